"""Accuracy against effective batch, one line per LR rule: does a rule keep its accuracy as the
batch grows? Each point is the best completed trial of its rule and batch.

One module, the figure's every step, as ``optuna.visualization``'s:

- compute: :func:`accuracy_vs_batch_info` turns the trials DataFrame into an
  :class:`AccuracyVsBatchInfo` of plain values (tested for values; imports no plotly);
- render: :func:`accuracy_vs_batch_figure` draws it with plotly;
- a study: :func:`plot_accuracy_vs_batch` (``plot_*(search)``);
- the dashboard: :func:`accuracy_vs_batch_from_query` answers
  ``/api/studies/NAME/figures/accuracy_vs_batch``.

"Accuracy" is the study's own quality objective unless asked for another metric: a study of
``val_loss`` draws the lowest ``val_loss`` per rule and batch.

Example:
    >>> import optuna
    >>> from hpsearch.testing import synthetic_study
    >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
    >>> [trace.name for trace in plot_accuracy_vs_batch(search).data]
    ['constant', 'linear', 'sqrt']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from hpsearch import record
from hpsearch.dashboards.points import (
    completed_trials,
    floats,
    hover_configs,
    log_axis,
    missing_note,
    no_completed_note,
    quality_metric,
    require_columns,
    rule_names,
)
from hpsearch.dashboards.queries import FigureQuery
from hpsearch.dashboards.style import (
    EMPTY_MESSAGE,
    MARKER_SIZE_PX,
    axis_label,
    batch_axis,
    hover,
    new_figure,
    rule_color,
    with_batch_axis,
    with_log_axes,
    with_note,
)
from hpsearch.record import Direction
from hpsearch.study import check_direction

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from hpsearch.search import Search

__all__ = [
    "AccuracyVsBatchInfo",
    "BatchBest",
    "RuleLine",
    "accuracy_vs_batch_figure",
    "accuracy_vs_batch_from_query",
    "accuracy_vs_batch_info",
    "plot_accuracy_vs_batch",
]


# ---- compute ------------------------------------------------------------------------------------

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
        metric: The column on the y axis (the study's quality objective in ``plot_*`` and the
            dashboard; ``val_accuracy`` by default here).
        direction: Which values of ``metric`` are better; "best" follows it.
        lines: One line per LR rule, by rule name.
        log_x: Whether the effective batch axis is logarithmic (see
            :func:`hpsearch.dashboards.style.batch_axis`).
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
    metric: str = record.VAL_ACCURACY,
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
    check_direction("direction", direction)
    done = completed_trials(df)
    note = missing_note(done, (record.EFFECTIVE_BATCH_SIZE, metric)) if len(done) else no_completed_note(df)
    batches = floats(done, record.EFFECTIVE_BATCH_SIZE)
    values = floats(done, metric)
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
        log_x=batch_axis(batches[keep]).log,
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
    for i, rule in enumerate(rule_names(done)):
        cells.setdefault((rule, float(batches[i])), []).append(i)
    # Rows are in trial-number order, so max() keeps the lowest number among equal values.
    bests = {cell: max(rows, key=lambda i: sign * values[i]) for cell, rows in sorted(cells.items())}
    # Hover configurations of the best trials only (one per rule and batch, not per trial).
    configs = dict(zip(bests.values(), hover_configs(done.iloc[list(bests.values())], (record.EFFECTIVE_BATCH_SIZE, metric))))
    lines: dict[str, list[BatchBest]] = {}
    for (rule, batch), best in bests.items():
        lines.setdefault(rule, []).append(
            BatchBest(batch, float(values[best]), numbers[best], len(cells[rule, batch]), configs[best])
        )
    return tuple(RuleLine(rule, tuple(points)) for rule, points in lines.items())


# ---- render -------------------------------------------------------------------------------------

def accuracy_vs_batch_figure(
    df: pd.DataFrame,
    *,
    metric: str = record.VAL_ACCURACY,
    direction: Direction = "maximize",
) -> go.Figure:
    """Accuracy against effective batch, one line per LR rule.

    Each point is the best completed trial of its rule at that batch (see
    :func:`accuracy_vs_batch_info` for why the best); its hover names that trial, its
    configuration and how many trials it is the best of. With a constant LR the line falls as
    the batch grows; a rule that keeps its line flat scales.

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
    import plotly.graph_objects as go  # heavy: only where a figure is drawn

    info = accuracy_vs_batch_info(df, metric=metric, direction=direction)
    fig = new_figure(f"best {axis_label(metric)} vs effective batch size, by LR rule",
                     record.EFFECTIVE_BATCH_SIZE, metric)
    if info.is_empty:
        return with_note(fig, info.note or EMPTY_MESSAGE)
    for line in info.lines:
        fig.add_trace(
            go.Scatter(
                x=[p.effective_batch_size for p in line.points],
                y=[p.value for p in line.points],
                mode="lines+markers",
                name=line.name,
                line={"color": rule_color(line.name), "width": 2},
                marker={"color": rule_color(line.name), "size": MARKER_SIZE_PX},
                customdata=[p.number for p in line.points],
                hovertext=[
                    hover(
                        f"trial {p.number}, best of {p.n_trials}",
                        {record.EFFECTIVE_BATCH_SIZE: p.effective_batch_size, metric: p.value},
                        p.config,
                    )
                    for p in line.points
                ],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    with_batch_axis(fig, [p.effective_batch_size for line in info.lines for p in line.points])
    return with_log_axes(fig, False, info.log_y, y=[p.value for line in info.lines for p in line.points])


# ---- a study, and the dashboard ------------------------------------------------------------------

def plot_accuracy_vs_batch(search: Search, metric: str | None = None) -> go.Figure:
    """``metric`` against effective batch size, one line per LR rule; each point is the best
    COMPLETE trial of its rule and batch, "best" in the study's direction for ``metric``.

    Args:
        search: The study.
        metric: The column on the y axis; by default the study's own quality objective
            (``val_accuracy``, ``val_loss``...: :func:`hpsearch.dashboards.points.quality_metric`).

    Raises:
        ColumnError: ``metric`` is not a column of the study's completed trials.
    """
    metric = metric or quality_metric(search.objectives)
    df = search.trials_dataframe()
    require_columns(df, metric)
    return accuracy_vs_batch_figure(df, metric=metric, direction=search.direction(metric))


def accuracy_vs_batch_from_query(query: FigureQuery) -> go.Figure:
    """``GET .../figures/accuracy_vs_batch``: parameter ``metric`` (default: the study's quality
    objective)."""
    metric = query.metric()
    return accuracy_vs_batch_figure(query.frame, metric=metric, direction=query.direction(metric))
