"""The figures that draw lines: accuracy against batch, learning curves, and throughput.

Each takes the trials DataFrame, asks a pure function of :mod:`hpsearch.dashboards.plots` for
the data (:func:`~hpsearch.dashboards.plots.accuracy_vs_batch_info`,
:func:`~hpsearch.dashboards.plots.learning_curves_info`,
:func:`~hpsearch.dashboards.plots.throughput_info`) and only draws it in the house look
(:mod:`hpsearch.dashboards.style`). Re-exported, with the other renderers, by
:mod:`hpsearch.dashboards.figures`. This module imports plotly at the top.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from hpsearch.dashboards.batch import accuracy_vs_batch_info
from hpsearch.dashboards.curves import DEFAULT_CURVES_LIMIT, learning_curves_info
from hpsearch.dashboards.style import (
    _SIZE_BASE_PX,
    EMPTY_MESSAGE,
    FRONT_COLOR,
    axis_label,
    format_value,
    hover,
    new_figure,
    rule_color,
    with_log_axes,
    with_note,
)
from hpsearch.dashboards.throughput import WorldSizeSeries, throughput_info
from hpsearch.search_spaces.record import Direction

__all__ = [
    "accuracy_vs_batch_figure",
    "learning_curves_figure",
    "throughput_figure",
]


def accuracy_vs_batch_figure(
    df: pd.DataFrame,
    *,
    metric: str = "val_accuracy",
    direction: Direction = "maximize",
) -> go.Figure:
    """Accuracy against effective batch, one line per LR rule.

    Each point is the best completed trial of its rule at that batch (see
    :func:`hpsearch.dashboards.plots.accuracy_vs_batch_info` for why the best); its hover
    names that trial, its configuration and how many trials it is the best of. With a
    constant LR the line falls as the batch grows; a rule that keeps its line flat scales.

    Args:
        df: The trials DataFrame.
        metric: The column on the y axis.
        direction: Which values of ``metric`` are best.

    Returns:
        A ``plotly.graph_objects.Figure``: one ``lines+markers`` trace per rule, or an empty
        figure with a note.

    Example:
        >>> df = pd.DataFrame({
        ...     "number": [0, 1, 2], "state": ["COMPLETE"] * 3,
        ...     "lr_rule": ["constant", "linear", "linear"], "effective_batch_size": [8, 8, 1024],
        ...     "val_accuracy": [0.95, 0.95, 0.90],
        ... })
        >>> fig = accuracy_vs_batch_figure(df)
        >>> [trace.name for trace in fig.data], fig.layout.xaxis.type
        (['constant', 'linear'], 'log')
    """
    info = accuracy_vs_batch_info(df, metric=metric, direction=direction)
    fig = new_figure(f"best {axis_label(metric)} vs effective batch size, by LR rule",
                      "effective_batch_size", metric)
    if info.is_empty:
        return with_note(fig, info.note or EMPTY_MESSAGE)
    for line in info.lines:
        fig.add_trace(
            go.Scatter(
                x=[p.effective_batch_size for p in line.points],
                y=[p.value for p in line.points],
                mode="lines+markers",
                name=line.name,
                line={"color": rule_color(line.name), "width": 2},
                marker={"color": rule_color(line.name), "size": _SIZE_BASE_PX},
                customdata=[p.number for p in line.points],
                hovertext=[
                    hover(
                        f"trial {p.number}, best of {p.n_trials}",
                        {"effective_batch_size": p.effective_batch_size, metric: p.value},
                        p.config,
                    )
                    for p in line.points
                ],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    return with_log_axes(fig, info.log_x, info.log_y)


def learning_curves_figure(
    df: pd.DataFrame,
    *,
    trials: Sequence[int] | None = None,
    metric: str = "val_accuracy",
    direction: Direction = "maximize",
    limit: int = DEFAULT_CURVES_LIMIT,
) -> go.Figure:
    """Per-epoch curves against samples seen, one line per trial in its rule's color.

    Lines of one rule share a legend group (click the rule to hide them all); a pruned or
    failed trial's line is dashed and ends where the trial stopped. When the default choice
    leaves trials out, the title says how many (the best ``limit`` by final ``metric``).

    Args:
        df: The trials DataFrame with its ``curves`` column (``all_attrs=True``).
        trials: Trial numbers to draw, or ``None`` for the best ``limit`` completed trials.
        metric: The curve on the y axis (a key of ``curves``).
        direction: Which final values are best, for the default choice.
        limit: How many trials the default choice draws.

    Returns:
        A ``plotly.graph_objects.Figure`` with one ``lines+markers`` trace per trial.

    Raises:
        ValueError: When ``trials`` names a trial number the study does not have.

    Example:
        >>> df = pd.DataFrame({
        ...     "number": [0, 1], "state": ["COMPLETE", "PRUNED"], "lr_rule": ["sqrt", "linear"],
        ...     "curves": [{"samples_seen": [100, 200], "val_accuracy": [0.5, 0.8]},
        ...                {"samples_seen": [100], "val_accuracy": [0.3]}],
        ... })
        >>> [trace.name for trace in learning_curves_figure(df, trials=[0, 1]).data]
        ['trial 0', 'trial 1']
    """
    info = learning_curves_info(df, trials=trials, metric=metric, direction=direction, limit=limit)
    title = f"{axis_label(metric)} vs samples seen"
    if info.note and not info.is_empty:
        title += f"<br><sup>{info.note}</sup>"
    fig = new_figure(title, "samples_seen", metric)
    if info.is_empty:
        return with_note(fig, info.note or EMPTY_MESSAGE)
    titled: set[str] = set()
    for curve in info.curves:
        fig.add_trace(
            go.Scatter(
                x=list(curve.x),
                y=list(curve.y),
                mode="lines+markers",
                name=f"trial {curve.number}",
                legendgroup=curve.rule,
                # The rule's title once, above its first trial.
                legendgrouptitle_text=None if curve.rule in titled else curve.rule,
                line={"color": rule_color(curve.rule), "width": 1.5,
                      "dash": "solid" if curve.state == "COMPLETE" else "dash"},
                marker={"color": rule_color(curve.rule), "size": 4},
                customdata=[curve.number] * len(curve.x),
                hovertext=[
                    hover(f"trial {curve.number} ({curve.state.lower()})", {"samples_seen": x, metric: y},
                           curve.config)
                    for x, y in zip(curve.x, curve.y)
                ],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
        titled.add(curve.rule)
    return with_log_axes(fig, info.log_x, info.log_y)


def throughput_figure(df: pd.DataFrame) -> go.Figure:
    """Throughput per device and communication share against world size, side by side.

    Left: training samples per second per device (see
    :func:`hpsearch.dashboards.plots.throughput_info`); right: the share of step time in
    gradient all-reduce. The line is the median over the completed trials of each world size,
    the error bars their quartiles, the light band their range. A flat left line is perfect
    scaling; a right line that climbs with W says why it is not.

    Args:
        df: The trials DataFrame.

    Returns:
        A ``plotly.graph_objects.Figure`` of two subplots; a subplot without data says why.

    Example:
        >>> df = pd.DataFrame({
        ...     "number": [0, 1], "state": ["COMPLETE"] * 2, "lr_rule": ["linear"] * 2,
        ...     "world_size": [1, 4], "samples_per_s": [1000.0, 3600.0], "comm_fraction": [0.0, 0.2],
        ... })
        >>> fig = throughput_figure(df)
        >>> fig.layout.yaxis.title.text, fig.layout.yaxis2.title.text
        ('throughput per device (samples/s)', 'communication share of step time')
    """
    info = throughput_info(df)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12)
    fig.update_layout(
        title={"text": "Throughput per device and communication share vs world size"},
        hovermode="closest",
        template="plotly_white",
    )
    _add_world_size_panel(fig, info.throughput, 1, info.log_x)
    _add_world_size_panel(fig, info.comm, 2, info.log_x)
    return fig


def _add_world_size_panel(fig: go.Figure, series: WorldSizeSeries, col: int, log_x: bool) -> None:
    """One subplot of the throughput figure: the median per world size with its quartiles as
    error bars, and the range (min to max) as a light band."""
    fig.update_yaxes(title_text=axis_label(series.metric), row=1, col=col)
    fig.update_xaxes(title_text=axis_label("world_size"), row=1, col=col)
    if series.is_empty:
        axis = "" if col == 1 else str(col)
        with_note(fig, series.note or EMPTY_MESSAGE, xref=f"x{axis} domain", yref=f"y{axis} domain")
        return
    # One legend for both subplots: the left one's traces carry it.
    fig.add_trace(_range_band(series, showlegend=col == 1), row=1, col=col)
    fig.add_trace(_median_line(series, showlegend=col == 1), row=1, col=col)
    with_log_axes(fig, log_x, series.log_y, row=1, col=col)


def _range_band(series: WorldSizeSeries, *, showlegend: bool) -> go.Scatter:
    """The range (min to max) per world size as a light band, drawn under the median."""
    world_sizes = [s.world_size for s in series.stats]
    return go.Scatter(
        x=world_sizes + world_sizes[::-1],
        y=[s.high for s in series.stats] + [s.low for s in series.stats][::-1],
        fill="toself",
        mode="none",
        fillcolor="rgba(51, 51, 51, 0.12)",
        name="range (min to max)",
        legendgroup="range",
        showlegend=showlegend,
        hoverinfo="skip",
    )


def _median_line(series: WorldSizeSeries, *, showlegend: bool) -> go.Scatter:
    """The median per world size, its quartiles as error bars, the whole spread on hover."""
    return go.Scatter(
        x=[s.world_size for s in series.stats],
        y=[s.median for s in series.stats],
        mode="lines+markers",
        name="median, quartiles",
        legendgroup="median",
        showlegend=showlegend,
        line={"color": FRONT_COLOR, "width": 2},
        marker={"color": FRONT_COLOR, "size": _SIZE_BASE_PX},
        error_y={
            "type": "data",
            "symmetric": False,
            "array": [s.q3 - s.median for s in series.stats],
            "arrayminus": [s.median - s.q1 for s in series.stats],
            "color": FRONT_COLOR,
        },
        hovertext=[
            f"<b>world size {s.world_size}</b>: {s.n_trials} completed trials<br>"
            f"median {format_value(s.median)}, quartiles {format_value(s.q1)} to "
            f"{format_value(s.q3)}<br>range {format_value(s.low)} to {format_value(s.high)}"
            for s in series.stats
        ],
        hovertemplate="%{hovertext}<extra></extra>",
    )
