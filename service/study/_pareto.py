"""Pareto fronts and directions: which trials no other trial beats on two measurements.

The study API's ``Search.frontier``, the CLI's frontier table and the dashboard's frontier
figures all take their front from here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from hpsearch import record
from hpsearch.record import Direction

# numpy and pandas are imported where a front is computed (``import hpsearch`` stays light).
if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = ["check_direction", "direction", "frontier_axes", "frontier_candidates", "frontier_numbers", "learned_nothing",
           "pareto_front"]

_DIRECTIONS: tuple[str, ...] = ("minimize", "maximize")


def direction(metric: str, objective_directions: Mapping[str, str] | None = None) -> Direction:
    """Which values of ``metric`` are better: the study's own direction for one of its
    objectives, else the trial record's (``runtime_s`` minimised, ``val_accuracy`` maximised...),
    else ``maximize``.

    Example:
        >>> direction("runtime_s"), direction("val_accuracy"), direction("val_loss", {"val_loss": "maximize"})
        ('minimize', 'maximize', 'maximize')
    """
    if objective_directions and metric in objective_directions:
        return "minimize" if objective_directions[metric] == "minimize" else "maximize"
    return record.direction_of(metric) or "maximize"


def check_direction(name: str, value: str) -> Direction:
    """``value`` when it is ``"minimize"`` or ``"maximize"``: a direction a caller passed in.

    Raises:
        ValueError: Any other value, naming ``name`` (the argument it came from).

    Example:
        >>> check_direction("y_direction", "maximize")
        'maximize'
        >>> check_direction("y_direction", "max")
        Traceback (most recent call last):
        ...
        ValueError: y_direction must be 'minimize' or 'maximize', got 'max'
    """
    if value not in _DIRECTIONS:
        raise ValueError(f"{name} must be 'minimize' or 'maximize', got {value!r}")
    return cast(Direction, value)


def frontier_axes(objectives: Sequence[str]) -> tuple[str, str]:
    """The default frontier axes for a study: runtime against its first quality objective
    (``val_accuracy`` when no objective measures quality).

    Example:
        >>> frontier_axes(["val_loss"]), frontier_axes(["val_accuracy", "runtime_s"])
        (('runtime_s', 'val_loss'), ('runtime_s', 'val_accuracy'))
    """
    costs = {record.RUNTIME_S, record.DEVICE_SECONDS}
    quality = [m for m in objectives if m not in costs]
    return record.RUNTIME_S, quality[0] if quality else record.VAL_ACCURACY


def pareto_front(
    xs: Sequence[float] | np.ndarray,
    ys: Sequence[float] | np.ndarray,
    *,
    x_direction: Direction = "minimize",
    y_direction: Direction = "maximize",
) -> list[int]:
    """Indices of the non-dominated points, ordered by ascending x.

    Dominance rule: point ``a`` dominates point ``b`` when ``a`` is at least as good as
    ``b`` in both coordinates and strictly better in at least one, where "better" follows
    each coordinate's direction. A point is on the front when no other point dominates it.
    Points with a NaN or infinite coordinate are never on the front (and dominate nothing).
    Identical points do not dominate each other under this rule; the front keeps only the
    one with the lowest index, so each (x, y) appears once.

    Runs in O(n log n): one sort, then one sweep keeping the best y seen so far.

    Args:
        xs: The first coordinate of each point (e.g. runtime in seconds).
        ys: The second coordinate of each point (e.g. validation accuracy).
        x_direction: ``"minimize"`` or ``"maximize"``: which x is better.
        y_direction: ``"minimize"`` or ``"maximize"``: which y is better.

    Returns:
        Positions into ``xs``/``ys`` of the front's points, by ascending x. Points on the
        front have distinct x values, so this order is unique.

    Raises:
        ValueError: When ``xs`` and ``ys`` differ in length, are not one-dimensional, or a
            direction is neither ``"minimize"`` nor ``"maximize"``.

    Example:
        >>> pareto_front([10.0, 20.0, 30.0, 15.0], [0.80, 0.90, 0.85, 0.70])
        [0, 1]
    """
    import numpy as np

    check_direction("x_direction", x_direction)
    check_direction("y_direction", y_direction)
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if x.ndim != 1 or y.ndim != 1:
        raise ValueError(
            f"xs and ys must be one-dimensional, got shapes {x.shape} and {y.shape}"
        )
    if x.shape != y.shape:
        raise ValueError(
            f"xs and ys must have the same length, got {x.shape[0]} and {y.shape[0]}"
        )
    finite = np.flatnonzero(np.isfinite(x) & np.isfinite(y))
    # Flip signs so that smaller is better on both axes; the sweep then has one case.
    kx = x[finite] if x_direction == "minimize" else -x[finite]
    ky = y[finite] if y_direction == "minimize" else -y[finite]
    # Sort by x, then y, then index: among equal x the best y comes first, and among
    # identical points the lowest index comes first, so later copies fail the strict test.
    order = np.lexsort((finite, ky, kx))
    front: list[int] = []
    best_y = math.inf
    for k in order:
        # Everything before k has x no worse than k's; k survives only with a strictly
        # better y than all of them (equal y with worse-or-equal x is dominated or a copy).
        if ky[k] < best_y:
            best_y = float(ky[k])
            front.append(int(finite[k]))
    if x_direction == "maximize":
        # The sweep ran from the largest x down; callers want ascending x for drawing.
        front.reverse()
    return front


#: Losses whose non-finite value marks a trial that diverged, whatever its state says.
_LOSSES = (record.VAL_LOSS, record.TRAIN_LOSS)


def frontier_candidates(frame: pd.DataFrame) -> pd.Series:
    """Which trials may stand on a frontier: COMPLETE, one of the search's own (a confirmation run
    repeats the answer with another seed: drawn, marked, but never counted twice), with no
    ``status_reason`` (a trial that diverged or failed carries one), a finite loss wherever the
    study's completed trials record that loss, and, for a classifier, a validation accuracy
    above its ``chance_accuracy`` (:func:`learned_nothing`).

    A diverged trial (val_accuracy 0.078, its loss NaN) that Optuna held as COMPLETE stayed on
    the runtime frontier, 0.27 ms faster than the first trial that learned: it reads as the
    cheapest configuration, and it is no configuration anyone should run. So does one whose loss
    stayed finite while it answered one class for every image (the quickstart's linear rule at
    B 512).

    Returns:
        A boolean Series aligned with ``frame``.

    Example:
        >>> import pandas as pd
        >>> frame = pd.DataFrame({"state": ["COMPLETE", "COMPLETE", "COMPLETE", "FAIL", "COMPLETE"],
        ...                       "status_reason": [None, "diverged", None, "diverged", None],
        ...                       "val_loss": [0.3, 2.3, float("nan"), None, 2.4],
        ...                       "val_accuracy": [0.9, 0.1, 0.1, None, 0.078],
        ...                       "chance_accuracy": [0.1, 0.1, 0.1, None, 0.1]})
        >>> frontier_candidates(frame).tolist()
        [True, False, False, False, False]
    """
    import numpy as np
    import pandas as pd

    keep = frame["state"].astype(str) == "COMPLETE" if "state" in frame.columns else pd.Series(False, frame.index)
    if record.ROLE in frame.columns:  # a run of the answer, which the search's own trials already place
        keep &= frame[record.ROLE] != record.ROLE_CONFIRMATION
    if record.STATUS_REASON in frame.columns:
        reasons = frame[record.STATUS_REASON]
        keep &= reasons.isna() | (reasons.astype(str) == "")
    for loss in _LOSSES:
        if loss in frame.columns:
            values = pd.to_numeric(frame[loss], errors="coerce").to_numpy(dtype=float)
            finite = pd.Series(np.isfinite(values), frame.index)
            if (finite & keep).any():  # the completed trials record it: a missing one diverged
                keep &= finite
    return keep & ~learned_nothing(frame)


def learned_nothing(frame: pd.DataFrame) -> pd.Series:
    """Which trials ended no better than chance: a validation accuracy at or below the trial's
    ``chance_accuracy``, what always answering the validation set's commonest class scores. Such
    a trial learned nothing, whatever its loss says; trials without both figures (a regression,
    a study recorded before chance_accuracy) are not.

    Returns:
        A boolean Series aligned with ``frame``.

    Example:
        >>> import pandas as pd
        >>> frame = pd.DataFrame({"val_accuracy": [0.078, 0.1003, 0.111, 0.9],
        ...                       "chance_accuracy": [0.1003, 0.1003, 0.1003, None]})
        >>> learned_nothing(frame).tolist()
        [True, True, False, False]
    """
    import pandas as pd

    if record.VAL_ACCURACY not in frame.columns or record.CHANCE_ACCURACY not in frame.columns:
        return pd.Series(False, frame.index)
    accuracy = pd.to_numeric(frame[record.VAL_ACCURACY], errors="coerce")
    chance = pd.to_numeric(frame[record.CHANCE_ACCURACY], errors="coerce")
    return (accuracy <= chance).fillna(False).astype(bool)


def frontier_numbers(frame: pd.DataFrame, x: str, y: str, *, x_direction: Direction = "minimize",
                     y_direction: Direction = "maximize") -> list[int]:
    """The numbers of the non-dominated COMPLETE trials on columns ``x`` and ``y``, by ascending
    ``x``; of trials with identical values the lowest number. Trials without a finite ``x`` and
    ``y`` take no part, nor do diverged ones (:func:`frontier_candidates`).

    Raises:
        KeyError: ``x`` or ``y`` is not a column while some trial is COMPLETE.

    Example:
        >>> import pandas as pd
        >>> frame = pd.DataFrame({"number": [0, 1, 2], "state": ["COMPLETE"] * 3,
        ...                       "runtime_s": [10.0, 20.0, 30.0], "val_accuracy": [0.8, 0.9, 0.85]})
        >>> frontier_numbers(frame, "runtime_s", "val_accuracy")
        [0, 1]
    """
    import pandas as pd

    if not len(frame):
        return []
    done = frame[frontier_candidates(frame)].sort_values("number", kind="stable")
    if not len(done):
        return []
    for column in (x, y):
        if column not in done.columns:
            raise KeyError(column)
    xs = pd.to_numeric(done[x], errors="coerce").to_numpy(dtype=float)
    ys = pd.to_numeric(done[y], errors="coerce").to_numpy(dtype=float)
    numbers = done["number"].astype(int).tolist()
    return [numbers[i] for i in pareto_front(xs, ys, x_direction=x_direction, y_direction=y_direction)]
