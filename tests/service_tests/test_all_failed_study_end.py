"""The end of a search whose every trial failed (``hpsearch start`` and ``resume``): the table
says why each failed, the failures are summed up by reason with their detail, no advice to
give a target (nothing trained, so no target would help) and no empty frontier page, but a
line saying why none was written.

The study is written as such a search leaves it into a real SQLite store; the end-of-search
report is the command's own (the search itself, Ray and the workload, is left out)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest
from click.testing import CliRunner
from optuna.distributions import CategoricalDistribution

import hpsearch
from hpsearch import record as r
from hpsearch.cli import cli
from hpsearch.store import open_storage, study_attrs

SPACE = """\
study: broken
workload: {name: digits_mlp, epochs: 1}
parameters:
  per_device_batch_size: {choices: [16, 32]}
  base_lr: {choices: [0.01, 0.03]}
search: {sampler: grid, n_trials: 4, seed: 0}
resources: {device: cpu}
"""
OBJECTIVES = [r.VAL_ACCURACY, r.RUNTIME_S]


def _failed_study(url: str) -> None:
    study = optuna.create_study(study_name="broken", storage=open_storage(url), directions=["maximize", "minimize"])
    study.set_metric_names(OBJECTIVES)
    for key, value in study_attrs(SPACE, OBJECTIVES, 4).items():
        study.set_user_attr(key, value)
    dists = {r.PER_DEVICE_BATCH_SIZE: CategoricalDistribution([16, 32]), r.BASE_LR: CategoricalDistribution([0.01, 0.03])}
    failures = [(r.REASON_WORKLOAD_ERROR, "ValueError at my_workload.py:12: labels out of range")] * 3
    failures.append((r.REASON_WORKLOAD_ERROR, "ValueError at my_workload.py:30: no validation data"))
    for k, (reason, detail) in enumerate(failures):
        b = (16, 32)[k % 2]
        study.add_trial(optuna.trial.create_trial(
            state=optuna.trial.TrialState.FAIL, params={r.PER_DEVICE_BATCH_SIZE: b, r.BASE_LR: 0.01}, distributions=dists,
            user_attrs={r.EFFECTIVE_BATCH_SIZE: b, r.STATUS_REASON: reason, r.STATUS_DETAIL: detail}))


@pytest.fixture()
def ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Path]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    _failed_study(url)

    def resume(study: str, storage: str, on_plan: Any, **_: Any) -> hpsearch.Search:
        # As the search plans it: the answer at the end is for 2 devices.
        on_plan(SimpleNamespace(devices=2, node_devices=None, n_trials=0, finished=4, requeued=0, study_name=study,
                                budget=SimpleNamespace(limited=False)))
        return hpsearch.load(study, storage=storage)

    monkeypatch.setattr(hpsearch, "resume", resume)
    result = CliRunner(env={"COLUMNS": "160", "HPSEARCH_RUNS_DIR": None}).invoke(
        cli, ["resume", "broken", "--storage", url, "--no-progress"])
    return result, tmp_path


def test_the_table_has_a_reason_column_even_when_every_trial_failed_alike(ended: tuple[Any, Path]) -> None:
    result, _ = ended
    header = next(line for line in result.stdout.splitlines() if line.startswith("┃"))
    assert "status_reason" in header
    assert sum("workload_error" in line for line in result.stdout.splitlines() if line.startswith("│")) == 4


def test_the_failures_are_summed_up_by_reason_with_their_detail(ended: tuple[Any, Path]) -> None:
    result, _ = ended
    assert "3 trials failed, workload_error (#0, #1, #2): ValueError at my_workload.py:12: labels out of range" in \
        result.stdout
    assert "1 trial failed, workload_error (#3): ValueError at my_workload.py:30: no validation data" in result.stdout
    assert result.exit_code == 4  # no trial completed, as before


def test_nothing_trained_gives_no_target_advice_and_writes_no_empty_frontier(ended: tuple[Any, Path]) -> None:
    result, folder = ended
    assert "target" not in result.output and "recommendation" not in result.output
    assert not list(folder.glob("*.html"))
    assert ("frontier html: none written: no trial completed, so there is no point to draw (hpsearch frontier broken "
            "writes one when some trial has)") in result.stdout
