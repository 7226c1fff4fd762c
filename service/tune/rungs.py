"""ASHA early stopping that survives a resume: the rungs rebuilt from the study.

Ray Tune's ``ASHAScheduler`` keeps its rungs (per milestone, the metric value of every trial
that reached it) in memory, and Tune does not restore a scheduler's state when an experiment is
restored (ray-project/ray#30838); ``hpsearch resume`` starts a fresh experiment anyway. A fresh
scheduler has empty rungs, so after a ``kill -9`` or Ctrl-C the next trials to reach each rung
could not be stopped: the first trial at an empty rung always goes on.

The study already holds what the rungs held. Every evaluation of every trial is in its
``curves`` (and, for the first objective, its intermediate values at ``step = samples_seen``,
ASHA's time axis). ``rebuild_rungs`` plays each earlier trial's evaluations through the new
scheduler's bracket exactly as Tune fed them to the old one, so the rungs hold the same values,
and a resumed trial is compared against the same cutoffs as in an uninterrupted search.

Which trials are played: every trial that ran to an end of its own (COMPLETE, stopped early by
ASHA, failed). Not the ones the search cut short (``interrupted``, ``budget``): ``resume`` runs
their configurations again from the start, and the rerun records its own values at each rung, as
the original would have in an uninterrupted search; playing both would count that
configuration twice.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ray.tune.schedulers import ASHAScheduler

from hpsearch import record
from hpsearch.record import CURVES, SAMPLES_SEEN
from hpsearch.study.reasons import counts_toward_n_trials

if TYPE_CHECKING:
    import optuna

    from hpsearch.search_spaces import SearchSpace

__all__ = ["asha_scheduler", "rebuild_rungs", "trial_evaluations"]


def asha_scheduler(space: SearchSpace, samples_per_epoch: int, trials: Iterable[optuna.trial.FrozenTrial] = ()) -> Any:
    """Ray Tune's ``ASHAScheduler`` for ``space`` (budget in samples seen, on the first
    objective), with its rungs rebuilt from the study's ``trials`` (``rebuild_rungs``)."""
    objective = space.objectives[0]
    scheduler = ASHAScheduler(
        time_attr=record.SAMPLES_SEEN,
        metric=objective.metric,
        mode="max" if objective.direction == "maximize" else "min",
        max_t=space.workload.epochs * samples_per_epoch,
        grace_period=max(1, round(space.search.grace_epochs * samples_per_epoch)),
        reduction_factor=space.search.reduction_factor,
        # A trial that reached the full budget finishes and is judged COMPLETE, never stopped
        # at its last report.
        stop_last_trials=False,
    )
    rebuild_rungs(scheduler, trials)
    return scheduler


def rebuild_rungs(scheduler: Any, trials: Iterable[optuna.trial.FrozenTrial]) -> int:
    """Record the earlier trials' evaluations in ``scheduler``'s rungs, as the scheduler of the
    search that ran them did. Returns how many trials were played.

    Each trial is played under a key of its own (``study-trial-N``), which no Tune trial of the
    new experiment has, so the resumed trials are compared against these values and never
    mistaken for them.

    Example:
        >>> from optuna.trial import TrialState, create_trial
        >>> from ray.tune.schedulers import ASHAScheduler
        >>> asha = ASHAScheduler(time_attr="samples_seen", metric="val_accuracy", mode="max", max_t=40,
        ...                      grace_period=10, reduction_factor=2, stop_last_trials=False)
        >>> done = create_trial(state=TrialState.COMPLETE, value=0.9, intermediate_values={10: 0.5, 20: 0.7, 40: 0.9})
        >>> done.number = 3
        >>> rebuild_rungs(asha, [done])
        1
        >>> {milestone: dict(recorded) for milestone, recorded in asha._brackets[0]._rungs}
        {40: {'study-trial-3': 0.9}, 20: {'study-trial-3': 0.7}, 10: {'study-trial-3': 0.5}}
    """
    [bracket] = scheduler._brackets  # hpsearch runs ASHA with one bracket
    sign = scheduler._metric_op
    played = 0
    for trial in trials:
        if not counts_toward_n_trials(trial):
            continue  # skipped, or cut short by the search (its rerun records its own values)
        tag = SimpleNamespace(trial_id=f"study-trial-{trial.number}")
        evaluations = list(trial_evaluations(trial, scheduler._metric))
        for samples, value in evaluations:
            # Exactly Tune's call for a result of this trial (AsyncHyperBandScheduler.on_trial_result).
            bracket.on_result(tag, samples, sign * value)
        played += bool(evaluations)
    return played


def trial_evaluations(trial: optuna.trial.FrozenTrial, metric: str) -> Iterator[tuple[int, float]]:
    """A trial's ``(samples_seen, metric)`` pairs, one per evaluation it reported, in order.

    From its ``curves`` when they hold the metric: they keep every evaluation, a non-finite
    value (which ASHA recorded too) as ``None``, played here as NaN. Otherwise from its
    intermediate values, which hold the first objective's finite values.
    """
    curves = trial.user_attrs.get(CURVES)
    if isinstance(curves, Mapping) and curves.get(metric) is not None and curves.get(SAMPLES_SEEN) is not None:
        for samples, value in zip(curves[SAMPLES_SEEN], curves[metric]):
            if samples is not None:
                yield int(samples), math.nan if value is None else float(value)
        return
    for step, value in sorted(trial.intermediate_values.items()):
        yield int(step), float(value)
