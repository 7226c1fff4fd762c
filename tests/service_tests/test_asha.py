"""ASHA early stopping end to end: budgets in samples seen, stopped trials PRUNED, never COMPLETE."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
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
        assert "device_seconds" not in a  # the final measurements never came
    for t in complete:
        assert t.user_attrs["epochs_completed"] == EPOCHS
        assert t.user_attrs["samples_seen"] == EPOCHS * TRAIN_SIZE
        assert t.value == t.user_attrs["val_accuracy"]
    assert study.best_trial.state == TrialState.COMPLETE
    # The stopped trials' ranks are gone with them.
    assert live_children() == []
