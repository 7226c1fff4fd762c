"""The Lightning example runs through `hpsearch start` like any workload, and a LightningModule
that lacks what the workload needs stops `validate` and `start` with exit status 2 and what to add."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import optuna
import pytest

from hpsearch.search_spaces import SpaceError, parse_space

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "lightning_digits"
MODULES = ROOT / "tests" / "trials_tests"  # lightning_modules.py: modules that lack one thing each

#: What every trial records (docs/design.md, "What each trial must record").
PARAMS = {"per_device_batch_size", "world_size", "grad_accum_steps", "lr_rule", "base_lr"}
ATTRS = {"effective_batch_size", "base_batch_size", "lr", "warmup_epochs", "val_accuracy", "val_loss", "train_loss",
         "epochs_completed", "samples_seen", "runtime_s", "device_seconds", "samples_per_s", "comm_fraction",
         "device", "curves"}


@pytest.fixture(autouse=True)
def lightning_installed(unavailable: Callable[[str], NoReturn]) -> None:
    try:
        import lightning.pytorch  # noqa: F401
    except ImportError:
        unavailable("PyTorch Lightning is not installed: pip install -c constraints/cpu.txt -e '.[lightning]' "
                    "(or '.[dev]') to run the lightning workload's tests")


def _hpsearch(*args: str, cwd: Path, path: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(path), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


@pytest.mark.slow  # 8 trials, each of whose rank processes imports Lightning once: ~1.5 min on 2 cores
def test_the_lightning_example_runs_through_hpsearch_start(tmp_path: Path) -> None:
    # Its search only: confirmation rounds are another test's (test_confirmation.py), and here cost
    # a Lightning import per run.
    result = _hpsearch("start", str(EXAMPLE / "space.yaml"), "--no-progress", "--no-confirm", cwd=tmp_path,
                       path=EXAMPLE)
    assert result.returncode == 0, result.stdout + result.stderr

    study = optuna.load_study(study_name="lightning-digits-example", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}")
    trials = study.get_trials()
    assert len(trials) == 8 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert {(t.params["per_device_batch_size"], t.params["world_size"], t.params["hidden"]) for t in trials} == {
        (b, w, h) for b in (16, 64) for w in (1, 2) for h in (32, 64)}
    for t in trials:
        assert set(t.params) >= PARAMS and set(t.user_attrs) >= ATTRS, t.number
        b, w, a = t.params["per_device_batch_size"], t.params["world_size"], t.params["grad_accum_steps"]
        attrs = t.user_attrs
        assert attrs["effective_batch_size"] == b * w * a
        assert attrs["lr"] == pytest.approx(0.05 * b * w * a / 16)  # linear from B0 = 16
        assert attrs["epochs_completed"] == 2 and attrs["samples_seen"] >= 2 * 1437
        assert attrs["device_seconds"] == pytest.approx(w * attrs["runtime_s"])
        assert 0.5 < attrs["val_accuracy"] <= 1  # what validation_step logged: ten classes, chance 0.1
        if w == 1:  # W x A = 1: no two batch sizes to compare, said as such
            assert attrs.get("noise_scale") is None and "noise_scale_note" in attrs and attrs["comm_fraction"] == 0
        else:
            assert attrs["noise_scale"] > 0 and attrs["comm_fraction"] > 0
    # The module's own width reached DigitsClassifier: the two widths trained different models.
    by_config = {(t.params["per_device_batch_size"], t.params["world_size"], t.params["hidden"]): t for t in trials}
    assert by_config[16, 1, 32].user_attrs["val_loss"] != by_config[16, 1, 64].user_attrs["val_loss"]


def _space(tmp_path: Path, module: str, extra: str = "") -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(f"""study: lightning-bad
workload:
  lightning: {{module: "lightning_modules:{module}", datamodule: "lightning_modules:BlobData"}}
  epochs: 1
