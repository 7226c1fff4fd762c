"""frontier_info on small hand-made trial tables."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from hpsearch.dashboards import FrontierInfo, frontier_info


def _trials() -> pd.DataFrame:
    # Trial 3 is dominated (slower and worse than trial 1); trial 4 failed and trial 5 was
    # pruned with numbers that would top the front if they counted; trial 6 has no metric.
    return pd.DataFrame(
        {
            "number": [0, 1, 2, 3, 4, 5, 6],
            "state": ["COMPLETE"] * 4 + ["FAIL", "PRUNED", "COMPLETE"],
            "per_device_batch_size": [8, 32, 128, 32, 8, 512, 8],
            "world_size": [1, 1, 2, 2, 1, 2, 1],
            "grad_accum_steps": [1, 1, 1, 1, 1, 1, 1],
            "effective_batch_size": [8, 32, 256, 64, 8, 1024, 8],
            "lr_rule": ["constant", "linear", "sqrt", "linear", "linear", "sqrt", "sqrt"],
            "base_lr": [0.01] * 7,
            "lr": [0.01, 0.04, 0.0566, 0.08, 0.01, 0.1131, 0.01],
            "momentum": [0.9] * 7,
            "runtime_s": [100.0, 40.0, 5.0, 60.0, 1.0, 0.5, 3.0],
            "device_seconds": [100.0, 40.0, 10.0, 120.0, 1.0, 1.0, 3.0],
            "val_accuracy": [0.95, 0.93, 0.80, 0.90, 0.99, 0.99, math.nan],
            "val_loss": [0.2, 0.25, 0.6, 0.3, 0.01, 0.01, math.nan],
            "status_reason": [None, None, None, None, "diverged", "asha", None],
        }
    )


def test_groups_hold_completed_trials_per_rule() -> None:
    info = frontier_info(_trials())
    assert [g.name for g in info.groups] == ["constant", "linear", "sqrt"]
    assert {g.name: [p.number for p in g.points] for g in info.groups} == {
        "constant": [0],
        "linear": [1, 3],
        "sqrt": [2],
    }
    assert info.n_trials == 7
    assert info.n_complete == 4


def test_front_is_trial_numbers_by_runtime() -> None:
    info = frontier_info(_trials())
    assert info.front == (2, 1, 0)
    assert [(p.x, p.y) for p in info.front_points] == [(5.0, 0.80), (40.0, 0.93), (100.0, 0.95)]


def test_failed_pruned_and_metricless_trials_are_left_out() -> None:
    info = frontier_info(_trials())
    numbers = {p.number for g in info.groups for p in g.points}
    assert numbers.isdisjoint({4, 5, 6})
    assert not {4, 5, 6} & set(info.front)


def test_points_carry_size_and_configuration_for_hover() -> None:
    info = frontier_info(_trials())
    point = next(p for g in info.groups for p in g.points if p.number == 2)
    assert point.size == 256.0
    assert point.config == {
        "per_device_batch_size": 128,
        "world_size": 2,
        "grad_accum_steps": 1,
        "effective_batch_size": 256,
        "lr_rule": "sqrt",
        "base_lr": 0.01,
        "lr": 0.0566,
        "momentum": 0.9,
    }
    # Plain Python values, so the hover and JSON output need no numpy.
    assert type(point.config["world_size"]) is int


def test_other_axes_and_directions_change_the_front() -> None:
    info = frontier_info(
        _trials(), x="device_seconds", y="val_loss", y_direction="minimize"
    )
    assert info.front == (2, 1, 0)
    assert info.x == "device_seconds"
    info = frontier_info(_trials(), x="device_seconds")
    # Trial 3 spent 120 device-seconds for less accuracy than trial 0 spent in 100.
    assert 3 not in info.front


def test_x_spanning_more_than_a_decade_asks_for_a_log_axis() -> None:
    assert frontier_info(_trials()).log_x  # 5 s to 100 s
    narrow = _trials().assign(runtime_s=[10.0, 20.0, 30.0, 40.0, 1.0, 1.0, 1.0])
    assert not frontier_info(narrow).log_x


def test_identical_results_keep_the_lowest_trial_number() -> None:
    df = _trials().iloc[[3, 1]].assign(runtime_s=40.0, val_accuracy=0.93)
    assert frontier_info(df).front == (1,)


def test_missing_metric_column_is_named_in_the_error() -> None:
    with pytest.raises(ValueError, match="'wall_time'"):
        frontier_info(_trials(), x="wall_time")
    with pytest.raises(ValueError, match="'val_accuracy'"):
        frontier_info(_trials().drop(columns="val_accuracy"))


def test_study_without_completed_trials_gives_empty_info() -> None:
    running = pd.DataFrame({"number": [0, 1], "state": ["RUNNING", "FAIL"]})
    for df in (running, pd.DataFrame()):
        info = frontier_info(df)
        assert isinstance(info, FrontierInfo)
        assert info.is_empty
        assert info.groups == ()
        assert info.front == ()


def test_missing_rule_column_gives_one_group() -> None:
    info = frontier_info(_trials().drop(columns="lr_rule"))
    assert [g.name for g in info.groups] == ["all trials"]
    assert info.front == (2, 1, 0)


def test_info_is_immutable() -> None:
    info = frontier_info(_trials())
    with pytest.raises(AttributeError):
        info.front = ()  # type: ignore[misc]
