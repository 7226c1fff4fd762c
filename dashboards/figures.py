"""Plotly figures of a study: the "render" half, thin on purpose.

Every figure here takes the trials DataFrame, asks a pure function in
:mod:`hpsearch.dashboards.frontier` or :mod:`hpsearch.dashboards.plots` for the data, and only
draws. They share one look: a fixed color per LR rule (:data:`RULE_COLORS`), axis titles with
units (:func:`axis_label`), log axes by one rule (:func:`hpsearch.dashboards.plots.log_axis`),
hover text that names the trial and its configuration, and an empty figure with a note, rather
than an error, while a study has nothing to show. This module imports plotly at the top, so
import it only where a figure is drawn (``import hpsearch`` stays light).
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from hpsearch.dashboards.frontier import (
    Direction,
    FrontierInfo,
    FrontierPoint,
    frontier_info,
)
from hpsearch.dashboards.plots import (
    DEFAULT_CURVES_LIMIT,
    THROUGHPUT_PER_DEVICE,
    WorldSizeSeries,
    accuracy_vs_batch_info,
    learning_curves_info,
    log_axis,
    noise_scale_info,
    throughput_info,
)
from hpsearch.search_spaces import record

__all__ = [
    "METRIC_LABELS",
    "RULE_COLORS",
    "accuracy_vs_batch_figure",
    "axis_label",
    "frontier_figure",
    "learning_curves_figure",
    "noise_scale_figure",
    "rule_color",
    "throughput_figure",
    "write_figure_html",
]

# Fixed colors per LR rule so "linear" is the same color in every figure and on every
# page. Okabe-Ito colors: they stay distinguishable for color-blind readers.
RULE_COLORS: dict[str, str] = {
    "constant": "#0072B2",
    "linear": "#D55E00",
    "sqrt": "#009E73",
}
# For other group names (user-defined rules, or a different color column). The pick is
# by a stable hash of the name, not by order of appearance, so a name keeps its color
# when another figure shows a different set of groups.
_OTHER_COLORS: tuple[str, ...] = (
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#F0E442",
    "#999999",
    "#000000",
)
_FRONT_COLOR = "#333333"

#: Axis titles of the columns that are not names of the trial record (which has its own labels,
#: ``hpsearch.search_spaces.record.label``).
METRIC_LABELS: dict[str, str] = {
    THROUGHPUT_PER_DEVICE: "throughput per device (samples/s)",
}

_EMPTY_MESSAGE = "no completed trials yet"

# Marker diameter in pixels: grows by _SIZE_STEP_PX per doubling of the size column
# above the smallest value drawn, capped so a 4096-sample batch does not hide its
# neighbours.
_SIZE_BASE_PX = 8.0
_SIZE_STEP_PX = 3.0
_SIZE_MAX_PX = 40.0


def rule_color(name: str) -> str:
    """The color used for an LR rule (or any group name) in every figure.

    Args:
        name: A group name, e.g. ``"linear"``.

    Returns:
        A CSS hex color: fixed for ``constant``, ``linear`` and ``sqrt``, and stable
        per name for any other.

    Example:
        >>> rule_color("linear")
        '#D55E00'
    """
    if name in RULE_COLORS:
        return RULE_COLORS[name]
    return _OTHER_COLORS[zlib.crc32(name.encode("utf-8")) % len(_OTHER_COLORS)]


def axis_label(column: str) -> str:
    """A human axis title, with units, for a trials column.

    Args:
        column: A column name such as ``"runtime_s"``.

    Returns:
        The label, e.g. ``"runtime (s)"``; unknown columns are returned unchanged.

    Example:
        >>> axis_label("device_seconds")
        'device-seconds'
    """
    return METRIC_LABELS.get(column) or record.label(column)


def _format_value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _hover(title: str, values: Mapping[str, object], config: Mapping[str, object]) -> str:
    """Hover text: a bold title naming the trial, the plotted values under their axis
    labels, then the configuration (measurements and bookkeeping such as the Ray node id are
    not configuration: ``hpsearch.dashboards.frontier``)."""
    lines = [f"<b>{title}</b>"]
    lines += [f"{axis_label(column)}: {_format_value(value)}" for column, value in values.items()]
    lines += [f"{key}: {_format_value(value)}" for key, value in config.items()]
    return "<br>".join(lines)


def _hover_text(point: FrontierPoint, info: FrontierInfo) -> str:
    return _hover(f"trial {point.number}", {info.x: point.x, info.y: point.y}, point.config)


def _marker_sizes(points: tuple[FrontierPoint, ...], smallest: float | None) -> list[float]:
    sizes: list[float] = []
    for point in points:
        if point.size is None or smallest is None or point.size <= 0:
            sizes.append(_SIZE_BASE_PX)
            continue
        doublings = math.log2(point.size / smallest)
        sizes.append(min(_SIZE_MAX_PX, _SIZE_BASE_PX + _SIZE_STEP_PX * doublings))
    return sizes


def _title(info: FrontierInfo) -> str:
    title = f"{axis_label(info.y)} vs {axis_label(info.x)}"
    if info.color is not None:
        title += f", by {axis_label(info.color)}"
    return title


def _new_figure(title: str, x: str, y: str, legend_title: str = "LR rule") -> go.Figure:
    """An empty figure in the house layout: a title, axis titles with units, a white template."""
    fig = go.Figure()
    fig.update_layout(
        title={"text": title[0].upper() + title[1:]},
        xaxis={"title": {"text": axis_label(x)}},
        yaxis={"title": {"text": axis_label(y)}},
        legend={"title": {"text": legend_title}},
        hovermode="closest",
        template="plotly_white",
    )
    return fig


def _with_note(fig: go.Figure, note: str, *, xref: str = "paper", yref: str = "paper") -> go.Figure:
    """The figure (or the subplot of axes ``xref``, ``yref``) with ``note`` across its middle."""
    fig.add_annotation(text=note, xref=xref, yref=yref, x=0.5, y=0.5, showarrow=False, font={"size": 16})
    return fig


def _with_log_axes(fig: go.Figure, log_x: bool, log_y: bool, **subplot: int) -> go.Figure:
    """The figure with its x and y axes (those of one subplot, given ``row`` and ``col``)
    logarithmic where asked."""
    if log_x:
        fig.update_xaxes(type="log", **subplot)
    if log_y:
        fig.update_yaxes(type="log", **subplot)
    return fig


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
    title = _title(info)
    if info.n_hidden:
        shown = info.n_complete - info.n_hidden
        title += "<br><sup>" + _thinned_note(shown, info.n_complete, len(info.front)) + "</sup>"
    fig = _new_figure(title, info.x, info.y, axis_label(info.color) if info.color else "")
    if info.is_empty:
        return _with_note(fig, _EMPTY_MESSAGE)

    positive = [
        p.size for g in info.groups for p in g.points if p.size is not None and p.size > 0
    ]
    smallest = min(positive) if positive else None
    for group in info.groups:
        fig.add_trace(
            go.Scatter(
                x=[p.x for p in group.points],
                y=[p.y for p in group.points],
                mode="markers",
                name=group.name,
                marker={
                    "color": rule_color(group.name),
                    "size": _marker_sizes(group.points, smallest),
                    "line": {"width": 1, "color": "white"},
                    "opacity": 0.85,
                },
                customdata=[p.number for p in group.points],
                hovertext=[_hover_text(p, info) for p in group.points],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=[p.x for p in info.front_points],
            y=[p.y for p in info.front_points],
            mode="lines",
            name="Pareto front",
            # From each front point the line first moves along x when x is minimized (the
            # next point costs more x to buy more y), along y when x is maximized: either
            # way the steps trace the edge of the region the front dominates.
            line={
                "shape": "hv" if info.x_direction == "minimize" else "vh",
                "color": _FRONT_COLOR,
                "width": 2,
                "dash": "dot",
            },
            customdata=list(info.front),
            hoverinfo="skip",
        )
    )
    drawn = [p for g in info.groups for p in g.points]
    return _with_log_axes(fig, log_axis(p.x for p in drawn), log_axis(p.y for p in drawn))


def _thinned_note(shown: int, total: int, front: int | None = None, what: str = "completed trials") -> str:
    """The subtitle of a scatter that draws some of its trials."""
    if front is not None:
        return f"showing {shown:,} of {total:,} {what}: all {front:,} on the Pareto front, the rest one per region"
    return f"showing {shown:,} of {total:,} {what}, one per region of the plot"


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
    fig = _new_figure(f"best {axis_label(metric)} vs effective batch size, by LR rule",
                      "effective_batch_size", metric)
    if info.is_empty:
        return _with_note(fig, info.note or _EMPTY_MESSAGE)
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
                    _hover(
                        f"trial {p.number}, best of {p.n_trials}",
                        {"effective_batch_size": p.effective_batch_size, metric: p.value},
                        p.config,
                    )
                    for p in line.points
                ],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    return _with_log_axes(fig, info.log_x, info.log_y)


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
    fig = _new_figure(title, "samples_seen", metric)
    if info.is_empty:
        return _with_note(fig, info.note or _EMPTY_MESSAGE)
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
                    _hover(f"trial {curve.number} ({curve.state.lower()})", {"samples_seen": x, metric: y},
                           curve.config)
                    for x, y in zip(curve.x, curve.y)
                ],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
        titled.add(curve.rule)
    return _with_log_axes(fig, info.log_x, info.log_y)


def _add_world_size_panel(fig: go.Figure, series: WorldSizeSeries, col: int, log_x: bool) -> None:
    """One subplot of the throughput figure: the median per world size with its quartiles as
    error bars, and the range (min to max) as a light band."""
    fig.update_yaxes(title_text=axis_label(series.metric), row=1, col=col)
    fig.update_xaxes(title_text=axis_label("world_size"), row=1, col=col)
    if series.is_empty:
        axis = "" if col == 1 else str(col)
        _with_note(fig, series.note or _EMPTY_MESSAGE, xref=f"x{axis} domain", yref=f"y{axis} domain")
        return
    world_sizes = [s.world_size for s in series.stats]
    fig.add_trace(
        go.Scatter(
            x=world_sizes + world_sizes[::-1],
            y=[s.high for s in series.stats] + [s.low for s in series.stats][::-1],
            fill="toself",
            mode="none",
            fillcolor="rgba(51, 51, 51, 0.12)",
            name="range (min to max)",
            legendgroup="range",
            showlegend=col == 1,
            hoverinfo="skip",
        ),
        row=1,
        col=col,
    )
    fig.add_trace(
        go.Scatter(
            x=world_sizes,
            y=[s.median for s in series.stats],
            mode="lines+markers",
            name="median, quartiles",
            legendgroup="median",
            showlegend=col == 1,
            line={"color": _FRONT_COLOR, "width": 2},
            marker={"color": _FRONT_COLOR, "size": _SIZE_BASE_PX},
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [s.q3 - s.median for s in series.stats],
                "arrayminus": [s.median - s.q1 for s in series.stats],
                "color": _FRONT_COLOR,
            },
            hovertext=[
                f"<b>world size {s.world_size}</b>: {s.n_trials} completed trials<br>"
                f"median {_format_value(s.median)}, quartiles {_format_value(s.q1)} to "
                f"{_format_value(s.q3)}<br>range {_format_value(s.low)} to {_format_value(s.high)}"
                for s in series.stats
            ],
            hovertemplate="%{hovertext}<extra></extra>",
        ),
        row=1,
        col=col,
    )
    _with_log_axes(fig, log_x, series.log_y, row=1, col=col)


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
    fig = _new_figure(title, "effective_batch_size", "noise_scale")
    if info.is_empty:
        return _with_note(fig, info.note or _EMPTY_MESSAGE)
    for group in info.groups:
        fig.add_trace(
            go.Scatter(
                x=[p.x for p in group.points],
                y=[p.y for p in group.points],
                mode="markers",
                name=group.name,
                marker={
                    "color": rule_color(group.name),
                    "size": _SIZE_BASE_PX,
                    "line": {"width": 1, "color": "white"},
                    "opacity": 0.85,
                },
                customdata=[p.number for p in group.points],
                hovertext=[
                    _hover(f"trial {p.number}", {"effective_batch_size": p.x, "noise_scale": p.y}, p.config)
                    for p in group.points
                ],
                hovertemplate="%{hovertext}<extra></extra>",
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
                line={"color": _FRONT_COLOR, "width": 1, "dash": "dot"},
                hoverinfo="skip",
            )
        )
    return _with_log_axes(fig, info.log_x, info.log_y)


def write_figure_html(fig: go.Figure, path: str | os.PathLike[str]) -> Path:
    """Write a figure as one standalone HTML file that also opens offline.

    plotly.js is embedded in the file (a few MiB) instead of loaded from a CDN, because
    frontiers are often opened on cluster machines or laptops without internet access.
    Parent folders are created. The file is written next to its target and renamed into
    place, so a browser refreshing a frontier while a study runs never reads half a file.

    Args:
        fig: The figure, e.g. from :func:`frontier_figure`.
        path: Where to write the ``.html`` file.

    Returns:
        The path written, as a ``pathlib.Path``.

    Raises:
        OSError: When the folder cannot be created or the file cannot be written.

    Example:
        >>> write_figure_html(frontier_figure(df), "out/frontier.html")  # doctest: +SKIP
        PosixPath('out/frontier.html')
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    html = pio.to_html(fig, include_plotlyjs=True, full_html=True, include_mathjax=False)
    # A per-process name opened normally (not mkstemp) so the file gets the usual
    # umask-based permissions rather than owner-only ones.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(html, encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
