"""What the study figures show, as plain data: the "compute" half of each figure.

Each ``*_info`` function takes the trials DataFrame (one row per trial, as
``Search.trials_dataframe(all_attrs=True)`` returns it) and returns a frozen dataclass of plain
numbers and strings; :mod:`hpsearch.dashboards.figures` only draws them. Nothing here imports
plotly.

A study that has only just started, has only failed or pruned trials, or lacks a column (a
study whose trials all ran on one device records no noise scale) gives an *empty* info whose
``note`` says why, never an exception: the dashboard shows these figures while a study runs.

Every numeric axis follows one rule, :func:`log_axis`: logarithmic when its values are
positive and span at least two decades.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from hpsearch.dashboards.frontier import Direction, _config_columns, _plain, thin_points

__all__ = [
    "DEFAULT_CURVES_LIMIT",
    "LOG_AXIS_MIN_RATIO",
    "THROUGHPUT_PER_DEVICE",
    "AccuracyVsBatchInfo",
    "BatchBest",
    "LearningCurvesInfo",
    "NoiseScaleInfo",
    "RuleLine",
    "ThroughputInfo",
    "TrialCurve",
    "TrialGroup",
    "TrialPoint",
    "WorldSizeSeries",
    "WorldSizeStats",
    "accuracy_vs_batch_info",
    "curve_metrics",
    "learning_curves_info",
    "log_axis",
    "noise_scale_info",
    "throughput_info",
]

#: An axis goes logarithmic when max / min of its (all positive) values reaches this: two
#: decades. Below it a linear axis reads more easily; above it a linear axis squeezes the small
#: values (batch 8 next to batch 8192) into one pixel column.
LOG_AXIS_MIN_RATIO = 100.0

#: How many trials the learning-curves figure draws when no ``trials=`` are chosen: enough to
#: compare rules and batches, few enough that the lines stay readable and a 10,000-trial study
#: stays quick to draw.
DEFAULT_CURVES_LIMIT = 20

#: The derived column of the throughput figure: ``samples_per_s`` per device used.
THROUGHPUT_PER_DEVICE = "samples_per_s_per_device"

_STATE_WORDS: dict[str, str] = {
    "COMPLETE": "completed",
    "FAIL": "failed",
    "PRUNED": "pruned",
    "RUNNING": "running",
    "WAITING": "waiting",
}

_NO_NOISE_SCALE = "no completed trial measured a noise scale: it needs world_size x grad_accum_steps > 1"

def log_axis(values: Iterable[float | None]) -> bool:
    """Whether an axis drawing these values should be logarithmic.

    The rule, used by every figure: all finite values are positive and the largest is at least
    :data:`LOG_AXIS_MIN_RATIO` (100) times the smallest. A zero or negative value keeps the axis
    linear, because a log axis cannot draw it (``comm_fraction`` is 0 for one process). Missing
    and non-finite values are ignored.

    Args:
        values: The values on the axis; ``None`` and NaN are allowed.

    Returns:
        True for a logarithmic axis.

    Example:
        >>> log_axis([8, 64, 512, 4096]), log_axis([0.5, 0.9]), log_axis([0.0, 1.0, 1000.0])
        (True, False, False)
    """
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite or min(finite) <= 0:
        return False
    return max(finite) / min(finite) >= LOG_AXIS_MIN_RATIO


@dataclass(frozen=True)
class TrialPoint:
    """One trial drawn as a point.

    Attributes:
        number: The trial number in the study.
        x: The trial's value on the x axis.
        y: The trial's value on the y axis.
        config: The configuration shown on hover: column name to a plain Python value, the
            batch and LR columns first; missing values are left out.
    """

    number: int
    x: float
    y: float
    config: Mapping[str, object] = field(hash=False)


@dataclass(frozen=True)
class TrialGroup:
    """The points of one LR rule (one color in every figure).

    Attributes:
        name: The rule, e.g. ``"linear"``; ``"n/a"`` for trials without one, ``"all trials"``
            when the study has no ``lr_rule`` column.
        points: The group's points, by trial number.
    """

    name: str
    points: tuple[TrialPoint, ...]


@dataclass(frozen=True)
class BatchBest:
    """The best completed trial of one LR rule at one effective batch.

    Attributes:
        effective_batch_size: B = b x W x A.
        value: The best trial's value of the metric.
        number: The best trial's number (the lowest one among equal values).
        n_trials: Completed trials of this rule and batch with a finite value (the best is
            taken over these).
        config: The best trial's configuration, for hover.
    """

    effective_batch_size: float
    value: float
    number: int
    n_trials: int
    config: Mapping[str, object] = field(hash=False)


@dataclass(frozen=True)
class RuleLine:
    """One LR rule's line: its best value at each effective batch.

    Attributes:
        name: The rule, e.g. ``"linear"``.
        points: One :class:`BatchBest` per effective batch the rule completed, by ascending batch.
    """

    name: str
    points: tuple[BatchBest, ...]


@dataclass(frozen=True)
class AccuracyVsBatchInfo:
    """Everything the accuracy-vs-effective-batch figure shows.

    Attributes:
        metric: The column on the y axis (``val_accuracy`` by default).
        direction: Which values of ``metric`` are better; "best" follows it.
        lines: One line per LR rule, by rule name.
        log_x: Whether the effective batch axis is logarithmic (see :func:`log_axis`).
        log_y: Whether the metric axis is logarithmic.
        n_trials: Rows in the DataFrame, whatever their state.
        n_complete: Completed trials with a finite batch and metric (the ones aggregated).
        note: Why the figure is empty, or ``None`` when it is not.
    """

    metric: str
    direction: Direction
    lines: tuple[RuleLine, ...]
    log_x: bool
    log_y: bool
    n_trials: int
    n_complete: int
    note: str | None

    @property
    def is_empty(self) -> bool:
        """True when there is nothing to draw."""
        return not self.lines


@dataclass(frozen=True)
class TrialCurve:
    """One trial's per-epoch curve against samples seen.

    Attributes:
        number: The trial number.
        rule: The trial's LR rule (its color), as :attr:`TrialGroup.name`.
        state: The trial's state: a PRUNED or FAIL trial's curve ends where it stopped.
        x: Samples seen after each epoch (over all ranks).
        y: The metric after each epoch; epochs without a finite value are left out.
        config: The trial's configuration, for hover.
    """

    number: int
    rule: str
    state: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    config: Mapping[str, object] = field(hash=False)


@dataclass(frozen=True)
class LearningCurvesInfo:
    """Everything the learning-curves figure shows.

    Attributes:
        metric: The curve drawn on the y axis (``val_accuracy`` by default).
        curves: The chosen trials' curves, in the order chosen (best first by default).
        log_x: Whether the samples-seen axis is logarithmic.
        log_y: Whether the metric axis is logarithmic.
        n_trials: Rows in the DataFrame, whatever their state.
        n_candidates: Trials the default choice ranked (completed, with a finite final value
            on the curve); with ``trials=`` given, the number of trials asked for.
        note: Why the figure is empty, or which trials it leaves out; ``None`` when neither.
    """

    metric: str
    curves: tuple[TrialCurve, ...]
    log_x: bool
    log_y: bool
    n_trials: int
    n_candidates: int
    note: str | None

    @property
    def is_empty(self) -> bool:
        """True when there is nothing to draw."""
        return not self.curves


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


@dataclass(frozen=True)
class NoiseScaleInfo:
    """Everything the gradient-noise-scale figure shows.

    Attributes:
        groups: Completed trials with a finite ``noise_scale`` (x = effective batch,
            y = noise scale), one group per LR rule.
        log_x: Whether the effective batch axis is logarithmic.
        log_y: Whether the noise-scale axis is logarithmic.
        n_trials: Rows in the DataFrame, whatever their state.
        n_complete: Completed trials.
        note: Why the figure is empty, or ``None`` when it is not.
        n_points: Completed trials with a finite effective batch and noise scale.
        n_hidden: Of those, how many are not in ``groups`` (0 unless ``max_points`` thinned
            them).
    """

    groups: tuple[TrialGroup, ...]
    log_x: bool
    log_y: bool
    n_trials: int
    n_complete: int
    note: str | None
    n_points: int = 0
    n_hidden: int = 0

    @property
    def is_empty(self) -> bool:
        """True when there is nothing to draw."""
        return not self.groups


def _completed(df: pd.DataFrame) -> pd.DataFrame:
    """The COMPLETE rows, by trial number; none when the frame has no ``state`` column."""
    if "state" not in df.columns or "number" not in df.columns:
        return df.iloc[0:0]
    done = df[df["state"].astype(str) == "COMPLETE"]
    return done.sort_values("number", kind="stable")


def _numbers(df: pd.DataFrame, column: str) -> np.ndarray:
    """A column as floats, NaN where missing, None or not a number (a missing column: all NaN)."""
    if column not in df.columns:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)


def _no_completed_note(df: pd.DataFrame) -> str:
    """Why a study has no completed trial to show: no trials at all, or only unfinished ones
    (counted by state, so "3 failed, 2 pruned" tells a broken search from a young one)."""
    if not len(df) or "state" not in df.columns:
        return "no trials yet"
    counts = df["state"].astype(str).value_counts()
    parts = ", ".join(f"{n} {_STATE_WORDS.get(state, state.lower())}" for state, n in sorted(counts.items()))
    return f"no completed trials yet ({parts})"


def _missing_note(df: pd.DataFrame, columns: Iterable[str]) -> str | None:
    """Which of ``columns`` no trial recorded, as a note; ``None`` when all are there."""
    missing = [c for c in columns if c not in df.columns]
    if not missing:
        return None
    return f"no trial recorded {' or '.join(missing)}"


def _rule_names(df: pd.DataFrame) -> list[str]:
    """Each row's LR rule as text: ``"n/a"`` where missing, ``"all trials"`` without the column."""
    if "lr_rule" not in df.columns:
        return ["all trials"] * len(df)
    names = []
    for value in df["lr_rule"].tolist():
        plain = _plain(value)
        names.append("n/a" if plain is None else str(plain))
    return names


