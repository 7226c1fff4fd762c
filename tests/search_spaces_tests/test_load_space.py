"""A valid space, from a file, a string or a dict, becomes the expected typed values."""

from __future__ import annotations

import pathlib
import textwrap

import pytest

from hpsearch.search_spaces import (
    CORE_PARAMETERS,
    Choice,
    Constraints,
    Fixed,
    FloatRange,
    IntRange,
    Objective,
    ResourceSpec,
    ScalingSpec,
    SearchSettings,
    SearchSpace,
    SpaceError,
    WorkloadSpec,
    load_space,
    parse_space,
    space_from_mapping,
)

FULL = textwrap.dedent("""\
    study: digits-lr-scaling
    storage: sqlite:///hpsearch.db
    workload:
      name: digits_cnn
      epochs: 12
      options: {hidden: 64, dropout: 0.1}
    scaling:
      base_batch_size: 16
      warmup_epochs: 0.5
    parameters:
      per_device_batch_size: {choices: [8, 32, 128, 512]}
      world_size: {choices: [1, 2]}
      grad_accum_steps: 1
      lr_rule: {choices: [constant, linear, sqrt]}
      base_lr: {low: 1.0e-3, high: 1.0e-1, log: true}
      momentum: 0.9
    objectives:
      - {metric: val_accuracy, direction: maximize}
      - {metric: runtime_s, direction: minimize}
    search:
      sampler: nsga2
      n_trials: 24
      max_concurrent: 4
      scheduler: none
      seed: 7
    resources:
      device: cuda
      cpus_per_worker: 2
      gpus_per_worker: 1
    """)

MINIMAL = textwrap.dedent("""\
    parameters:
      per_device_batch_size: 32
      base_lr: 0.1
    """)


