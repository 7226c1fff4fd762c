"""Targets and time-to-target: when each trial first reached a value of a metric.

A target is a metric and a threshold (``val_accuracy >= 0.95``, ``val_loss <= 0.3``). Each
trial's curves give the metric at each evaluation against samples seen; the first crossing is
interpolated linearly between the two evaluations around it, and the samples, optimizer steps,
training seconds, wall seconds and device-seconds at that point are the trial's cost to the
target. A trial that never crossed has not reached it: "not reached" is a value, not a zero.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from hpsearch import record
from hpsearch.errors import AnalysisError, NoAnswerError
from hpsearch.record import Direction
from hpsearch.search_spaces._checks import suggest  # the space loader's did-you-mean, for the same names

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    FloatArray = NDArray[np.float64]
    BoolArray = NDArray[np.bool_]

__all__ = ["CURVE_FIELDS", "Crossing", "Crossings", "CurveArrays", "Target", "crossing", "crossings", "curve_arrays",
           "default_target", "parse_target", "quality_metric"]

#: The series of a trial's ``curves`` the time-to-target needs.
CURVE_FIELDS: tuple[str, ...] = (record.SAMPLES_SEEN, record.STEPS, record.TRAIN_S, record.RUNTIME_S)

#: The share of the batch sizes tried whose best trial must reach a derived target.
DEFAULT_TARGET_SHARE = 2 / 3


@dataclass(frozen=True)
class Target:
    """A metric and the value a trial must reach.

    Attributes:
        metric: A metric the trials record per evaluation (``val_accuracy``, ``val_loss``...).
        value: The threshold.
        direction: ``maximize``: reached at ``value`` or more; ``minimize``: at ``value`` or less.
        source: ``argument`` (given to the command or call), ``space`` (the space's
            ``analysis.target``) or ``default`` (derived from the study, see ``default_target``).
        note: How a derived target was chosen, to print beside the answer.
    """

    metric: str
    value: float
    direction: Direction
    source: Literal["argument", "space", "default"] = "argument"
    note: str = ""

    def reached(self, value: float) -> bool:
        """Whether ``value`` meets the target."""
        return value >= self.value if self.direction == "maximize" else value <= self.value

    def __str__(self) -> str:
        return f"{self.metric} {'>=' if self.direction == 'maximize' else '<='} {self.value:.4g}"


def parse_target(text: str) -> tuple[str, float]:
    """``"val_accuracy=0.95"`` as ``("val_accuracy", 0.95)``.

    Raises:
        AnalysisError: not ``METRIC=VALUE`` with a metric the trials record and a number; a
            misspelt metric is told the one it is closest to.

    Example:
        >>> parse_target("val_accuracy=0.95")
        ('val_accuracy', 0.95)
        >>> parse_target("val_acc=0.95")
        Traceback (most recent call last):
        ...
        hpsearch.errors.AnalysisError: a target's metric must be one of val_accuracy, val_loss, train_loss, runtime_s, device_seconds, samples_per_s, comm_fraction; got 'val_acc'; did you mean 'val_accuracy'?
    """
    metric, sep, raw = text.partition("=")
    metric = metric.strip()
    if not sep or not metric:
        raise AnalysisError(f"a target is METRIC=VALUE, such as val_accuracy=0.95; got {text!r}")
    if metric not in record.METRICS:
        raise AnalysisError(f"a target's metric must be one of {', '.join(record.METRICS)}; got {metric!r}"
                            f"{suggest(metric, record.METRICS)}")
    try:
        value = float(raw)
    except ValueError:
        raise AnalysisError(f"a target's value must be a number; got {raw.strip()!r} in {text!r}") from None
    if not math.isfinite(value):
        raise AnalysisError(f"a target's value must be a finite number; got {raw.strip()!r}")
    return metric, value


def quality_metric(objectives: Sequence[str], columns: Sequence[str]) -> str:
    """The metric a default target is stated in: the study's first objective that measures
    quality (not time or cost), else ``val_accuracy`` or ``val_loss``, whichever was recorded."""
    costs = {record.RUNTIME_S, record.DEVICE_SECONDS, record.SAMPLES_PER_S, record.COMM_FRACTION}
    for metric in objectives:
        if metric not in costs and metric in record.FIELDS:
            return metric
    return record.VAL_ACCURACY if record.VAL_ACCURACY in columns else record.VAL_LOSS


@dataclass(frozen=True)
class Crossing:
    """Where one trial first reached the target, interpolated between two evaluations; every
    field ``None`` when it never did.

    Attributes:
        samples: Training samples seen (over all ranks) at the crossing.
        steps: Optimizer steps at the crossing.
        train_s: Training seconds (evaluations left out) at the crossing.
        runtime_s: Wall seconds of the training job at the crossing.
        first_evaluation: The crossing is at or before the first evaluation, which bounds it
            from above only (a finer ``workload.eval_every_samples`` resolves it).
    """

    samples: float | None = None
    steps: float | None = None
    train_s: float | None = None
    runtime_s: float | None = None
    first_evaluation: bool = False

    @property
    def reached(self) -> bool:
        """Whether the trial reached the target."""
        return self.samples is not None


_NOT_REACHED = Crossing()


def crossing(curves: Mapping[str, Any] | None, target: Target, *, batch_size: float | None = None) -> Crossing:
    """Where a trial's curves first meet ``target`` (``crossings`` for one trial).

    Args:
        curves: The trial's ``curves`` attr (``samples_seen``, the target's metric and, where
            recorded, ``steps``, ``train_s``, ``runtime_s``).
        batch_size: The trial's effective batch, to count steps where the curves do not (studies
            recorded before ``steps`` was kept).

    Example:
        >>> curves = {"samples_seen": [100, 200, 300], "val_accuracy": [0.5, 0.8, 0.9],
        ...           "runtime_s": [1.0, 2.0, 3.0]}
        >>> hit = crossing(curves, Target("val_accuracy", 0.85, "maximize"))
        >>> round(hit.samples, 6), round(hit.runtime_s, 6)
        (250.0, 2.5)
        >>> crossing(curves, Target("val_accuracy", 0.95, "maximize")).reached
        False
    """
    return crossings([curves], target, [batch_size]).at(0)


@dataclass(frozen=True)
class Crossings:
    """The first crossings of many trials, as arrays (NaN where a trial never reached the target).

    Attributes:
        samples, steps, train_s, runtime_s: At each trial's crossing.
        first_evaluation: Whether it is at the trial's first evaluation (an upper bound only).
        best: The best value of the target's metric at any evaluation of each trial (NaN: none).
    """

    samples: FloatArray
    steps: FloatArray
    train_s: FloatArray
    runtime_s: FloatArray
    first_evaluation: BoolArray
    best: FloatArray

    def at(self, i: int) -> Crossing:
        """Trial ``i``'s crossing."""
        if not math.isfinite(self.samples[i]):
            return _NOT_REACHED
        values = [None if not math.isfinite(x) else float(x)
                  for x in (self.samples[i], self.steps[i], self.train_s[i], self.runtime_s[i])]
        return Crossing(values[0], values[1], values[2], values[3], bool(self.first_evaluation[i]))


