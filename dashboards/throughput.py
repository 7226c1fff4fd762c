"""Throughput per device and the communication share of step time against world size: how far a
study's trials are from perfect scaling, and why.

One module, the figure's every step, as ``optuna.visualization``'s:

- compute: :func:`throughput_info` turns the trials DataFrame into a :class:`ThroughputInfo` of
  plain values (tested for values; imports no plotly);
- render: :func:`throughput_figure` draws it with plotly, two panels side by side;
- a study: :func:`plot_throughput` (``plot_*(search)``);
- the dashboard: :func:`throughput_from_query` answers ``/api/studies/NAME/figures/throughput``.

Example:
    >>> import optuna
    >>> from hpsearch.testing import synthetic_study
    >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
    >>> [trace.name for trace in plot_throughput(search).data][:2]
    ['range (min to max)', 'median, quartiles']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from hpsearch import record
from hpsearch.dashboards.points import completed_trials, floats, log_axis, missing_note, no_completed_note
from hpsearch.dashboards.queries import FigureQuery
from hpsearch.dashboards.style import (
    EMPTY_MESSAGE,
    FRONT_COLOR,
    MARKER_SIZE_PX,
    axis_label,
    count_ticks,
    format_value,
    white_template,
    with_log_axes,
    with_note,
)

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from hpsearch.search import Search

__all__ = [
    "THROUGHPUT_PER_DEVICE",
    "ThroughputInfo",
    "WorldSizeSeries",
    "WorldSizeStats",
    "plot_throughput",
    "throughput_figure",
    "throughput_from_query",
    "throughput_info",
]


# ---- compute ------------------------------------------------------------------------------------

#: The derived column of the throughput figure: ``samples_per_s`` per device used.
THROUGHPUT_PER_DEVICE = "samples_per_s_per_device"
_THROUGHPUT_LABEL = "throughput per device (samples/s)"


@dataclass(frozen=True)
class WorldSizeStats:
    """The spread of one measurement over the completed trials of one world size.

    Attributes:
        world_size: W, the number of ranks.
        n_trials: Completed trials of this world size with a finite value.
        median: Their median.
        q1: The 25th percentile (linear interpolation, as ``numpy.percentile``).
        q3: The 75th percentile.
        low: The smallest value.
        high: The largest value.
    """

    world_size: int
    n_trials: int
    median: float
    q1: float
    q3: float
    low: float
    high: float


@dataclass(frozen=True)
class WorldSizeSeries:
    """One measurement against world size: its spread over the trials of each world size.

    Attributes:
        metric: The measurement's column, e.g. ``"comm_fraction"``.
        stats: One :class:`WorldSizeStats` per world size, by ascending W.
        log_y: Whether the measurement's axis is logarithmic.
        note: Why there is nothing to draw, or ``None``.
    """

    metric: str
    stats: tuple[WorldSizeStats, ...]
    log_y: bool
    note: str | None

    @property
    def is_empty(self) -> bool:
        """True when there is nothing to draw."""
        return not self.stats


@dataclass(frozen=True)
class ThroughputInfo:
    """Everything the throughput figure shows: two measurements against world size.

    Attributes:
        throughput: Training samples per second per device
            (``samples_per_s_per_device``, see :func:`throughput_info`).
        comm: The share of step time in gradient all-reduce (``comm_fraction``).
        log_x: Whether the world-size axis is logarithmic.
        n_trials: Rows in the DataFrame, whatever their state.
        n_complete: Completed trials.
        note: Why the figure is empty, or ``None`` when either measurement has points.
    """

    throughput: WorldSizeSeries
    comm: WorldSizeSeries
    log_x: bool
    n_trials: int
    n_complete: int
    note: str | None

    @property
    def is_empty(self) -> bool:
        """True when neither measurement has anything to draw."""
        return self.throughput.is_empty and self.comm.is_empty


def _world_size_series(world_sizes: np.ndarray, values: np.ndarray, metric: str, note: str | None) -> WorldSizeSeries:
    """The spread of ``values`` per world size, over the trials with both finite; empty, with
    ``note`` (or one saying that no trial has both), when there is nothing to draw."""
    keep = np.isfinite(world_sizes) & np.isfinite(values)
    if note is None and not keep.any():
        note = f"no completed trial has both a world size and {metric}"
    if note is not None:
        return WorldSizeSeries(metric, (), False, note)
    ws, vs = world_sizes[keep], values[keep]
    stats = []
    for w in sorted(set(ws.tolist())):
        at = vs[ws == w]
        q1, median, q3 = np.percentile(at, [25, 50, 75])
        stats.append(
            WorldSizeStats(int(w), len(at), float(median), float(q1), float(q3), float(at.min()), float(at.max()))
        )
    return WorldSizeSeries(metric=metric, stats=tuple(stats), log_y=log_axis(vs), note=None)


def throughput_info(df: pd.DataFrame) -> ThroughputInfo:
    """Throughput per device and communication share against world size.

    Throughput per device is ``samples_per_s / processes``, where processes (devices) is
    ``world_size / emulated_ranks``: ``world_size`` for a normal DDP trial (``emulated_ranks``
    is 1 or absent), 1 for a trial whose ranks were emulated in one process
    (``emulated_ranks`` = W, see docs/trials.md). Perfect scaling keeps it flat as W grows;
    the drop shows what communication and stragglers cost. ``comm_fraction`` (the share of step
    time spent in gradient all-reduce) is drawn beside it because it is usually why.

    Each measurement gets, per world size, the median and spread (quartiles, min and max) over
    the COMPLETE trials with a finite value. Aggregates rather than one point per trial: the
    figure stays a few kilobytes for a 10,000-trial study, and the spread per world size is
    what the question needs (the frontier and noise-scale figures show single trials).

    Args:
        df: The trials DataFrame (``number``, ``state``, ``world_size``, ``samples_per_s``,
            ``comm_fraction``; ``emulated_ranks`` where recorded).

    Returns:
        A :class:`ThroughputInfo`; a measurement without data is empty with its own ``note``.

    Example:
        >>> df = pd.DataFrame({
        ...     "number": [0, 1, 2], "state": ["COMPLETE"] * 3, "world_size": [1, 4, 4],
        ...     "emulated_ranks": [1, 1, 4], "samples_per_s": [1000.0, 3600.0, 950.0],
        ...     "comm_fraction": [0.0, 0.2, 0.0],
        ... })
        >>> info = throughput_info(df)
        >>> [(s.world_size, s.median) for s in info.throughput.stats]
        [(1, 1000.0), (4, 925.0)]
    """
    done = completed_trials(df)
    note = no_completed_note(df) if not len(done) else None
    world_sizes = floats(done, record.WORLD_SIZE)
    emulated = floats(done, record.EMULATED_RANKS)
    processes = world_sizes / np.where(np.isfinite(emulated) & (emulated >= 1), emulated, 1.0)
    per_device = floats(done, record.SAMPLES_PER_S) / processes
    throughput = _world_size_series(
        world_sizes, per_device, THROUGHPUT_PER_DEVICE, note or missing_note(done, (record.WORLD_SIZE, record.SAMPLES_PER_S))
    )
    comm = _world_size_series(
        world_sizes, floats(done, record.COMM_FRACTION), record.COMM_FRACTION,
        note or missing_note(done, (record.WORLD_SIZE, record.COMM_FRACTION)),
    )
    if note is None and throughput.is_empty and comm.is_empty:
        note = throughput.note
    return ThroughputInfo(
        throughput=throughput,
        comm=comm,
        log_x=log_axis(s.world_size for series in (throughput, comm) for s in series.stats),
        n_trials=len(df),
        n_complete=len(done),
        note=note,
    )


# ---- render -------------------------------------------------------------------------------------

def throughput_figure(df: pd.DataFrame) -> go.Figure:
    """Throughput per device and communication share against world size, side by side.

    Left: training samples per second per device (see :func:`throughput_info`); right: the
    share of step time in gradient all-reduce. The line is the median over the completed
    trials of each world size, the error bars their quartiles, the light band their range. A
    flat left line is perfect scaling; a right line that climbs with W says why it is not.

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
    import plotly.graph_objects as go  # heavy: only where a figure is drawn
    from plotly.subplots import make_subplots

    info = throughput_info(df)
    # The house template as data, unvalidated (style.new_figure says why).
    # The gap holds the right panel's axis title and its "100%" ticks: at 0.12 the title lay on
    # the left panel's points.
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.2,
                        figure=go.Figure(layout={"template": white_template()}, _validate=False))
    fig.update_layout(
        title={"text": "Throughput per device and communication share vs world size"},
        hovermode="closest",
    )
    _add_world_size_panel(fig, info.throughput, 1, info.log_x)
    _add_world_size_panel(fig, info.comm, 2, info.log_x)
    return fig


