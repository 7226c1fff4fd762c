"""The throughput figure as plain data: throughput per device and communication share per world size.

:func:`throughput_info` is re-exported by :mod:`hpsearch.dashboards.plots`, where the figures'
data is documented; :mod:`hpsearch.dashboards.figures` draws it. Nothing here imports plotly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from hpsearch.dashboards.points import _completed, _missing_note, _no_completed_note, _numbers, log_axis

__all__ = [
    "THROUGHPUT_PER_DEVICE",
    "ThroughputInfo",
    "WorldSizeSeries",
    "WorldSizeStats",
    "throughput_info",
]

#: The derived column of the throughput figure: ``samples_per_s`` per device used.
THROUGHPUT_PER_DEVICE = "samples_per_s_per_device"


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
    done = _completed(df)
    note = _no_completed_note(df) if not len(done) else None
    world_sizes = _numbers(done, "world_size")
    emulated = _numbers(done, "emulated_ranks")
    processes = world_sizes / np.where(np.isfinite(emulated) & (emulated >= 1), emulated, 1.0)
    per_device = _numbers(done, "samples_per_s") / processes
    throughput = _world_size_series(
        world_sizes, per_device, THROUGHPUT_PER_DEVICE, note or _missing_note(done, ("world_size", "samples_per_s"))
    )
    comm = _world_size_series(
        world_sizes, _numbers(done, "comm_fraction"), "comm_fraction",
        note or _missing_note(done, ("world_size", "comm_fraction")),
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
