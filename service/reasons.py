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
FAIL        anything else        the trial failed (``diverged``, ``rank_exited``...)
==========  ===================  ====================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpsearch.search_spaces.record import (
    NOT_RUN_REASONS,
    REASON_CONSTRAINT,
    REASON_EARLY_STOPPED,
    REASON_EQUIVALENT,
    REASON_INTERRUPTED,
    STATUS_REASON,
)
from hpsearch.study import is_finished

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


def counts_toward_n_trials(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a trial is finished for ``n_trials`` (``hpsearch.study.is_finished``): it ran to
    an end of its own (COMPLETE, stopped early by ASHA, or failed), not skipped by a constraint
    nor cut short by a stopped search."""
    return is_finished(trial.state.name, trial.user_attrs.get(STATUS_REASON))


def occupies_its_configuration(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a trial's configuration counts as tried: every trial but the ones an interrupted
    search cut short, which ``resume`` runs again."""
    return not (trial.state.name == "FAIL" and trial.user_attrs.get(STATUS_REASON) == REASON_INTERRUPTED)
