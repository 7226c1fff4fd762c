"""The frontier: a study's completed trials on a cost (runtime, or devices x time) against its
quality objective, the non-dominated ones joined.

One module, the figure's every step, as ``optuna.visualization``'s:

- compute: :func:`frontier_info` turns the trials DataFrame into a :class:`FrontierInfo` of plain
  values (tested for values; imports no plotly), in named steps: the completed trials with a
  finite x and y, their Pareto front, the ones shown (all, or a thinned set that keeps the
  front), their points, and the points by color group;
- render: :func:`frontier_figure` draws it with plotly;
- a study: :func:`plot_frontier` and :func:`plot_device_seconds_frontier` (``plot_*(search)``);
- the dashboard: :func:`frontier_from_query` and :func:`device_seconds_frontier_from_query`
  answer ``/api/studies/NAME/figures/frontier`` and ``.../device_frontier``.

The y axis is the study's own quality objective unless asked for another
(:func:`hpsearch.dashboards.points.quality_metric`), in the study's direction: a study of
``val_loss`` draws ``val_loss`` against runtime, lower being better.

Example:
    >>> import optuna
    >>> from hpsearch.testing import synthetic_study
    >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
    >>> plot_frontier(search).layout.xaxis.title.text
    'runtime (s)'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from hpsearch import record
from hpsearch.dashboards.points import (
    config_columns,
    floats,
    group_names,
    log_axis,
    plain_value,
    quality_metric,
    require_columns,
    thin_points,
)
from hpsearch.dashboards.queries import FigureQuery
from hpsearch.dashboards.style import (
    EMPTY_MESSAGE,
    FRONT_COLOR,
    MARKER_SIZE_PX,
    axis_label,
    format_value,
    hover,
    legend_entry,
    new_figure,
    subtitle,
    thinned_note,
    trial_markers,
    with_log_axes,
    with_note,
)
from hpsearch.record import Direction
from hpsearch.study import check_direction, frontier_candidates, is_solo_estimate, learned_nothing, pareto_front

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from hpsearch.search import Search

__all__ = [
    "FrontierGroup",
    "FrontierInfo",
    "FrontierPoint",
    "device_seconds_frontier_from_query",
    "frontier_figure",
    "frontier_from_query",
    "frontier_info",
    "pareto_front",
    "plot_device_seconds_frontier",
    "plot_frontier",
]

# Marker diameter grows by this many pixels per doubling of the size column above the smallest
# value drawn, capped so a 4096-sample batch does not hide its neighbours.
_SIZE_STEP_PX = 3.0
_SIZE_MAX_PX = 40.0


# ---- compute ------------------------------------------------------------------------------------

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
        confirmation: The trial is a confirmation run of the study's answer: drawn as a
            diamond, on no front (the search's own trials place its configuration).
        solo_estimate: Its runtime on an axis is an estimate of it alone, not its wall time:
            it trained fused (``runtime_basis: solo_estimate``). Drawn hollow.
        same_point: The other trials of its group at exactly this x and y, drawn as this one
            marker (fused members of one configuration land on one point): by trial number.
    """

    number: int
    x: float
    y: float
    size: float | None
    config: Mapping[str, object] = field(hash=False)
    confirmation: bool = False
    solo_estimate: bool = False
    same_point: tuple[int, ...] = ()


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
    x: str = record.RUNTIME_S,
    y: str = record.VAL_ACCURACY,
    x_direction: Direction = "minimize",
    y_direction: Direction = "maximize",
    color: str | None = record.LR_RULE,
    size: str | None = record.EFFECTIVE_BATCH_SIZE,
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
    check_direction("x_direction", x_direction)
    check_direction("y_direction", y_direction)
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

    xs, ys = floats(completed, x), floats(completed, y)
    sizes = floats(completed, size_column) if size_column is not None else np.full(len(completed), np.nan)
    names = group_names(completed, color_column)
    # A diverged trial is drawn but stands on no front (hpsearch.study.frontier_candidates).
    eligible = np.flatnonzero(frontier_candidates(completed).to_numpy(dtype=bool))
    front = [int(eligible[i]) for i in pareto_front(xs[eligible], ys[eligible], x_direction=x_direction,
                                                     y_direction=y_direction)]
    shown = _shown_positions(xs, ys, sizes, names, front, max_points)
    hover_columns = config_columns([str(c) for c in completed.columns], x, y)
    notes = _off_front_notes(completed)
    estimated = _solo_estimates(completed, x, y)
    points = _points(completed.iloc[shown], xs[shown], ys[shown], sizes[shown], hover_columns,
                     [notes[i] for i in shown.tolist()], [estimated[i] for i in shown.tolist()])
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
    keep = np.isfinite(floats(completed, x)) & np.isfinite(floats(completed, y))
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