def _configs(df: pd.DataFrame, shown: Sequence[str]) -> list[dict[str, object]]:
    """Each row's hover configuration: the frontier's configuration columns, less ``shown``
    (already on an axis) and bookkeeping attrs."""
    # The frontier's own x and y exclusion is not used (""): ``shown`` may name any number.
    columns = [
        c
        for c in _config_columns([str(c) for c in df.columns], "", "")
        if c not in shown
    ]
    return [
        {c: v for c in columns if (v := _plain(record[c])) is not None}
        for record in df[columns].to_dict("records")
    ]


def _groups(df: pd.DataFrame, xs: np.ndarray, ys: np.ndarray, shown: Sequence[str]) -> tuple[TrialGroup, ...]:
    """Points of the rows of ``df`` (already filtered to finite x and y), one group per rule."""
    configs = _configs(df, shown)
    by_rule: dict[str, list[TrialPoint]] = {}
    for i, (number, rule) in enumerate(zip(df["number"].tolist(), _rule_names(df))):
        by_rule.setdefault(rule, []).append(TrialPoint(int(number), float(xs[i]), float(ys[i]), configs[i]))
    return tuple(TrialGroup(name, tuple(points)) for name, points in sorted(by_rule.items()))


def accuracy_vs_batch_info(
    df: pd.DataFrame,
    *,
    metric: str = "val_accuracy",
    direction: Direction = "maximize",
) -> AccuracyVsBatchInfo:
    """For each LR rule and effective batch, the best completed trial's metric.

    Aggregation: the **best** value (highest for ``maximize``), not the mean or median. The
    other searched parameters (``base_lr`` above all) vary between trials of the same rule and
    batch, and a mean would mix well-tuned trials with badly tuned ones; the best is what the
    rule reaches at that batch once those are tuned, which is the question the figure answers
    ("which rule keeps accuracy as the batch grows?"). Each point keeps how many trials it is
    the best of, so a point backed by one trial can be told from one backed by fifty. Of equal
    values the lowest trial number wins.

    Only COMPLETE trials with a finite batch and metric count: a pruned trial stopped at a
    partial budget, and a failed one has no final value.

    Args:
        df: The trials DataFrame (``number``, ``state``, ``effective_batch_size``, ``lr_rule``
            and ``metric`` columns).
        metric: The column on the y axis.
        direction: ``"maximize"`` or ``"minimize"``: which values of ``metric`` are best.

    Returns:
        An :class:`AccuracyVsBatchInfo`; empty, with a ``note``, when no trial qualifies or a
        column is missing.

    Raises:
        ValueError: When ``direction`` is neither ``"minimize"`` nor ``"maximize"``.

    Example:
        >>> df = pd.DataFrame({
        ...     "number": [0, 1, 2, 3], "state": ["COMPLETE"] * 4,
        ...     "lr_rule": ["linear", "linear", "linear", "sqrt"],
        ...     "effective_batch_size": [64, 64, 512, 64],
        ...     "val_accuracy": [0.90, 0.95, 0.93, 0.91],
        ... })
        >>> info = accuracy_vs_batch_info(df)
        >>> [(p.effective_batch_size, p.value, p.number, p.n_trials) for p in info.lines[0].points]
        [(64.0, 0.95, 1, 2), (512.0, 0.93, 2, 1)]
    """
    if direction not in ("minimize", "maximize"):
        raise ValueError(f"direction must be 'minimize' or 'maximize', got {direction!r}")
    done = _completed(df)
    note = _missing_note(done, ("effective_batch_size", metric)) if len(done) else _no_completed_note(df)
    batches = _numbers(done, "effective_batch_size")
    values = _numbers(done, metric)
    keep = np.isfinite(batches) & np.isfinite(values)
    if note is None and not keep.any():
        note = f"no completed trial has both an effective batch size and {metric}"
    if note is not None:
        return AccuracyVsBatchInfo(metric, direction, (), False, False, len(df), 0, note)

    done, batches, values = done[keep], batches[keep], values[keep]
    numbers = done["number"].astype(int).tolist()
    sign = 1.0 if direction == "maximize" else -1.0
    cells: dict[tuple[str, float], list[int]] = {}
    for i, rule in enumerate(_rule_names(done)):
        cells.setdefault((rule, float(batches[i])), []).append(i)
    # Rows are in trial-number order, so max() keeps the lowest number among equal values.
    bests = {cell: max(rows, key=lambda i: sign * values[i]) for cell, rows in sorted(cells.items())}
    # Hover configurations of the best trials only (one per rule and batch, not per trial).
    configs = dict(zip(bests.values(), _configs(done.iloc[list(bests.values())], ("effective_batch_size", metric))))
    lines: dict[str, list[BatchBest]] = {}
    for (rule, batch), best in bests.items():
        lines.setdefault(rule, []).append(
            BatchBest(batch, float(values[best]), numbers[best], len(cells[rule, batch]), configs[best])
        )
    return AccuracyVsBatchInfo(
        metric=metric,
        direction=direction,
        lines=tuple(RuleLine(rule, tuple(points)) for rule, points in lines.items()),
        log_x=log_axis(batches),
        log_y=log_axis(p.value for points in lines.values() for p in points),
        n_trials=len(df),
        n_complete=int(keep.sum()),
        note=None,
    )


