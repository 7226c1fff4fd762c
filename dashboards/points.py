"""Trials as points: what every figure's data shares, and nothing that draws.

How a figure reads the trials DataFrame (one row per trial, as
``Search.trials_dataframe(all_attrs=True)`` returns it): which rows count
(:func:`completed_trials`), a column as numbers (:func:`floats`), the configuration a point shows
on hover (:func:`hover_configs`), its LR rule (its color, :func:`rule_names`), the note of a
figure with nothing to show (:func:`no_completed_note`, :func:`missing_note`), the metric a
figure shows unless asked for another (:func:`quality_metric`: the study's own), the one rule
for logarithmic axes (:func:`log_axis`) and how a study of many trials is thinned to a drawable
few (:func:`thin_points`). Each figure's module (:mod:`hpsearch.dashboards.frontier`,
:mod:`hpsearch.dashboards.accuracy_vs_batch`...) builds its data on these. Nothing here imports
plotly.

Example:
    >>> import pandas as pd
    >>> df = pd.DataFrame({"number": [1, 0, 2], "state": ["COMPLETE", "COMPLETE", "FAIL"]})
    >>> completed_trials(df)["number"].tolist(), no_completed_note(df.iloc[2:])
    ([0, 1], 'no completed trials yet (1 failed)')
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from hpsearch import record
from hpsearch.errors import ColumnError
from hpsearch.study import frontier_axes

__all__ = [
    "LOG_AXIS_MIN_RATIO",
    "TrialGroup",
    "TrialPoint",
    "completed_trials",
    "config_columns",
    "floats",
    "group_names",
    "hover_configs",
    "log_axis",
    "missing_note",
    "no_completed_note",
    "plain_value",
    "point_groups",
    "quality_metric",
    "require_columns",
    "rule_names",
    "thin_points",
]

#: An axis goes logarithmic when max / min of its (all positive) values reaches this: two
#: decades. Below it a linear axis reads more easily; above it a linear axis squeezes the small
#: values (batch 8 next to batch 8192) into one pixel column.
LOG_AXIS_MIN_RATIO = 100.0

# The configuration a user wants to see first when hovering a trial, in this order.
_CONFIG_COLUMNS: tuple[str, ...] = (
    record.PER_DEVICE_BATCH_SIZE,
    record.WORLD_SIZE,
    record.GRAD_ACCUM_STEPS,
    record.EFFECTIVE_BATCH_SIZE,
    record.LR_RULE,
    record.BASE_LR,
    record.LR,
)

# Columns that are measurements or bookkeeping, not configuration: the trial record's measured
# and bookkeeping names and the table's own columns. The study's DataFrame flattens params and
# user attrs into plain columns, so whatever is not listed here (and is a scalar) counts as
# configuration, which keeps searched parameters of user workloads (momentum, weight_decay...)
# in the hover.
_NOT_CONFIG_COLUMNS: frozenset[str] = frozenset(
    {"number", "state", "duration_s", "datetime_start", "datetime_complete"}
    | {f.name for f in record.FIELDS.values() if f.kind in ("measured", "bookkeeping")}
)
_NOT_CONFIG_PREFIXES: tuple[str, ...] = (
    "datetime_",
    "values_",
    "system_attrs_",
    "intermediate_",
)

_STATE_WORDS: dict[str, str] = {
    "COMPLETE": "completed",
    "FAIL": "failed",
    "PRUNED": "pruned",
    "RUNNING": "running",
    "WAITING": "waiting",
}


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


# ---- reading the trials DataFrame -----------------------------------------------------------------

def plain_value(value: object) -> object | None:
    """A numpy/pandas scalar as a plain Python value; None for missing values."""
    if value is None:
        return None
    kind = type(value)
    if kind is str or kind is int or kind is bool:  # the common cells first: no pandas call
        return value
    if kind is float:
        return None if value != value else value  # NaN is missing
    if isinstance(value, (list, tuple, dict, set, np.ndarray)):
        # Per-epoch curves and similar are not configuration.
        return None
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        return None
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def config_columns(columns: Sequence[str], x: str, y: str) -> list[str]:
    """The columns of a trial's hover configuration: the batch and LR columns first, then the
    other configuration columns by name, less ``x`` and ``y`` (already on an axis)."""
    known = [c for c in _CONFIG_COLUMNS if c in columns]
    others = sorted(
        c
        for c in columns
        if c not in _CONFIG_COLUMNS
        and c not in _NOT_CONFIG_COLUMNS
        and c not in (x, y)
        and not c.startswith(_NOT_CONFIG_PREFIXES)
    )
    return known + others


def completed_trials(df: pd.DataFrame) -> pd.DataFrame:
    """The COMPLETE rows, by trial number; none when the frame has no ``state`` column."""
    if "state" not in df.columns or "number" not in df.columns:
        return df.iloc[0:0]
    done = df[df["state"].astype(str) == "COMPLETE"]
    return done.sort_values("number", kind="stable")


def floats(df: pd.DataFrame, column: str) -> np.ndarray:
    """A column as floats, NaN where missing, None or not a number (a missing column: all NaN)."""
    if column not in df.columns:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)


def no_completed_note(df: pd.DataFrame) -> str:
    """Why a study has no completed trial to show: no trials at all, or only unfinished ones
    (counted by state, so "3 failed, 2 pruned" tells a broken search from a young one)."""
    if not len(df) or "state" not in df.columns:
        return "no trials yet"
    counts = df["state"].astype(str).value_counts()
    parts = ", ".join(f"{n} {_STATE_WORDS.get(state, state.lower())}" for state, n in sorted(counts.items()))
    return f"no completed trials yet ({parts})"


def missing_note(df: pd.DataFrame, columns: Iterable[str]) -> str | None:
    """Which of ``columns`` no trial recorded, as a note; ``None`` when all are there."""
    missing = [c for c in columns if c not in df.columns]
    if not missing:
        return None
    return f"no trial recorded {' or '.join(missing)}"


def group_names(df: pd.DataFrame, column: str | None) -> list[str]:
    """Each row's color group: its ``column`` value as text, ``"n/a"`` where missing, and
    ``"all trials"`` for every row without the column (or with ``column`` ``None``)."""
    if column is None or column not in df.columns:
        return ["all trials"] * len(df)
    names = []
    for value in df[column].tolist():
        plain = plain_value(value)
        names.append("n/a" if plain is None else str(plain))
    return names


def rule_names(df: pd.DataFrame) -> list[str]:
    """Each row's LR rule as text: ``"n/a"`` where missing, ``"all trials"`` without the column."""
    return group_names(df, record.LR_RULE)


