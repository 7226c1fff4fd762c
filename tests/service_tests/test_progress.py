"""The live progress line of ``hpsearch start``: done, training, pending (waiting for their
devices), failed, best so far, time left."""

from __future__ import annotations

import pytest

from hpsearch.progress import ProgressDisplay, SearchEvent


def test_the_progress_line_counts_trials_by_outcome_and_tracks_the_best(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    display = ProgressDisplay(5, "val_accuracy", maximize=True)
    with display:
        for number in (0, 1, 2):
            display.on_event(SearchEvent("started", number))
        display.on_event(SearchEvent("completed", 0, {"values": [0.91, 3.0]}))
        display.on_event(SearchEvent("completed", 1, {"values": [0.95, 9.0]}))
        display.on_event(SearchEvent("skipped", 3, {"reason": "equivalent"}))
        display.on_event(SearchEvent("started", 4))
        display.on_event(SearchEvent("pruned", 4, {"reason": "early_stopped"}))
        display.on_event(SearchEvent("failed", 2, {"reason": "diverged", "detail": "non-finite loss"}))

    err = capsys.readouterr().err
    assert "trial 2 failed: diverged non-finite loss" in err
    assert "4/5" in err
    assert "training 0  failed 1  stopped early 1  skipped 1  best val_accuracy 0.95" in err
    assert "left ~" in err


def test_a_minimised_objective_keeps_the_lowest_value_as_best(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    display = ProgressDisplay(2, "val_loss", maximize=False)
    with display:
        display.on_event(SearchEvent("started", 0))
        display.on_event(SearchEvent("started", 1))
        display.on_event(SearchEvent("completed", 0, {"values": [0.4]}))
        display.on_event(SearchEvent("completed", 1, {"values": [0.7]}))

    err = capsys.readouterr().err
    assert "training 0  failed 0  best val_loss 0.4" in err
    assert "left ~0s" in err


def test_trials_waiting_for_their_devices_are_pending_not_training(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    display = ProgressDisplay(3, "val_accuracy", maximize=True, enabled=True)
    with display:
        for number in (0, 1, 2):
            display.on_event(SearchEvent("started", number))  # proposed: PENDING until its devices are granted
        display.on_event(SearchEvent("training", 0))
        display.on_event(SearchEvent("training", 1))
        display._progress.refresh()
        shown_while_pending = display._progress.tasks[0].fields["info"]
        display.on_event(SearchEvent("completed", 0, {"values": [0.9]}))
        display.on_event(SearchEvent("training", 2))

    # The word hpsearch status, the dashboard and the trials table use for the same trials.
    assert "training 2  pending 1  " in shown_while_pending
    assert "training 2  failed 0" in capsys.readouterr().err


def test_a_budgeted_search_shows_the_budget_spent_and_left_and_budget_stops_apart_from_failures(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpsearch.planner.budget import BudgetSpent, BudgetStatus
    from hpsearch.search_spaces import Budget

    monkeypatch.setenv("COLUMNS", "250")
    display = ProgressDisplay(10, "val_accuracy", maximize=True)
    with display:
        display.on_event(SearchEvent("started", 0))
        display.on_event(SearchEvent("training", 0))
        display.on_event(SearchEvent("budget", -1, {"status": BudgetStatus.of(
            Budget(wall_s=120.0, device_hours=1.0), BudgetSpent(wall_s=70.0, device_s=900.0))}))
        display.on_event(SearchEvent("budget_stop", -1, {"detail": "the wall-clock budget of 2m is spent: "
                                                                   "stopping the running trials"}))
        display.on_event(SearchEvent("failed", 0, {"reason": "budget", "detail": "stopped"}))

    err = capsys.readouterr().err
    assert "budget 1m10s of 2m (50s left), 0.25 of 1 device-hours (0.75 left)" in err
    assert "the wall-clock budget of 2m is spent: stopping the running trials" in err
    assert "failed 0  stopped by budget 1" in err
    assert "trial 0 failed" not in err  # the budget's stop is not the trial's failure