def _curve_of(curves: object, metric: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(samples seen, metric) of one trial's ``curves`` attr, epochs without both left out."""
    if not isinstance(curves, Mapping):
        return (), ()
    xs, ys = curves.get("samples_seen") or [], curves.get(metric) or []
    points = [
        (float(x), float(y))
        for x, y in zip(xs, ys)
        if isinstance(x, (int, float)) and isinstance(y, (int, float))
        and math.isfinite(x) and math.isfinite(y)
    ]
    return tuple(p[0] for p in points), tuple(p[1] for p in points)


def _final_of(curves: object, metric: str) -> float | None:
    """The last ``metric`` value of one trial's ``curves`` that :func:`_curve_of` would keep,
    or ``None``: what the default choice ranks by, without building the whole curve."""
    if not isinstance(curves, Mapping):
        return None
    xs, ys = curves.get("samples_seen") or [], curves.get(metric) or []
    for i in range(min(len(xs), len(ys)) - 1, -1, -1):
        x, y = xs[i], ys[i]
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and math.isfinite(x) and math.isfinite(y):
            return float(y)
    return None


def curve_metrics(df: pd.DataFrame) -> tuple[str, ...]:
    """The per-epoch metrics any trial recorded in its ``curves``, sorted (``samples_seen``,
    the x axis of every curve, left out).

    Args:
        df: The trials DataFrame with its ``curves`` column (``all_attrs=True``).

    Returns:
        Metric names such as ``("lr", "val_accuracy", ...)``; empty when no trial has curves.

    Example:
        >>> curve_metrics(pd.DataFrame({"curves": [{"samples_seen": [8], "val_loss": [0.3]}, None]}))
        ('val_loss',)
    """
    if "curves" not in df.columns:
        return ()
    names = {str(k) for c in df["curves"].tolist() if isinstance(c, Mapping) for k in c}
    return tuple(sorted(names - {"samples_seen"}))


def learning_curves_info(
    df: pd.DataFrame,
    *,
    trials: Sequence[int] | None = None,
    metric: str = "val_accuracy",
    direction: Direction = "maximize",
    limit: int = DEFAULT_CURVES_LIMIT,
) -> LearningCurvesInfo:
    """Per-epoch curves of chosen trials against samples seen.

    The x axis is samples seen, not epochs or steps: a batch-512 trial and a batch-8 trial
    are compared after the same amount of data (as ASHA compares them).

    Which trials: those numbered in ``trials`` (any state: a pruned or failed trial's curve
    ends where it stopped), in that order; by default the ``limit`` best COMPLETE trials by the
    last value of their ``metric`` curve, best first, so a 10,000-trial study draws 20 lines.

    Args:
        df: The trials DataFrame with its ``curves`` column (``all_attrs=True``).
        trials: Trial numbers to draw, or ``None`` for the best ``limit`` completed trials.
        metric: The curve on the y axis: a key of ``curves`` such as ``val_accuracy``,
            ``val_loss``, ``train_loss``, ``lr``, ``comm_fraction`` or ``noise_scale``.
        direction: Which final values are best, for the default choice.
        limit: How many trials the default choice draws.

    Returns:
        A :class:`LearningCurvesInfo`; empty, with a ``note``, when no chosen trial has the
        curve.

    Raises:
        ValueError: When ``trials`` names a trial number the study does not have, ``limit``
            is below 1, or ``direction`` is invalid.

    Example:
        >>> df = pd.DataFrame({
        ...     "number": [0, 1], "state": ["COMPLETE", "PRUNED"], "lr_rule": ["sqrt", "linear"],
        ...     "curves": [{"samples_seen": [100, 200], "val_accuracy": [0.5, 0.8]},
        ...                {"samples_seen": [100], "val_accuracy": [0.3]}],
        ... })
        >>> [(c.number, c.y) for c in learning_curves_info(df).curves]
        [(0, (0.5, 0.8))]
        >>> [(c.number, c.state) for c in learning_curves_info(df, trials=[1, 0]).curves]
        [(1, 'PRUNED'), (0, 'COMPLETE')]
    """
    if direction not in ("minimize", "maximize"):
        raise ValueError(f"direction must be 'minimize' or 'maximize', got {direction!r}")
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if not len(df) or "number" not in df.columns:
        return LearningCurvesInfo(metric, (), False, False, len(df), 0, "no trials yet")
    if "curves" not in df.columns:
        return LearningCurvesInfo(metric, (), False, False, len(df), 0, "no trial recorded curves")

    rows = df.set_index(pd.Index(df["number"].astype(int).tolist()), drop=False)
    note = None
    if trials is not None:
        unknown = [n for n in trials if n not in rows.index]
        if unknown:
            raise ValueError(
                f"no trial numbered {', '.join(map(str, unknown))} in this study "
                f"(trials {rows.index.min()} to {rows.index.max()})"
            )
        chosen = [int(n) for n in trials]
        n_candidates = len(chosen)
    else:
        done = _completed(df)
        finals = {
            int(n): final
            for n, c in zip(done["number"].tolist(), done["curves"].tolist())
            if (final := _final_of(c, metric)) is not None
        }
        sign = -1.0 if direction == "maximize" else 1.0
        chosen = sorted(finals, key=lambda n: (sign * finals[n], n))[:limit]
        n_candidates = len(finals)
        if not len(done):
            note = _no_completed_note(df)
        elif n_candidates > limit:
            note = f"the {limit} best of {n_candidates} completed trials by final {metric}"

    picked = rows.loc[chosen] if chosen else rows.iloc[0:0]
    configs = _configs(picked, ())
    curves: list[TrialCurve] = []
    without: list[int] = []
    records = zip(chosen, _rule_names(picked), picked["state"].astype(str).tolist(), picked["curves"].tolist())
    for i, (number, rule, state, raw) in enumerate(records):
        xs, ys = _curve_of(raw, metric)
        if not xs:
            without.append(number)
            continue
        curves.append(TrialCurve(number, rule, state, xs, ys, configs[i]))
    if trials is not None and not chosen:
        note = "no trials chosen"
    elif without and trials is not None:
        note = f"no {metric} curve in trial {', '.join(map(str, without))}"
    if not curves and note is None:
        note = f"no completed trial has a {metric} curve"
    return LearningCurvesInfo(
        metric=metric,
        curves=tuple(curves),
        log_x=log_axis(x for c in curves for x in c.x),
        log_y=log_axis(y for c in curves for y in c.y),
        n_trials=len(df),
        n_candidates=n_candidates,
        note=note,
    )


def _world_size_series(world_sizes: np.ndarray, values: np.ndarray, metric: str, note: str | None) -> WorldSizeSeries:
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


def noise_scale_info(df: pd.DataFrame, *, max_points: int | None = None) -> NoiseScaleInfo:
    """The gradient noise scale of completed trials against their effective batch.

    The simple noise scale B_simple (docs/trials.md) estimates the batch beyond which a larger
    batch buys little: trials whose effective batch is well above their noise scale spend
    samples for little progress per step. A trial of one process and one micro-batch per step
    (W x A = 1) cannot measure it and records none; such trials are left out, as are pruned
    and failed ones.

    With ``max_points``, a study of more such trials keeps the trials at the ends of each
    axis and a thinned rest (:func:`hpsearch.dashboards.frontier.thin_points`, by LR rule);
    ``n_hidden`` says how many were left out.

    Args:
        df: The trials DataFrame (``number``, ``state``, ``effective_batch_size``,
            ``noise_scale``, ``lr_rule``).
        max_points: Keep at most this many trials in ``groups``, or ``None`` for all.

    Returns:
        A :class:`NoiseScaleInfo` with one group per LR rule; empty, with a ``note``, when no
        completed trial measured a noise scale.

    Example:
        >>> df = pd.DataFrame({
        ...     "number": [0, 1, 2], "state": ["COMPLETE"] * 3, "lr_rule": ["linear"] * 3,
        ...     "effective_batch_size": [8, 64, 512], "noise_scale": [None, 410.0, 530.0],
        ... })
        >>> [(p.number, p.x, p.y) for p in noise_scale_info(df).groups[0].points]
        [(1, 64.0, 410.0), (2, 512.0, 530.0)]
    """
    done = _completed(df)
    batches = _numbers(done, "effective_batch_size")
    noise = _numbers(done, "noise_scale")
    keep = np.isfinite(batches) & np.isfinite(noise)
    note = _missing_note(done, ("effective_batch_size",)) if len(done) else _no_completed_note(df)
    if note is None and not keep.any():
        # A missing noise_scale column means the same: no trial could measure it.
        note = _NO_NOISE_SCALE
    if note is not None:
        return NoiseScaleInfo((), False, False, len(df), len(done), note)
    done, batches, noise = done[keep], batches[keep], noise[keep]
    log_x, log_y = log_axis(batches), log_axis(noise)
    shown = np.arange(len(done))
    if max_points is not None and len(done) > max_points:
        shown = thin_points(batches, noise, max_points=max_points, groups=_rule_names(done), log_x=log_x, log_y=log_y)
    return NoiseScaleInfo(
        groups=_groups(done.iloc[shown], batches[shown], noise[shown], ("effective_batch_size", "noise_scale")),
        log_x=log_x,
        log_y=log_y,
        n_trials=len(df),
        n_complete=len(done),
        note=None,
        n_points=len(done),
        n_hidden=len(done) - len(shown),
    )
