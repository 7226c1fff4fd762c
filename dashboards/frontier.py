"""The runtime-vs-accuracy frontier as plain data: the "compute" half of a frontier figure.

Nothing here imports plotly, so the CLI, the Python API and the tests can ask for the
front of a study without paying for the plotting stack. :mod:`hpsearch.dashboards.figures`
turns a :class:`FrontierInfo` into a figure. :func:`frontier_info` reads top to bottom in
named steps: the completed trials with a finite x and y, their Pareto front, the ones shown
(all, or a thinned set that keeps the front), their points, and the points by color group.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from hpsearch.dashboards.points import _config_columns, _group_names, _numbers, _plain, log_axis, thin_points
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
    completed = _completed_trials(df, x, y)
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
            n_trials=len(df),
            n_complete=0,
        )

    xs, ys = _numbers(completed, x), _numbers(completed, y)
    sizes = _numbers(completed, size_column) if size_column is not None else np.full(len(completed), np.nan)
    names = _group_names(completed, color_column)
    front = pareto_front(xs, ys, x_direction=x_direction, y_direction=y_direction)
    shown = _shown_positions(xs, ys, sizes, names, front, max_points)
    config_columns = _config_columns([str(c) for c in completed.columns], x, y)
    points = _points(completed.iloc[shown], xs[shown], ys[shown], sizes[shown], config_columns)
    point_at = dict(zip(shown.tolist(), points))  # position in ``completed`` -> its point
    front_points = tuple(point_at[i] for i in front)
    x_min, x_max = float(xs.min()), float(xs.max())
    return FrontierInfo(
        x=x,
        y=y,
        x_direction=x_direction,
        y_direction=y_direction,
        color=color_column,
        size=size_column,
        groups=_groups(points, [names[i] for i in shown.tolist()]),
        front=tuple(p.number for p in front_points),
        front_points=front_points,
        log_x=bool(x_min > 0 and x_max / x_min > 10.0),
        n_trials=len(df),
        n_complete=len(completed),
        n_hidden=len(completed) - len(points),
    )


def _require(df: pd.DataFrame, column: str, role: str) -> None:
    if column not in df.columns:
        present = ", ".join(map(str, df.columns)) or "none"
        raise ValueError(
            f"the {role} column {column!r} is missing from the trials DataFrame "
            f"(columns present: {present})"
        )


def _completed_trials(df: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """The COMPLETE trials with a finite ``x`` and ``y``, by trial number.

    Raises:
        ValueError: ``state`` is missing while there are trials, or ``number``, ``x`` or ``y``
            is missing while some trial completed (a study that has only just started has
            recorded no metrics yet: that is no error).
    """
    if not len(df):
        return pd.DataFrame()
    _require(df, "state", "state")
    completed = df[df["state"].astype(str) == "COMPLETE"]
    if not len(completed):
        return completed
    _require(df, "number", "trial number")
    _require(df, x, "x")
    _require(df, y, "y")
    keep = np.isfinite(_numbers(completed, x)) & np.isfinite(_numbers(completed, y))
    # Sort by trial number so "lowest index" in pareto_front means lowest trial number.
    return completed[keep].sort_values("number", kind="stable")


def _shown_positions(
    xs: np.ndarray, ys: np.ndarray, sizes: np.ndarray, names: list[str], front: Sequence[int], max_points: int | None
) -> np.ndarray:
    """The positions of the trials the groups keep: all of them, or with ``max_points`` and
    more trials, the front, the ends of each axis and of the size column, and a thinned rest."""
    if max_points is None or len(xs) <= max_points:
        return np.arange(len(xs))
    positive = np.flatnonzero(np.isfinite(sizes) & (sizes > 0))
    # The smallest marker sets every marker's size: it stays, as do the front and the extremes.
    smallest = [int(positive[sizes[positive].argmin()])] if len(positive) else []
    return thin_points(xs, ys, max_points=max_points, groups=names, keep=[*front, *smallest],
                       log_x=log_axis(xs), log_y=log_axis(ys))


def _points(
    shown: pd.DataFrame, xs: np.ndarray, ys: np.ndarray, sizes: np.ndarray, config_columns: list[str]
) -> list[FrontierPoint]:
    """The rows of ``shown`` as points, with their ``xs``, ``ys`` and ``sizes`` (one each, in
    the same order) and their configuration for hover."""
    points: list[FrontierPoint] = []
    for i, row in enumerate(shown.to_dict("records")):
        config = {
            column: value
            for column in config_columns
            if (value := _plain(row[column])) is not None
        }
        points.append(
            FrontierPoint(
                number=int(row["number"]),
                x=float(xs[i]),
                y=float(ys[i]),
                size=float(sizes[i]) if math.isfinite(sizes[i]) else None,
                config=config,
            )
        )
    return points


def _groups(points: list[FrontierPoint], names: list[str]) -> tuple[FrontierGroup, ...]:
    """The points by group name (``names``: one per point), one group per name, by name."""
    return tuple(
        FrontierGroup(
            name=name,
            points=tuple(p for p, n in zip(points, names) if n == name),
        )
        for name in sorted(set(names))
    )