def hover_configs(df: pd.DataFrame, shown: Sequence[str]) -> list[dict[str, object]]:
    """Each row's hover configuration: the frontier's configuration columns, less ``shown``
    (already on an axis) and bookkeeping attrs."""
    # The frontier's own x and y exclusion is not used (""): ``shown`` may name any number.
    columns = [
        c
        for c in config_columns([str(c) for c in df.columns], "", "")
        if c not in shown
    ]
    return [
        {c: v for c in columns if (v := plain_value(row[c])) is not None}
        for row in df[columns].to_dict("records")
    ]


def point_groups(df: pd.DataFrame, xs: np.ndarray, ys: np.ndarray, shown: Sequence[str]) -> tuple[TrialGroup, ...]:
    """Points of the rows of ``df`` (already filtered to finite x and y), one group per rule."""
    configs = hover_configs(df, shown)
    by_rule: dict[str, list[TrialPoint]] = {}
    for i, (number, rule) in enumerate(zip(df["number"].tolist(), rule_names(df))):
        by_rule.setdefault(rule, []).append(TrialPoint(int(number), float(xs[i]), float(ys[i]), configs[i]))
    return tuple(TrialGroup(name, tuple(points)) for name, points in sorted(by_rule.items()))


def quality_metric(objectives: Sequence[str]) -> str:
    """The metric a figure shows unless asked for another: the study's first objective that
    measures quality (not ``runtime_s`` or ``device_seconds``), as ``hpsearch frontier`` and the
    end-of-search frontier choose it; ``val_accuracy`` for a study without one.

    A study of ``val_loss`` gets figures of ``val_loss`` (lower is better, by the study's own
    direction), not an error about a ``val_accuracy`` column its trials never recorded.

    Example:
        >>> quality_metric(["val_loss"]), quality_metric(["runtime_s", "val_accuracy"]), quality_metric([])
        ('val_loss', 'val_accuracy', 'val_accuracy')
    """
    return frontier_axes(list(objectives))[1]