def test_full_file_round_trips_into_the_expected_dataclasses(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "ignored-stem.yaml"
    path.write_text(FULL)

    space = load_space(path)

    assert space == SearchSpace(
        study="digits-lr-scaling",
        storage="sqlite:///hpsearch.db",
        workload=WorkloadSpec(name="digits_cnn", epochs=12, options={"hidden": 64, "dropout": 0.1}),
        scaling=ScalingSpec(base_batch_size=16, warmup_epochs=0.5),
        parameters={
            "per_device_batch_size": Choice((8, 32, 128, 512)),
            "world_size": Choice((1, 2)),
            "grad_accum_steps": Fixed(1),
            "lr_rule": Choice(("constant", "linear", "sqrt")),
            "base_lr": FloatRange(low=1e-3, high=1e-1, log=True),
            "momentum": Fixed(0.9),
        },
        objectives=(Objective("val_accuracy", "maximize"), Objective("runtime_s", "minimize")),
        search=SearchSettings(
            sampler="nsga2", n_trials=24, max_concurrent=4, scheduler="none", seed=7
        ),
        resources=ResourceSpec(device="cuda", cpus_per_worker=2, gpus_per_worker=1),
        source_text=FULL,
        source_path=str(path),
    )


def test_parameters_keep_file_order_with_missing_core_defaults_after_them() -> None:
    space = parse_space(
        "parameters:\n  momentum: 0.9\n  base_lr: 0.1\n  per_device_batch_size: 8\n"
    )

    assert list(space.parameters) == [
        "momentum",
        "base_lr",
        "per_device_batch_size",
        "world_size",
        "grad_accum_steps",
        "lr_rule",
    ]
    assert set(CORE_PARAMETERS) <= set(space.parameters)


def test_minimal_file_gets_every_default() -> None:
    space = parse_space(MINIMAL)

    assert space.study == "space"
    assert space.storage is None
    assert space.workload == WorkloadSpec()
    assert space.scaling == ScalingSpec()
    assert space.parameters["world_size"] == Fixed(1)
    assert space.parameters["grad_accum_steps"] == Fixed(1)
    assert space.parameters["lr_rule"] == Fixed("linear")
    assert space.parameters["base_lr"] == Fixed(0.1)
    assert space.objectives == (Objective("val_accuracy", "maximize"),)
    assert space.search == SearchSettings(sampler="tpe", n_trials=10, max_concurrent=None, seed=0)
    assert space.resources == ResourceSpec()
    assert space.source_text == MINIMAL
    assert space.source_path is None


def test_study_defaults_to_the_file_stem(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "resnet-sweep.v2.yaml"
    path.write_text(MINIMAL)

    space = load_space(str(path))

    assert space.study == "resnet-sweep.v2"
    assert space.source_path == str(path)


def test_default_study_applies_to_text_without_study() -> None:
    assert parse_space(MINIMAL, default_study="nightly").study == "nightly"


def test_several_objectives_default_to_the_nsga2_sampler() -> None:
    space = parse_space(
        MINIMAL
        + "objectives:\n  - {metric: val_loss, direction: minimize}\n"
        + "  - {metric: device_seconds, direction: minimize}\n"
    )

    assert space.search.sampler == "nsga2"


@pytest.mark.parametrize(
    ("written", "read"),
    [("TPESampler", "tpe"), ("NSGAIISampler", "nsga2"), ("Random", "random"), ("GPSampler", "gp")],
)
def test_sampler_class_names_read_as_their_short_name(written: str, read: str) -> None:
    assert parse_space(MINIMAL + f"search: {{sampler: {written}}}\n").search.sampler == read


@pytest.mark.parametrize("written", ["BaseSampler", "PartialFixedSampler", "BoTorchSampler"])
def test_a_sampler_class_the_search_cannot_build_from_the_space_is_refused(written: str) -> None:
    with pytest.raises(SpaceError) as caught:
        parse_space(MINIMAL + f"search: {{sampler: {written}}}\n", source="space.yaml")

    assert caught.value.key_path == "search.sampler"
    assert "sampler must be one of grid, random, tpe, nsga2, nsga3, cmaes, qmc, gp, bruteforce" in str(caught.value)


def test_exponent_without_dot_reads_as_a_float() -> None:
    # YAML 1.1 (PyYAML) reads 1e-3 as a string; users mean a number.
    space = parse_space(
        "parameters:\n  per_device_batch_size: 8\n  base_lr: {low: 1e-4, high: 1E-1}\n"
    )

    assert space.parameters["base_lr"] == FloatRange(low=1e-4, high=0.1)


def test_yaml_merge_keys_and_anchors_are_resolved() -> None:
    space = parse_space(textwrap.dedent("""\
            parameters:
              per_device_batch_size: 8
              base_lr: &lr {low: 1.0e-3, high: 1.0e-1, log: true}
              weight_decay:
                <<: *lr
                log: false
                low: 0.0
            """))

    assert space.parameters["weight_decay"] == FloatRange(low=0.0, high=0.1, log=False)


def test_empty_sections_use_their_defaults() -> None:
    space = parse_space(MINIMAL + "scaling:\nsearch:\nresources:\nworkload:\n")

    assert space.scaling == ScalingSpec()
    assert space.search.n_trials == 10


def test_cpu_device_reserves_no_gpus_by_default() -> None:
    assert parse_space(MINIMAL + "resources: {device: cpu}\n").resources.gpus_per_worker == 0


def test_utf8_bom_and_utf16_files_are_read(tmp_path: pathlib.Path) -> None:
    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbf" + MINIMAL.encode())
    utf16 = tmp_path / "utf16.yaml"
    utf16.write_bytes(MINIMAL.encode("utf-16"))

    assert load_space(bom).parameters["base_lr"] == Fixed(0.1)
    assert load_space(utf16).parameters["base_lr"] == Fixed(0.1)


def test_mapping_input_validates_like_a_file() -> None:
    space = space_from_mapping(
        {
            "study": "from-python",
            "parameters": {
                "per_device_batch_size": {"choices": (8, 16)},
                "base_lr": {"low": 1e-3, "high": 1e-1, "log": True},
                "hidden": {"low": 16, "high": 64, "step": 16},
            },
            "search": {"n_trials": 3},
        }
    )

    assert space.study == "from-python"
    assert space.parameters["per_device_batch_size"] == Choice((8, 16))
    assert space.parameters["hidden"] == IntRange(low=16, high=64, step=16)
    assert space.search.n_trials == 3
    assert "n_trials: 3" in space.source_text


def test_mapping_input_accepts_parameter_and_objective_objects() -> None:
    space = space_from_mapping(
        {
            "parameters": {
                "per_device_batch_size": Choice((8, 16)),
                "base_lr": FloatRange(1e-3, 1e-1, log=True),
                "layers": IntRange(1, 4),
            },
            "objectives": [Objective("val_loss", "minimize")],
        },
        default_study="py",
    )

    assert space.study == "py"
    assert space.parameters["base_lr"] == FloatRange(1e-3, 1e-1, log=True)
    assert space.parameters["layers"] == IntRange(1, 4)
    assert space.objectives == (Objective("val_loss", "minimize"),)
    # The kept text is a space file that reads back to the same space.
    assert parse_space(space.source_text, default_study="py").parameters == space.parameters


def test_mapping_errors_carry_the_key_path_but_no_line() -> None:
    with pytest.raises(SpaceError) as caught:
        space_from_mapping({"parameters": {"per_device_batch_size": 8, "base_lr": -0.1}})

    assert caught.value.key_path == "parameters.base_lr"
    assert caught.value.line is None
    assert str(caught.value) == "<mapping> at 'parameters.base_lr': base_lr must be > 0, got -0.1"


def test_mapping_input_objects_are_checked_by_the_same_rules() -> None:
    with pytest.raises(SpaceError) as caught:
        space_from_mapping(
            {"parameters": {"per_device_batch_size": Choice((8, 0)), "base_lr": 0.1}}
        )

    assert caught.value.key_path == "parameters.per_device_batch_size.choices[1]"


def test_parsing_the_space_does_not_change_the_callers_mapping() -> None:
    data = {
        "parameters": {"per_device_batch_size": 8, "base_lr": 0.1},
        "workload": {"options": {"a": 1}},
    }

    space = space_from_mapping(data)

    assert data == {
        "parameters": {"per_device_batch_size": 8, "base_lr": 0.1},
        "workload": {"options": {"a": 1}},
    }
    assert space.workload.options == {"a": 1}


def test_asha_and_constraints_read_in_both_forms() -> None:
    base = "parameters:\n  per_device_batch_size: {choices: [8, 64]}\n  base_lr: 0.1\n"

    short = parse_space(base + "search: {scheduler: asha}\n")
    long = parse_space(base + "search:\n  scheduler: {name: asha, grace_epochs: 0.5, reduction_factor: 4}\n"
                       "constraints: {max_effective_batch_size: 256, max_lr: 0.5, skip_equivalent: true}\n")

    assert (short.search.scheduler, short.search.grace_epochs, short.search.reduction_factor) == ("asha", 1.0, 3)
    assert (long.search.scheduler, long.search.grace_epochs, long.search.reduction_factor) == ("asha", 0.5, 4)
    assert long.constraints == Constraints(max_effective_batch_size=256, max_lr=0.5, skip_equivalent=True)
    assert short.constraints == Constraints() and not short.constraints.any
