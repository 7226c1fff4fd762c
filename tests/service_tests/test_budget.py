"""A search's budget end to end: a wall-clock limit stops the search at the limit with every
stopped trial recorded, ``resume --budget`` finishes it, and the study keeps what was spent.

Real CLI processes, a real local Ray, real DDP ranks and a real SQLite study.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch.record import ATTR_BUDGET, ATTR_BUDGET_SPENT
from hpsearch.store import open_storage

LIMIT_S = 30.0

# Two slow trials at once (about 45 s each whatever the machine: the workload's forward pass
# sleeps, benchmarks.workloads.sleepy; 800 epochs of the digits took 70 s when the loop fed its
# batches one sample at a time, 14 s once they sat in tensors), so the limit falls while both
# train and report (a trial stops at its next report, here every 1.3 s).
SPACE = """\
study: budgeted
workload: {name: "benchmarks.workloads.sleepy:sleepy", epochs: 35, options: {samples: 256, sample_s: 0.005}}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: {choices: [8, 16]}
  world_size: 1
  lr_rule: constant
  base_lr: 0.01
objectives:
  - {metric: val_accuracy, direction: maximize}
search: {sampler: grid, seed: 0, max_concurrent: 2}
resources: {device: cpu}
"""


# The benchmarks' workloads import from the project's root.
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def _hpsearch(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], cwd=work, capture_output=True, text=True,
                          timeout=400, env=ENV)


def _study(work: Path) -> optuna.Study:
    return optuna.load_study(study_name="budgeted", storage=open_storage(f"sqlite:///{work / 'hpsearch.db'}"))


@pytest.mark.slow
def test_a_wall_clock_budget_stops_the_search_at_its_limit_and_resume_finishes_it(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    began = time.time()
    first = _hpsearch(tmp_path, "start", "space.yaml", "--no-progress", "--budget", f"{LIMIT_S:g}s")
    exited = time.time() - began

    # No trial completed: exit status 4 and one line saying why.
    assert first.returncode == 4, first.stdout + first.stderr
    assert "error: study 'budgeted': no trial completed: 2 trials, 2 stopped by the budget; most common reason " \
           "'budget' (2 of 2)" in first.stderr
    assert "the wall-clock budget of 30s is spent: stopping the running trials" in first.stderr
    assert "Traceback" not in first.stderr

    study = _study(tmp_path)
    trials = study.get_trials()
    assert len(trials) == 2
    for t in trials:  # nothing left RUNNING; each stopped trial says why and what it used
        assert t.state == TrialState.FAIL
        assert t.user_attrs["status_reason"] == "budget"
        assert t.user_attrs["status_detail"] == "stopped: the wall-clock budget of 30s is spent"
        if t.user_attrs.get("curves"):  # it reported before the limit (on a loaded machine it may not have)
            assert t.user_attrs["device_seconds"] > 0  # the device time it used ...
            assert len(t.intermediate_values) == len(t.user_attrs["curves"]["val_accuracy"])  # ... and its evaluations
        # The trials end at the limit (the search's clock starts once Python has imported
        # hpsearch, a second or two after the command on a busy machine).
        assert LIMIT_S < t.datetime_complete.timestamp() - began < LIMIT_S + 6
    spent = study.user_attrs[ATTR_BUDGET_SPENT]
    # The limit, and Tune's stop of the trials: at their next report, or after 10 s for one still
    # starting up.
    assert LIMIT_S <= spent["wall_s"] < LIMIT_S + 13
    assert exited < LIMIT_S + 30, exited  # ... and Ray's shutdown
    assert study.user_attrs[ATTR_BUDGET] == {"wall_s": LIMIT_S, "device_hours": None}
    assert spent["device_s"] == pytest.approx(sum(t.user_attrs.get("device_seconds", 0) for t in trials), abs=1e-3)

    best = _hpsearch(tmp_path, "best", "budgeted", "--json")
    assert best.returncode == 4, best.stdout + best.stderr
    assert best.stdout.strip() == "null"
    assert "no trial completed" in best.stderr

    status = _hpsearch(tmp_path, "status", "budgeted", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["budget"]["wall_left_s"] == 0

    # A resume without a larger budget runs nothing (it queues the stopped trials' configurations);
    # with one it runs them and finishes the study.
    spent_out = _hpsearch(tmp_path, "resume", "budgeted", "--no-progress")
    assert spent_out.returncode == 4, spent_out.stdout + spent_out.stderr
    assert "nothing left to run (0 already finished, 2 cut-short trials queued to run again)" in spent_out.stderr
    assert "resume with a larger --budget to go on" in spent_out.stderr

    resumed = _hpsearch(tmp_path, "resume", "budgeted", "--no-progress", "--budget", "10m")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    study = _study(tmp_path)
    trials = study.get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert sorted(t.params["per_device_batch_size"] for t in complete) == [8, 16]
    assert {t.user_attrs["rerun_of"] for t in complete} == {0, 1}
    assert TrialState.RUNNING not in {t.state for t in trials}
    # The budget's spending adds up over the runs, and its device-hours are the trials' own.
    again = study.user_attrs[ATTR_BUDGET_SPENT]
    assert again["wall_s"] > spent["wall_s"] + 5
    assert again["device_s"] == pytest.approx(sum(t.user_attrs.get("device_seconds", 0) for t in trials), abs=1e-3)
    assert study.user_attrs[ATTR_BUDGET] == {"wall_s": 600.0, "device_hours": None}
    assert "budget: " in resumed.stdout and "of 10m wall-clock spent" in resumed.stdout


def test_a_bad_budget_on_the_command_line_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    result = _hpsearch(tmp_path, "start", "space.yaml", "--no-progress", "--budget", "2x")
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: --budget: a budget is a wall-clock time such as 40s, 90m, 2h or 1h30m "
                                     "and/or device-hours such as 1.5dh, separated by a comma, or 'none'; got '2x'")
    assert not (tmp_path / "hpsearch.db").exists()


def test_a_bad_budget_in_the_space_names_its_key_and_line(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE.replace("max_concurrent: 2}", "max_concurrent: 2, budget: {wall: -1}}"))
    result = _hpsearch(tmp_path, "start", "space.yaml", "--no-progress")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: space.yaml:11 at 'search.budget.wall': wall must be > 0 s, got -1"