#: The hover's line for a trial no frontier counts (``_off_front_notes``).
OFF_FRONT = "on no front"


def _off_front_notes(completed: pd.DataFrame) -> list[str | None]:
    """Per completed trial, why it stands on no front, in words (``None`` where it may): a
    faster trial left off the front with nothing said read as a drawing error."""
    nothing = learned_nothing(completed).to_numpy(dtype=bool)
    chance = floats(completed, record.CHANCE_ACCURACY)
    confirming = _confirmation_runs(completed)
    return [f"learned nothing: accuracy at or below chance, {chance[i]:.3g} (always the commonest class)"
            if nothing[i] else CONFIRMATION_NOTE if confirming[i] else None for i in range(len(completed))]


#: The hover's line for a confirmation run (``_off_front_notes``).
CONFIRMATION_NOTE = "a confirmation run of the study's answer (a new seed): the search's own trials make the front"


def _confirmation_runs(completed: pd.DataFrame) -> list[bool]:
    """Per completed trial, whether it is a confirmation run (``record.ROLE``)."""
    if record.ROLE not in completed.columns:
        return [False] * len(completed)
    return [role == record.ROLE_CONFIRMATION for role in completed[record.ROLE].tolist()]


#: What the hover says after a fused member's runtime (``_solo_estimates``).
SOLO_ESTIMATE_NOTE = "a solo estimate: it trained fused, and this is what it would take alone"

#: The legend's entry for the hollow markers of solo estimates.
SOLO_ESTIMATE_LEGEND = "hollow: runtime a solo estimate (trained fused)"


def _solo_estimates(completed: pd.DataFrame, x: str, y: str) -> list[bool]:
    """Per completed trial, whether an axis shows a runtime that is an estimate of it alone (a
    fused member's ``runtime_s``): drawn like a measured one, twelve members of a group read
    as twelve trials that each took that long."""
    if record.RUNTIME_S not in (x, y) or record.RUNTIME_BASIS not in completed.columns:
        return [False] * len(completed)
    return [is_solo_estimate(basis) for basis in completed[record.RUNTIME_BASIS].tolist()]


def _points(
    shown: pd.DataFrame, xs: np.ndarray, ys: np.ndarray, sizes: np.ndarray, hover_columns: list[str],
    notes: Sequence[str | None] = (), estimated: Sequence[bool] = (),
) -> list[FrontierPoint]:
    """The rows of ``shown`` as points, with their ``xs``, ``ys`` and ``sizes`` (one each, in
    the same order), their configuration for hover and, where given, why a point stands on no
    front (``notes``, one per row or none) and whether its runtime is a solo estimate
    (``estimated``, likewise)."""
    points: list[FrontierPoint] = []
    # Only the columns the hover shows: the rest of a 2,000-row slice cost as much to convert.
    for i, row in enumerate(shown[["number", *[c for c in hover_columns if c != "number"]]].to_dict("records")):
        config = {
            column: value
            for column in hover_columns
            if (value := plain_value(row[column])) is not None
        }
        if i < len(notes) and notes[i]:
            config[OFF_FRONT] = notes[i]
        points.append(
            FrontierPoint(
                number=int(row["number"]),
                x=float(xs[i]),
                y=float(ys[i]),
                size=float(sizes[i]) if math.isfinite(sizes[i]) else None,
                config=config,
                confirmation=i < len(notes) and notes[i] == CONFIRMATION_NOTE,
                solo_estimate=i < len(estimated) and estimated[i],
            )
        )
    return points


def _groups(points: list[FrontierPoint], names: list[str]) -> tuple[FrontierGroup, ...]:
    """The points by group name (``names``: one per point), one group per name, by name; the
    trials of a group at one x and y as one point (``_one_per_place``)."""
    return tuple(
        FrontierGroup(
            name=name,
            points=_one_per_place([p for p, n in zip(points, names) if n == name]),
        )
        for name in sorted(set(names))
    )


def _one_per_place(points: list[FrontierPoint]) -> tuple[FrontierPoint, ...]:
    """``points`` with those at exactly one x and y as one: the lowest-numbered, naming the
    others (``same_point``). Fused members of one configuration train the same batches and
    carry one solo estimate, so they land on one place; drawn one over another, a user saw
    one trial where there were several, and hovered only the top one."""
    at: dict[tuple[float, float], list[FrontierPoint]] = {}
    for point in points:
        at.setdefault((point.x, point.y), []).append(point)
    out = []
    for point in points:
        together = at[(point.x, point.y)]
        if together[0] is point:
            out.append(replace(point, same_point=tuple(p.number for p in together[1:])) if len(together) > 1 else point)
    return tuple(out)