def require_columns(df: pd.DataFrame, *columns: str) -> None:
    """Refuse a column the study's completed trials lack.

    Only completed trials carry metrics: a study with none yet (or no trials at all) gets an
    empty figure that says so, not this error.

    Raises:
        ColumnError: Some trial completed and ``df`` has no such column; the message names the
            column and lists those it has.

    Example:
        >>> df = pd.DataFrame({"number": [0], "state": ["COMPLETE"], "val_loss": [0.3]})
        >>> require_columns(df, "val_accuracy")
        Traceback (most recent call last):
        ...
        hpsearch.errors.ColumnError: no column 'val_accuracy' in this study's trials; columns: number, state, val_loss
    """
    completed = len(df) and "state" in df.columns and bool((df["state"] == "COMPLETE").any())
    for column in columns:
        if completed and column not in df.columns:
            raise ColumnError(f"no column {column!r} in this study's trials; columns: {', '.join(map(str, df.columns))}")


# ---- thinning a study of many trials --------------------------------------------------------------

def thin_points(
    xs: Sequence[float] | np.ndarray,
    ys: Sequence[float] | np.ndarray,
    *,
    max_points: int,
    groups: Sequence[object] | None = None,
    keep: Sequence[int] = (),
    log_x: bool = False,
    log_y: bool = False,
) -> np.ndarray:
    """Positions of at most ``max_points`` of the (finite) points that draw like all of them.

    Every point of ``keep`` (a Pareto front, say) stays, and so do the first point with the
    smallest and largest x and y (so the axes span what all points span). Of the others, each
    group keeps one point per occupied cell of a grid over the plot, the first of the cell
    (lowest position): where points pile up the plot shows one, and a lone outlier stays. The
    grid has as many cells per axis as fit the budget (256, 215, 181, ... down to 1), measured on a
    log scale along an axis with ``log_x`` or ``log_y``. The same points give the same
    positions. With no more than ``max_points`` points, all are kept; ``keep`` and the
    extremes are kept even when they alone exceed it.

    Args:
        xs: The x of each point; all finite (and positive along a log axis).
        ys: The y of each point.
        max_points: How many positions to return at most.
        groups: Each point's group (one color of the figure), or ``None`` for one group.
        keep: Positions that must stay.
        log_x: Whether the x axis is logarithmic.
        log_y: Whether the y axis is logarithmic.

    Returns:
        The kept positions, ascending.

    Example:
        >>> xs = [1.0, 1.01, 1.02, 5.0, 9.0]
        >>> thin_points(xs, [1.0, 1.0, 1.0, 3.0, 2.0], max_points=4).tolist()
        [0, 3, 4]
    """
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    n = len(x)
    if n <= max_points:
        return np.arange(n)
    fixed = np.unique(np.concatenate([
        np.asarray(keep, dtype=np.int64).reshape(-1),
        np.array([x.argmin(), x.argmax(), y.argmin(), y.argmax()], dtype=np.int64),
    ]))
    codes = np.zeros(n, dtype=np.int64) if groups is None else np.unique(
        np.asarray([str(g) for g in groups]), return_inverse=True)[1].astype(np.int64).reshape(-1)

    def scaled(values: np.ndarray, log: bool) -> np.ndarray:
        values = np.log10(values) if log else values
        low, high = float(values.min()), float(values.max())
        return (values - low) / (high - low) if high > low else np.zeros_like(values)

    sx, sy = scaled(x, log_x), scaled(y, log_y)
    chosen = fixed
    # From 256 cells per axis down to 1, a quarter of an octave at a time.
    for cells in dict.fromkeys(max(1, round(256 * 2 ** (-k / 4))) for k in range(33)):
        ix = np.minimum((sx * cells).astype(np.int64), cells - 1)
        iy = np.minimum((sy * cells).astype(np.int64), cells - 1)
        _, first = np.unique((codes * cells + ix) * cells + iy, return_index=True)
        chosen = np.union1d(first, fixed)
        if len(chosen) <= max_points:
            break
    return chosen
