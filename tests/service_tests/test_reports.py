"""A trial's reports on their way to the study: every evaluation is recorded, however fast they
come, while Tune gets at most one result a second from a trial of a search with no scheduler."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from hpsearch.planner.report import EARLIER_KEY, ReportKind, TrialReport
from hpsearch.tune.trainable import _Reports

FAST_SPACE = """\
study: fast
workload: {name: digits_mlp, epochs: 40}
parameters:
  per_device_batch_size: 256
  base_lr: 0.05
search: {sampler: grid, n_trials: 1, seed: 0}
resources: {device: cpu}
"""


def test_every_evaluation_of_a_fast_trial_is_recorded_in_order(tmp_path: Path) -> None:
    # 40 epochs of a few hundredths of a second each: many evaluations reach the searcher
    # inside one Tune result.
    (tmp_path / "space.yaml").write_text(FAST_SPACE)
    done = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (trial,) = optuna.load_study(study_name="fast", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}").trials
    curves = trial.user_attrs["curves"]
    assert trial.user_attrs["epochs_completed"] == 40
    assert len(curves["val_accuracy"]) == 40
    assert curves["samples_seen"] == sorted(curves["samples_seen"]) and len(set(curves["samples_seen"])) == 40
    assert list(trial.intermediate_values) == curves["samples_seen"]
    assert list(trial.intermediate_values.values()) == pytest.approx(curves["val_accuracy"])


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    # What reaches Tune: the one call Tune offers a trial, recorded instead of made (no Tune
    # session runs in this test).
    from ray import tune

    results: list[dict[str, Any]] = []
    monkeypatch.setattr(tune, "report", results.append)
    return results


def test_reports_faster_than_the_interval_ride_along_with_the_next_result(sent: list[dict[str, Any]]) -> None:
    clock = _Clock()
    reports = _Reports({"node": "n"}, every_s=1.0, clock=clock)
    for i in range(1, 11):  # ten evaluations, 0.25 s apart
        clock.now = i * 0.25
        reports.forward({"evaluation": i})
    assert [r["evaluation"] for r in sent] == [4, 8]
    assert [e["evaluation"] for e in sent[0][EARLIER_KEY]] == [1, 2, 3]
    assert [e["evaluation"] for e in sent[1][EARLIER_KEY]] == [5, 6, 7]
    # The last two go out with the final report; the final evaluation itself only there.
    reports.forward({"evaluation": 11, "final": True})
    final = reports.last(TrialReport(ReportKind.FINAL, {"evaluation": 11, "final": True}))
    assert [e["evaluation"] for e in final[EARLIER_KEY]] == [9, 10] and final["node"] == "n"
    assert len(sent) == 2


def test_a_search_with_a_scheduler_gets_every_report_at_once(sent: list[dict[str, Any]]) -> None:
    reports = _Reports({"node": "n"}, every_s=None)
    for i in range(1, 6):
        reports.forward({"evaluation": i})
    assert [r["evaluation"] for r in sent] == [1, 2, 3, 4, 5]
    assert not any(EARLIER_KEY in r for r in sent)