# ---- render -------------------------------------------------------------------------------------

def frontier_figure(
    df: pd.DataFrame,
    *,
    x: str = record.RUNTIME_S,
    y: str = record.VAL_ACCURACY,
    x_direction: Direction = "minimize",
    y_direction: Direction = "maximize",
    color: str | None = record.LR_RULE,
    size: str | None = record.EFFECTIVE_BATCH_SIZE,
    max_points: int | None = None,
) -> go.Figure:
    """A scatter of completed trials with their Pareto front, one trace per LR rule.

    Each color group (LR rule by default) is one scatter trace in a fixed color (see
    :func:`hpsearch.dashboards.style.rule_color`); marker size grows with log2 of ``size`` (the
    effective batch by default); hovering a point shows its trial number, x, y and configuration.
    The front is an extra trace named ``"Pareto front"``, drawn as a staircase that bounds the
    region the front dominates (a front of one trial: a ring around it, named so; a diverged
    trial is never on it: :func:`hpsearch.study.frontier_candidates`). An axis is logarithmic when its values span two decades (see
    :func:`hpsearch.dashboards.points.log_axis`). A study without completed trials gives an
    empty figure that says so, not an error. ``x="device_seconds"`` draws the
    device-seconds-vs-accuracy frontier: what the trials cost in devices times time.

    With ``max_points``, a study of more completed trials draws every front trial and a
    thinned rest (see :func:`frontier_info`), and the title says how many trials it shows.

    Args:
        df: The trials DataFrame (one row per trial; see :func:`frontier_info`).
        x: The column for the x axis.
        y: The column for the y axis.
        x_direction: ``"minimize"`` or ``"maximize"``: which x is better.
        y_direction: ``"minimize"`` or ``"maximize"``: which y is better.
        color: The column that splits trials into traces, or ``None``.
        size: The column that sets marker sizes, or ``None``.
        max_points: Draw at most about this many trials (every front trial stays), or
            ``None`` for all.

    Returns:
        A ``plotly.graph_objects.Figure``.

    Raises:
        ValueError: When ``x`` or ``y`` is missing from a DataFrame with completed trials,
            or a direction is invalid.

    Example:
        >>> df = pd.DataFrame({
        ...     "number": [0, 1, 2], "state": ["COMPLETE"] * 3, "lr_rule": ["linear", "sqrt", "linear"],
        ...     "runtime_s": [10.0, 20.0, 30.0], "device_seconds": [80.0, 20.0, 30.0],
        ...     "val_accuracy": [0.8, 0.9, 0.85],
        ... })
        >>> fig = frontier_figure(df, x="device_seconds")
        >>> [trace.name for trace in fig.data], fig.layout.xaxis.title.text
        (['linear', 'sqrt', 'Pareto front: trial 1 alone'], 'device-seconds')
    """
    info = frontier_info(df, x=x, y=y, x_direction=x_direction, y_direction=y_direction, color=color, size=size,
                         max_points=max_points)
    fig = new_figure(_title(info), info.x, info.y, axis_label(info.color) if info.color else "")
    if info.is_empty:
        return with_note(fig, EMPTY_MESSAGE)
    positive = [p.size for g in info.groups for p in g.points if p.size is not None and p.size > 0]
    smallest = min(positive) if positive else None
    for group in info.groups:
        fig.add_trace(
            trial_markers(
                group.name,
                group.points,
                _marker_sizes(group.points, smallest),
                [hover(_hover_title(p), _hover_values(info, p), p.config) for p in group.points],
            )
        )
    if (front := _front_line(info)) is not None:
        fig.add_trace(front)
    if any(p.solo_estimate for g in info.groups for p in g.points):
        fig.add_trace(legend_entry(SOLO_ESTIMATE_LEGEND, "circle-open"))
    drawn = [p for g in info.groups for p in g.points]
    xs, ys = [p.x for p in drawn], [p.y for p in drawn]
    return with_log_axes(fig, log_axis(xs), log_axis(ys), x=xs, y=ys)


def _hover_values(info: FrontierInfo, point: FrontierPoint) -> dict[str, object]:
    """The plotted values of ``point`` for its hover, a runtime that is a solo estimate said so."""
    values: dict[str, object] = {info.x: point.x, info.y: point.y}
    if point.solo_estimate:
        values[record.RUNTIME_S] = f"{format_value(values[record.RUNTIME_S])}, {SOLO_ESTIMATE_NOTE}"
    return values


def _hover_title(point: FrontierPoint) -> str:
    """``trial 3``; for trials drawn at one point, all of them: ``trials 3, 5 and 8 (at one point)``."""
    if not point.same_point:
        return f"trial {point.number}"
    numbers = [str(n) for n in (point.number, *point.same_point)]
    return f"trials {', '.join(numbers[:-1])} and {numbers[-1]} (at one point)"


