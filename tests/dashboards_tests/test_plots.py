"""The figures' data (the ``*_info`` functions of hpsearch.dashboards) on small hand-made trial tables."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from hpsearch.dashboards import (
    accuracy_vs_batch_info,
    curve_metrics,
    learning_curves_info,
    log_axis,
    noise_scale_info,
    throughput_info,
)


def _trials() -> pd.DataFrame:
    """Nine trials: linear and constant at batches 64 and 512, one sqrt, and trials that must
    never count (a failed one and a pruned one with the best accuracy of all, a NaN one)."""
    return pd.DataFrame(
        {
            "number": [0, 1, 2, 3, 4, 5, 6, 7, 8],
            "state": ["COMPLETE"] * 6 + ["FAIL", "PRUNED", "COMPLETE"],
            "per_device_batch_size": [32, 32, 256, 32, 256, 64, 256, 32, 32],
            "world_size": [2, 2, 2, 2, 2, 4, 2, 1, 2],
            "grad_accum_steps": [1] * 9,
            "effective_batch_size": [64, 64, 512, 64, 512, 256, 512, 32, 64],
            "lr_rule": ["linear", "linear", "linear", "constant", "constant", "sqrt", "linear", "sqrt", "linear"],
            "base_lr": [0.01, 0.02, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01],
            "lr": [0.02, 0.04, 0.16, 0.01, 0.01, 0.028, 0.16, 0.01, 0.02],
            "val_accuracy": [0.90, 0.93, 0.91, 0.90, 0.70, 0.92, 0.99, 0.99, math.nan],
            "samples_per_s": [2000.0, 2100.0, 3800.0, 1900.0, 4000.0, 6000.0, None, None, 1800.0],
            "comm_fraction": [0.10, 0.12, 0.05, 0.11, 0.04, 0.20, None, None, 0.09],
            "noise_scale": [300.0, 320.0, 900.0, None, 850.0, 600.0, None, None, 310.0],
            "node_id": ["f" * 56] * 9,
        }
    )


def _curves(*points: tuple[int, float | None]) -> dict[str, list[float | None]]:
    return {"samples_seen": [p[0] for p in points], "val_accuracy": [p[1] for p in points],
            "val_loss": [None if p[1] is None else 1.0 - p[1] for p in points]}


# --- the log-axis rule ---------------------------------------------------------------------


def test_log_axis_needs_two_decades_of_positive_values() -> None:
    assert log_axis([8, 800])  # exactly two decades
    assert not log_axis([8, 799])
    assert log_axis([32, 1024, 32768])


def test_log_axis_stays_linear_with_a_zero_or_negative_value() -> None:
    assert not log_axis([0.0, 0.01, 0.4])  # comm_fraction of one process is 0
    assert not log_axis([-5.0, 10.0, 5000.0])


def test_log_axis_ignores_missing_values() -> None:
    assert log_axis([None, 1.0, math.nan, 1000.0, math.inf])
    assert not log_axis([])
    assert not log_axis([None, math.nan])


# --- accuracy vs effective batch -----------------------------------------------------------


def test_best_completed_trial_per_rule_and_batch() -> None:
    info = accuracy_vs_batch_info(_trials())
    lines = {
        line.name: [(p.effective_batch_size, p.value, p.number, p.n_trials) for p in line.points]
        for line in info.lines
    }
    assert lines == {
        "constant": [(64.0, 0.90, 3, 1), (512.0, 0.70, 4, 1)],
        # Trials 0 and 1 share batch 64: the better one (1) stands for both. The failed
        # trial 6 and the NaN trial 8 do not count.
        "linear": [(64.0, 0.93, 1, 2), (512.0, 0.91, 2, 1)],
        "sqrt": [(256.0, 0.92, 5, 1)],
    }
    assert info.n_complete == 6
    assert info.note is None


def test_minimized_metric_takes_the_lowest_value_and_ties_keep_the_lowest_number() -> None:
    df = _trials().assign(val_loss=[0.3, 0.3, 0.2, 0.4, 0.9, 0.25, 0.01, 0.01, 0.5])
    info = accuracy_vs_batch_info(df, metric="val_loss", direction="minimize")
    linear = next(line for line in info.lines if line.name == "linear")
    # Trials 0, 1 and 8 share batch 64; 0 and 1 tie at 0.3, 8 is worse.
    assert [(p.value, p.number, p.n_trials) for p in linear.points] == [(0.3, 0, 3), (0.2, 2, 1)]


def test_best_point_carries_the_trials_configuration_without_bookkeeping() -> None:
    info = accuracy_vs_batch_info(_trials())
    point = next(line for line in info.lines if line.name == "sqrt").points[0]
    assert point.config["per_device_batch_size"] == 64
    assert point.config["world_size"] == 4
    assert point.config["lr_rule"] == "sqrt"
    assert "node_id" not in point.config
    assert "effective_batch_size" not in point.config  # it is the x axis


def test_the_batch_axis_is_logarithmic_whatever_its_span() -> None:
    assert accuracy_vs_batch_info(_trials()).log_x  # 64 to 512: batches double, so does their spacing
    wide = _trials().assign(effective_batch_size=[64, 64, 8192, 64, 8192, 256, 8192, 32, 64])
    assert accuracy_vs_batch_info(wide).log_x
    assert not accuracy_vs_batch_info(wide).log_y


# --- empty, failed-only and incomplete studies ---------------------------------------------


def test_empty_study_gives_empty_infos_that_say_so() -> None:
    for info in (accuracy_vs_batch_info(pd.DataFrame()), learning_curves_info(pd.DataFrame()),
                 throughput_info(pd.DataFrame()), noise_scale_info(pd.DataFrame())):
        assert info.is_empty
        assert info.note == "no trials yet"


def test_study_of_failed_and_pruned_trials_counts_them_in_the_note() -> None:
    df = _trials().assign(state=["FAIL"] * 6 + ["PRUNED"] * 3)
    for info in (accuracy_vs_batch_info(df), learning_curves_info(df.assign(curves=None)),
                 throughput_info(df), noise_scale_info(df)):
        assert info.is_empty
        assert info.note == "no completed trials yet (6 failed, 3 pruned)"


def test_missing_columns_give_a_note_not_an_error() -> None:
    bare = _trials()[["number", "state"]]
    assert accuracy_vs_batch_info(bare).note == "no trial recorded effective_batch_size or val_accuracy"
    assert throughput_info(bare).throughput.note == "no trial recorded world_size or samples_per_s"
    assert throughput_info(bare).note == throughput_info(bare).throughput.note
    assert learning_curves_info(bare).note == "no trial recorded curves"
    assert "needs world_size x grad_accum_steps > 1" in (noise_scale_info(
        _trials().drop(columns="noise_scale")).note or "")


def test_invalid_direction_is_rejected_with_its_value() -> None:
    with pytest.raises(ValueError, match="'up'"):
        accuracy_vs_batch_info(_trials(), direction="up")  # type: ignore[arg-type]


# --- throughput per device and communication share -----------------------------------------


def test_throughput_per_device_divides_by_processes_not_ranks() -> None:
    df = pd.DataFrame(
        {
            "number": [0, 1, 2, 3],
            "state": ["COMPLETE"] * 4,
            "world_size": [1, 4, 4, 4],
            # Trial 2 emulated its 4 ranks in one process: one device did all the work.
            # Trial 3 predates the attr: a missing value means real ranks.
            "emulated_ranks": [1, 1, 4, None],
            "samples_per_s": [1000.0, 3600.0, 950.0, 3200.0],
            "comm_fraction": [0.0, 0.25, 0.0, 0.35],
        }
    )
    info = throughput_info(df)
    assert [(s.world_size, s.n_trials, s.low, s.high) for s in info.throughput.stats] == [
        (1, 1, 1000.0, 1000.0),
        (4, 3, 800.0, 950.0),
    ]
    four = info.throughput.stats[1]
    assert (four.q1, four.median, four.q3) == (850.0, 900.0, 925.0)
    assert [(s.world_size, s.median) for s in info.comm.stats] == [(1, 0.0), (4, 0.25)]
    assert info.throughput.metric == "samples_per_s_per_device"
    assert not info.comm.log_y  # zeros keep it linear


def test_throughput_uses_only_completed_trials_with_values() -> None:
    info = throughput_info(_trials())
    assert sum(s.n_trials for s in info.throughput.stats) == 7  # six complete, plus trial 8
    assert [s.world_size for s in info.throughput.stats] == [2, 4]
    assert not info.log_x


def test_comm_share_without_its_column_leaves_throughput_drawn() -> None:
    info = throughput_info(_trials().drop(columns="comm_fraction"))
    assert not info.throughput.is_empty
    assert info.comm.is_empty and info.comm.note == "no trial recorded comm_fraction"
    assert not info.is_empty and info.note is None


# --- gradient noise scale -------------------------------------------------------------------


def test_noise_scale_points_are_completed_trials_with_a_value_by_rule() -> None:
    info = noise_scale_info(_trials())
    assert {g.name: [(p.number, p.x, p.y) for p in g.points] for g in info.groups} == {
        "constant": [(4, 512.0, 850.0)],
        "linear": [(0, 64.0, 300.0), (1, 64.0, 320.0), (2, 512.0, 900.0), (8, 64.0, 310.0)],
        "sqrt": [(5, 256.0, 600.0)],
    }


def test_study_that_never_measured_a_noise_scale_says_why() -> None:
    info = noise_scale_info(_trials().assign(noise_scale=None))
    assert info.is_empty
    assert info.note == ("no completed trial measured a noise scale: "
                         "it needs world_size x grad_accum_steps > 1")


# --- learning curves ------------------------------------------------------------------------


def _with_curves() -> pd.DataFrame:
    df = _trials().iloc[:8].copy()
    df["curves"] = [
        _curves((100, 0.5), (200, 0.90)),
        _curves((100, 0.6), (200, 0.93)),
        _curves((800, 0.4), (1600, 0.91)),
        _curves((100, 0.5), (200, None)),  # the last epoch has no value: 0.5 is its last
        _curves((800, 0.3), (1600, 0.70)),
        None,  # a COMPLETE trial without curves (recorded before curves existed)
        _curves((800, 0.2)),
        _curves((50, 0.99)),
    ]
    return df


def test_default_curves_are_the_best_completed_trials_best_first() -> None:
    info = learning_curves_info(_with_curves(), limit=3)
    assert [c.number for c in info.curves] == [1, 2, 0]
    assert info.n_candidates == 5
    assert info.note == "the 3 best of 5 completed trials by final val_accuracy"
    best = info.curves[0]
    assert (best.x, best.y, best.rule, best.state) == ((100.0, 200.0), (0.6, 0.93), "linear", "COMPLETE")


def test_minimized_curves_rank_the_lowest_final_value_first() -> None:
    info = learning_curves_info(_with_curves(), metric="val_loss", direction="minimize", limit=2)
    assert [c.number for c in info.curves] == [1, 2]


def test_chosen_trials_are_drawn_in_order_whatever_their_state() -> None:
    info = learning_curves_info(_with_curves(), trials=[7, 6, 3])
    assert [(c.number, c.state, c.x, c.y) for c in info.curves] == [
        (7, "PRUNED", (50.0,), (0.99,)),
        (6, "FAIL", (800.0,), (0.2,)),
        (3, "COMPLETE", (100.0,), (0.5,)),  # the epoch without a value is left out
    ]
    assert info.note is None


def test_chosen_trial_without_curves_is_named_in_the_note() -> None:
    info = learning_curves_info(_with_curves(), trials=[5, 1])
    assert [c.number for c in info.curves] == [1]
    assert info.note == "no val_accuracy curve in trial 5"


def test_choosing_no_trials_draws_nothing_and_says_so() -> None:
    info = learning_curves_info(_with_curves(), trials=[])
    assert info.is_empty and info.note == "no trials chosen"


def test_unknown_trial_number_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="no trial numbered 42"):
        learning_curves_info(_with_curves(), trials=[1, 42])


def test_default_cap_keeps_a_large_study_drawable() -> None:
    many = pd.DataFrame(
        {
            "number": range(500),
            "state": ["COMPLETE"] * 500,
            "lr_rule": ["linear"] * 500,
            "curves": [_curves((100, i / 1000), (200, i / 500)) for i in range(500)],
        }
    )
    info = learning_curves_info(many)
    assert len(info.curves) == 20
    assert info.curves[0].number == 499
    assert info.n_candidates == 500


def test_curve_metrics_lists_what_the_trials_recorded() -> None:
    assert curve_metrics(_with_curves()) == ("val_accuracy", "val_loss")
    assert curve_metrics(_trials()) == ()
