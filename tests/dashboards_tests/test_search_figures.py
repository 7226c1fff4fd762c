"""The figures of a study (``hpsearch.dashboards.plot_*(search)``) on a synthetic study in an SQLite store."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import pytest

from hpsearch import ColumnError, Search, load
from hpsearch.dashboards import (
    plot_accuracy_vs_batch,
    plot_device_seconds_frontier,
    plot_frontier,
    plot_learning_curves,
    plot_noise_scale,
    plot_throughput,
)
from hpsearch.dashboards.learning_curves import DEFAULT_CURVES_LIMIT
from hpsearch.testing import synthetic_study


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory) -> Search:
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'hpsearch.db'}"
    synthetic_study(url, "figures", n_trials=150, seed=1)
    return load("figures", storage=url)


def _names(fig: go.Figure) -> list[str]:
    return [trace.name for trace in fig.data]


def test_accuracy_vs_batch_draws_each_rule_on_a_log_batch_axis(search: Search) -> None:
    fig = plot_accuracy_vs_batch(search)
    assert _names(fig) == ["constant", "linear", "sqrt"]
    assert fig.layout.xaxis.type == "log"
    assert "best of" in fig.data[0].hovertext[0]


def test_accuracy_vs_batch_of_a_missing_metric_is_a_column_error(search: Search) -> None:
    with pytest.raises(ColumnError, match="'top5_accuracy'"):
        plot_accuracy_vs_batch(search, metric="top5_accuracy")


def test_learning_curves_default_to_the_best_trials(search: Search) -> None:
    fig = plot_learning_curves(search)
    assert len(fig.data) == DEFAULT_CURVES_LIMIT
    best = max(
        (t for t in search.study.trials if t.state.name == "COMPLETE"), key=lambda t: t.user_attrs["val_accuracy"]
    )
    assert fig.data[0].name == f"trial {best.number}"


def test_learning_curves_of_chosen_trials_and_metric(search: Search) -> None:
    failed = next(t.number for t in search.study.trials if t.state.name == "FAIL" and "curves" in t.user_attrs)
    fig = plot_learning_curves(search, trials=[failed, 0], metric="val_loss")
    assert _names(fig) == [f"trial {failed}", "trial 0"]
    assert fig.data[0].line.dash == "dash"
    assert fig.layout.yaxis.title.text == "validation loss"


def test_learning_curves_of_an_unrecorded_metric_or_trial_are_errors(search: Search) -> None:
    with pytest.raises(ColumnError, match="'top5_accuracy'"):
        plot_learning_curves(search, metric="top5_accuracy")
    with pytest.raises(ValueError, match="no trial numbered 9999"):
        plot_learning_curves(search, trials=[9999])


def test_throughput_figure_has_both_panels_over_every_world_size(search: Search) -> None:
    fig = plot_throughput(search)
    medians = [t for t in fig.data if t.name == "median, quartiles"]
    assert [list(t.x) for t in medians] == [[1, 2, 4, 8]] * 2
    # Per-device throughput falls as all-reduce takes a growing share of each step.
    throughput, comm = (list(t.y) for t in medians)
    assert throughput[0] > throughput[-1]
    assert comm[0] == 0.0 < comm[-1]


def test_noise_scale_figure_draws_each_rule(search: Search) -> None:
    fig = plot_noise_scale(search)
    assert _names(fig)[:3] == ["constant", "linear", "sqrt"]
    assert fig.layout.yaxis.title.text == "gradient noise scale"


def test_device_seconds_frontier_is_the_frontier_on_device_seconds(search: Search) -> None:
    fig = plot_device_seconds_frontier(search)
    same = plot_frontier(search, x="device_seconds")
    assert fig.layout.xaxis.title.text == "device-seconds"
    assert [list(t.x) for t in fig.data] == [list(t.x) for t in same.data]


def test_figures_of_a_study_without_trials_say_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    empty = synthetic_study(url, "empty", n_trials=0)
    for fig in (plot_accuracy_vs_batch(empty), plot_learning_curves(empty), plot_noise_scale(empty),
                plot_device_seconds_frontier(empty)):
        assert len(fig.data) == 0
        assert fig.layout.annotations
    assert [a.text for a in plot_throughput(empty).layout.annotations] == ["no trials yet"] * 2


def test_plot_learning_curves_default_limit_is_the_figures() -> None:
    import inspect

    assert inspect.signature(plot_learning_curves).parameters["limit"].default == DEFAULT_CURVES_LIMIT