def _title(info: FrontierInfo) -> str:
    """The title, "y vs x, by color", with a subtitle saying how many trials are drawn when not all are."""
    title = f"{axis_label(info.y)} vs {axis_label(info.x)}"
    if info.color is not None:
        title += f", by {axis_label(info.color)}"
    if info.n_hidden:
        shown = info.n_complete - info.n_hidden
        title += subtitle(thinned_note(shown, info.n_complete, len(info.front)))
    return title


def _front_line(info: FrontierInfo) -> go.Scatter | None:
    """The Pareto front as a dotted staircase through its trials; a front of one trial (one
    trial beats every other on both axes) as a ring around it, named for what it is; ``None``
    without a front. A one-point "Pareto front" line drew nothing, yet stood in the legend."""
    import plotly.graph_objects as go  # heavy: only where a figure is drawn

    if not info.front_points:
        return None
    if len(info.front_points) == 1:
        [best] = info.front_points
        return go.Scatter(
            x=[best.x], y=[best.y], mode="markers", name=f"Pareto front: trial {best.number} alone",
            marker={"symbol": "circle-open", "size": 3 * MARKER_SIZE_PX, "color": FRONT_COLOR, "line": {"width": 2}},
            customdata=[best.number], hoverinfo="skip",
        )
    return go.Scatter(
        x=[p.x for p in info.front_points],
        y=[p.y for p in info.front_points],
        mode="lines",
        name="Pareto front",
        # From each front point the line first moves along x when x is minimized (the
        # next point costs more x to buy a better y), along y when x is maximized: either
        # way the steps trace the edge of the region the front dominates, whichever way y goes.
        line={
            "shape": "hv" if info.x_direction == "minimize" else "vh",
            "color": FRONT_COLOR,
            "width": 2,
            "dash": "dot",
        },
        customdata=list(info.front),
        hoverinfo="skip",
    )


def _marker_sizes(points: tuple[FrontierPoint, ...], smallest: float | None) -> list[float]:
    sizes: list[float] = []
    for point in points:
        if point.size is None or smallest is None or point.size <= 0:
            sizes.append(MARKER_SIZE_PX)
            continue
        doublings = math.log2(point.size / smallest)
        sizes.append(min(_SIZE_MAX_PX, MARKER_SIZE_PX + _SIZE_STEP_PX * doublings))
    return sizes


# ---- a study, and the dashboard ------------------------------------------------------------------

def plot_frontier(search: Search, x: str = record.RUNTIME_S, y: str | None = None, *,
                  max_points: int | None = None) -> go.Figure:
    """The frontier of ``y`` against ``x``: COMPLETE trials colored by LR rule, sized by
    effective batch, the non-dominated ones joined. Directions follow ``search.direction``.

    Args:
        search: The study.
        x: The cost on the x axis.
        y: The column on the y axis; by default the study's own quality objective
            (``val_accuracy``, ``val_loss``...: :func:`hpsearch.dashboards.points.quality_metric`).
        max_points: Draw at most about this many trials (every front trial stays), or all.

    Raises:
        ColumnError: ``x`` or ``y`` is not a column of the study's completed trials.
    """
    y = y or quality_metric(search.objectives)
    df = search.trials_dataframe()
    require_columns(df, x, y)
    return frontier_figure(df, x=x, y=y, x_direction=search.direction(x), y_direction=search.direction(y),
                           max_points=max_points)


def plot_device_seconds_frontier(search: Search, y: str | None = None) -> go.Figure:
    """The device-seconds-vs-``y`` frontier: what each trial cost in devices x time, so a fast
    8-device trial is weighed against a slower 1-device one. ``y`` defaults to the study's own
    quality objective.

    Raises:
        ColumnError: ``y`` is not a column of the study's completed trials.
    """
    return plot_frontier(search, x=record.DEVICE_SECONDS, y=y)


def frontier_from_query(query: FigureQuery, *, x: str = record.RUNTIME_S) -> go.Figure:
    """``GET .../figures/frontier``: parameters ``x`` (default ``x``) and ``y`` (any numeric
    column; default: the study's quality objective), and ``max_points``."""
    x = query.column("x", x)
    y = query.metric("y")
    return frontier_figure(query.frame, x=x, y=y, x_direction=query.direction(x), y_direction=query.direction(y),
                           max_points=query.max_points())


def device_seconds_frontier_from_query(query: FigureQuery) -> go.Figure:
    """``GET .../figures/device_frontier``: the frontier on ``device_seconds`` by default."""
    return frontier_from_query(query, x=record.DEVICE_SECONDS)
