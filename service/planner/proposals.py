"""``Proposer``: the next configuration a search runs, from the study's sampler or a
confirmation round, and the configurations skipped on the way.

A configuration the sampler proposes is skipped before it runs where a cap of the constraints
refuses it, where the search already ran its exact parameters (with the same seed it would
train the very same thing), where it is equivalent to one tried (``constraints.skip_equivalent``)
or at or above a per-device batch that ran out of memory; an exact duplicate
(``constraints.skip_duplicates``) does not train and ends as the trial it duplicates ends.
"""

from __future__ import annotations

import time
from typing import Any

from hpsearch import record
from hpsearch.planner.ceilings import ExceedsMemory, Halved
from hpsearch.planner.constraints import equivalence_key, violation
from hpsearch.planner.decisions import Ending, Finished, Proposal, Skip
from hpsearch.planner.plan import ConfirmationRun
from hpsearch.planner.sampler import ask_at, held_by
from hpsearch.planner.state import SearchState, exact
from hpsearch.planner.writer import StudyWriter
from hpsearch.record import RAN_AS, REASON_EXCEEDS_MEMORY
from hpsearch.study.reasons import REASON_CONSTRAINT, REASON_EQUIVALENT
from hpsearch.trials.spec import TrialSpec, processes_for, ran_shape

__all__ = ["MAX_SKIPS_IN_A_ROW", "Proposer", "derived"]

#: How many configurations in a row the constraints may skip before the search gives up asking.
MAX_SKIPS_IN_A_ROW = 1000


