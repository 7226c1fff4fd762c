"""The gradient noise scale of completed trials against their effective batch, by LR rule: the
batch beyond which a larger one buys little progress per step.

One module, the figure's every step, as ``optuna.visualization``'s:

- compute: :func:`noise_scale_info` turns the trials DataFrame into a :class:`NoiseScaleInfo` of
  plain values (tested for values; imports no plotly);
- render: :func:`noise_scale_figure` draws it with plotly;
- a study: :func:`plot_noise_scale` (``plot_*(search)``);
- the dashboard: :func:`noise_scale_from_query` answers ``/api/studies/NAME/figures/noise_scale``.

Example:
    >>> import optuna
    >>> from hpsearch.testing import synthetic_study
    >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
    >>> plot_noise_scale(search).data[-1].name
    'batch = noise scale'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from hpsearch import record
from hpsearch.dashboards.points import (
    TrialGroup,
    completed_trials,
    floats,
    log_axis,
    missing_note,
    no_completed_note,
    point_groups,
    rule_names,
    thin_points,
)
from hpsearch.dashboards.queries import FigureQuery
from hpsearch.dashboards.style import (
    EMPTY_MESSAGE,
    FRONT_COLOR,
    MARKER_SIZE_PX,
    batch_axis,
    hover,
    new_figure,
    subtitle,
    thinned_note,
    trial_markers,
    with_batch_axis,
    with_log_axes,
    with_note,
)

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from hpsearch.search import Search

__all__ = [
    "NoiseScaleInfo",
    "noise_scale_figure",
    "noise_scale_from_query",
    "noise_scale_info",
    "plot_noise_scale",
]


# ---- compute ------------------------------------------------------------------------------------

_NO_NOISE_SCALE = "no completed trial measured a noise scale: it needs world_size x grad_accum_steps > 1"


@dataclass(frozen=True)
class NoiseScaleInfo:
    """Everything the gradient-noise-scale figure shows.

    Attributes:
        groups: Completed trials with a finite ``noise_scale`` (x = effective batch,
            y = noise scale), one group per LR rule.
        log_x: Whether the effective batch axis is logarithmic.
        log_y: Whether the noise-scale axis is logarithmic.
        n_trials: Rows in the DataFrame, whatever their state.
        n_complete: Completed trials.
        note: Why the figure is empty, or ``None`` when it is not.
        n_points: Completed trials with a finite effective batch and noise scale.
        n_hidden: Of those, how many are not in ``groups`` (0 unless ``max_points`` thinned
            them).
    """

    groups: tuple[TrialGroup, ...]
    log_x: bool
    log_y: bool
    n_trials: int
    n_complete: int
    note: str | None
    n_points: int = 0
    n_hidden: int = 0

    @property
    def is_empty(self) -> bool:
        """True when there is nothing to draw."""
        return not self.groups


def noise_scale_info(df: pd.DataFrame, *, max_points: int | None = None) -> NoiseScaleInfo:
    """The gradient noise scale of completed trials against their effective batch.

    The simple noise scale B_simple (docs/trials.md) estimates the batch beyond which a larger
    batch buys little: trials whose effective batch is well above their noise scale spend
    samples for little progress per step. A trial of one process and one micro-batch per step
    (W x A = 1) cannot measure it and records none; such trials are left out, as are pruned
    and failed ones.

    With ``max_points``, a study of more such trials keeps the trials at the ends of each
    axis and a thinned rest (:func:`hpsearch.dashboards.points.thin_points`, by LR rule);
    ``n_hidden`` says how many were left out.

    Args:
        df: The trials DataFrame (``number``, ``state``, ``effective_batch_size``,
            ``noise_scale``, ``lr_rule``).
        max_points: Keep at most this many trials in ``groups``, or ``None`` for all.

    Returns:
        A :class:`NoiseScaleInfo` with one group per LR rule; empty, with a ``note``, when no
        completed trial measured a noise scale.

    Example:
        >>> df = pd.DataFrame({
        ...     "number": [0, 1, 2], "state": ["COMPLETE"] * 3, "lr_rule": ["linear"] * 3,
        ...     "effective_batch_size": [8, 64, 512], "noise_scale": [None, 410.0, 530.0],
        ... })
        >>> [(p.number, p.x, p.y) for p in noise_scale_info(df).groups[0].points]
        [(1, 64.0, 410.0), (2, 512.0, 530.0)]
    """
    done = completed_trials(df)
    batches = floats(done, record.EFFECTIVE_BATCH_SIZE)
    noise = floats(done, record.NOISE_SCALE)
    keep = np.isfinite(batches) & np.isfinite(noise)
    note = missing_note(done, (record.EFFECTIVE_BATCH_SIZE,)) if len(done) else no_completed_note(df)
    if note is None and not keep.any():
        # A missing noise_scale column means the same: no trial could measure it.
        note = _NO_NOISE_SCALE
    if note is not None:
        return NoiseScaleInfo((), False, False, len(df), len(done), note)
    done, batches, noise = done[keep], batches[keep], noise[keep]
    log_x, log_y = batch_axis(batches).log, log_axis(noise)
    shown = np.arange(len(done))
    if max_points is not None and len(done) > max_points:
        shown = thin_points(batches, noise, max_points=max_points, groups=rule_names(done), log_x=log_x, log_y=log_y)
    return NoiseScaleInfo(
        groups=point_groups(done.iloc[shown], batches[shown], noise[shown], (record.EFFECTIVE_BATCH_SIZE, record.NOISE_SCALE)),
        log_x=log_x,
        log_y=log_y,
        n_trials=len(df),
        n_complete=len(done),
        note=None,
        n_points=len(done),
        n_hidden=len(done) - len(shown),
    )


# ---- render -------------------------------------------------------------------------------------

def noise_scale_figure(df: pd.DataFrame, *, max_points: int | None = None) -> go.Figure:
    """The gradient noise scale of completed trials against their effective batch, by rule.

    The dotted diagonal is "batch = noise scale": trials below it train with a batch larger
    than their noise scale, where a larger batch buys little progress per step (McCandlish et
    al. 2018). Trials that could not measure a noise scale (W x A = 1) are left out.

    With ``max_points``, a study of more such trials draws a thinned set (see
    :func:`noise_scale_info`) and the title says how many.

    Args:
        df: The trials DataFrame.
        max_points: Draw at most this many trials, or ``None`` for all.

    Returns:
        A ``plotly.graph_objects.Figure``: one marker trace per rule and the diagonal, or an
        empty figure with a note.

    Example:
        >>> df = pd.DataFrame({
        ...     "number": [0, 1], "state": ["COMPLETE"] * 2, "lr_rule": ["linear", "sqrt"],
        ...     "effective_batch_size": [64, 512], "noise_scale": [410.0, 530.0],
        ... })
        >>> [trace.name for trace in noise_scale_figure(df).data]
        ['linear', 'sqrt', 'batch = noise scale']
    """
    import plotly.graph_objects as go  # heavy: only where a figure is drawn

    info = noise_scale_info(df, max_points=max_points)
    title = "gradient noise scale vs effective batch size, by LR rule"
    if info.n_hidden:
        note = thinned_note(info.n_points - info.n_hidden, info.n_points, what="trials with a noise scale")
        title += subtitle(note)
    fig = new_figure(title, record.EFFECTIVE_BATCH_SIZE, record.NOISE_SCALE)
    if info.is_empty:
        return with_note(fig, info.note or EMPTY_MESSAGE)
    for group in info.groups:
        fig.add_trace(
            trial_markers(
                group.name,
                group.points,
                MARKER_SIZE_PX,
                [
                    hover(f"trial {p.number}", {record.EFFECTIVE_BATCH_SIZE: p.x, record.NOISE_SCALE: p.y}, p.config)
                    for p in group.points
                ],
            )
        )
    points = [p for g in info.groups for p in g.points]
    # Only where both axes already reach, so the diagonal never stretches an axis.
    low = max(min(p.x for p in points), min(p.y for p in points))
    high = min(max(p.x for p in points), max(p.y for p in points))
    if low < high:
        fig.add_trace(
            go.Scatter(
                # Points along it, not its ends only: on a log batch axis beside a linear noise
                # axis a straight segment between the ends would not be the diagonal.
                x=(diagonal := (np.geomspace if low > 0 else np.linspace)(low, high, 17).tolist()),
                y=diagonal,
                mode="lines",
                name="batch = noise scale",
                line={"color": FRONT_COLOR, "width": 1, "dash": "dot"},
                hoverinfo="skip",
            )
        )
    with_batch_axis(fig, [p.x for p in points])
    return with_log_axes(fig, False, info.log_y, y=[p.y for p in points])


# ---- a study, and the dashboard ------------------------------------------------------------------

def plot_noise_scale(search: Search) -> go.Figure:
    """The gradient noise scale of COMPLETE trials against their effective batch, by LR rule."""
    return noise_scale_figure(search.trials_dataframe())


def noise_scale_from_query(query: FigureQuery) -> go.Figure:
    """``GET .../figures/noise_scale``: parameter ``max_points``."""
    return noise_scale_figure(query.frame, max_points=query.max_points())
