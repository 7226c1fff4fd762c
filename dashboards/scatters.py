"""The figures that draw one marker per trial: the frontier and the gradient noise scale.

Both draw completed trials by LR rule (one trace per rule, in its color), can draw a thinned set
of a large study (the subtitle says how many are shown) and take their data from a pure function
(:func:`hpsearch.dashboards.frontier.frontier_info`,
:func:`hpsearch.dashboards.plots.noise_scale_info`). Re-exported, with the other renderers, by
:mod:`hpsearch.dashboards.figures`. This module imports plotly at the top.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import pandas as pd
import plotly.graph_objects as go

from hpsearch.dashboards.frontier import Direction, FrontierInfo, FrontierPoint, frontier_info
from hpsearch.dashboards.noise import noise_scale_info
from hpsearch.dashboards.points import log_axis
from hpsearch.dashboards.style import (
    _SIZE_BASE_PX,
    _SIZE_MAX_PX,
    _SIZE_STEP_PX,
    EMPTY_MESSAGE,
    FRONT_COLOR,
    axis_label,
    hover,
    new_figure,
    rule_color,
    with_log_axes,
    with_note,
)

__all__ = [
    "frontier_figure",
    "noise_scale_figure",
]


def frontier_figure(
    df: pd.DataFrame,
    *,
    x: str = "runtime_s",
    y: str = "val_accuracy",
    x_direction: Direction = "minimize",
    y_direction: Direction = "maximize",
    color: str | None = "lr_rule",
    size: str | None = "effective_batch_size",
    max_points: int | None = None,
) -> go.Figure:
    """A scatter of completed trials with their Pareto front, one trace per LR rule.

    Each color group (LR rule by default) is one scatter trace in a fixed color (see
    :func:`rule_color`); marker size grows with log2 of ``size`` (the effective batch by
    default); hovering a point shows its trial number, x, y and configuration. The front is
    an extra trace named ``"Pareto front"``, drawn as a staircase that bounds the region
    the front dominates. An axis is logarithmic when its values span two decades (see
    :func:`hpsearch.dashboards.plots.log_axis`). A study without completed trials gives an
    empty figure that says so, not an error. ``x="device_seconds"`` draws the
    device-seconds-vs-accuracy frontier: what the trials cost in devices times time.

    With ``max_points``, a study of more completed trials draws every front trial and a
    thinned rest (see :func:`hpsearch.dashboards.frontier_info`), and the title says how
    many trials it shows.

    Args:
        df: The trials DataFrame (one row per trial; see
            :func:`hpsearch.dashboards.frontier_info`).
        x: The column for the x axis.
        y: The column for the y axis.
        x_direction: ``"minimize"`` or ``"maximize"``: which x is better.
        y_direction: ``"minimize"`` or ``"maximize"``: which y is better.
        color: The column that splits trials into traces, or ``None``.
        size: The column that sets marker sizes, or ``None``.
        max_points: Draw at most about this many trials (every front trial stays), or
            ``None`` for all.

    Returns:
        A ``plotly.graph_objects.Figure``.

    Raises:
        ValueError: When ``x`` or ``y`` is missing from a DataFrame with completed trials,
            or a direction is invalid.

    Example:
        >>> df = pd.DataFrame({
        ...     "number": [0, 1, 2], "state": ["COMPLETE"] * 3, "lr_rule": ["linear", "sqrt", "linear"],
        ...     "runtime_s": [10.0, 20.0, 30.0], "device_seconds": [80.0, 20.0, 30.0],
        ...     "val_accuracy": [0.8, 0.9, 0.85],
        ... })
        >>> fig = frontier_figure(df, x="device_seconds")
        >>> [trace.name for trace in fig.data], fig.layout.xaxis.title.text
        (['linear', 'sqrt', 'Pareto front'], 'device-seconds')
    """
    info = frontier_info(
        df,
        x=x,
        y=y,
        x_direction=x_direction,
        y_direction=y_direction,
        color=color,
        size=size,
        max_points=max_points,
    )
    fig = new_figure(_frontier_title(info), info.x, info.y, axis_label(info.color) if info.color else "")
    if info.is_empty:
        return with_note(fig, EMPTY_MESSAGE)
    positive = [
        p.size for g in info.groups for p in g.points if p.size is not None and p.size > 0
    ]
    smallest = min(positive) if positive else None
    for group in info.groups:
        fig.add_trace(
            _trial_markers(
                group.name,
                group.points,
                _marker_sizes(group.points, smallest),
                [hover(f"trial {p.number}", {info.x: p.x, info.y: p.y}, p.config) for p in group.points],
            )
        )
    fig.add_trace(_front_line(info))
    drawn = [p for g in info.groups for p in g.points]
    return with_log_axes(fig, log_axis(p.x for p in drawn), log_axis(p.y for p in drawn))


def _frontier_title(info: FrontierInfo) -> str:
    """The title, "y vs x, by color", with a subtitle saying how many trials are drawn when not all are."""
    title = f"{axis_label(info.y)} vs {axis_label(info.x)}"
    if info.color is not None:
        title += f", by {axis_label(info.color)}"
    if info.n_hidden:
        shown = info.n_complete - info.n_hidden
        title += "<br><sup>" + _thinned_note(shown, info.n_complete, len(info.front)) + "</sup>"
    return title


def _front_line(info: FrontierInfo) -> go.Scatter:
    """The Pareto front as a dotted staircase through its trials."""
    return go.Scatter(
        x=[p.x for p in info.front_points],
        y=[p.y for p in info.front_points],
        mode="lines",
        name="Pareto front",
        # From each front point the line first moves along x when x is minimized (the
        # next point costs more x to buy more y), along y when x is maximized: either
        # way the steps trace the edge of the region the front dominates.
        line={
            "shape": "hv" if info.x_direction == "minimize" else "vh",
            "color": FRONT_COLOR,
            "width": 2,
            "dash": "dot",
        },
        customdata=list(info.front),
        hoverinfo="skip",
    )


def _marker_sizes(points: tuple[FrontierPoint, ...], smallest: float | None) -> list[float]:
    sizes: list[float] = []
    for point in points:
        if point.size is None or smallest is None or point.size <= 0:
            sizes.append(_SIZE_BASE_PX)
            continue
        doublings = math.log2(point.size / smallest)
        sizes.append(min(_SIZE_MAX_PX, _SIZE_BASE_PX + _SIZE_STEP_PX * doublings))
    return sizes


class _Trial(Protocol):
    """What a marker needs of a trial's point: a frontier point or a noise-scale one."""

    @property
    def number(self) -> int: ...

    @property
    def x(self) -> float: ...

    @property
    def y(self) -> float: ...


