"""``workload.lightning``: a LightningModule and its datamodule named in a space file, checked with
the file's line numbers; the strategies hpsearch does not run are refused with the reason."""

from __future__ import annotations

import pytest

from hpsearch.search_spaces import SpaceError, parse_space

BASE = "parameters: {per_device_batch_size: 8, base_lr: 0.1}\n"
CLASSES = 'module: "pkg.mod:Model", datamodule: "pkg.mod:Data"'


def test_the_section_is_the_lightning_workload_with_its_classes_among_the_options() -> None:
    space = parse_space(BASE + f"workload:\n  lightning: {{{CLASSES}, val_accuracy: val_acc}}\n"
                               "  options: {hidden: 32}\n")
    assert space.workload.name == "lightning"
    assert dict(space.workload.options) == {"module": "pkg.mod:Model", "datamodule": "pkg.mod:Data",
                                            "val_accuracy": "val_acc", "hidden": 32}


@pytest.mark.parametrize("strategy", ["ddp", "auto", "ddp_spawn", "ddp_fork"])
def test_the_ddp_strategies_are_taken(strategy: str) -> None:
    space = parse_space(BASE + f"workload: {{lightning: {{{CLASSES}, strategy: {strategy}}}}}\n")
    assert "strategy" not in space.workload.options  # always DDP: nothing to pass on


@pytest.mark.parametrize(("strategy", "why"), [
    ("dp", "DataParallel splits one batch across the devices (effective batch b)"),
    ("deepspeed_stage_3", "DeepSpeed shards optimizer state and parameters"),
    ("fsdp", "FSDP shards parameters across devices"),
    ("ddp_find_unused_parameters_true", "hpsearch's DDP expects every parameter to get a gradient"),
])
def test_other_strategies_are_refused_with_the_reason(strategy: str, why: str) -> None:
    with pytest.raises(SpaceError, match=r"workload\.lightning\.strategy") as refused:
        parse_space(BASE + f"workload: {{lightning: {{{CLASSES}, strategy: {strategy}}}}}\n")
    assert f"strategy '{strategy}' is not supported: {why}" in str(refused.value)
    assert refused.value.line == 2


def test_an_unknown_strategy_lists_the_ones_taken() -> None:
    with pytest.raises(SpaceError, match=r"strategy must be one of 'ddp', 'auto', 'ddp_spawn'.*got 'dpp'"):
        parse_space(BASE + f"workload: {{lightning: {{{CLASSES}, strategy: dpp}}}}\n")


@pytest.mark.parametrize(("section", "says"), [
    ('{module: "pkg.mod:Model"}', "workload.lightning needs 'datamodule': the LightningDataModule class"),
    ('{module: "pkg.mod.Model", datamodule: "pkg.mod:Data"}', "module must be 'package.module:Class', got "
                                                             "'pkg.mod.Model'"),
    (f"{{{CLASSES}, modul: x}}", "unknown key 'modul' in 'workload.lightning'; did you mean 'module'?"),
    (f"{{{CLASSES}, loss_reduction: median}}", "loss_reduction must be one of 'mean', 'sum'"),
])
def test_a_bad_section_names_the_key(section: str, says: str) -> None:
    with pytest.raises(SpaceError) as refused:
        parse_space(BASE + f"workload: {{lightning: {section}}}\n")
    assert says in str(refused.value)


def test_name_and_lightning_are_not_both_set() -> None:
    with pytest.raises(SpaceError, match=r"set either workload\.name or workload\.lightning, not both"):
        parse_space(BASE + f"workload: {{name: digits_cnn, lightning: {{{CLASSES}}}}}\n")


def test_a_class_set_twice_is_refused() -> None:
    with pytest.raises(SpaceError, match=r"'module' is set in workload\.lightning; remove it from workload\.options"):
        parse_space(BASE + f"workload: {{lightning: {{{CLASSES}}}, options: {{module: other:Model}}}}\n")
