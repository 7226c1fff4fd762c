"""``StudyWriter``: the study's writes a search makes, whatever decided them.

A trial's end told (``tell``, ``fail``), a configuration skipped or refused by the budget, an
exact duplicate recorded and ending as the trial it duplicates ends, a configuration that never
started put back in the queue. The planner writes its decisions through it and the recorder
(``hpsearch.planner.recorder``, its subclass) what the trials report, so the study keeps one
writer (one writer per SQLite study, docs/design.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import TrialState

from hpsearch import record
from hpsearch.planner.decisions import Proposal, Skip
from hpsearch.planner.state import SearchState
from hpsearch.record import (
    DUPLICATE_OF,
    FUSE,
    FUSED_GROUP,
    FUSED_MEMBERS,
    MODEL_PATH,
    PHASE_NAMES,
    PHASES,
    STATUS_DETAIL,
    STATUS_REASON,
    TRAINING_STARTED,
)
from hpsearch.store import return_to_queue, write_trial_record
from hpsearch.study import is_confirmation
from hpsearch.study.reasons import NOT_RUN_REASONS, REASON_BUDGET

__all__ = ["StudyWriter", "is_finite", "phases", "write"]

#: What an exact duplicate does not take on from the trial that trained it (``take_on``): that
#: trial's own bookkeeping (its phases, weights, fused group, reason's detail, why it ran).
_RUN_OWN = frozenset({PHASES, TRAINING_STARTED, MODEL_PATH, FUSED_GROUP, FUSED_MEMBERS, FUSE, record.FUSED_RUNTIME_S,
                      record.FUSED_STEP_S, STATUS_DETAIL, record.RERUN_OF, record.ROLE, record.CONFIRMATION,
                      DUPLICATE_OF})


class StudyWriter:
    """The study's writes (see the module's docstring), on the search's ``state``."""

    def __init__(self, state: SearchState) -> None:
        self.state = state

    def unstarted(self, proposal: Proposal, reason: str, detail: str) -> None:
        """A configuration asked ahead that the stopped search never started: back to the queue
        (``requeue``); a confirmation run, which is its round's and not the queue's, FAIL with
        ``reason``."""
        if not is_confirmation(proposal.trial.user_attrs):
            self.requeue(proposal.trial)
            return
        write(proposal.trial, {PHASES: phases(proposal.asked, None)})
        self.fail(proposal.trial, reason, detail)

    def requeue(self, trial: optuna.Trial) -> None:
        """Put a configuration the search asked but never started back in the study's queue
        (``hpsearch.store.return_to_queue``): not a failed trial, since nothing ran; ``resume``
        runs it first, under its own number. Failing them instead, Ctrl-C with two slots marks
        every configuration asked ahead for a fused group FAIL ``interrupted``."""
        return_to_queue(trial.storage, trial._trial_id)
        self.state.emit("queued", trial.number)

    def skipped(self, trial: optuna.Trial, derived: Mapping[str, Any], skip: Skip, asked: float) -> None:
        """A proposed configuration not run (``skip`` says why): PRUNED, not counted toward ``n_trials``."""
        write(trial, {**derived, STATUS_REASON: skip.reason, STATUS_DETAIL: skip.detail, PHASES: phases(asked, None)})
        self.tell(trial, state=TrialState.PRUNED)
        self.state.emit("skipped", trial.number, reason=skip.reason, detail=skip.detail)

    def over_budget(self, trial: optuna.Trial, derived: Mapping[str, Any], refusal: str) -> None:
        """A proposed trial the budget left cannot fit: FAIL ``budget``, never started."""
        write(trial, {**derived, STATUS_REASON: REASON_BUDGET, STATUS_DETAIL: refusal})
        self.tell(trial, state=TrialState.FAIL)
        self.state.emit("budget_stop", trial.number, detail=f"trial {trial.number} {refusal}; no more trials start")

    def duplicate(self, trial: optuna.Trial, derived: Mapping[str, Any], run: tuple[int, int]) -> None:
        """Record the proposed ``trial`` as an exact duplicate of trial ``run`` (its number and
        storage id), which trained, or trains, the very same thing: it does not train, counts
        toward ``n_trials``, and ends as ``run`` ends, now if it has (``take_on``), else when
        it does (``settle``). Trials run concurrently, so ``run`` may still be training, or be
        asked ahead and not started."""
        s = self.state
        number, trial_id = run
        write(trial, {**derived, DUPLICATE_OF: number})
        s.launched += 1
        ran = s.study._storage.get_trial(trial_id)
        if ran.state.is_finished():
            self.take_on(trial, ran)
        else:
            s.awaiting.setdefault(trial_id, []).append(trial)

    def fail(self, trial: optuna.Trial, reason: str, detail: str) -> None:
        write(trial, {STATUS_REASON: reason, **({STATUS_DETAIL: detail[:2000]} if detail else {})})
        self.tell(trial, state=TrialState.FAIL)
        self.state.emit("failed", trial.number, reason=reason, detail=detail)

    def tell(self, trial: optuna.Trial, values: Sequence[float] | None = None, *,
             state: TrialState | None = None) -> None:
        """``study.tell``, then the exact duplicates waiting for ``trial`` end as it did."""
        self.state.study.tell(trial, values, state=state)
        self.settle(trial._trial_id)

    def settle(self, trial_id: int) -> None:
        """End the duplicates waiting for the trial of storage id ``trial_id``, which just ended."""
        waiting = self.state.awaiting.pop(trial_id, [])
        if waiting:
            ran = self.state.study._storage.get_trial(trial_id)
            for trial in waiting:
                self.take_on(trial, ran)

    def take_on(self, trial: optuna.Trial, ran: optuna.trial.FrozenTrial) -> None:
        """End exact duplicate ``trial`` as ``ran``, the trial that trained it, ended: its state,
        objective values, measurements, curves and intermediate values (not its own bookkeeping,
        ``_RUN_OWN``), so every reader that reads the duplicate per rule reads what its training
        gave. A failure is recorded as the same failure: with the same seed the same training
        fails the same way (a diverged run diverges again). Cut short by the search
        (``interrupted``, ``budget``), both are, and ``resume`` runs one and records the other."""
        s = self.state
        attrs = {k: v for k, v in ran.user_attrs.items() if k not in _RUN_OWN}
        reason = ran.user_attrs.get(STATUS_REASON)
        if ran.state != TrialState.COMPLETE:
            attrs[STATUS_DETAIL] = (f"not trained: the exact duplicate of trial #{ran.number}, which ended "
                                    f"{ran.state.name} ({reason}): {ran.user_attrs.get(STATUS_DETAIL) or '-'}")[:2000]
        write(trial, attrs, sorted(ran.intermediate_values.items()))
        if reason in NOT_RUN_REASONS:
            s.launched -= 1  # neither counts toward n_trials, as the trial it duplicates
        if ran.state == TrialState.COMPLETE:
            s.study.tell(trial, ran.values)
            s.emit("completed", trial.number, values=list(ran.values), duplicate_of=ran.number)
        elif ran.state == TrialState.PRUNED:
            s.study.tell(trial, state=TrialState.PRUNED)
            s.emit("pruned", trial.number, reason=reason, detail=attrs[STATUS_DETAIL], duplicate_of=ran.number)
        else:
            s.study.tell(trial, state=TrialState.FAIL)
            s.emit("failed", trial.number, reason=reason, detail=attrs[STATUS_DETAIL], duplicate_of=ran.number)




