"""The accuracy-vs-effective-batch figure as plain data: the best trial per LR rule and batch.

:func:`accuracy_vs_batch_info` is re-exported by :mod:`hpsearch.dashboards.plots`, where the
figures' data is documented; :mod:`hpsearch.dashboards.figures` draws it. Nothing here imports
plotly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from hpsearch.dashboards.points import (
    _completed,
    _configs,
    _missing_note,
    _no_completed_note,
    _numbers,
    _rule_names,
    log_axis,
)
from hpsearch.search_spaces.record import Direction

__all__ = [
    "AccuracyVsBatchInfo",
    "BatchBest",
    "RuleLine",
    "accuracy_vs_batch_info",
]


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

    lines = _rule_lines(done[keep], batches[keep], values[keep], metric, direction)
    return AccuracyVsBatchInfo(
        metric=metric,
        direction=direction,
        lines=lines,
        log_x=log_axis(batches[keep]),
        log_y=log_axis(p.value for line in lines for p in line.points),
        n_trials=len(df),
        n_complete=int(keep.sum()),
        note=None,
    )


def _rule_lines(
    done: pd.DataFrame, batches: np.ndarray, values: np.ndarray, metric: str, direction: Direction
) -> tuple[RuleLine, ...]:
    """The best of the rows of ``done`` (completed, finite batch and value, by trial number)
    per rule and batch: one line per rule, by rule name, its points by ascending batch."""
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
    return tuple(RuleLine(rule, tuple(points)) for rule, points in lines.items())
