"""Learning curves: chosen trials' metric at each evaluation against samples seen, one line per
trial in its LR rule's color.

One module, the figure's every step, as ``optuna.visualization``'s:

- compute: :func:`learning_curves_info` turns the trials DataFrame (with its ``curves`` column)
  into a :class:`LearningCurvesInfo` of plain values (tested for values; imports no plotly);
  :func:`curve_metrics` says which curves the trials recorded;
- render: :func:`learning_curves_figure` draws it with plotly;
- a study: :func:`plot_learning_curves` (``plot_*(search)``);
- the dashboard: :func:`learning_curves_from_query` answers
  ``/api/studies/NAME/figures/learning_curves``, reading the curves of only the trials it ranks
  or draws.

The curve drawn is the study's own quality objective unless asked for another, and "best"
follows the study's direction: a study of ``val_loss`` draws the ``val_loss`` curves of its
lowest-loss trials.

Example:
    >>> import optuna
    >>> from hpsearch.testing import synthetic_study
    >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=60)
    >>> len(plot_learning_curves(search, limit=5).data)
    5
    >>> [trace.name for trace in plot_learning_curves(search, trials=[3, 7], metric="val_loss").data]
    ['trial 3', 'trial 7']
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from hpsearch import record
from hpsearch.dashboards.points import (
    completed_trials,
    hover_configs,
    log_axis,
    no_completed_note,
    quality_metric,
    rule_names,
)
from hpsearch.dashboards.queries import BadRequest, FigureQuery
from hpsearch.dashboards.style import (
    EMPTY_MESSAGE,
    axis_label,
    hover,
    new_figure,
    rule_color,
    subtitle,
    with_log_axes,
    with_note,
)
from hpsearch.errors import ColumnError
from hpsearch.record import Direction
from hpsearch.study import check_direction

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from hpsearch.search import Search

__all__ = [
    "DEFAULT_CURVES_LIMIT",
    "MAX_CURVES_LIMIT",
    "LearningCurvesInfo",
    "TrialCurve",
    "curve_metrics",
    "learning_curves_figure",
    "learning_curves_from_query",
    "learning_curves_info",
    "plot_learning_curves",
]

#: The most trials the dashboard's learning-curves figure draws on request (``limit``).
MAX_CURVES_LIMIT = 200


# ---- compute ------------------------------------------------------------------------------------

#: How many trials the learning-curves figure draws when no ``trials=`` are chosen: enough to
#: compare rules and batches, few enough that the lines stay readable and a 10,000-trial study
#: stays quick to draw.
DEFAULT_CURVES_LIMIT = 20


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
        metric: The curve drawn on the y axis (the study's quality objective in ``plot_*`` and
            the dashboard; ``val_accuracy`` by default here).
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


def _curve_of(curves: object, metric: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(samples seen, metric) of one trial's ``curves`` attr, epochs without both left out."""
    if not isinstance(curves, Mapping):
        return (), ()
    xs, ys = curves.get(record.SAMPLES_SEEN) or [], curves.get(metric) or []
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
    xs, ys = curves.get(record.SAMPLES_SEEN) or [], curves.get(metric) or []
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
    if record.CURVES not in df.columns:
        return ()
    names = {str(k) for c in df[record.CURVES].tolist() if isinstance(c, Mapping) for k in c}
    return tuple(sorted(names - {record.SAMPLES_SEEN}))


