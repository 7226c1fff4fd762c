"""The gradient-noise-scale figure as plain data: completed trials' noise scale against their batch.

:func:`noise_scale_info` is re-exported by :mod:`hpsearch.dashboards.plots`, where the figures'
data is documented; :mod:`hpsearch.dashboards.figures` draws it. Nothing here imports plotly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from hpsearch.dashboards.points import (
    TrialGroup,
    _completed,
    _groups,
    _missing_note,
    _no_completed_note,
    _numbers,
    _rule_names,
    log_axis,
    thin_points,
)

__all__ = [
    "NoiseScaleInfo",
    "noise_scale_info",
]

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
    axis and a thinned rest (:func:`hpsearch.dashboards.frontier.thin_points`, by LR rule);
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
    done = _completed(df)
    batches = _numbers(done, "effective_batch_size")
    noise = _numbers(done, "noise_scale")
    keep = np.isfinite(batches) & np.isfinite(noise)
    note = _missing_note(done, ("effective_batch_size",)) if len(done) else _no_completed_note(df)
    if note is None and not keep.any():
        # A missing noise_scale column means the same: no trial could measure it.
        note = _NO_NOISE_SCALE
    if note is not None:
        return NoiseScaleInfo((), False, False, len(df), len(done), note)
    done, batches, noise = done[keep], batches[keep], noise[keep]
    log_x, log_y = log_axis(batches), log_axis(noise)
    shown = np.arange(len(done))
    if max_points is not None and len(done) > max_points:
        shown = thin_points(batches, noise, max_points=max_points, groups=_rule_names(done), log_x=log_x, log_y=log_y)
    return NoiseScaleInfo(
        groups=_groups(done.iloc[shown], batches[shown], noise[shown], ("effective_batch_size", "noise_scale")),
        log_x=log_x,
        log_y=log_y,
        n_trials=len(df),
        n_complete=len(done),
        note=None,
        n_points=len(done),
        n_hidden=len(done) - len(shown),
    )
