"""ASHA early stopping end to end: budgets in samples seen, stopped trials PRUNED, never COMPLETE,
and the same trials stopped after a ``kill -9`` and ``resume`` as in an uninterrupted search."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import psutil
import pytest
from optuna.trial import TrialState

from hpsearch.store import open_storage
from hpsearch.trials.workloads.digits import load_digits_split

TRAIN_SIZE = len(load_digits_split()[0])
EPOCHS = 6

# At one fixed LR, large batches take few steps per epoch and fall behind small ones at every
# rung, so ASHA has trials to stop.
SPACE = f"""\
study: asha
workload: {{name: digits_mlp, epochs: {EPOCHS}}}
scaling: {{base_batch_size: 8}}
parameters:
  per_device_batch_size: {{choices: [8, 16, 64, 128, 256, 512]}}
  world_size: 1
  lr_rule: constant
  base_lr: 0.01
objectives:
  - {{metric: val_accuracy, direction: maximize}}
search:
  sampler: grid
  seed: 0
  scheduler: {{name: asha, grace_epochs: 1, reduction_factor: 2}}
resources: {{device: cpu}}
"""


def test_asha_stores_stopped_trials_as_pruned_with_the_budget_they_reached(
    tmp_path: Path, live_children: Callable[[], list[Any]]
) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr

    study = optuna.load_study(study_name="asha", storage=open_storage(f"sqlite:///{tmp_path / 'hpsearch.db'}"))
    trials = study.get_trials()
    assert len(trials) == 6
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert pruned and complete
    assert len(pruned) + len(complete) == 6
    for t in pruned:
        a = t.user_attrs
        assert a["status_reason"] == "early_stopped"
        assert a["epochs_completed"] < EPOCHS
        # The budget is samples seen: whole epochs of the training set, whatever the batch.
        assert a["samples_seen"] == a["epochs_completed"] * TRAIN_SIZE
        assert max(t.intermediate_values) == a["samples_seen"]
        assert t.value == t.intermediate_values[a["samples_seen"]]  # Optuna's value for PRUNED
        assert "ASHA stopped it after" in a["status_detail"]
        assert "samples_per_s" not in a  # the final measurements never came
        # ... but the device time it used up to its stop is recorded (one device).
        assert a["device_seconds"] == pytest.approx(a["runtime_s"], rel=0.05, abs=0.5)
    for t in complete:
        assert t.user_attrs["epochs_completed"] == EPOCHS
        assert t.user_attrs["samples_seen"] == EPOCHS * TRAIN_SIZE
        assert t.value == t.user_attrs["val_accuracy"]
    assert study.best_trial.state == TrialState.COMPLETE
    # The stopped trials' ranks are gone with them.
    assert live_children() == []


# Two LRs for b=8 make one slow trial that trains two epochs before ASHA stops it, so a kill -9
# lands inside it. With seed 0 the grid runs (32, 0.01), (8, 0.01), then that trial (8, 0.0002),
# then (32, 0.0002); one trial at a time, so every trial meets the rungs its predecessors left.
# The workload sleeps half a second an epoch (benchmarks.workloads.sleepy), so that trial trains
# about a second whatever the machine (on the digits it took 0.07 s once data sat in tensors).
SERIAL_SPACE = f"""\
study: {{study}}
workload: {{{{name: "benchmarks.workloads.sleepy:sleepy", epochs: {EPOCHS}, options: {{{{samples: 256, sample_s: 0.002}}}}}}}}
scaling: {{{{base_batch_size: 8}}}}
parameters:
  per_device_batch_size: {{{{choices: [8, 32]}}}}
  world_size: 1
  lr_rule: constant
  base_lr: {{{{choices: [0.01, 0.0002]}}}}
objectives:
  - {{{{metric: val_accuracy, direction: maximize}}}}
search:
  sampler: grid
  seed: 0
  max_concurrent: 1
  scheduler: {{{{name: asha, grace_epochs: 2, reduction_factor: 2}}}}
resources: {{{{device: cpu}}}}
"""


# The benchmarks' workloads import from the project's root.
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def _hpsearch(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpsearch", *args, "--no-progress"], cwd=work,
                          capture_output=True, text=True, timeout=300, env=ENV)


def _trials(work: Path, study: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=open_storage(f"sqlite:///{work / 'hpsearch.db'}")).get_trials()


def _config(t: optuna.trial.FrozenTrial) -> tuple[int, float]:
    return t.params["per_device_batch_size"], t.params["base_lr"]


def _stopped_early(trials: list[optuna.trial.FrozenTrial]) -> set[tuple[int, float]]:
    return {_config(t) for t in trials if t.state == TrialState.PRUNED and t.user_attrs["status_reason"] == "early_stopped"}


def _kill_children_in(work: Path) -> None:
    """Kill what a killed search left behind in ``work`` (Ray's own agents can outlive it)."""
    for p in psutil.process_iter(["cwd"]):
        try:
            if p.info["cwd"] and Path(p.info["cwd"]).is_relative_to(work):
                p.kill()
        except psutil.Error:
            pass


@pytest.mark.slow
def test_a_resumed_asha_search_stops_the_same_trials_as_an_uninterrupted_one(tmp_path: Path) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    for work, study in ((whole, "whole"), (killed, "killed")):
        work.mkdir()
        (work / "space.yaml").write_text(SERIAL_SPACE.format(study=study))

    done = _hpsearch(whole, "start", "space.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    uninterrupted = sorted(_trials(whole, "whole"), key=lambda t: t.number)
    expected = _stopped_early(uninterrupted)
    order = [_config(t) for t in uninterrupted]
    # The grid's ranking is stable: the slow, low-LR b=8 trial is third, and ASHA stops it
    # against the two before it.
    target = (8, 0.0002)
    assert order.index(target) == 2, order
    assert target in expected, [(t.number, _config(t), t.state.name) for t in uninterrupted]

    proc = subprocess.Popen([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"], cwd=killed,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=ENV)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            try:
                running = [t for t in _trials(killed, "killed") if t.state == TrialState.RUNNING]
            except KeyError:  # the study is not created yet
                running = []
            if any(t.params.get("per_device_batch_size") == 8 and t.params.get("base_lr") == 0.0002
                   and t.user_attrs.get("training_started") for t in running):
                break
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        before = _trials(killed, "killed")
        cut = [t for t in before if t.state == TrialState.RUNNING]
        assert [_config(t) for t in cut] == [target], [(_config(t), t.state.name) for t in before]
        time.sleep(2)  # the dead search's processes go with it
        resumed = _hpsearch(killed, "resume", "killed")
    finally:
        _kill_children_in(killed)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr

    after = sorted(_trials(killed, "killed"), key=lambda t: t.number)
    ran = [t for t in after if t.user_attrs.get("status_reason") != "interrupted"]
    assert sorted(_config(t) for t in ran) == sorted(order)  # each configuration ran to its end once
    assert _stopped_early(after) == expected
    # The first trial after the resume, the rerun of the one the kill cut short, is stopped: a
    # scheduler with empty rungs never stops the first trial to reach a rung, so only the rungs
    # rebuilt from the study can have stopped it.
    [rerun] = [t for t in after if t.user_attrs.get("rerun_of") == cut[0].number]
    assert _config(rerun) == target
    assert rerun.state == TrialState.PRUNED
    assert rerun.intermediate_values == next(t for t in uninterrupted if _config(t) == target).intermediate_values