parameters:
  per_device_batch_size: 10
  base_lr: 0.01
{extra}resources: {{device: cpu}}
""")
    return path


def test_validate_refuses_a_module_without_validation_step_saying_what_to_add(tmp_path: Path) -> None:
    result = _hpsearch("validate", str(_space(tmp_path, "NoValidation")), cwd=tmp_path, path=MODULES)
    assert result.returncode == 2, result.stdout + result.stderr
    assert ("NoValidation (workload.lightning.module) does not define validation_step, which hpsearch trains "
            'with; add def validation_step(self, batch, batch_idx) calling self.log("val_loss", loss)') in result.stderr
    assert "Traceback" not in result.stderr


def test_start_refuses_a_module_that_logs_no_validation_loss_before_anything_is_written(tmp_path: Path) -> None:
    result = _hpsearch("start", str(_space(tmp_path, "LogsNoValLoss")), "--no-progress", cwd=tmp_path, path=MODULES)
    assert result.returncode == 2, result.stdout + result.stderr
    assert ("validation_step logs no 'val_loss' (it logs: loss); hpsearch records the validation loss the module "
            "logs as val_loss: add self.log('val_loss', loss) to validation_step, or name what it logs with "
            "workload.lightning.val_loss") in result.stderr
    assert "Traceback" not in result.stderr
    stored = optuna.study.get_all_study_names(f"sqlite:///{tmp_path / 'hpsearch.db'}") \
        if (tmp_path / "hpsearch.db").exists() else []
    assert "lightning-bad" not in stored


def test_an_objective_the_module_does_not_log_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from hpsearch.errors import WorkloadError
    from hpsearch.workload_check import build_first

    monkeypatch.syspath_prepend(str(MODULES))
    # BlobModel logs its accuracy as val_acc: without workload.lightning.val_accuracy it records none.
    space = parse_space('workload: {lightning: {module: "lightning_modules:BlobModel", '
                        'datamodule: "lightning_modules:BlobData"}}\n'
                        "parameters: {per_device_batch_size: 10, base_lr: 0.01}\n"
                        "objectives: [{metric: val_accuracy, direction: maximize}]\n")
    with pytest.raises(WorkloadError, match=r"objective val_accuracy \(objectives\[0\]\): workload 'lightning' does "
                                            r"not record it.*name what the module logs with "
                                            r"workload.lightning.val_accuracy"):
        build_first(space)
    named = parse_space('workload: {lightning: {module: "lightning_modules:BlobModel", '
                        'datamodule: "lightning_modules:BlobData", val_accuracy: val_acc}}\n'
                        "parameters: {per_device_batch_size: 10, base_lr: 0.01}\n")
    hooks = build_first(named).hooks
    assert hooks is not None and hooks.metrics == ("val_loss", "val_accuracy")


def test_the_engines_optimizer_keys_are_refused_for_a_lightning_workload(monkeypatch: pytest.MonkeyPatch) -> None:
    from hpsearch.workload_check import check_space_workload

    monkeypatch.syspath_prepend(str(MODULES))
    space = parse_space('workload: {lightning: {module: "lightning_modules:BlobModel", '
                        'datamodule: "lightning_modules:BlobData"}}\n'
                        "parameters: {per_device_batch_size: 10, base_lr: 0.01, momentum: {choices: [0, 0.9]}}\n")
    with pytest.raises(SpaceError, match="'momentum' sets the optimizer the engine builds, but a lightning "
                                         "workload's optimizer comes from its module's configure_optimizers"):
        check_space_workload(space)
    # The module's own settings are checked like a built-in's options.
    space = parse_space('workload: {lightning: {module: "lightning_modules:BlobModel", '
                        'datamodule: "lightning_modules:BlobData"}}\n'
                        "parameters: {per_device_batch_size: 10, base_lr: 0.01, widht: 4}\n")
    with pytest.raises(SpaceError, match="'widht' is neither a parameter of the engine nor an option of workload "
                                         "'lightning'; did you mean 'width'"):
        check_space_workload(space)