def _add_world_size_panel(fig: go.Figure, series: WorldSizeSeries, col: int, log_x: bool) -> None:
    """One subplot of the throughput figure: the median per world size with its quartiles as
    error bars, and the range (min to max) as a light band."""
    label = _THROUGHPUT_LABEL if series.metric == THROUGHPUT_PER_DEVICE else axis_label(series.metric)
    fig.update_yaxes(title_text=label, row=1, col=col)
    fig.update_xaxes(title_text=axis_label(record.WORLD_SIZE), row=1, col=col)
    if series.is_empty:
        axis = "" if col == 1 else str(col)
        with_note(fig, series.note or EMPTY_MESSAGE, xref=f"x{axis} domain", yref=f"y{axis} domain")
        return
    # One legend for both subplots: the left one's traces carry it.
    fig.add_trace(_range_band(series, showlegend=col == 1), row=1, col=col)
    fig.add_trace(_median_line(series, showlegend=col == 1), row=1, col=col)
    with_log_axes(fig, log_x, series.log_y, row=1, col=col)
    # A world size is a whole count: ticks at the ones the trials ran (plotly's own put ticks
    # at W 1.5 between 1 and 2).
    fig.update_xaxes(**count_ticks([s.world_size for s in series.stats], log=log_x).layout(), row=1, col=col)
    if series.metric == record.COMM_FRACTION:
        # A share of step time: 0 to 100% (plotly draws -1 to 1 when every trial's share is 0).
        # A little room past both ends, so that a point at exactly 0% (one device) is not cut in half.
        fig.update_yaxes(range=[-0.03, 1.03], tickformat=".0%", tickvals=[0, 0.2, 0.4, 0.6, 0.8, 1.0],
                         row=1, col=col)


def _range_band(series: WorldSizeSeries, *, showlegend: bool) -> go.Scatter:
    """The range (min to max) per world size as a light band, drawn under the median."""
    import plotly.graph_objects as go  # heavy: only where a figure is drawn

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
    import plotly.graph_objects as go  # heavy: only where a figure is drawn

    return go.Scatter(
        x=[s.world_size for s in series.stats],
        y=[s.median for s in series.stats],
        mode="lines+markers",
        name="median, quartiles",
        legendgroup="median",
        showlegend=showlegend,
        line={"color": FRONT_COLOR, "width": 2},
        marker={"color": FRONT_COLOR, "size": MARKER_SIZE_PX},
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


# ---- a study, and the dashboard ------------------------------------------------------------------

def plot_throughput(search: Search) -> go.Figure:
    """Training samples per second per device, and the share of step time in all-reduce,
    against world size: COMPLETE trials as points, the median and quartiles per world size."""
    return throughput_figure(search.trials_dataframe())


def throughput_from_query(query: FigureQuery) -> go.Figure:
    """``GET .../figures/throughput``: no parameters."""
    return throughput_figure(query.frame)