class Proposer:
    """Asks the study for configurations to run (see the module's docstring); ``writer``
    records the skips and duplicates."""

    def __init__(self, state: SearchState, writer: StudyWriter) -> None:
        self.state = state
        self.writer = writer

    def propose(self, taken: int = 0) -> Proposal | Finished:
        """The study's next configuration to run; ``Finished`` when there is none, or when the
        duplicates recorded on the way reached ``n_trials`` (``taken``: the configurations the
        caller asked and holds beside ``held``)."""
        s = self.state
        if s.confirming:
            return self.confirmation(s.confirming.pop(0))
        remaining = getattr(s.study.sampler, "remaining", None)
        for _ in range(MAX_SKIPS_IN_A_ROW):
            if s.launched + len(s.held) + taken >= s.n_trials:
                return Finished(Ending.N_TRIALS)  # duplicates recorded count toward n_trials
            left = remaining(s.study) if remaining is not None else None
            queued = s.queued()
            if left is not None and not left and not queued:
                return Finished(Ending.EXHAUSTED)  # the grid is used up
            if s.space_size is not None and len(s.seen) >= s.space_size and not queued:
                if not s.said_exhausted:
                    s.said_exhausted = True
                    s.emit("exhausted", -1, detail=f"every one of the space's {s.space_size} "
                                                   "configurations has been proposed; stopping the search")
                return Finished(Ending.EXHAUSTED)
            asked = time.time()
            # The grid's next configuration is known: one transaction (a queued rerun goes first,
            # through Optuna's ask, which takes it off the queue).
            trial = (ask_at(s.study, left[0], s.distributions) if left and not queued
                     else s.study.ask(s.distributions))
            params = dict(trial.params)
            memory = s.ceilings.plan(params, s.on_oom)
            ran_as = memory.ran_as if isinstance(memory, Halved) else None
            spec = s.spec({**params, **ran_shape(ran_as)})
            derive = derived(spec)
            if ran_as is not None:
                derive[RAN_AS] = ran_as
            key = s.duplicate_key(params) if s.skip_duplicates else None
            skip = self.refusal(spec, params)
            run = s.runs.get(key) if skip is None and key is not None else None
            if skip is None and run is None:
                skip = self.skip(spec, memory)
            s.seen.add(exact(params))
            if run is not None:
                self.writer.duplicate(trial, derive, run)
                continue
            if skip is not None:
                self.writer.skipped(trial, derive, skip, asked)
                continue
            s.tried.add(equivalence_key(spec))
            s.ran.setdefault(exact(params), trial.number)
            if key is not None:
                s.runs.setdefault(key, (trial.number, trial._trial_id))
            return Proposal(trial, params, spec, derive, asked)
        s.emit("exhausted", -1, detail=f"the constraints skipped {MAX_SKIPS_IN_A_ROW} proposed "
                                       "configurations in a row; stopping the search")
        return Finished(Ending.EXHAUSTED)

    def confirmation(self, run: ConfirmationRun) -> Proposal:
        """A confirmation run as a new trial: the params the study's distributions can hold as its
        params, and the whole configuration, its seed and what the answer predicted in its
        ``confirmation`` record. It runs whatever ran before (a configuration the search tried
        runs again, with a new seed), on the devices the answer names: emulated on fewer where
        the machine has fewer (the math of W exactly, its time not)."""
        s = self.state
        asked = time.time()
        params = dict(run.params)
        attrs = {record.ROLE: record.ROLE_CONFIRMATION, record.SEED: run.seed,
                 record.CONFIRMATION: {**run.record, "params": params}}
        trial = ask_at(s.study, held_by(s.distributions, params), s.distributions, attrs)
        world = int(params.get(record.WORLD_SIZE, 1))
        emulate = s.space.resources.emulate_ranks
        processes = processes_for(world, "auto" if emulate == "off" else emulate, s.max_processes)
        spec = s.spec(params, seed=run.seed, emulated_ranks=world // processes)
        return Proposal(trial, params, spec, derived(spec), asked)

    def next_held(self) -> Proposal | None:
        """The first configuration asked ahead that still runs (see ``refreshed``)."""
        s = self.state
        while s.held:
            proposal = self.refreshed(s.held.pop(0))
            if proposal is not None:
                return proposal
        return None

    def refreshed(self, proposal: Proposal) -> Proposal | None:
        """A configuration asked ahead, under the memory ceilings learnt since it was asked: as
        it was, halved (``on_oom: accumulate``), or ``None`` when it is now skipped
        (``exceeds_memory``, recorded as at the ask)."""
        s = self.state
        memory = s.ceilings.plan(proposal.params, s.on_oom)
        if memory is None:
            return proposal
        if isinstance(memory, ExceedsMemory):
            self.writer.skipped(proposal.trial, proposal.derived, Skip(REASON_EXCEEDS_MEMORY, memory.detail),
                                proposal.asked)
            return None
        if RAN_AS in proposal.derived:
            return proposal
        spec = s.spec({**proposal.params, **ran_shape(memory.ran_as)})
        return Proposal(proposal.trial, proposal.params, spec, {**proposal.derived, RAN_AS: memory.ran_as},
                        proposal.asked)

    def refusal(self, spec: TrialSpec, params: dict[str, Any]) -> Skip | None:
        """Why a proposed configuration is skipped before anything else: a cap of the
        constraints, or the sampler proposing a configuration of the study again."""
        broken = violation(spec, self.state.space.constraints)
        if broken is not None:
            return Skip(REASON_CONSTRAINT, broken)
        earlier = self.state.ran.get(exact(params))
        if earlier is not None:
            return Skip(REASON_EQUIVALENT, f"the same configuration as trial #{earlier}, which ran with the same seed")
        return None

    def skip(self, spec: TrialSpec, memory: ExceedsMemory | Halved | None) -> Skip | None:
        """Why a proposed configuration that is no exact duplicate is skipped: equivalent to one
        tried (``constraints.skip_equivalent``), or above a batch that ran out of memory."""
        if self.state.space.constraints.skip_equivalent and equivalence_key(spec) in self.state.tried:
            return Skip(REASON_EQUIVALENT, (f"same effective batch {spec.effective_batch_size}, lr {spec.lr:.4g} and "
                                            "other settings as a trial already tried"))
        if isinstance(memory, ExceedsMemory):
            return Skip(REASON_EXCEEDS_MEMORY, memory.detail)
        return None


def derived(spec: TrialSpec) -> dict[str, Any]:
    """What the search records of a proposed trial from its spec, before it runs."""
    return {record.EFFECTIVE_BATCH_SIZE: spec.effective_batch_size, record.BASE_BATCH_SIZE: spec.base_batch_size,
            record.LR: spec.lr, record.WARMUP_EPOCHS: spec.warmup_epochs, record.WARMUP_FROM: spec.warmup_from,
            record.LR_SCHEDULE: spec.schedule,
            record.EMULATED_RANKS: spec.emulated_ranks, record.SEED: spec.seed}