def _trial_markers(name: str, points: Sequence[_Trial], size: float | list[float], hovertext: list[str]) -> go.Scatter:
    """One group's trials as markers in the group's color; each marker carries its trial number
    (``customdata``, which the dashboard's pages link to) and its hover text."""
    return go.Scatter(
        x=[p.x for p in points],
        y=[p.y for p in points],
        mode="markers",
        name=name,
        marker={
            "color": rule_color(name),
            "size": size,
            "line": {"width": 1, "color": "white"},
            "opacity": 0.85,
        },
        customdata=[p.number for p in points],
        hovertext=hovertext,
        hovertemplate="%{hovertext}<extra></extra>",
    )


def _thinned_note(shown: int, total: int, front: int | None = None, what: str = "completed trials") -> str:
    """The subtitle of a scatter that draws some of its trials."""
    if front is not None:
        return f"showing {shown:,} of {total:,} {what}: all {front:,} on the Pareto front, the rest one per region"
    return f"showing {shown:,} of {total:,} {what}, one per region of the plot"


def noise_scale_figure(df: pd.DataFrame, *, max_points: int | None = None) -> go.Figure:
    """The gradient noise scale of completed trials against their effective batch, by rule.

    The dotted diagonal is "batch = noise scale": trials below it train with a batch larger
    than their noise scale, where a larger batch buys little progress per step (McCandlish et
    al. 2018). Trials that could not measure a noise scale (W x A = 1) are left out.

    With ``max_points``, a study of more such trials draws a thinned set (see
    :func:`hpsearch.dashboards.plots.noise_scale_info`) and the title says how many.

    Args:
        df: The trials DataFrame.
        max_points: Draw at most this many trials, or ``None`` for all.

    Returns:
        A ``plotly.graph_objects.Figure``: one marker trace per rule and the diagonal, or an
        empty figure with a note.

    Example:
        >>> df = pd.DataFrame({
        ...     "number": [0, 1], "state": ["COMPLETE"] * 2, "lr_rule": ["linear", "sqrt"],
        ...     "effective_batch_size": [64, 512], "noise_scale": [410.0, 530.0],
        ... })
        >>> [trace.name for trace in noise_scale_figure(df).data]
        ['linear', 'sqrt', 'batch = noise scale']
    """
    info = noise_scale_info(df, max_points=max_points)
    title = "gradient noise scale vs effective batch size, by LR rule"
    if info.n_hidden:
        note = _thinned_note(info.n_points - info.n_hidden, info.n_points, what="trials with a noise scale")
        title += f"<br><sup>{note}</sup>"
    fig = new_figure(title, "effective_batch_size", "noise_scale")
    if info.is_empty:
        return with_note(fig, info.note or EMPTY_MESSAGE)
    for group in info.groups:
        fig.add_trace(
            _trial_markers(
                group.name,
                group.points,
                _SIZE_BASE_PX,
                [
                    hover(f"trial {p.number}", {"effective_batch_size": p.x, "noise_scale": p.y}, p.config)
                    for p in group.points
                ],
            )
        )
    points = [p for g in info.groups for p in g.points]
    # Only where both axes already reach, so the diagonal never stretches an axis.
    low = max(min(p.x for p in points), min(p.y for p in points))
    high = min(max(p.x for p in points), max(p.y for p in points))
    if low < high:
        fig.add_trace(
            go.Scatter(
                x=[low, high],
                y=[low, high],
                mode="lines",
                name="batch = noise scale",
                line={"color": FRONT_COLOR, "width": 1, "dash": "dot"},
                hoverinfo="skip",
            )
        )
    return with_log_axes(fig, info.log_x, info.log_y)
