"""The runtime-vs-accuracy frontier as plain data: the "compute" half of a frontier figure.

Nothing here imports plotly, so the CLI, the Python API and the tests can ask for the
front of a study without paying for the plotting stack. :mod:`hpsearch.dashboards.figures`
turns a :class:`FrontierInfo` into a figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from hpsearch.search_spaces import record
from hpsearch.study import pareto_front
from hpsearch.study._pareto import _check_direction

__all__ = [
    "Direction",
    "FrontierGroup",
    "FrontierInfo",
    "FrontierPoint",
    "frontier_info",
    "pareto_front",
    "thin_points",
]

Direction = record.Direction

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


@dataclass(frozen=True)
class FrontierPoint:
    """One completed trial as a point of the frontier.

    Attributes:
        number: The trial number in the study.
        x: The trial's value on the x axis (e.g. ``runtime_s``).
        y: The trial's value on the y axis (e.g. ``val_accuracy``).
        size: The value that sets the marker size (e.g. ``effective_batch_size``), or
            ``None`` when the trial has none.
        config: The trial's configuration for hover text: column name to a plain Python
            value, the batch and LR columns first; missing values are left out.
    """

    number: int
    x: float
    y: float
    size: float | None
    config: Mapping[str, object] = field(hash=False)


@dataclass(frozen=True)
class FrontierGroup:
    """The points of one color group (one LR rule by default).

    Attributes:
        name: The group's value of the color column as text, e.g. ``"linear"``.
        points: The group's points, by trial number.
    """

    name: str
    points: tuple[FrontierPoint, ...]


@dataclass(frozen=True)
class FrontierInfo:
    """Everything a frontier figure shows, computed from a trials DataFrame.

    Attributes:
        x: The column on the x axis.
        y: The column on the y axis.
        x_direction: Whether smaller or larger x is better.
        y_direction: Whether smaller or larger y is better.
        color: The column that splits the points into groups, or ``None`` for one group.
        size: The column that sets marker sizes, or ``None``.
        groups: One group per distinct value of ``color``, by name.
        front: Trial numbers of the Pareto front over all groups, by ascending x.
        front_points: The same trials as points, in the same order.
        log_x: True when all x are positive and span more than a decade
            (max / min > 10), so the x axis should be logarithmic.
        n_trials: Rows in the DataFrame, whatever their state.
        n_complete: Completed trials with a finite x and y.
        n_hidden: Of those, how many are not in ``groups`` (0 unless ``max_points`` thinned
            them; every front trial is always in).
    """

    x: str
    y: str
    x_direction: Direction
    y_direction: Direction
    color: str | None
    size: str | None
    groups: tuple[FrontierGroup, ...]
    front: tuple[int, ...]
    front_points: tuple[FrontierPoint, ...]
    log_x: bool
    n_trials: int
    n_complete: int
    n_hidden: int = 0

    @property
    def is_empty(self) -> bool:
        """True when there is no completed trial to draw."""
        return self.n_complete == 0


def _plain(value: object) -> object | None:
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


def _config_columns(columns: Sequence[str], x: str, y: str) -> list[str]:
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


def _require(df: pd.DataFrame, column: str, role: str) -> None:
    if column not in df.columns:
        present = ", ".join(map(str, df.columns)) or "none"
        raise ValueError(
            f"the {role} column {column!r} is missing from the trials DataFrame "
            f"(columns present: {present})"
        )


def _group_name(value: object) -> str:
    plain = _plain(value)
    return "n/a" if plain is None else str(plain)


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


def frontier_info(
    df: pd.DataFrame,
    *,
    x: str = "runtime_s",
    y: str = "val_accuracy",
    x_direction: Direction = "minimize",
    y_direction: Direction = "maximize",
    color: str | None = "lr_rule",
    size: str | None = "effective_batch_size",
    max_points: int | None = None,
) -> FrontierInfo:
    """Compute the points, groups and Pareto front of a study's trials.

    Only trials in state ``COMPLETE`` with a finite ``x`` and ``y`` count: pruned trials
    stopped at a partial budget and failed trials would distort the front. Points are
    grouped by the ``color`` column (one group per LR rule by default); when that column
    is absent (or ``color`` is ``None``) all points form one group named ``"all trials"``.
    Trials with a missing color value form a group named ``"n/a"``. The front is taken over
    all groups together, with the dominance rule of :func:`pareto_front`; of trials with
    identical (x, y) the lowest trial number is kept.

    A DataFrame without completed trials gives an empty :class:`FrontierInfo` rather than
    an error, even when the metric columns do not exist yet (a study that has only just
    started has recorded no metrics).

    With ``max_points``, a study of more completed trials keeps in its groups every front
    trial, the trials at the ends of each axis and of the size column, and a thinned rest
    (:func:`thin_points`, by group): a figure of 10,000 trials draws about as it would with
    all of them, in a fraction of the bytes. ``n_hidden`` says how many were left out.

    Args:
        df: The trials as the study API produces them: one row per trial with columns
            ``number``, ``state`` and one plain column per param and user attr.
        x: The column for the x axis.
        y: The column for the y axis.
        x_direction: ``"minimize"`` or ``"maximize"``: which x is better.
        y_direction: ``"minimize"`` or ``"maximize"``: which y is better.
        color: The column whose values split points into groups, or ``None``.
        size: The column that sets marker sizes, or ``None``; ignored when absent.
        max_points: Keep at most about this many trials in ``groups`` (every front trial
            stays), or ``None`` for all.

    Returns:
        A :class:`FrontierInfo`.

    Raises:
        ValueError: When a column the computation needs (``x``, ``y``, ``number`` or
            ``state``) is missing while there are trials, or a direction is invalid.

    Example:
        >>> df = pd.DataFrame({
        ...     "number": [0, 1, 2], "state": ["COMPLETE"] * 3,
        ...     "lr_rule": ["linear", "sqrt", "linear"],
        ...     "runtime_s": [10.0, 20.0, 30.0], "val_accuracy": [0.8, 0.9, 0.85],
        ... })
        >>> info = frontier_info(df)
        >>> info.front
        (0, 1)
        >>> [g.name for g in info.groups]
        ['linear', 'sqrt']
    """
    _check_direction("x_direction", x_direction)
    _check_direction("y_direction", y_direction)
    n_trials = len(df)
    completed = pd.DataFrame()
    if n_trials:
        _require(df, "state", "state")
        completed = df[df["state"].astype(str) == "COMPLETE"]
    if len(completed):
        _require(df, "number", "trial number")
        _require(df, x, "x")
        _require(df, y, "y")
        xs = pd.to_numeric(completed[x], errors="coerce").to_numpy(dtype=float)
        ys = pd.to_numeric(completed[y], errors="coerce").to_numpy(dtype=float)
        keep = np.isfinite(xs) & np.isfinite(ys)
        # Sort by trial number so "lowest index" in pareto_front means lowest trial number.
        completed = completed[keep].sort_values("number", kind="stable")
    color_column = color if color is not None and color in df.columns else None
    size_column = size if size is not None and size in df.columns else None

    if not len(completed):
        return FrontierInfo(
            x=x,
            y=y,
            x_direction=x_direction,
            y_direction=y_direction,
            color=color_column,
            size=size_column,
            groups=(),
            front=(),
            front_points=(),
            log_x=False,
            n_trials=n_trials,
            n_complete=0,
        )

    xs = pd.to_numeric(completed[x], errors="coerce").to_numpy(dtype=float)
    ys = pd.to_numeric(completed[y], errors="coerce").to_numpy(dtype=float)
    sizes = (
        pd.to_numeric(completed[size_column], errors="coerce").to_numpy(dtype=float)
        if size_column is not None
        else np.full(len(completed), np.nan)
    )
    all_names = (
        [_group_name(v) for v in completed[color_column].tolist()]
        if color_column is not None
        else ["all trials"] * len(completed)
    )
    front_idx = pareto_front(xs, ys, x_direction=x_direction, y_direction=y_direction)
    shown = np.arange(len(completed))
    if max_points is not None and len(completed) > max_points:
        from hpsearch.dashboards.plots import log_axis

        positive = np.flatnonzero(np.isfinite(sizes) & (sizes > 0))
        # The smallest marker sets every marker's size: it stays, as do the front and the extremes.
        smallest = [int(positive[sizes[positive].argmin()])] if len(positive) else []
        shown = thin_points(xs, ys, max_points=max_points, groups=all_names, keep=[*front_idx, *smallest],
                            log_x=log_axis(xs), log_y=log_axis(ys))
    config_columns = _config_columns([str(c) for c in completed.columns], x, y)
    records = completed.iloc[shown].to_dict("records")

    points: list[FrontierPoint] = []
    names: list[str] = []
    at: dict[int, int] = {}  # position in ``completed`` -> index in ``points``
    for row, i in zip(records, shown.tolist()):
        config = {
            column: value
            for column in config_columns
            if (value := _plain(row[column])) is not None
        }
        at[i] = len(points)
        points.append(
            FrontierPoint(
                number=int(row["number"]),
                x=float(xs[i]),
                y=float(ys[i]),
                size=float(sizes[i]) if math.isfinite(sizes[i]) else None,
                config=config,
            )
        )
        names.append(all_names[i])

    groups = tuple(
        FrontierGroup(
            name=name,
            points=tuple(p for p, n in zip(points, names) if n == name),
        )
        for name in sorted(set(names))
    )
    front_points = tuple(points[at[i]] for i in front_idx)
    x_min, x_max = float(xs.min()), float(xs.max())
    return FrontierInfo(
        x=x,
        y=y,
        x_direction=x_direction,
        y_direction=y_direction,
        color=color_column,
        size=size_column,
        groups=groups,
        front=tuple(p.number for p in front_points),
        front_points=front_points,
        log_x=bool(x_min > 0 and x_max / x_min > 10.0),
        n_trials=n_trials,
        n_complete=len(completed),
        n_hidden=len(completed) - len(points),
    )
