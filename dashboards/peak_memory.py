"""Peak memory per rank against the per-device batch, one line per device kind, with where the
trials ran out of memory: the figure beside throughput that says how large a batch fits.

One module, the figure's every step, as ``optuna.visualization``'s:

- compute: :func:`memory_info` turns the trials DataFrame into a :class:`MemoryInfo` of plain
  values (tested for values; imports no plotly);
- render: :func:`memory_figure` draws it with plotly;
- a study: :func:`plot_memory` (``plot_*(search)``);
- the dashboard: :func:`memory_from_query` answers ``/api/studies/NAME/figures/memory``.

The facts and the line are the analysis's own (``hpsearch.analysis.memory_models``: peak =
fixed + per_sample x b per device kind and configuration, the largest batch that fit, the
smallest that ran out), so the figure and ``hpsearch recommend`` say the same.

Example:
    >>> import optuna
    >>> from hpsearch.testing import synthetic_study
    >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
    >>> [trace.name for trace in plot_memory(search).data][:2]
    ['cuda (NVIDIA H100 80GB HBM3)', 'cuda (NVIDIA H100 80GB HBM3): fitted line']
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hpsearch import record
from hpsearch.analysis import memory_limits, memory_models, ran_shapes
from hpsearch.dashboards.points import config_columns, plain_value
from hpsearch.dashboards.queries import FigureQuery
from hpsearch.dashboards.style import (
    MARKER_SIZE_PX,
    axis_label,
    batch_axis,
    subtitle,
    white_template,
    with_batch_axis,
    with_note,
)
from hpsearch.study import format_bytes

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from hpsearch.analysis import MemoryLimits
    from hpsearch.search import Search

__all__ = ["BatchPeak", "MemoryInfo", "MemorySeries", "device_kind", "memory_figure", "memory_from_query",
           "memory_info", "memory_parameters", "memory_unit", "plot_memory"]

_TITLE = "Peak memory per rank vs per-device batch"
_NO_PEAKS = "no trial recorded its peak memory yet"
_MIB = 2**20
_GIB = 2**30
#: A rank's device index in a ``device`` attr: ``cuda:0 (NVIDIA H100)`` is the kind ``cuda (NVIDIA H100)``.
_DEVICE_INDEX = re.compile(r"^(\w+):\d+\b")
#: One color per series, in order (Okabe-Ito, as the rules' colors: distinguishable for
#: color-blind readers, and none too pale on white).
_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")


# ---- compute ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BatchPeak:
    """The measured peaks of one series at one per-device batch.

    Attributes:
        per_device_batch: b, as the trials ran it.
        n_trials: Trials with a peak there.
        median: Their median peak, in bytes.
        low: The smallest peak.
        high: The largest peak.
        trials: Their numbers (the first few).
    """

    per_device_batch: float
    n_trials: int
    median: float
    low: float
    high: float
    trials: tuple[int, ...]


@dataclass(frozen=True)
class MemorySeries:
    """One device kind (and configuration, where the study's memory-relevant parameters vary).

    Attributes:
        name: The legend's name: the device kind, then the configuration (``cpu, hidden 64``).
        device: The device kind.
        configuration: Its values of the study's other parameters that vary.
        peaks: The measured peaks per per-device batch, ascending.
        line: The fitted line's ``(b, bytes)`` points over the batches drawn, empty without one.
        largest_fit: The largest per-device batch that ran without running out of memory.
        smallest_out_of_memory: The smallest per-device batch that ran out, the ceiling.
        out_of_memory_at: Where to mark the ceiling: ``(b, bytes)``, the line's peak there (or
            the largest peak measured); ``None`` without a ceiling.
        out_of_memory_trials: The trials that ran out (or ran halved because their batch had).
        limit_bytes: What a rank may hold, where known.
        summary: The analysis's line about it (``MemoryModel.describe``).
        contradicted: Per-device batches where a trial ran out of memory although a trial of
            that batch or a larger one on the same device kind ran to the end: ``(b, trials)``.
            They set no ceiling (a cap of another run, a transient allocation or a neighbour on a
            shared GPU), and are drawn apart.
    """

    name: str
    device: str
    configuration: Mapping[str, Any]
    peaks: tuple[BatchPeak, ...]
    line: tuple[tuple[float, float], ...]
    largest_fit: int | None
    smallest_out_of_memory: int | None
    out_of_memory_at: tuple[float, float] | None
    out_of_memory_trials: tuple[int, ...]
    limit_bytes: float | None
    summary: str
    contradicted: tuple[tuple[int, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class MemoryInfo:
    """Everything the memory figure shows.

    Attributes:
        series: One per device kind (and configuration), by name.
        log_x: Whether the per-device-batch axis is logarithmic.
        n_trials: Rows in the DataFrame, whatever their state.
        n_out_of_memory: Trials that ran out of memory.
        n_not_started: Trials the search did not start because a smaller batch ran out (``exceeds_memory``).
        note: Why the figure is empty, or ``None``.
    """

    series: tuple[MemorySeries, ...]
    log_x: bool
    n_trials: int
    n_out_of_memory: int
    n_not_started: int
    note: str | None = None

    @property
    def unit(self) -> tuple[str, float]:
        """The one unit of the figure's memory axis and its labels: :func:`memory_unit`."""
        return memory_unit([p.high for s in self.series for p in s.peaks]
                           + [s.out_of_memory_at[1] for s in self.series if s.out_of_memory_at is not None]
                           + [s.limit_bytes for s in self.series if s.limit_bytes is not None])

    @property
    def is_empty(self) -> bool:
        """True when there is nothing to draw."""
        return not self.series