def write(trial: optuna.Trial, attrs: Mapping[str, Any], intermediates: Sequence[tuple[int, float]] = ()) -> None:
    """The trial's new attrs (and intermediate values) in one transaction of the store."""
    if not attrs and not intermediates:
        return
    writer = getattr(trial.storage, "write_trial_record", None)  # the search's patient storage
    if writer is not None:
        writer(trial._trial_id, dict(attrs), intermediates)
    else:
        write_trial_record(trial.storage, trial._trial_id, dict(attrs), intermediates)


def phases(asked: float | None, seen: Sequence[tuple[str, Any]] | None) -> dict[str, float]:
    """A trial's phases as it records them: ``asked_at`` (wall clock), then each phase's seconds
    since it was asked, in ``PHASE_NAMES`` order, ``told`` being now. ``seen``: the phases the
    trial's process saw (its last report's ``phases``)."""
    told = time.time()
    start = told if asked is None else asked
    times = {"asked": start, **dict(seen or ()), "told": told}
    out = {"asked_at": round(start, 3)}
    out.update({name: round(float(times[name]) - start, 4) for name in PHASE_NAMES if is_finite(times.get(name))})
    # A count and seconds, not times: kept as they are (hpsearch.trials.launcher).
    out.update({name: round(float(times[name]), 4) for name in (record.FAILED_ATTEMPTS, record.FAILED_ATTEMPTS_S)
                if is_finite(times.get(name))})
    return out


def is_finite(v: Any) -> bool:
    """Whether ``v`` is a finite number (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
