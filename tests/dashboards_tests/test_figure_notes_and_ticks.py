"""A figure's note never hides what it draws, and a loss axis (a metric minimised over decades,
as a regression workload's ``val_loss``) is labelled at round values a reader can say aloud."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from hpsearch.dashboards.analysis_figures import LRLawInfo, TradeOffInfo, lr_law_figure, tradeoff_figure
from hpsearch.dashboards.frontier import frontier_figure
from hpsearch.dashboards.learning_curves import learning_curves_figure
from hpsearch.dashboards.style import MAX_TICKS, log_ticks, with_note

REFUSAL = "no LR law: only two effective batch sizes were tried at two LRs or more"


def _annotations_over_the_plot(fig: go.Figure) -> list[Any]:
    """The annotations that lie inside the plot area (a paper-referenced one between 0 and 1)."""
    return [a for a in fig.layout.annotations
            if not (a.yref == "paper" and a.y is not None and a.y >= 1 and a.yanchor == "bottom")]


def _says(fig: go.Figure, text: str) -> bool:
    """Whether the figure writes ``text`` somewhere (its title or an annotation), as wrapped lines."""
    drawn = " ".join([fig.layout.title.text or ""] + [a.text for a in fig.layout.annotations])
    plain = " ".join(drawn.replace("<br>", " ").replace("<sup>", " ").replace("</sup>", " ").split())
    return text in plain


def test_a_refused_lr_law_says_why_without_covering_the_best_lr_points() -> None:
    points = ((64.0, 0.1, 3, False, "val_accuracy"), (512.0, 0.4, 7, False, "val_accuracy"))
    fig = lr_law_figure(LRLawInfo(points, (), {}, "", REFUSAL))
    assert [t.name for t in fig.data] == ["best LR at each batch"]
    assert _says(fig, REFUSAL)
    # Centred across the plot, the note lay on the points it explained.
    assert _annotations_over_the_plot(fig) == []


def test_a_refused_tradeoff_fit_says_why_without_covering_the_batches() -> None:
    note = "no fit: the steps to the target fall with the batch at only two batch sizes"
    info = TradeOffInfo("val_accuracy=0.9", ((64.0, 6400.0, 100.0, "best"), (512.0, 20480.0, 40.0, "best")),
                        (), (), (), None, None, None, math.inf, None, None, note)
    fig = tradeoff_figure(info)
    assert fig.data and _says(fig, note)
    assert _annotations_over_the_plot(fig) == []


def test_a_note_on_a_figure_with_nothing_drawn_stays_across_its_middle() -> None:
    fig = frontier_figure(pd.DataFrame({"number": [], "state": []}))
    [note] = fig.layout.annotations
    assert (note.x, note.y, note.xref, note.yref) == (0.5, 0.5, "paper", "paper")


def test_a_note_over_a_subplot_that_draws_points_sits_above_it_and_an_empty_one_in_its_middle() -> None:
    fig = make_subplots(rows=1, cols=2)
    fig.add_trace(go.Scatter(x=[1, 2], y=[3, 4]), row=1, col=2)
    with_note(fig, "nothing measured here", xref="x domain", yref="y domain")
    with_note(fig, "measured, but refused", xref="x2 domain", yref="y2 domain")
    empty, drawn = fig.layout.annotations
    assert (empty.x, empty.y) == (0.5, 0.5)
    assert drawn.xref == "x2 domain" and drawn.yref == "y2 domain"
    assert drawn.y == 1 and drawn.yanchor == "bottom"  # the subplot's own subtitle line, above its points


def _loss_trials(low: float, high: float, n: int = 40) -> pd.DataFrame:
    """Completed trials of a study minimising ``val_loss``, spread evenly in log over [low, high]."""
    rng = np.random.default_rng(0)
    losses = np.geomspace(low, high, n)
    return pd.DataFrame({
        "number": range(n), "state": ["COMPLETE"] * n, "lr_rule": ["linear", "sqrt"] * (n // 2),
        "runtime_s": rng.uniform(10.0, 60.0, n), "effective_batch_size": [64] * n, "val_loss": losses,
        "curves": [{"samples_seen": [1000, 2000, 3000], "val_loss": [3 * float(v), 2 * float(v), float(v)]}
                   for v in losses],
    })


def _assert_readable(axis: Any, low: float, high: float) -> None:
    assert axis.type == "log"
    values, labels = list(axis.tickvals), list(axis.ticktext)
    assert 3 <= len(values) <= MAX_TICKS, values
    for value, label in zip(values, labels):
        mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
        assert round(mantissa, 6) in (1, 2, 5), value  # a round value: 1, 2 or 5 times a power of ten
        assert float(label.replace(",", "")) == value and "e" not in label, label  # written out, as read
    assert sum(low <= v <= high for v in values) >= 3  # labelled where the points are
    assert len(set(labels)) == len(labels)


def test_a_loss_axis_over_decades_is_labelled_at_round_values() -> None:
    df = _loss_trials(0.004, 2.5)
    fig = frontier_figure(df, y="val_loss", y_direction="minimize")
    # plotly's own log ticks over three decades were "0.01, 2, 5, 0.1, 2, 5, 1, 2": bare digits
    # that read as losses of 2 and 5.
    _assert_readable(fig.layout.yaxis, 0.004, 2.5)
    assert list(fig.layout.yaxis.tickvals) == [0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5]
    assert list(fig.layout.yaxis.ticktext)[:3] == ["0.002", "0.005", "0.01"]
    curves = learning_curves_figure(df, metric="val_loss", direction="minimize", limit=len(df))
    _assert_readable(curves.layout.yaxis, 0.004, 7.5)


def test_a_linear_loss_axis_keeps_plotlys_round_ticks() -> None:
    fig = frontier_figure(_loss_trials(0.3, 2.4), y="val_loss", y_direction="minimize")
    assert fig.layout.yaxis.type is None and fig.layout.yaxis.tickvals is None


def test_log_ticks_over_many_decades_are_powers_of_ten_and_never_too_many() -> None:
    ticks = log_ticks([1e-7, 3.0])
    assert ticks.log and ticks.tickvals == (1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1, 10)
    assert ticks.ticktext[:2] == ("1e-7", "1e-6") and ticks.ticktext[-3:] == ("0.1", "1", "10")
    wide = log_ticks([1e-12, 1e12])
    assert 3 <= len(wide.tickvals) <= MAX_TICKS
    assert all(round(math.log10(v), 9).is_integer() for v in wide.tickvals)