def learning_curves_info(
    df: pd.DataFrame,
    *,
    trials: Sequence[int] | None = None,
    metric: str = record.VAL_ACCURACY,
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
    check_direction("direction", direction)
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if not len(df) or "number" not in df.columns:
        return LearningCurvesInfo(metric, (), False, False, len(df), 0, "no trials yet")
    if record.CURVES not in df.columns:
        return LearningCurvesInfo(metric, (), False, False, len(df), 0, "no trial recorded curves")

    rows = df.set_index(pd.Index(df["number"].astype(int).tolist()), drop=False)
    note = None
    if trials is not None:
        chosen = _asked_trials(rows, trials)
        n_candidates = len(chosen)
    else:
        chosen, n_candidates, note = _best_trials(df, metric, direction, limit)
    curves, without = _trial_curves(rows, chosen, metric)
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


def _asked_trials(rows: pd.DataFrame, trials: Sequence[int]) -> list[int]:
    """The trial numbers of ``trials=``, in their order, once each is known to be in ``rows``
    (the trials indexed by number)."""
    unknown = [n for n in trials if n not in rows.index]
    if unknown:
        raise ValueError(
            f"no trial numbered {', '.join(map(str, unknown))} in this study "
            f"(trials {rows.index.min()} to {rows.index.max()})"
        )
    return [int(n) for n in trials]


def _best_trials(df: pd.DataFrame, metric: str, direction: Direction, limit: int) -> tuple[list[int], int, str | None]:
    """The default choice: the ``limit`` best COMPLETE trials by the final value of their
    ``metric`` curve, best first (the lower number first among equals), with how many were
    ranked and the note saying what is left out, or why nothing is there."""
    done = completed_trials(df)
    finals = {
        int(n): final
        for n, c in zip(done["number"].tolist(), done[record.CURVES].tolist())
        if (final := _final_of(c, metric)) is not None
    }
    sign = -1.0 if direction == "maximize" else 1.0
    chosen = sorted(finals, key=lambda n: (sign * finals[n], n))[:limit]
    note = None
    if not len(done):
        note = no_completed_note(df)
    elif len(finals) > limit:
        note = f"the {limit} best of {len(finals)} completed trials by final {metric}"
    return chosen, len(finals), note


def _trial_curves(rows: pd.DataFrame, chosen: list[int], metric: str) -> tuple[list[TrialCurve], list[int]]:
    """The ``metric`` curves of the ``chosen`` trials of ``rows`` (the trials indexed by number),
    in the order chosen, and the numbers of the chosen trials without one."""
    picked = rows.loc[chosen] if chosen else rows.iloc[0:0]
    configs = hover_configs(picked, ())
    curves: list[TrialCurve] = []
    without: list[int] = []
    records = zip(chosen, rule_names(picked), picked["state"].astype(str).tolist(), picked[record.CURVES].tolist())
    for i, (number, rule, state, raw) in enumerate(records):
        xs, ys = _curve_of(raw, metric)
        if not xs:
            without.append(number)
            continue
        curves.append(TrialCurve(number, rule, state, xs, ys, configs[i]))
    return curves, without


# ---- render -------------------------------------------------------------------------------------

def learning_curves_figure(
    df: pd.DataFrame,
    *,
    trials: Sequence[int] | None = None,
    metric: str = record.VAL_ACCURACY,
    direction: Direction = "maximize",
    limit: int = DEFAULT_CURVES_LIMIT,
) -> go.Figure:
    """Per-epoch curves against samples seen, one line per trial in its rule's color.

    Lines of one rule share a legend group (click the rule to hide them all) and its color,
    each with a marker of its own that its legend entry shows; a pruned or
    failed trial's line is dashed and ends where the trial stopped. When the default choice
    leaves trials out, the title says how many (the best ``limit`` by final ``metric``).

    Args:
        df: The trials DataFrame with its ``curves`` column (``all_attrs=True``).
        trials: Trial numbers to draw, or ``None`` for the best ``limit`` completed trials.
        metric: The curve on the y axis (a key of ``curves``).
        direction: Which final values are best, for the default choice.
        limit: How many trials the default choice draws.

    Returns:
        A ``plotly.graph_objects.Figure`` with one ``lines+markers`` trace per trial.

    Raises:
        ValueError: When ``trials`` names a trial number the study does not have.

    Example:
        >>> df = pd.DataFrame({
        ...     "number": [0, 1], "state": ["COMPLETE", "PRUNED"], "lr_rule": ["sqrt", "linear"],
        ...     "curves": [{"samples_seen": [100, 200], "val_accuracy": [0.5, 0.8]},
        ...                {"samples_seen": [100], "val_accuracy": [0.3]}],
        ... })
        >>> [trace.name for trace in learning_curves_figure(df, trials=[0, 1]).data]
        ['trial 0', 'trial 1']
    """
    import plotly.graph_objects as go  # heavy: only where a figure is drawn

    info = learning_curves_info(df, trials=trials, metric=metric, direction=direction, limit=limit)
    title = f"{axis_label(metric)} vs samples seen"
    if info.note and not info.is_empty:
        title += subtitle(info.note)
    fig = new_figure(title, record.SAMPLES_SEEN, metric)
    if info.is_empty:
        return with_note(fig, info.note or EMPTY_MESSAGE)
    titled: set[str] = set()
    in_rule: dict[str, int] = {}
    for curve in info.curves:
        # Each trial of a rule its own marker, which its legend entry shows: twenty lines in
        # three colors, each named "trial N", told no line from another of its color.
        symbol = _SYMBOLS[in_rule.get(curve.rule, 0) % len(_SYMBOLS)]
        in_rule[curve.rule] = in_rule.get(curve.rule, 0) + 1
        fig.add_trace(
            go.Scatter(
                x=list(curve.x),
                y=list(curve.y),
                mode="lines+markers",
                name=f"trial {curve.number}",
                legendgroup=curve.rule,
                # The rule's title once, above its first trial.
                legendgrouptitle_text=None if curve.rule in titled else curve.rule,
                line={"color": rule_color(curve.rule), "width": 1.5,
                      "dash": "solid" if curve.state == "COMPLETE" else "dash"},
                marker={"color": rule_color(curve.rule), "size": 7, "symbol": symbol},
                customdata=[curve.number] * len(curve.x),
                hovertext=[
                    hover(f"trial {curve.number} ({curve.state.lower()})", {record.SAMPLES_SEEN: x, metric: y},
                          curve.config)
                    for x, y in zip(curve.x, curve.y)
                ],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
        titled.add(curve.rule)
    return with_log_axes(fig, info.log_x, info.log_y, x=[x for c in info.curves for x in c.x],
                         y=[y for c in info.curves for y in c.y])


#: The markers that tell apart the lines of one rule (one color), in turn.
_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star", "triangle-down", "cross", "pentagon",
            "hexagon")



# ---- a study, and the dashboard ------------------------------------------------------------------

def plot_learning_curves(search: Search, trials: Sequence[int] | None = None, metric: str | None = None,
                         limit: int = DEFAULT_CURVES_LIMIT) -> go.Figure:
    """``metric`` at each evaluation against samples seen, one line per trial: the trials
    numbered in ``trials`` (any state), or by default the ``limit`` best COMPLETE trials.

    Args:
        search: The study.
        trials: Trial numbers to draw, or ``None`` for the best ``limit`` completed trials.
        metric: The curve on the y axis; by default the study's own quality objective
            (``val_accuracy``, ``val_loss``...: :func:`hpsearch.dashboards.points.quality_metric`).
        limit: How many trials the default choice draws.

    Raises:
        ColumnError: no trial recorded the ``metric`` asked for (while some recorded curves).
        ValueError: ``trials`` names a trial number the study does not have.
    """
    df = search.trials_dataframe(all_attrs=True)
    if metric is not None:
        recorded = curve_metrics(df)
        if recorded and metric not in recorded:
            raise ColumnError(f"no curve {metric!r} in this study's trials; curves: {', '.join(recorded)}")
    metric = metric or quality_metric(search.objectives)
    return learning_curves_figure(df, trials=trials, metric=metric, direction=search.direction(metric), limit=limit)


def learning_curves_from_query(query: FigureQuery) -> go.Figure:
    """``GET .../figures/learning_curves``: parameters ``metric`` (a curve; default: the study's
    quality objective), ``trials`` (comma-separated numbers; default: the best ``limit``) and
    ``limit``. Reads the curves of only the trials drawn, or of those the default choice ranks
    (completed ones), and of those only the two series drawn.

    Raises:
        BadRequest: ``trials`` is not a list of numbers or names a trial the study lacks, or
            ``limit`` is out of range.
    """
    metric = query.params.get("metric") or quality_metric(query.objectives)
    trials = None
    if query.params.get("trials"):
        try:
            trials = [int(n) for n in query.params["trials"].split(",") if n]
        except ValueError:
            raise BadRequest(f"trials must be trial numbers separated by commas, got {query.params['trials']!r}") \
                from None
    limit = query.whole_number("limit", DEFAULT_CURVES_LIMIT, minimum=1, maximum=MAX_CURVES_LIMIT)
    series = (record.SAMPLES_SEEN, metric)
    curves = (query.curves(numbers=trials, fields=series) if trials is not None
              else query.curves(states=["COMPLETE"], fields=series))
    frame = query.frame
    if curves or query.curves(limit=1):  # as the whole table: no column when no trial has curves
        frame = frame.assign(curves=[curves.get(n) for n in frame["number"].tolist()])
    try:
        return learning_curves_figure(frame, trials=trials, metric=metric, direction=query.direction(metric),
                                      limit=limit)
    except ValueError as exc:  # an unknown trial number
        raise BadRequest(str(exc)) from None
