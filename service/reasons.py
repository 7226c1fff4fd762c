"""How a trial ended, as the study records it: the ``status_reason`` values hpsearch writes and
what they mean for ``n_trials`` and for resuming. The names themselves are part of the trial
record (``hpsearch.search_spaces.record``).

==========  ===================  ====================================================
state       ``status_reason``    meaning
==========  ===================  ====================================================
COMPLETE    (none)               ran every epoch
PRUNED      ``early_stopped``    ASHA stopped it; ``samples_seen`` is its budget
PRUNED      ``constraint``       skipped: a cap of ``constraints:`` rules it out
PRUNED      ``equivalent``       skipped: equivalent to a configuration already tried
FAIL        ``interrupted``      the search stopped under it; ``resume`` reruns it
FAIL        ``budget``           the search's budget ran out under it (or before it
                                 started); ``resume`` with budget left reruns it
FAIL        anything else        the trial failed (``diverged``, ``rank_exited``...)
==========  ===================  ====================================================

A trial stopped by the budget is, like an interrupted one, not finished in the ``n_trials``
sense and does not hold its configuration: the search cut it short, not the trial itself, so
``resume`` runs its configuration again from the start (trials keep no checkpoints). Its
record stays, with its curves and the device time it used.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from hpsearch.search_spaces.record import (
    NOT_RUN_REASONS,
    REASON_BUDGET,
    REASON_CONSTRAINT,
    REASON_EARLY_STOPPED,
    REASON_EQUIVALENT,
    REASON_INTERRUPTED,
    RERUN_REASONS,
    STATUS_REASON,
)
from hpsearch.study import is_finished

if TYPE_CHECKING:
    import optuna

__all__ = [
    "NOT_RUN_REASONS",
    "REASON_BUDGET",
    "REASON_CONSTRAINT",
    "REASON_EARLY_STOPPED",
    "REASON_EQUIVALENT",
    "REASON_INTERRUPTED",
    "RERUN_REASONS",
    "counts_toward_n_trials",
    "cut_short_by_the_search",
    "no_completion_summary",
    "occupies_its_configuration",
]


def counts_toward_n_trials(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a trial is finished for ``n_trials`` (``hpsearch.study.is_finished``): it ran to
    an end of its own (COMPLETE, stopped early by ASHA, or failed), not skipped by a constraint
    nor cut short by a stopped search or its budget."""
    return is_finished(trial.state.name, trial.user_attrs.get(STATUS_REASON))


def cut_short_by_the_search(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether the search itself ended the trial (``interrupted``, ``budget``): ``resume`` runs
    its configuration again."""
    return trial.state.name == "FAIL" and trial.user_attrs.get(STATUS_REASON) in RERUN_REASONS


def occupies_its_configuration(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a trial's configuration counts as tried: every trial but the ones the search cut
    short (``cut_short_by_the_search``), which ``resume`` runs again."""
    return not cut_short_by_the_search(trial)


def no_completion_summary(trials: Iterable[optuna.trial.FrozenTrial]) -> str | None:
    """One line saying why a study has no COMPLETE trial: how many trials failed, were stopped
    or skipped, and the most common reason; ``None`` when some trial completed.

    Example:
        >>> from optuna.trial import TrialState, create_trial
        >>> fail = lambda reason: create_trial(state=TrialState.FAIL, user_attrs={"status_reason": reason})
        >>> no_completion_summary([fail("diverged"), fail("diverged"), fail("budget")])
        "no trial completed: 3 trials, 2 failed, 1 stopped by the budget; most common reason 'diverged' (2 of 3)"
        >>> no_completion_summary([])
        'no trial completed: the study has no trial'
    """
    trials = list(trials)
    if any(t.state.name == "COMPLETE" for t in trials):
        return None
    if not trials:
        return "no trial completed: the study has no trial"
    kinds: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for t in trials:
        reason = t.user_attrs.get(STATUS_REASON)
        if t.state.name in ("RUNNING", "WAITING"):
            kinds["still running or queued"] += 1
            continue
        reasons[str(reason or t.state.name.lower())] += 1
        if reason == REASON_BUDGET:
            kinds["stopped by the budget"] += 1
        elif reason == REASON_INTERRUPTED:
            kinds["interrupted"] += 1
        elif reason in (REASON_CONSTRAINT, REASON_EQUIVALENT):
            kinds["skipped"] += 1
        elif reason == REASON_EARLY_STOPPED:
            kinds["stopped early"] += 1
        else:
            kinds["failed"] += 1
    parts = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
    line = f"no trial completed: {len(trials)} trial{'' if len(trials) == 1 else 's'}, {parts}"
    if reasons:
        (reason, n), = reasons.most_common(1)
        line += f"; most common reason {reason!r} ({n} of {sum(reasons.values())})"
    return line
