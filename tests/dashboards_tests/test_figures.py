"""The study figures as a user sees them: traces, colors, log axes, hover text, empty notes."""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from hpsearch.dashboards.accuracy_vs_batch import accuracy_vs_batch_figure
from hpsearch.dashboards.frontier import frontier_figure
from hpsearch.dashboards.learning_curves import learning_curves_figure
from hpsearch.dashboards.noise_scale import noise_scale_figure
from hpsearch.dashboards.style import RULE_COLORS
from hpsearch.dashboards.throughput import throughput_figure


def _trials() -> pd.DataFrame:
    """Six completed trials over three rules and batches 32 to 4096, one failed trial."""
    return pd.DataFrame(
        {
            "number": [0, 1, 2, 3, 4, 5, 6],
            "state": ["COMPLETE"] * 6 + ["FAIL"],
            "per_device_batch_size": [32, 512, 32, 512, 64, 512, 512],
            "world_size": [1, 8, 1, 8, 2, 8, 8],
            "grad_accum_steps": [1, 1, 1, 1, 1, 1, 1],
            "effective_batch_size": [32, 4096, 32, 4096, 128, 4096, 4096],
            "lr_rule": ["constant", "constant", "linear", "linear", "sqrt", "sqrt", "linear"],
            "base_lr": [0.05] * 7,
            "lr": [0.05, 0.05, 0.05, 6.4, 0.1, 0.57, 6.4],
            "val_accuracy": [0.94, 0.40, 0.94, 0.85, 0.93, 0.80, None],
            "runtime_s": [900.0, 20.0, 900.0, 21.0, 300.0, 20.0, None],
            "device_seconds": [900.0, 160.0, 900.0, 168.0, 600.0, 160.0, None],
            "samples_per_s": [560.0, 25000.0, 560.0, 24000.0, 1700.0, 25500.0, None],
            "comm_fraction": [0.0, 0.30, 0.0, 0.32, 0.12, 0.31, None],
            "noise_scale": [None, 1100.0, None, 1500.0, 900.0, 1300.0, None],
            "emulated_ranks": [1] * 7,
            "node_id": ["a" * 56] * 7,
            "curves": [
                {"samples_seen": [50_000 * e for e in (1, 2, 3)], "val_accuracy": [0.5, 0.8, v]}
                for v in (0.94, 0.40, 0.94, 0.85, 0.93, 0.80)
            ] + [{"samples_seen": [50_000], "val_accuracy": [0.1]}],
        }
    )


def _traces(fig: go.Figure) -> dict[str, go.Scatter]:
    return {trace.name: trace for trace in fig.data}


def _notes(fig: go.Figure) -> list[str]:
    """The notes across a figure as a reader sees them: plotly's line breaks and escapes undone."""
    return [html.unescape(a.text.replace("<br>", " ")) for a in fig.layout.annotations]


def test_accuracy_vs_batch_has_one_line_per_rule_in_its_color() -> None:
    fig = accuracy_vs_batch_figure(_trials())
    traces = _traces(fig)
    assert list(traces) == ["constant", "linear", "sqrt"]
    assert list(traces["constant"].x) == [32.0, 4096.0]
    assert list(traces["constant"].y) == [0.94, 0.40]
    for rule, trace in traces.items():
        assert trace.line.color == RULE_COLORS[rule]
        assert trace.mode == "lines+markers"


def test_accuracy_vs_batch_uses_a_log_batch_axis_across_decades() -> None:
    fig = accuracy_vs_batch_figure(_trials())
    assert fig.layout.xaxis.type == "log"  # 32 to 4096
    assert fig.layout.yaxis.type != "log"
    assert fig.layout.xaxis.title.text == "effective batch size"
    assert fig.layout.yaxis.title.text == "validation accuracy"


def test_accuracy_vs_batch_hover_names_the_best_trial_and_its_configuration() -> None:
    (_, text) = _traces(accuracy_vs_batch_figure(_trials()))["linear"].hovertext
    assert "trial 3, best of 1" in text
    assert "per_device_batch_size: 512" in text
    assert "world_size: 8" in text
    assert "lr: 6.4" in text
    assert "node_id" not in text


def test_learning_curves_draw_one_line_per_trial_grouped_by_rule() -> None:
    fig = learning_curves_figure(_trials())
    # The best first; the failed trial is not among the default choice.
    assert [t.name for t in fig.data] == ["trial 0", "trial 2", "trial 4", "trial 3", "trial 5", "trial 1"]
    traces = _traces(fig)
    assert traces["trial 3"].line.color == RULE_COLORS["linear"]
    assert traces["trial 3"].legendgroup == "linear"
    assert list(traces["trial 3"].x) == [50_000, 100_000, 150_000]
    assert fig.layout.xaxis.title.text == "samples seen"