def device_kind(device: object) -> object:
    """A ``device`` attr without the rank's device index: trials of one kind on ``cuda:0`` and
    ``cuda:1`` (or recorded as ``cuda``) are one series of one device kind.

    Example:
        >>> device_kind("cuda:0 (NVIDIA H100 80GB HBM3)"), device_kind("cuda:1"), device_kind("cpu")
        ('cuda (NVIDIA H100 80GB HBM3)', 'cuda', 'cpu')
    """
    return _DEVICE_INDEX.sub(r"\1", device) if isinstance(device, str) else device


def memory_unit(values: Sequence[float]) -> tuple[str, float]:
    """The binary unit for a memory axis that reaches ``values`` (bytes): ``("GiB", 2**30)`` from
    1 GiB up, else ``("MiB", 2**20)``, so a 300 MiB peak is not drawn as 0.29.

    Example:
        >>> memory_unit([3.0e8]), memory_unit([3.0e8, 2.5e9])
        (('MiB', 1048576), ('GiB', 1073741824))
    """
    return ("GiB", _GIB) if max(values, default=_GIB) >= _GIB else ("MiB", _MIB)


def memory_parameters(df: pd.DataFrame, objectives: Sequence[str] = ()) -> list[str]:
    """The table's columns that may tell configurations apart for memory: the study's own
    parameters (the workload's, the optimizer's, a searched ``precision``), not the batch, the
    world size, the accumulation, the rule or the LR."""
    return [c for c in config_columns([str(c) for c in df.columns], "", "")
            if c not in objectives and (c == record.PRECISION or c not in record.FIELDS)]


