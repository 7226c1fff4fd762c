"""The budget's account: what is spent, when it runs out, and which trials it refuses to start,
on a clock the test moves (the end-to-end search is in test_budget.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

import optuna
from optuna.trial import TrialState, create_trial

from hpsearch.planner.budget import BudgetLedger, BudgetSpent, predict_trial, spent_of, write_budget
from hpsearch.record import ATTR_BUDGET
from hpsearch.search_spaces import Budget

T0 = datetime(2030, 1, 1)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def completed(batch: int, world_size: int, seconds: float, runtime_s: float) -> optuna.trial.FrozenTrial:
    choices = optuna.distributions.CategoricalDistribution([1, 2, 8, 16, 32, 64])
    trial = create_trial(
        state=TrialState.COMPLETE, value=0.9,
        params={"per_device_batch_size": batch, "world_size": world_size, "grad_accum_steps": 1},
        distributions=dict.fromkeys(("per_device_batch_size", "world_size", "grad_accum_steps"), choices),
        user_attrs={"runtime_s": runtime_s, "device_seconds": runtime_s * world_size})
    trial.datetime_start, trial.datetime_complete = T0, T0 + timedelta(seconds=seconds)
    return trial


def test_a_trial_is_predicted_from_the_completed_trials_of_its_shape_else_from_all() -> None:
    trials = [completed(8, 1, 100, 90), completed(8, 1, 120, 110), completed(64, 2, 20, 15)]
    same = predict_trial(trials, {"per_device_batch_size": 8, "world_size": 1, "grad_accum_steps": 1}, devices=1)
    assert same is not None
    assert (same.wall_s, same.device_s) == (110.0, 100.0)
    assert same.basis == "2 completed trials of the same shape"
    other = predict_trial(trials, {"per_device_batch_size": 32, "world_size": 2, "grad_accum_steps": 1}, devices=2)
    assert other is not None
    assert (other.wall_s, other.device_s) == (100.0, 180.0)  # medians of all three, runtime x 2 devices
    assert predict_trial([], {"per_device_batch_size": 8}, devices=1) is None


def test_the_wall_clock_budget_counts_earlier_runs_and_refuses_a_trial_that_cannot_fit() -> None:
    clock = Clock()
    ledger = BudgetLedger(Budget(wall_s=600.0), BudgetSpent(wall_s=400.0), started=clock.now, clock=clock)
    fits = predict_trial([completed(8, 1, 150, 140)], {"per_device_batch_size": 8, "world_size": 1,
                                                       "grad_accum_steps": 1}, devices=1)
    clock.now += 30  # 430 of 600 s spent: 170 s left
    assert ledger.refusal(fits) is None
    assert ledger.refusal(None) is None  # nothing to predict from: it may start
    clock.now += 40  # 130 s left
    assert ledger.refusal(fits) == ("not started: predicted to take 2m30s (1 completed trial of the same "
                                    "shape), and 2m10s of the wall-clock budget is left")
    assert ledger.exhausted() is None
    clock.now += 130
    assert ledger.exhausted() == "the wall-clock budget of 10m is spent"
    assert ledger.refusal(None) == "not started: the wall-clock budget of 10m is spent"
    assert ledger.status().wall_left_s == 0


def test_the_device_hours_count_the_running_trials_and_what_they_are_predicted_to_use() -> None:
    clock = Clock()
    ledger = BudgetLedger(Budget(device_hours=0.1), BudgetSpent(device_s=60.0), started=clock.now, clock=clock)
    prediction = predict_trial([completed(8, 2, 100, 90)], {"per_device_batch_size": 8, "world_size": 2,
                                                            "grad_accum_steps": 1}, devices=2)
    assert prediction is not None and prediction.device_s == 180.0
    ledger.trial_proposed("a", 2, prediction)
    ledger.trial_training("a")
    clock.now += 10
    assert ledger.device_s() == 80.0  # 60 s from earlier runs and 2 devices x 10 s
    # 360 s in all: 60 spent, 180 held for the running trial, 120 left: a second one does not fit.
    assert ledger.refusal(prediction) == ("not started: predicted to use 0.05 device-hours (1 completed trial "
                                          "of the same shape), and 0.0333 are left once the running trials end")
    ledger.trial_ended("a", 25.0)  # it stopped early, having used 25 device-seconds
    assert ledger.device_s() == 85.0
    assert ledger.refusal(prediction) is None
    ledger.trial_proposed("b", 2, prediction)
    ledger.trial_training("b")
    clock.now += 137.5
    assert ledger.exhausted() == "the budget of 0.1 device-hours is spent"


def test_the_study_keeps_the_budget_and_its_trials_device_seconds_are_what_it_spent() -> None:
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    study.add_trial(completed(8, 2, 100, 90))
    write_budget(study, Budget(wall_s=7200.0))
    assert study.user_attrs[ATTR_BUDGET] == {"wall_s": 7200.0, "device_hours": None}
    assert spent_of(study) == BudgetSpent(wall_s=0.0, device_s=180.0)
