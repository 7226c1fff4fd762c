"""``hpsearch export-trial`` of a trial that did not complete says so first, on stderr: that it
failed and why (its ``status_reason`` and detail), and that the job trains the configuration
that failed. It still exports: a user exporting a failed trial usually wants to reproduce the
failure. The study is written as ``hpsearch start`` writes it, without running a search."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner
from optuna.trial import TrialState, create_trial

from hpsearch.cli import cli
from hpsearch.planner.sampler import distributions
from hpsearch.search_spaces import parse_space
from hpsearch.store import open_storage, study_attrs

SPACE = """\
study: fails
workload: {name: digits_mlp, epochs: 1}
parameters:
  per_device_batch_size: {choices: [16, 32]}
  base_lr: 0.05
search: {sampler: grid, n_trials: 2}
resources: {device: cpu}
"""


@pytest.fixture
def store(tmp_path: Path) -> str:
    """Trial #0 COMPLETE, #1 FAIL ``workload_error``, as a search records them."""
    url = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    space = parse_space(SPACE)
    study = optuna.create_study(study_name="fails", storage=open_storage(url), direction="maximize")
    for key, value in study_attrs(SPACE, ["val_accuracy"], 2).items():
        study.set_user_attr(key, value)
    fixed = {name: getattr(p, "value", None) for name, p in space.parameters.items()}
    for batch, state in ((16, TrialState.COMPLETE), (32, TrialState.FAIL)):
        params = {**fixed, "per_device_batch_size": batch}
        attrs = {"device": "cpu"} if state == TrialState.COMPLETE else {
            "device": "cpu", "status_reason": "workload_error",
            "status_detail": "ValueError: labels out of range\n  at my_workload.py:12"}
        study.add_trial(create_trial(params=params, state=state, values=[0.9] if state == TrialState.COMPLETE else None,
                                     distributions=distributions(space),
                                     user_attrs=attrs))
    return url


def _export(url: str, number: int, folder: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["export-trial", "fails", str(number), "-o", str(folder), "--storage", url, *args])
    return result.exit_code, result.stdout, result.stderr


def test_exporting_a_failed_trial_says_it_failed_and_why_and_still_exports(store: str, tmp_path: Path) -> None:
    code, _, err = _export(store, 1, tmp_path / "job")
    assert code == 0, err
    warning = err.splitlines()[0]
    assert warning.startswith("warning: trial #1 failed: workload_error")
    assert "ValueError: labels out of range" in warning
    assert "the job trains the configuration that failed" in warning
    assert (tmp_path / "job" / "launch.sh").exists()
    assert json.loads((tmp_path / "job" / "trial.json").read_text())["state"] == "FAIL"


def test_the_json_of_a_failed_trial_carries_the_warning(store: str, tmp_path: Path) -> None:
    code, out, _ = _export(store, 1, tmp_path / "job", "--json")
    assert code == 0
    assert any(w.startswith("trial #1 failed: workload_error") for w in json.loads(out)["warnings"])


def test_exporting_a_completed_trial_warns_of_nothing(store: str, tmp_path: Path) -> None:
    code, _, err = _export(store, 0, tmp_path / "job")
    assert code == 0 and "warning" not in err