@dataclass(frozen=True)
class CurveArrays:
    """Many trials' curves as arrays, one row per trial, one column per evaluation, NaN where a
    trial has no value (fewer evaluations, a missing series): what ``crossings`` reads.

    Attributes:
        metric: The metric of ``values``.
        samples, values, steps, train_s, runtime_s: The series.
        batch_sizes: Each trial's effective batch (NaN: unknown).
    """

    metric: str
    samples: FloatArray
    values: FloatArray
    steps: FloatArray
    train_s: FloatArray
    runtime_s: FloatArray
    batch_sizes: FloatArray

    def step_lines(self) -> tuple[FloatArray, FloatArray]:
        """Each trial's training seconds against optimizer steps over its evaluations, as a
        line: ``(seconds per step, start-up seconds)`` (its slope and intercept; NaN with fewer
        than two evaluations). The first steps of a trial cost more than the later ones (data
        loader workers, allocator, thread pools and the process group warming up: 1.2x to 3x on
        the digits quickstart), which the intercept holds and the slope leaves out."""
        valid = np.isfinite(self.steps) & np.isfinite(self.train_s)
        count = valid.sum(axis=1)
        x = np.where(valid, self.steps, 0.0)
        y = np.where(valid, self.train_s, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mx, my = x.sum(axis=1) / count, y.sum(axis=1) / count
            dx = np.where(valid, self.steps - mx[:, None], 0.0)
            slope = (dx * np.where(valid, self.train_s - my[:, None], 0.0)).sum(axis=1) / (dx * dx).sum(axis=1)
            intercept = my - slope * mx
        enough = (count >= 2) & np.isfinite(slope) & (slope > 0)
        return np.where(enough, slope, np.nan), np.where(enough, np.maximum(intercept, 0.0), np.nan)

    def trained(self) -> FloatArray:
        """Each trial's samples seen at its last evaluation (NaN: never evaluated): what a run
        that missed the target trained without reaching it."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a trial never evaluated: NaN
            last: FloatArray = np.nanmax(self.samples, axis=1)
        return last

    def diverging(self, direction: Direction) -> BoolArray:
        """Which trials' metric went non-finite at an evaluation (the trial records ``None``
        there) while it was finite at another, or ended worse than at its first evaluation:
        training that moved away from the target. Such a trial's best value is where it
        started, not what its configuration can reach (a derived target leaves it out)."""
        evaluated = np.isfinite(self.samples)
        finite = evaluated & np.isfinite(self.values)
        lost = (evaluated & ~np.isfinite(self.values)).any(axis=1) & finite.any(axis=1)
        rows = np.arange(len(self.values))
        first = finite.argmax(axis=1)
        last = finite.shape[1] - 1 - finite[:, ::-1].argmax(axis=1)
        start, end = self.values[rows, first], self.values[rows, last]
        with np.errstate(invalid="ignore"):
            worse = (end < start) if direction == "maximize" else (end > start)
        out: BoolArray = lost | ((finite.sum(axis=1) >= 2) & worse)
        return out

    def best(self, direction: Direction) -> FloatArray:
        """Each trial's best value of the metric at any evaluation (NaN: none)."""
        masked = np.where(np.isfinite(self.samples), self.values, np.nan)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a trial without any finite value: NaN
            best: FloatArray = np.nanmax(masked, axis=1) if direction == "maximize" else np.nanmin(masked, axis=1)
        return best


