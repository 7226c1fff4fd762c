"""Targets and time-to-target: when each trial first reached a value of a metric.

A target is a metric and a threshold (``val_accuracy >= 0.95``, ``val_loss <= 0.3``). Each
trial's curves give the metric at each evaluation against samples seen; the first crossing is
interpolated linearly between the two evaluations around it, and the samples, optimizer steps,
training seconds, wall seconds and device-seconds at that point are the trial's cost to the
target. A trial that never crossed has not reached it: "not reached" is a value, not a zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from hpsearch.errors import AnalysisError
from hpsearch.search_spaces import record
from hpsearch.search_spaces.record import Direction

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CURVE_FIELDS", "Crossing", "Target", "crossing", "default_target", "parse_target", "quality_metric"]

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
        AnalysisError: not ``METRIC=VALUE`` with a metric the trials record and a number.

    Example:
        >>> parse_target("val_accuracy=0.95")
        ('val_accuracy', 0.95)
    """
    metric, sep, raw = text.partition("=")
    metric = metric.strip()
    if not sep or not metric:
        raise AnalysisError(f"a target is METRIC=VALUE, such as val_accuracy=0.95; got {text!r}")
    if metric not in record.METRICS:
        raise AnalysisError(f"a target's metric must be one of {', '.join(record.METRICS)}; got {metric!r}")
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
        if metric not in costs and record.FIELDS.get(metric, None) is not None:
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
    """Where a trial's curves first meet ``target``.

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
    if not isinstance(curves, Mapping):
        return _NOT_REACHED
    samples = curves.get(record.SAMPLES_SEEN) or []
    values = curves.get(target.metric) or []
    previous: tuple[int, float] | None = None  # (index, value) of the last finite evaluation
    for i in range(min(len(samples), len(values))):
        value = values[i]
        if not _finite(value) or not _finite(samples[i]):
            continue
        if target.reached(float(value)):
            if previous is None:
                return _at(curves, i, None, 0.0, batch_size, first=True)
            j, before = previous
            span = float(value) - before
            fraction = 1.0 if span == 0 else (target.value - before) / span
            return _at(curves, i, j, min(1.0, max(0.0, fraction)), batch_size, first=False)
        previous = (i, float(value))
    return _NOT_REACHED


def _at(curves: Mapping[str, Any], i: int, j: int | None, fraction: float, batch_size: float | None, *,
        first: bool) -> Crossing:
    """The crossing ``fraction`` of the way from evaluation ``j`` to ``i`` (from ``i`` when
    ``j`` is None)."""

    def series(name: str) -> float | None:
        points = curves.get(name) or []
        if i >= len(points) or not _finite(points[i]):
            return None
        if j is None:
            return float(points[i])
        if j >= len(points) or not _finite(points[j]):
            return None
        return float(points[j]) + fraction * (float(points[i]) - float(points[j]))

    samples = series(record.SAMPLES_SEEN)
    steps = series(record.STEPS)
    if steps is None and samples is not None and batch_size:
        steps = samples / batch_size
    return Crossing(samples, steps, series(record.TRAIN_S), series(record.RUNTIME_S), first)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def best_along_curve(curves: Mapping[str, Any] | None, metric: str, direction: Direction) -> float | None:
    """The best value of ``metric`` at any evaluation of a trial, or ``None``."""
    if not isinstance(curves, Mapping):
        return None
    values = [float(v) for v in curves.get(metric) or [] if _finite(v)]
    if not values:
        return None
    return max(values) if direction == "maximize" else min(values)


def default_target(frame: pd.DataFrame, curves: Mapping[int, Any], metric: str, direction: Direction) -> Target:
    """A target derived from the study, for when none is given: the best value that the best
    trials of two thirds of the effective batch sizes tried reach (at least three batch sizes
    where three or more were tried), rounded to three significant digits toward the easier
    side. So most batch sizes enter the critical-batch fit, and the target is one the study
    shows to be reachable.

    Raises:
        AnalysisError: no trial recorded ``metric`` at any evaluation.
    """
    best: dict[float, float] = {}
    for number, batch in zip(frame["number"].tolist(), frame[record.EFFECTIVE_BATCH_SIZE].tolist()):
        value = best_along_curve(curves.get(int(number)), metric, direction)
        if value is None or not _finite(batch):
            continue
        batch = float(batch)
        if batch not in best or (value > best[batch] if direction == "maximize" else value < best[batch]):
            best[batch] = value
    if not best:
        raise AnalysisError(f"no trial recorded {metric} at any evaluation, so no target can be derived; "
                            "give one (analysis.target in the space, or --target METRIC=VALUE)")
    ranked = sorted(best.values(), reverse=direction == "maximize")
    need = max(min(3, len(ranked)), math.ceil(DEFAULT_TARGET_SHARE * len(ranked)))
    value = _round_easier(ranked[need - 1], direction)
    note = (f"derived: the best value that the best trials of {need} of the {len(ranked)} effective batch sizes "
            "reach; set analysis.target in the space or --target METRIC=VALUE to choose")
    return Target(metric, value, direction, "default", note)


def _round_easier(value: float, direction: Direction) -> float:
    """``value`` to three significant digits, rounded so that whoever reached ``value`` still
    reaches the rounded one."""
    if value == 0 or not math.isfinite(value):
        return value
    scale = 10 ** (math.floor(math.log10(abs(value))) - 2)
    rounded = (math.floor if direction == "maximize" else math.ceil)(value / scale) * scale
    return float(f"{rounded:.3g}")
