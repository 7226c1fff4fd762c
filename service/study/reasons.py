"""How a trial ended, as the study records it: the ``status_reason`` values hpsearch writes and
what they mean for ``n_trials`` and for resuming. The names themselves are part of the trial
record (``hpsearch.record``).

==========  ===================  ====================================================
state       ``status_reason``    meaning
==========  ===================  ====================================================
COMPLETE    (none)               ran every epoch
PRUNED      ``early_stopped``    ASHA stopped it; ``samples_seen`` is its budget
PRUNED      ``constraint``       skipped: a cap of ``constraints:`` rules it out
PRUNED      ``equivalent``       skipped: equivalent to a configuration already tried
PRUNED      ``exceeds_memory``   not started: the same configuration ran out of memory
                                 at this per-device batch or a smaller one
FAIL        ``interrupted``      the search stopped under it; ``resume`` reruns it
FAIL        ``budget``           the search's budget ran out under it (or before it
                                 started); ``resume`` with budget left reruns it
FAIL        ``out_of_memory``    a rank ran out of memory (the device's, or
                                 ``resources.memory_per_worker`` on the CPU)
FAIL        anything else        the trial failed (``diverged``, ``rank_exited``...)
==========  ===================  ====================================================

The skipped ones (``constraint``, ``equivalent``, ``exceeds_memory``) never ran and do not
count toward ``n_trials``. ``REASON_TEXT`` says what each reason means in a few words, for the
readers that show reasons (``hpsearch status``, the dashboard's legend).

A configuration the search asked but never started (asked ahead for a fused group, or waiting
for its devices) when it stopped has no reason at all: it is back in the study's queue
(WAITING, ``hpsearch.store.return_to_queue``), and ``resume`` runs it first.

A trial stopped by the budget is, like an interrupted one, not finished in the ``n_trials``
sense and does not hold its configuration: the search cut it short, not the trial itself, so
``resume`` runs its configuration again from the start (trials keep no checkpoints). Its
record stays, with its curves and the device time it used.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from hpsearch import record
from hpsearch.record import (
    NOT_RUN_REASONS,
    RAN_AS,
    REASON_BUDGET,
    REASON_CONSTRAINT,
    REASON_EARLY_STOPPED,
    REASON_EQUIVALENT,
    REASON_EXCEEDS_MEMORY,
    REASON_INTERRUPTED,
    REASON_OUT_OF_MEMORY,
    RERUN_REASONS,
    STATUS_DETAIL,
    STATUS_REASON,
)
from hpsearch.study import is_confirmation, is_finished

if TYPE_CHECKING:
    import optuna

__all__ = [
    "NOT_RUN_REASONS",
    "REASON_BUDGET",
    "REASON_CONSTRAINT",
    "REASON_EARLY_STOPPED",
    "REASON_EQUIVALENT",
    "REASON_EXCEEDS_MEMORY",
    "REASON_INTERRUPTED",
    "REASON_OUT_OF_MEMORY",
    "REASON_TEXT",
    "RERUN_REASONS",
    "counts_toward_n_trials",
    "cut_short",
    "cut_short_by_the_search",
    "describe_reason",
    "failure_summary",
    "no_completion_summary",
    "occupies_its_configuration",
]

#: What each ``status_reason`` means, in a few words.
REASON_TEXT: Mapping[str, str] = {
    record.REASON_EARLY_STOPPED: "stopped early by ASHA: it fell behind at a rung",
    record.REASON_CONSTRAINT: "not started: a cap of constraints: rules it out",
    record.REASON_EQUIVALENT: "not started: equivalent to a configuration already tried",
    record.REASON_EXCEEDS_MEMORY: ("not started: the same configuration ran out of memory at this per-device batch "
                                   "or a smaller one"),
    record.REASON_INTERRUPTED: "the search was stopped under it; resume runs it again",
    record.REASON_BUDGET: "the search's budget ran out under it, or before it started; resume with more runs it",
    record.REASON_DIVERGED: "its training diverged (a non-finite loss or objective)",
    record.REASON_TIMEOUT: "it ran longer than search.trial_timeout_s",
    record.REASON_RANK_EXITED: "a rank's process exited",
    record.REASON_PEER_LOST: "a rank lost its peers",
    record.REASON_WORKLOAD_ERROR: "the workload raised an error",
    record.REASON_NO_RESULT: "it ended without a result",
    record.REASON_OUT_OF_MEMORY: ("a rank ran out of memory (the device's, or resources.memory_per_worker on the "
                                  "CPU)"),
    record.REASON_MISSING_METRIC: "it reported no value of an objective",
    record.REASON_STOPPED: "it stopped before its last epoch without a failure report",
    record.REASON_ERROR: "the trial's process raised an error",
}


#: ``REASON_TEXT`` said of several trials, where its words name the trial ("11 trials
#: interrupted: the search was stopped under it" reads as one trial's sentence).
_REASON_TEXT_MANY: Mapping[str, str] = {
    record.REASON_EARLY_STOPPED: "stopped early by ASHA: they fell behind at a rung",
    record.REASON_INTERRUPTED: "the search was stopped under them; resume runs them again",
    record.REASON_BUDGET: "the search's budget ran out under them, or before they started; resume with more runs them",
    record.REASON_DIVERGED: "their training diverged (a non-finite loss or objective)",
    record.REASON_TIMEOUT: "they ran longer than search.trial_timeout_s",
    record.REASON_NO_RESULT: "they ended without a result",
    record.REASON_MISSING_METRIC: "they reported no value of an objective",
    record.REASON_STOPPED: "they stopped before their last epoch without a failure report",
    record.REASON_ERROR: "the trials' processes raised an error",
}


def describe_reason(reason: str, count: int = 1) -> str:
    """What a ``status_reason`` means (``REASON_TEXT``), said of ``count`` trials; an unknown
    one comes back as it is.

    Example:
        >>> print(describe_reason("out_of_memory"))
        a rank ran out of memory (the device's, or resources.memory_per_worker on the CPU)
        >>> print(describe_reason("interrupted", count=11))
        the search was stopped under them; resume runs them again
        >>> describe_reason("my_reason")
        'my_reason'
    """
    if count != 1 and reason in _REASON_TEXT_MANY:
        return _REASON_TEXT_MANY[reason]
    return REASON_TEXT.get(reason, reason)


def counts_toward_n_trials(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a trial is finished for ``n_trials`` (``hpsearch.study.is_finished``): it ran to
    an end of its own (COMPLETE, stopped early by ASHA, or failed), not skipped by a constraint
    nor cut short by a stopped search or its budget, and it is one of the search's own (a
    confirmation run counts apart)."""
    return is_finished(trial.state.name, trial.user_attrs.get(STATUS_REASON)) and not is_confirmation(trial.user_attrs)


def cut_short_by_the_search(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether the search itself ended the trial (``interrupted``, ``budget``): ``resume`` runs
    its configuration again."""
    return cut_short(trial.state.name, trial.user_attrs.get(STATUS_REASON))


def cut_short(state: str, status_reason: object) -> bool:
    """``cut_short_by_the_search`` from a trial's state name and ``status_reason``."""
    return state == "FAIL" and status_reason in RERUN_REASONS


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
        >>> print(no_completion_summary([fail("out_of_memory")]))
        no trial completed: 1 trial, 1 ran out of memory; most common reason 'out_of_memory' (1 of 1); lower per_device_batch_size, or set search.on_oom: accumulate to run such batches halved with accumulation
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
        elif reason == REASON_EXCEEDS_MEMORY:
            kinds["not started (at or above a per-device batch that ran out of memory)"] += 1
        elif reason == REASON_OUT_OF_MEMORY:
            kinds["ran out of memory"] += 1
        elif reason == REASON_EARLY_STOPPED:
            kinds["stopped early"] += 1
        else:
            kinds["failed"] += 1
    parts = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
    line = f"no trial completed: {len(trials)} trial{'' if len(trials) == 1 else 's'}, {parts}"
    if reasons:
        (reason, n), = reasons.most_common(1)
        line += f"; most common reason {reason!r} ({n} of {sum(reasons.values())})"
        if reason in (REASON_OUT_OF_MEMORY, REASON_EXCEEDS_MEMORY) and any(RAN_AS in t.user_attrs for t in trials):
            line += ("; lower per_device_batch_size, or make it even: search.on_oom: accumulate halved it until it "
                     "could not halve it evenly")
        elif reason in (REASON_OUT_OF_MEMORY, REASON_EXCEEDS_MEMORY):
            line += ("; lower per_device_batch_size, or set search.on_oom: accumulate to run such batches halved with "
                     "accumulation")
    return line


def failure_summary(trials: Iterable[optuna.trial.FrozenTrial], most: int = 5) -> list[str]:
    """One line per distinct way trials failed (their ``status_reason`` and ``status_detail``),
    the commonest first, each naming its trials: what a study whose every trial failed shows
    under its table, so the user reads why without opening each trial. At most ``most`` lines,
    then one that says how many ways are left out.

    Example:
        >>> from optuna.trial import TrialState, create_trial
        >>> fail = lambda n, detail: create_trial(state=TrialState.FAIL, user_attrs={
        ...     "status_reason": "workload_error", "status_detail": detail})
        >>> trials = [fail(0, "ValueError: bad labels"), fail(1, "ValueError: bad labels")]
        >>> for n, t in enumerate(trials):
        ...     t.number = n
        >>> failure_summary(trials)
        ['2 trials failed, workload_error (#0, #1): ValueError: bad labels']
    """
    groups: dict[tuple[str, str], list[int]] = {}
    for t in trials:
        if t.state.name != "FAIL":
            continue
        reason = str(t.user_attrs.get(STATUS_REASON) or "no reason recorded")
        detail = str(t.user_attrs.get(STATUS_DETAIL) or describe_reason(reason))
        groups.setdefault((reason, detail), []).append(t.number)
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[1][0]))
    lines = []
    for (reason, detail), numbers in ordered[:most]:
        shown = ", ".join(f"#{n}" for n in numbers[:8]) + (f" and {len(numbers) - 8} more" if len(numbers) > 8 else "")
        lines.append(f"{len(numbers)} trial{'' if len(numbers) == 1 else 's'} failed, {reason} ({shown}): {detail}")
    if len(ordered) > most:
        left = len(ordered) - most
        lines.append(f"and {left} other way{'' if left == 1 else 's'} of failing: hpsearch status STUDY --trial N says each")
    return lines
