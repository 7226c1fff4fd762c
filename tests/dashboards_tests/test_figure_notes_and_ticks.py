"""A figure's note never hides what it draws."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from hpsearch.dashboards.analysis_figures import LRLawInfo, TradeOffInfo, lr_law_figure, tradeoff_figure
from hpsearch.dashboards.frontier import frontier_figure
from hpsearch.dashboards.style import with_note

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