def curve_arrays(curves: Sequence[Mapping[str, Any] | None], metric: str,
                 batch_sizes: Sequence[float | None]) -> CurveArrays:
    """``CurveArrays`` of the trials' ``curves`` attrs (one per trial, ``None`` for none)."""
    trials = [c if isinstance(c, Mapping) else {} for c in curves]
    length = max(1, max((len(c.get(record.SAMPLES_SEEN) or ()) for c in trials), default=0))
    empty = [None] * length

    def padded(name: str) -> FloatArray:
        # One numpy conversion of the whole list of rows (None becomes NaN): a Python loop that
        # fills an array row by row takes twice as long for a 10,000-trial study.
        rows = [series if series is not None and len(series) == length
                else ((series or [])[:length] + empty)[:length]
                for series in (c.get(name) for c in trials)]
        return np.array(rows, dtype=float).reshape(len(trials), length)

    batches = np.array([np.nan if b is None else float(b) for b in batch_sizes], dtype=float)
    return CurveArrays(metric, padded(record.SAMPLES_SEEN), padded(metric), padded(record.STEPS),
                       padded(record.TRAIN_S), padded(record.RUNTIME_S), batches)


def crossings(curves: Sequence[Mapping[str, Any] | None] | CurveArrays, target: Target,
              batch_sizes: Sequence[float | None] = ()) -> Crossings:
    """The first crossing of ``target`` by each trial's curves, for all trials at once.

    A crossing is interpolated linearly between the last finite evaluation before it and the
    first one that meets the target, in every series (samples, steps, training and wall
    seconds); one at the trial's first evaluation takes that evaluation's values. Steps missing
    from older studies' curves are counted from the trial's batch size. Vectorised over the
    trials: a 10,000-trial study's curves take tens of milliseconds.

    Args:
        curves: Each trial's ``curves`` attr, or their ``curve_arrays`` (built once for
            several targets).
        batch_sizes: Each trial's effective batch (with ``curves`` as attrs).
    """
    arrays = curves if isinstance(curves, CurveArrays) else curve_arrays(curves, target.metric, batch_sizes)
    samples, values = arrays.samples, arrays.values
    n = len(samples)
    valid = np.isfinite(samples) & np.isfinite(values)
    with np.errstate(invalid="ignore"):
        hit = valid & (values >= target.value if target.direction == "maximize" else values <= target.value)
    reached = hit.any(axis=1)
    rows = np.arange(n)
    first = hit.argmax(axis=1)
    # The last finite evaluation before the crossing: a running maximum of valid positions.
    position = np.where(valid, np.arange(valid.shape[1])[None, :], -1)
    last_valid = np.maximum.accumulate(position, axis=1)
    before = np.where(first > 0, last_valid[rows, np.maximum(first - 1, 0)], -1)
    at_first = reached & (before < 0)
    j = np.maximum(before, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        span = values[rows, first] - values[rows, j]
        fraction = np.where(at_first | (span == 0), 1.0, (target.value - values[rows, j]) / span)
    fraction = np.clip(fraction, 0.0, 1.0)

    def at_crossing(series: FloatArray) -> FloatArray:
        value: FloatArray = series[rows, j] + fraction * (series[rows, first] - series[rows, j])
        value = np.where(at_first, series[rows, first], value)
        return np.where(reached, value, np.nan)

    crossed = at_crossing(samples)
    steps = at_crossing(arrays.steps)
    with np.errstate(invalid="ignore", divide="ignore"):
        steps = np.where(np.isfinite(steps), steps, crossed / arrays.batch_sizes)
    return Crossings(crossed, steps, at_crossing(arrays.train_s), at_crossing(arrays.runtime_s), at_first,
                     arrays.best(target.direction))


def best_along_curve(curves: Mapping[str, Any] | None, metric: str, direction: Direction) -> float | None:
    """The best value of ``metric`` at any evaluation of a trial, or ``None``."""
    if not isinstance(curves, Mapping):
        return None
    values = [float(v) for v in curves.get(metric) or [] if _finite(v)]
    if not values:
        return None
    return max(values) if direction == "maximize" else min(values)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def default_target(batches: Sequence[float | None], best_values: Sequence[float], metric: str,
                   direction: Direction, *, ignored: int = 0) -> Target:
    """A target derived from the study, for when none is given: the best value that the best
    trials of two thirds of the effective batch sizes tried reach (at least three batch sizes
    where three or more were tried), rounded to three significant digits toward the easier
    side. So most batch sizes enter the critical-batch fit, and the target is one the study
    shows to be reachable.

    The caller leaves out the trials that say nothing of what a configuration can reach:
    failed ones, and ones whose training diverged (``CurveArrays.diverging``). A diverging
    trial's best value is its first evaluation's; a target taken from it was met by every
    other trial at its first evaluation, and gave an answer with no evidence behind it.

    Args:
        batches: Each trial's effective batch.
        best_values: Each trial's best value of ``metric`` at any evaluation (NaN: none).
        ignored: How many diverging trials the caller left out (said in the target's note).

    Raises:
        NoAnswerError: no trial recorded ``metric`` at any evaluation.
    """
    best: dict[float, float] = {}
    for batch, value in zip(batches, best_values):
        if not _finite(value) or not _finite(batch):
            continue
        batch = float(batch)  # type: ignore[arg-type]
        if batch not in best or (value > best[batch] if direction == "maximize" else value < best[batch]):
            best[batch] = value
    if not best:
        diverged = f" ({ignored} diverging trial(s) left out)" if ignored else ""
        raise NoAnswerError(f"no trial recorded {metric} at any evaluation{diverged}, so no target can be derived; "
                            "give one (analysis.target in the space, or --target METRIC=VALUE)")
    ranked = sorted(best.values(), reverse=direction == "maximize")
    need = max(min(3, len(ranked)), math.ceil(DEFAULT_TARGET_SHARE * len(ranked)))
    value = _round_easier(ranked[need - 1], direction)
    diverged = f", {ignored} diverging trial(s) left out" if ignored else ""
    note = (f"derived: the best value that the best trials of {need} of the {len(ranked)} effective batch sizes "
            f"reach{diverged}; set analysis.target in the space or --target METRIC=VALUE to choose")
    return Target(metric, value, direction, "default", note)


def _round_easier(value: float, direction: Direction) -> float:
    """``value`` to three significant digits, rounded so that whoever reached ``value`` still
    reaches the rounded one."""
    if value == 0 or not math.isfinite(value):
        return value
    scale = 10 ** (math.floor(math.log10(abs(value))) - 2)
    rounded = (math.floor if direction == "maximize" else math.ceil)(value / scale) * scale
    return float(f"{rounded:.3g}")