def memory_info(df: pd.DataFrame, limits: MemoryLimits | None = None,
                objectives: Sequence[str] = ()) -> MemoryInfo:
    """Peak memory per rank against the per-device batch, per device kind and configuration.

    Each series holds the peaks its trials measured at each per-device batch they ran (median,
    smallest and largest: a few values per batch, whatever the study's size), the analysis's
    fitted line over them, and its ceiling: the smallest per-device batch that ran out of memory.
    A trial that ran halved (``ran_as``) counts at the batch it ran.

    Args:
        df: The trials DataFrame (``state``, ``status_reason``, the params, ``device``,
            ``peak_memory_bytes``, ``ran_as`` where recorded).
        limits: What the study's space says of a rank's memory, where its trials did not record
            it (``hpsearch.analysis.memory_limits``).
        objectives: The study's objectives (never a configuration).

    Returns:
        A :class:`MemoryInfo`; empty, with a note, when no trial recorded a peak or ran out.

    Example:
        >>> df = pd.DataFrame({"number": [0, 1, 2, 3], "state": ["COMPLETE", "COMPLETE", "COMPLETE", "FAIL"],
        ...     "status_reason": [None, None, None, "out_of_memory"], "per_device_batch_size": [64, 128, 256, 512],
        ...     "device": ["cpu"] * 4, "peak_memory_bytes": [1.25e9, 1.5e9, 2.0e9, None]})
        >>> info = memory_info(df)
        >>> s, = info.series
        >>> s.name, [p.per_device_batch for p in s.peaks], s.smallest_out_of_memory, info.n_out_of_memory
        ('cpu', [64.0, 128.0, 256.0], 512, 1)
    """
    # numpy and the analysis (scipy, loaded with hpsearch.analysis): with the first memory figure

    reasons = df[record.STATUS_REASON].tolist() if record.STATUS_REASON in df.columns else [None] * len(df)
    n_out = sum(r == record.REASON_OUT_OF_MEMORY for r in reasons)
    n_skipped = sum(r == record.REASON_EXCEEDS_MEMORY for r in reasons)
    if not len(df) or "number" not in df.columns:
        return MemoryInfo((), False, len(df), 0, 0, "no trials yet")
    if record.DEVICE in df.columns:
        # One series per device kind: the raw attr splits cuda:0 from cuda, and a ceiling found on
        # one would be drawn against the peaks of the other.
        df = df.assign(**{record.DEVICE: [device_kind(d) for d in df[record.DEVICE].tolist()]})
    parameters = memory_parameters(df, objectives)
    models = memory_models(df, parameters, limits)
    b_ran, _, halved_from = ran_shapes(df)
    peaks = (pd.to_numeric(df[record.PEAK_MEMORY_BYTES], errors="coerce").to_numpy(dtype=float)
             if record.PEAK_MEMORY_BYTES in df.columns else np.full(len(df), np.nan))
    devices = df[record.DEVICE].tolist() if record.DEVICE in df.columns else [None] * len(df)
    numbers = [int(n) for n in df["number"].tolist()]
    values = {k: [plain_value(v) for v in df[k].tolist()] for k in parameters}
    measured_rows = [i for i in range(len(df)) if reasons[i] != record.REASON_OUT_OF_MEMORY
                     and b_ran[i] is not None and np.isfinite(peaks[i])]
    series = []
    for model in models:
        rows = [i for i in measured_rows if devices[i] == model.device
                and all(values[k][i] == v for k, v in model.configuration.items())]
        by_batch: dict[float, list[int]] = {}
        for i in rows:
            by_batch.setdefault(float(b_ran[i]), []).append(i)  # type: ignore[arg-type]
        measured = tuple(
            BatchPeak(b, len(at), float(np.median(peaks[at])), float(peaks[at].min()), float(peaks[at].max()),
                      tuple(numbers[i] for i in at[:8]))
            for b, at in sorted(by_batch.items()))
        xs = sorted({p.per_device_batch for p in measured})
        mine = [i for i in range(len(df)) if devices[i] == model.device
                and all(values[k][i] == v for k, v in model.configuration.items())]
        out_rows = [i for i in mine if reasons[i] == record.REASON_OUT_OF_MEMORY or halved_from[i] is not None]
        smallest, contradicted = _ceiling(out_rows, model.largest_fit, numbers, b_ran, halved_from)
        if smallest is not None and smallest not in xs:
            xs = sorted({*xs, float(smallest)})
        line = tuple((x, float(model.peak(x))) for x in xs) if model.has_line and len(xs) >= 2 else ()  # type: ignore[arg-type]
        ceiling = None
        if smallest is not None:
            at = model.peak(smallest)
            top = at if at is not None else max((p.high for p in measured), default=model.limit_bytes or 0.0)
            ceiling = (float(smallest), float(top))
        name = model.device + "".join(f", {k} {v}" for k, v in model.configuration.items())
        out_trials = tuple(n for n in model.out_of_memory_trials if n not in {m for _, ns in contradicted for m in ns})
        series.append(MemorySeries(name, model.device, dict(model.configuration), measured, line, model.largest_fit,
                                   smallest, ceiling, out_trials, model.limit_bytes, model.describe(), contradicted))
    series = [s for s in series if s.peaks or s.out_of_memory_at is not None]
    note = None if series else _NO_PEAKS
    xs = [p.per_device_batch for s in series for p in s.peaks] + [
        s.out_of_memory_at[0] for s in series if s.out_of_memory_at is not None]
    return MemoryInfo(tuple(series), batch_axis(xs).log, len(df), n_out, n_skipped, note)


