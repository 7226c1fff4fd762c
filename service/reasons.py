"""How a trial ended, as the study records it: the ``status_reason`` values hpsearch writes and
what they mean for ``n_trials`` and for resuming. Light: Optuna is imported only for its enum.

==========  ===================  ====================================================
state       ``status_reason``    meaning
==========  ===================  ====================================================
COMPLETE    (none)               ran every epoch
PRUNED      ``early_stopped``    ASHA stopped it; ``samples_seen`` is its budget
PRUNED      ``constraint``       skipped: a cap of ``constraints:`` rules it out
PRUNED      ``equivalent``       skipped: equivalent to a configuration already tried
FAIL        ``interrupted``      the search stopped under it; ``resume`` reruns it
FAIL        anything else        the trial failed (``diverged``, ``rank_exited``...)
==========  ===================  ====================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import optuna

__all__ = [
    "NOT_RUN_REASONS",
    "REASON_CONSTRAINT",
    "REASON_EARLY_STOPPED",
    "REASON_EQUIVALENT",
    "REASON_INTERRUPTED",
    "counts_toward_n_trials",
    "occupies_its_configuration",
]

REASON_EARLY_STOPPED = "early_stopped"
REASON_CONSTRAINT = "constraint"
REASON_EQUIVALENT = "equivalent"
REASON_INTERRUPTED = "interrupted"

#: Trials that did not run to an end of their own: they do not count as finished.
NOT_RUN_REASONS = frozenset({REASON_INTERRUPTED, REASON_CONSTRAINT, REASON_EQUIVALENT})


def counts_toward_n_trials(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a trial is finished for ``n_trials``: it ran to an end of its own (COMPLETE,
    stopped early by ASHA, or failed), not skipped by a constraint nor cut short by a stopped
    search."""
    from optuna.trial import TrialState

    finished = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return trial.state in finished and trial.user_attrs.get("status_reason") not in NOT_RUN_REASONS


def occupies_its_configuration(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a trial's configuration counts as tried: every trial but the ones an interrupted
    search cut short, which ``resume`` runs again."""
    from optuna.trial import TrialState

    return not (trial.state == TrialState.FAIL and trial.user_attrs.get("status_reason") == REASON_INTERRUPTED)
