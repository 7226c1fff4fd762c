"""The look every study figure shares: colors, axis titles, hover text, empty figures, log axes.

A fixed color per LR rule (:data:`RULE_COLORS`), axis titles with units (:func:`axis_label`),
hover text that names the trial and its configuration, one marker size, a white template, and
an empty figure with a note, rather than an error, while a study has nothing to show. The
renderers (:mod:`hpsearch.dashboards.figures`) and the analysis figures build on these; the
public names are re-exported by :mod:`hpsearch.dashboards.figures`. This module imports plotly
at the top, so import it only where a figure is drawn.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

import plotly.graph_objects as go

from hpsearch.dashboards.throughput import THROUGHPUT_PER_DEVICE
from hpsearch.search_spaces import record

__all__ = [
    "EMPTY_MESSAGE",
    "FRONT_COLOR",
    "METRIC_LABELS",
    "RULE_COLORS",
    "axis_label",
    "format_value",
    "hover",
    "new_figure",
    "rule_color",
    "with_log_axes",
    "with_note",
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
FRONT_COLOR = "#333333"

#: Axis titles of the columns that are not names of the trial record (which has its own labels,
#: ``hpsearch.search_spaces.record.label``).
METRIC_LABELS: dict[str, str] = {
    THROUGHPUT_PER_DEVICE: "throughput per device (samples/s)",
}

EMPTY_MESSAGE = "no completed trials yet"

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


def format_value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def hover(title: str, values: Mapping[str, object], config: Mapping[str, object]) -> str:
    """Hover text: a bold title naming the trial, the plotted values under their axis
    labels, then the configuration (measurements and bookkeeping such as the Ray node id are
    not configuration: ``hpsearch.dashboards.points``)."""
    lines = [f"<b>{title}</b>"]
    lines += [f"{axis_label(column)}: {format_value(value)}" for column, value in values.items()]
    lines += [f"{key}: {format_value(value)}" for key, value in config.items()]
    return "<br>".join(lines)


def new_figure(title: str, x: str, y: str, legend_title: str = "LR rule") -> go.Figure:
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


def with_note(fig: go.Figure, note: str, *, xref: str = "paper", yref: str = "paper") -> go.Figure:
    """The figure (or the subplot of axes ``xref``, ``yref``) with ``note`` across its middle."""
    fig.add_annotation(text=note, xref=xref, yref=yref, x=0.5, y=0.5, showarrow=False, font={"size": 16})
    return fig


def with_log_axes(fig: go.Figure, log_x: bool, log_y: bool, **subplot: int) -> go.Figure:
    """The figure with its x and y axes (those of one subplot, given ``row`` and ``col``)
    logarithmic where asked."""
    if log_x:
        fig.update_xaxes(type="log", **subplot)
    if log_y:
        fig.update_yaxes(type="log", **subplot)
    return fig