def _ceiling(out_rows: Sequence[int], largest_fit: int | None, numbers: list[int], b_ran: list[float | None],
             halved_from: list[int | None]) -> tuple[int | None, tuple[tuple[int, tuple[int, ...]], ...]]:
    """Of the rows that ran out of memory (or ran halved because their batch had), the smallest
    per-device batch above every batch that fit (the ceiling), and the batches that ran out at
    or below one that fit (contradicted), with their trials. A cross on a batch that completed
    told the reader it does not fit."""
    out: dict[int, list[int]] = {}
    for i in out_rows:
        b = halved_from[i] if halved_from[i] is not None else b_ran[i]
        if b is not None:
            out.setdefault(int(b), []).append(numbers[i])
    above = [b for b in out if largest_fit is None or b > largest_fit]
    contradicted = tuple((b, tuple(sorted(ns))) for b, ns in sorted(out.items()) if b not in above)
    return (min(above) if above else None), contradicted


# ---- render -------------------------------------------------------------------------------------

def memory_figure(df: pd.DataFrame, limits: MemoryLimits | None = None,
                  objectives: Sequence[str] = ()) -> go.Figure:
    """Peak memory per rank (GiB, or MiB below 1 GiB) against the per-device batch, one line
    per device kind.

    Per series: the median peak measured at each per-device batch, with the range over its
    trials as error bars; the fitted line fixed + per_sample x b, dashed, continued to the
    ceiling; the ceiling itself, the smallest per-device batch that ran out of memory, as a
    cross and a dotted vertical line; and, where known (recorded by the trials, or the space's
    ``resources.memory_per_worker``), what a rank may hold as a horizontal line named in
    the legend. The batch axis is :func:`hpsearch.dashboards.style.batch_axis`.

    Args:
        df: The trials DataFrame.
        limits: What the study's space says of a rank's memory (``hpsearch.analysis.memory_limits``).
        objectives: The study's objectives.

    Example:
        >>> df = pd.DataFrame({"number": [0, 1, 2], "state": ["COMPLETE", "COMPLETE", "FAIL"],
        ...     "status_reason": [None, None, "out_of_memory"], "per_device_batch_size": [64, 128, 256],
        ...     "device": ["cpu"] * 3, "peak_memory_bytes": [1.25e9, 1.5e9, None]})
        >>> fig = memory_figure(df)
        >>> fig.layout.xaxis.title.text, fig.layout.yaxis.title.text, [t.name for t in fig.data]
        ('per-device batch size', 'peak memory per rank (GiB)', ['cpu', 'cpu: fitted line', 'cpu: ran out of memory'])
    """
    import plotly.graph_objects as go  # heavy: only where a figure is drawn

    info = memory_info(df, limits, objectives)
    fig = go.Figure(layout={"template": white_template()}, _validate=False)  # style.new_figure says why
    title = _TITLE
    if info.n_out_of_memory or info.n_not_started:
        trials = f"{info.n_out_of_memory} trial{'' if info.n_out_of_memory == 1 else 's'}"
        title += subtitle(f"{trials} ran out of memory; {info.n_not_started} not started at or above a per-device "
                          "batch that had")
    unit, scale = info.unit
    fig.update_layout(title={"text": title}, xaxis={"title": {"text": axis_label(record.PER_DEVICE_BATCH_SIZE)}},
                      yaxis={"title": {"text": f"peak memory per rank ({unit})"}, "rangemode": "tozero"},
                      legend={"title": {"text": "device"}}, hovermode="closest")
    if info.is_empty:
        return with_note(fig, info.note or _NO_PEAKS)
    batches = [p.per_device_batch for s in info.series for p in s.peaks] + [
        s.out_of_memory_at[0] for s in info.series if s.out_of_memory_at is not None] + [
        b for s in info.series for b, _ in s.contradicted]
    low, high = min(batches), max(batches)
    # What a rank may hold is the device kind's, not a configuration's: one line for each, in
    # its first series' colour (two configurations of one cap wrote "cpu may hold 600 MiB" twice).
    limits_drawn: set[tuple[str, float]] = set()
    for k, s in enumerate(info.series):
        color = _COLORS[k % len(_COLORS)]
        if s.peaks:
            fig.add_trace(go.Scatter(
                x=[p.per_device_batch for p in s.peaks], y=[p.median / scale for p in s.peaks],
                mode="markers+lines" if not s.line else "markers", name=s.name, legendgroup=s.name,
                marker={"color": color, "size": MARKER_SIZE_PX},
                error_y={"type": "data", "symmetric": False, "color": color,
                         "array": [(p.high - p.median) / scale for p in s.peaks],
                         "arrayminus": [(p.median - p.low) / scale for p in s.peaks]},
                hovertext=[f"<b>{s.name}</b>: b {p.per_device_batch:g}, {p.n_trials} trials<br>"
                           f"median {format_bytes(p.median)}, {format_bytes(p.low)} to {format_bytes(p.high)}"
                           for p in s.peaks],
                hovertemplate="%{hovertext}<extra></extra>"))
        if s.line:
            fig.add_trace(go.Scatter(
                x=[x for x, _ in s.line], y=[y / scale for _, y in s.line], mode="lines", name=f"{s.name}: fitted line",
                legendgroup=s.name, line={"color": color, "dash": "dash", "width": 1.5},
                hovertext=[s.summary] * len(s.line), hovertemplate="%{hovertext}<extra></extra>"))
        if s.out_of_memory_at is not None:
            b, top = s.out_of_memory_at
            fig.add_trace(go.Scatter(
                x=[b], y=[top / scale], mode="markers", name=f"{s.name}: ran out of memory", legendgroup=s.name,
                marker={"color": color, "symbol": "x", "size": 2 * MARKER_SIZE_PX, "line": {"width": 2}},
                customdata=[s.out_of_memory_trials[0]] if s.out_of_memory_trials else None,
                hovertext=[f"<b>{s.name}</b>: b {b:g} ran out of memory (trials "
                           + ", ".join(f"#{n}" for n in s.out_of_memory_trials[:5])
                           + (", ..." if len(s.out_of_memory_trials) > 5 else "") + ")"
                           + (f"<br>largest that fit: {s.largest_fit}" if s.largest_fit is not None else "")],
                hovertemplate="%{hovertext}<extra></extra>"))
            fig.add_vline(x=b, line={"color": color, "dash": "dot", "width": 1})
        if s.contradicted:
            # Not a ceiling: a trial of this batch (or a larger one) on this device kind ran to the
            # end. Drawn hollow and grey, on the axis, so it reads apart from the ceiling's cross.
            fig.add_trace(go.Scatter(
                x=[b for b, _ in s.contradicted], y=[0.0] * len(s.contradicted), mode="markers",
                name=f"{s.name}: ran out where others fit (contradicted)", legendgroup=s.name,
                marker={"color": "#999999", "symbol": "x-open", "size": 1.5 * MARKER_SIZE_PX},
                customdata=[ns[0] for _, ns in s.contradicted],
                hovertext=[f"<b>{s.name}</b>: b {b} ran out of memory in trial"
                           f"{'s' if len(ns) > 1 else ''} {', '.join(f'#{n}' for n in ns[:5])}, yet b "
                           f"{s.largest_fit} ran to the end on this device kind: not a ceiling"
                           for b, ns in s.contradicted],
                hovertemplate="%{hovertext}<extra></extra>"))
        if s.limit_bytes is not None and (s.device, s.limit_bytes) not in limits_drawn:
            limits_drawn.add((s.device, s.limit_bytes))
            # In the legend, not written over the plot: an annotation on the line sat on the
            # points of the small batches.
            fig.add_trace(go.Scatter(
                x=[low, high], y=[s.limit_bytes / scale] * 2, mode="lines", legendgroup=s.name,
                name=f"{s.device} may hold {s.limit_bytes / scale:.3g} {unit}",
                line={"color": color, "dash": "dashdot", "width": 1}, hoverinfo="skip"))
    return with_batch_axis(fig, batches)


# ---- a study, and the dashboard ------------------------------------------------------------------

def plot_memory(search: Search) -> go.Figure:
    """Peak memory per rank against the per-device batch, one line per device kind, with the
    smallest batch that ran out of memory marked."""
    return memory_figure(search.trials_dataframe(), memory_limits(search), search.objectives)


def memory_from_query(query: FigureQuery) -> go.Figure:
    """``GET .../figures/memory``: no parameters."""
    return memory_figure(query.frame, memory_limits(query.space_text) if query.space_text else None, query.objectives)