def test_learning_curve_of_a_failed_trial_is_dashed_and_says_its_state() -> None:
    fig = learning_curves_figure(_trials(), trials=[6, 2])
    failed, done = fig.data
    assert failed.line.dash == "dash" and done.line.dash == "solid"
    assert "trial 6 (fail)" in failed.hovertext[0]
    assert "lr_rule: linear" in failed.hovertext[0]


def test_capped_learning_curves_say_how_many_were_left_out() -> None:
    fig = learning_curves_figure(_trials(), limit=2)
    assert len(fig.data) == 2
    assert "the 2 best of 6 completed trials" in fig.layout.title.text


def test_throughput_figure_shows_per_device_median_and_comm_share_by_world_size() -> None:
    fig = throughput_figure(_trials())
    left = [t for t in fig.data if t.name == "median, quartiles" and t.xaxis == "x"]
    right = [t for t in fig.data if t.name == "median, quartiles" and t.xaxis == "x2"]
    assert list(left[0].x) == [1, 2, 8]
    # World size 8: 25000, 24000, 25500 samples/s over 8 devices each.
    assert list(left[0].y) == [560.0, 850.0, 3125.0]
    assert list(right[0].y) == [0.0, 0.12, 0.31]
    assert fig.layout.yaxis.title.text == "throughput per device (samples/s)"
    assert fig.layout.yaxis2.title.text == "communication share of step time"
    assert "3 completed trials" in left[0].hovertext[2]


def test_noise_scale_figure_has_a_trace_per_rule_and_the_diagonal() -> None:
    fig = noise_scale_figure(_trials())
    traces = _traces(fig)
    assert list(traces) == ["constant", "linear", "sqrt", "batch = noise scale"]
    assert list(traces["sqrt"].x) == [128.0, 4096.0]
    assert traces["linear"].marker.color == RULE_COLORS["linear"]
    assert "trial 3" in traces["linear"].hovertext[0]
    # Batches 128 to 4096 and noise scales 900 to 1500: under two decades, linear axes.
    assert fig.layout.xaxis.type == "log"  # the batch axis (style.batch_axis)
    assert fig.layout.yaxis.type != "log"


def test_device_seconds_frontier_labels_its_axis_and_keeps_the_front() -> None:
    fig = frontier_figure(_trials(), x="device_seconds")
    assert fig.layout.xaxis.title.text == "device-seconds"
    front = _traces(fig)["Pareto front"]
    assert list(front.customdata) == [5, 3, 4, 0]
    assert fig.layout.xaxis.type != "log"  # 160 to 900
    slow = _trials().assign(device_seconds=[90_000.0, 160.0, 90_000.0, 168.0, 600.0, 160.0, None])
    assert frontier_figure(slow, x="device_seconds").layout.xaxis.type == "log"


def test_every_figure_of_an_empty_or_failed_study_is_empty_with_a_note() -> None:
    failed = _trials().assign(state="FAIL")
    for draw in (accuracy_vs_batch_figure, learning_curves_figure, noise_scale_figure):
        assert _notes(draw(pd.DataFrame())) == ["no trials yet"]
        fig = draw(failed)
        assert len(fig.data) == 0
        assert _notes(fig) == ["no completed trials yet (7 failed)"]
    fig = throughput_figure(failed)
    assert len(fig.data) == 0
    assert _notes(fig) == ["no completed trials yet (7 failed)"] * 2


def test_study_of_single_device_trials_explains_the_missing_noise_scale() -> None:
    fig = noise_scale_figure(_trials().drop(columns="noise_scale"))
    assert len(fig.data) == 0
    assert "world_size x grad_accum_steps > 1" in _notes(fig)[0]


def test_each_learning_curve_of_a_rule_has_a_marker_of_its_own_that_its_legend_entry_shows() -> None:
    fig = learning_curves_figure(_trials())
    by_rule: dict[str, list[str]] = {}
    for trace in fig.data:
        by_rule.setdefault(trace.legendgroup, []).append(trace.marker.symbol)
    assert any(len(symbols) > 1 for symbols in by_rule.values())
    assert all(len(set(symbols)) == len(symbols) for symbols in by_rule.values()), by_rule
