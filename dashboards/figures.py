"""Plotly figures of a study: the "render" half, thin on purpose.

Every figure here takes the trials DataFrame, asks a pure function in
:mod:`hpsearch.dashboards.frontier` for the data, and only draws. This module imports
plotly at the top, so import it only where a figure is drawn (``import hpsearch`` stays
light).
"""

from __future__ import annotations

import math
import os
import zlib
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from hpsearch.dashboards.frontier import (
    Direction,
    FrontierInfo,
    FrontierPoint,
    frontier_info,
)

__all__ = [
    "METRIC_LABELS",
    "RULE_COLORS",
    "axis_label",
    "frontier_figure",
    "rule_color",
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

METRIC_LABELS: dict[str, str] = {
    "runtime_s": "runtime (s)",
    "device_seconds": "device-seconds",
    "val_accuracy": "validation accuracy",
    "val_loss": "validation loss",
    "train_loss": "training loss",
    "samples_per_s": "throughput (samples/s)",
    "samples_seen": "samples seen",
    "effective_batch_size": "effective batch size",
    "per_device_batch_size": "per-device batch size",
    "world_size": "world size (devices)",
    "comm_fraction": "communication share of step time",
    "noise_scale": "gradient noise scale",
    "lr": "learning rate",
    "base_lr": "base learning rate",
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
    return METRIC_LABELS.get(column, column)


def _format_value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _hover_text(point: FrontierPoint, info: FrontierInfo) -> str:
    lines = [
        f"<b>trial {point.number}</b>",
        f"{axis_label(info.x)}: {_format_value(point.x)}",
        f"{axis_label(info.y)}: {_format_value(point.y)}",
    ]
    lines += [f"{key}: {_format_value(value)}" for key, value in point.config.items()]
    return "<br>".join(lines)


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
    return title[0].upper() + title[1:]


def frontier_figure(
    df: pd.DataFrame,
    *,
    x: str = "runtime_s",
    y: str = "val_accuracy",
    x_direction: Direction = "minimize",
    y_direction: Direction = "maximize",
    color: str | None = "lr_rule",
    size: str | None = "effective_batch_size",
) -> go.Figure:
    """A scatter of completed trials with their Pareto front, one trace per LR rule.

    Each color group (LR rule by default) is one scatter trace in a fixed color (see
    :func:`rule_color`); marker size grows with log2 of ``size`` (the effective batch by
    default); hovering a point shows its trial number, x, y and configuration. The front is
    an extra trace named ``"Pareto front"``, drawn as a staircase that bounds the region
    the front dominates. The x axis is logarithmic when x spans more than a decade. A study
    without completed trials gives an empty figure that says so, not an error.

    Args:
        df: The trials DataFrame (one row per trial; see
            :func:`hpsearch.dashboards.frontier_info`).
        x: The column for the x axis.
        y: The column for the y axis.
        x_direction: ``"minimize"`` or ``"maximize"``: which x is better.
        y_direction: ``"minimize"`` or ``"maximize"``: which y is better.
        color: The column that splits trials into traces, or ``None``.
        size: The column that sets marker sizes, or ``None``.

    Returns:
        A ``plotly.graph_objects.Figure``.

    Raises:
        ValueError: When ``x`` or ``y`` is missing from a DataFrame with completed trials,
            or a direction is invalid.

    Example:
        >>> from hpsearch.dashboards.figures import frontier_figure, write_figure_html
        >>> fig = frontier_figure(df, x="device_seconds")  # doctest: +SKIP
        >>> write_figure_html(fig, "frontier.html")  # doctest: +SKIP
    """
    info = frontier_info(
        df,
        x=x,
        y=y,
        x_direction=x_direction,
        y_direction=y_direction,
        color=color,
        size=size,
    )
    fig = go.Figure()
    fig.update_layout(
        title={"text": _title(info)},
        xaxis={"title": {"text": axis_label(info.x)}},
        yaxis={"title": {"text": axis_label(info.y)}},
        legend={"title": {"text": axis_label(info.color) if info.color else ""}},
        hovermode="closest",
        template="plotly_white",
    )
    if info.is_empty:
        fig.add_annotation(
            text=_EMPTY_MESSAGE,
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
            showarrow=False,
            font={"size": 16},
        )
        return fig

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
    if info.log_x:
        fig.update_xaxes(type="log")
    return fig


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
