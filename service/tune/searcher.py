"""``StudySearcher``: a Ray Tune searcher that asks and tells an Optuna study, with hpsearch's
own bookkeeping.

Ray's stock ``OptunaSearch`` corrupts studies (docs/design.md, "Our own searcher"). Here every
trial ends in exactly one of:

- COMPLETE with the objectives' final values and the measured user attrs;
- FAIL with ``status_reason`` (``diverged``, ``workload_error``, ``rank_exited``, ``error``...).

It lives in the Tune driver process, so it is the only writer of the study (one writer per
SQLite study).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState
from ray.tune import Callback, Stopper
from ray.tune.search import Searcher

from hpsearch import record
from hpsearch.budget import BudgetLedger, predict_trial, spent_device_seconds, trial_devices
from hpsearch.constraints import equivalence_key, violation
from hpsearch.errors import StoreLostError
from hpsearch.planner.ceilings import MemoryCeilings, training_ran_out
from hpsearch.planner.fuse_decisions import FuseDecisions
from hpsearch.planner.plan import ConfirmationRun
from hpsearch.planner.report import (
    EARLIER_KEY,
    FAILED_KEY,
    FINAL_KEY,
    FUSE_DECLINED_KEY,
    MEMBER_KEY,
    MEMBERS_KEY,
    NOT_RUN_KEY,
    PHASES_KEY,
    RESTARTED_KEY,
    STARTED_KEY,
)
from hpsearch.planner.task import REPORT_EVERY_S, TrialTask, trial_folder
from hpsearch.progress import SearchEvent
from hpsearch.reasons import (
    NOT_RUN_REASONS,
    REASON_BUDGET,
    REASON_CONSTRAINT,
    REASON_EARLY_STOPPED,
    REASON_EQUIVALENT,
    REASON_INTERRUPTED,
    occupies_its_configuration,
)
from hpsearch.record import (
    CURVE_METRICS,
    DEVICE_SECONDS,
    DUPLICATE_OF,
    EMULATED_RANKS,
    FUSE,
    FUSED_GROUP,
    FUSED_MEMBERS,
    MODEL_PATH,
    PHASE_NAMES,
    PHASES,
    RAN_AS,
    REASON_EXCEEDS_MEMORY,
    RECORDED_METRICS,
    RUNTIME_S,
    STATUS_REASON,
    TRAINING_STARTED,
)
from hpsearch.sampler import ask_at, distributions, held_by
from hpsearch.saved_models import ModelKeeper
from hpsearch.search_spaces import Choice, Fixed, Parameter, SearchSpace
from hpsearch.store import return_to_queue, write_trial_record
from hpsearch.study import is_confirmation
from hpsearch.trials.spec import (
    MEMBER_FIELDS,
    MEMBER_HYPERPARAMETERS,
    TrialSpec,
    duplicate_key,
    fusion_key,
    group_spec,
    processes_for,
    ran_shape,
    trial_spec,
)

__all__ = ["InterruptStopper", "StudySearcher", "TrainingStarted"]

#: How many configurations in a row the constraints may skip before the search gives up asking.
MAX_SKIPS_IN_A_ROW = 1000

#: What an exact duplicate does not take on from the trial that trained it (``_take_on``): that
#: trial's own bookkeeping (its phases, weights, fused group, reason's detail, why it ran).
_RUN_OWN = frozenset({PHASES, TRAINING_STARTED, MODEL_PATH, FUSED_GROUP, FUSED_MEMBERS, FUSE, record.FUSED_RUNTIME_S,
                      record.FUSED_STEP_S, record.STATUS_DETAIL, record.RERUN_OF, record.ROLE, record.CONFIRMATION,
                      DUPLICATE_OF})


@dataclass
class _Proposal:
    """A configuration the study proposed and the search will run: its Optuna trial (RUNNING
    from the ask), its parameters and spec, what the searcher derived from them, and when it was
    asked; ``announced``: the progress display was told it started."""

    trial: optuna.Trial
    params: dict[str, Any]
    spec: TrialSpec
    derived: dict[str, Any]
    asked: float
    announced: bool = False


def _store_guard(method: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a lost store (``StoreLostError``, after the storage's own retries) into a stop of
    the search: Tune's callbacks must not raise, and nothing more can be recorded anyway."""

    @functools.wraps(method)
    def guarded(self: StudySearcher, *args: Any, **kwargs: Any) -> Any:
        finished = Searcher.FINISHED if method.__name__ == "suggest" else None
        if self.store_lost is not None:
            return finished
        try:
            return method(self, *args, **kwargs)
        except StoreLostError as exc:
            self.store_lost = exc
            return finished

    return guarded


class StudySearcher(Searcher):
    """Proposes configurations from the study's sampler and records results in the study.

    Args:
        study: The Optuna study (its storage is written from this process only).
        space: The validated space.
        n_trials: How many trials to launch in this run (skipped configurations not counted).
        device: ``cpu`` or ``cuda``: where the trials train.
        max_processes: The most processes one trial can have (``SearchPlan.devices``): a larger
            world size plays its ranks on fewer (``resources.emulate_ranks: auto``).
        runs_dir: Parent of each trial's run folder.
        on_event: Called with each ``SearchEvent`` (progress display).
        ledger: The search's budget account (``hpsearch.budget``); ``None``: no budget kept.
        slots: How many trials run at once (``SearchPlan.max_concurrent``): fused groups of one
            shape are sized to keep them busy.
        confirmations: A confirmation round's runs (``hpsearch.confirmation``): proposed first,
            each as a new trial of the study's answer with its own seed, whatever the sampler
            would ask; ``n_trials`` counts them.
    """

    def __init__(
        self,
        study: optuna.Study,
        space: SearchSpace,
        n_trials: int,
        device: str,
        runs_dir: Path,
        on_event: Callable[[SearchEvent], None] | None = None,
        ledger: BudgetLedger | None = None,
        max_processes: int | None = None,
        slots: int = 1,
        confirmations: Sequence[ConfirmationRun] = (),
    ) -> None:
        super().__init__()
        self.study = study
        self.space = space
        self.n_trials = n_trials
        self.device = device
        self.max_processes = max_processes
        self.runs_dir = runs_dir
        self.on_event = on_event
        #: Set by the orchestrator on Ctrl-C/SIGTERM: trials stopped from then on are
        #: ``interrupted``, not early-stopped.
        self.interrupted = False
        #: Set when the store stopped answering for good; the search then stops.
        self.store_lost: StoreLostError | None = None
        self.ledger = ledger
        #: Set when the budget ran out: the running trials are stopped as ``budget``.
        self.budget_ran_out = False
        #: Why the budget stopped the search (set once it ran out, or could not fit the next
        #: trial): trials stopped from then on are ``budget``, not interrupted.
        self.budget_stop: str | None = None
        # Per running trial: its last evaluation's runtime_s and when that report arrived, for
        # the device time of a trial that ends before its final report.
        self._last_runtime: dict[str, tuple[float, float, float]] = {}
        # Per running trial, its final report once it came (the trial trained to its end).
        self._finals: dict[str, dict[str, Any]] = {}
        self._distributions = distributions(space)
        self._metrics = [o.metric for o in space.objectives]
        self._trials: dict[str, optuna.Trial] = {}
        self._curves: dict[str, dict[str, list[Any]]] = {}
        # Per open trial, when it was asked (wall clock), for its phases.
        self._asked: dict[str, float] = {}
        self._launched = 0
        self._tried: set[Hashable] = set()
        # Every configuration tried, by its exact parameters: the trial that ran it. The seed is
        # the search's, so running one again would train the very same thing (random search
        # and TPE proposed repeats, some diverging twice).
        self._ran: dict[Hashable, int] = {}
        # Exact duplicates (constraints.skip_duplicates): per ``duplicate_key``, the trial that
        # trains it (its number and storage id); per such trial still open (by storage id), the
        # duplicates waiting for its end, which they take on when it comes (``_settle``).
        self.skip_duplicates = space.constraints.skip_duplicates
        self._runs: dict[Hashable, tuple[int, int]] = {}
        self._awaiting: dict[int, list[optuna.Trial]] = {}
        # Per open trial, the per-device batch it runs at (halved by search.on_oom: accumulate).
        self._batch: dict[str, int] = {}
        self.on_oom = str(getattr(space.search, "on_oom", "skip"))
        # Every configuration proposed so far, and how many the space has (None: infinitely
        # many): a random search of a finite space stops once it proposed them all.
        self._seen: set[Hashable] = set()
        self._space_size = space.grid_size()
        # Fused trials (search.fuse): per Tune trial, its members' ids (the trial id itself for a
        # trial of its own, "<trial id>#<k>" for member k of a group); per member id, what it was
        # proposed as; configurations asked ahead and not yet started; shapes that declined to
        # fuse, with why.
        self.fuse = str(getattr(space.search, "fuse", "auto"))  # not a record name
        self.fuse_max = int(getattr(space.search, "fuse_max", 16))
        self._groups: dict[str, list[str]] = {}
        # Member ids whose devices were reserved and whose ranks started (``training_started``):
        # the trials that ran. One the search stops before that goes back to the queue.
        self._started: set[str] = set()
        # Why no two of the space's configurations can share a shape (None: some may), so that
        # nothing is asked ahead for partners that cannot exist.
        self._shapeless = _no_shared_shape(space)
        self._proposals: dict[str, _Proposal] = {}
        self._held: list[_Proposal] = []
        # What fuse: auto decided for each shape, as the study keeps it (a resume follows it).
        self.decisions = FuseDecisions.of_study(study)
        # Per shape, the largest peak memory a member of its completed trials held (``_fuse_cap``).
        self._peaks: dict[Hashable, float] = {}
        # Per shape, the size its groups take (the first group's configurations shared among
        # the trial slots), and the slots (``max_concurrent``).
        self._group_size: dict[Hashable, int] = {}
        self.slots = max(1, slots)
        self._said_exhausted = False
        self._confirming = list(confirmations)
        #: Which completed trials keep their saved weights (``workload.save_model``).
        self.models = ModelKeeper.of_study(study, space.workload.save_model)
        trials = study.get_trials(deepcopy=False)
        #: Per configuration, the smallest per-device batch that ran out of memory (on this kind of device).
        self.ceilings = MemoryCeilings.of_trials(trials, device=device)
        for t in trials:
            if is_confirmation(t.user_attrs):
                continue  # a run of the answer, with a seed of its own: no configuration of the space's
            if t.state == TrialState.COMPLETE and space.resources.memory_per_worker is not None and device == "cpu":
                self._note_peak(trial_spec(space, {**t.params, **ran_shape(t.user_attrs.get(RAN_AS))}, device=device,
                                           max_processes=max_processes), t.user_attrs)
            # A trial back in the queue (WAITING with its parameters: a stopped search never
            # started it) has not tried its configuration: it runs it when the queue gives it.
            queued = t.state == TrialState.WAITING
            if t.params and occupies_its_configuration(t) and t.user_attrs.get(STATUS_REASON) not in NOT_RUN_REASONS \
                    and not queued:
                self._ran.setdefault(_exact(t.params), t.number)
                if self.skip_duplicates and DUPLICATE_OF not in t.user_attrs:
                    self._runs.setdefault(self._duplicate_key(t.params), (t.number, t._trial_id))
            if t.params and occupies_its_configuration(t):
                self._seen.add(_exact(t.params))
                if space.constraints.skip_equivalent and not queued:
                    self._tried.add(equivalence_key(trial_spec(space, dict(t.params), device=device,
                                                               max_processes=max_processes)))

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its searcher into the experiment state; the study (a live database
        # engine) and the display callback stay behind. The study itself is the durable record.
        state = self.__dict__.copy()
        state.update(study=None, on_event=None, _trials={}, _proposals={}, _held=[], _awaiting={})
        return state

    # Tune calls this before the run; we optimise our own objectives, not Tune's metric/mode.
    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any) -> bool:
        return True

    @_store_guard
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self.interrupted or self.budget_stop is not None:
            return Searcher.FINISHED
        if self._launched >= self.n_trials:
            return Searcher.FINISHED
        if self.ledger is not None and self.ledger.exhausted() is not None:
            return Searcher.FINISHED  # nothing asked: the stopper records why
        first = self._next_held() or self._propose()
        if not isinstance(first, _Proposal):
            return first
        why = self._unfusable(first.spec)
        if why is not None:
            return self._launch(trial_id, [first], why)
        return self._launch(trial_id, *self._gather(first))

    def _propose(self, taken: int = 0) -> _Proposal | str:
        """Ask the study for its next configuration to run (those the constraints, the memory
        ceilings or an earlier trial of the same settings skip are recorded as such, and exact
        duplicates as the trial they duplicate ends: ``_duplicate``); ``FINISHED`` when there is
        none, or when the duplicates recorded on the way reached ``n_trials`` (``taken``: the
        configurations the caller asked and holds beside ``_held``)."""
        if self._confirming:
            return self._confirmation(self._confirming.pop(0))
        remaining = getattr(self.study.sampler, "remaining", None)
        for _ in range(MAX_SKIPS_IN_A_ROW):
            if self._launched + len(self._held) + taken >= self.n_trials:
                return Searcher.FINISHED  # duplicates recorded count toward n_trials
            left = remaining(self.study) if remaining is not None else None
            queued = self._queued()
            if left is not None and not left and not queued:
                return Searcher.FINISHED  # the grid is used up
            if self._space_size is not None and len(self._seen) >= self._space_size and not queued:
                if not self._said_exhausted:
                    self._said_exhausted = True
                    self._emit("exhausted", -1, detail=f"every one of the space's {self._space_size} "
                                                       "configurations has been proposed; stopping the search")
                return Searcher.FINISHED
            asked = time.time()
            # The grid's next configuration is known: one transaction (a queued rerun goes first,
            # through Optuna's ask, which takes it off the queue).
            trial = (ask_at(self.study, left[0], self._distributions) if left and not queued
                     else self.study.ask(self._distributions))
            params = dict(trial.params)
            memory = self.ceilings.plan(params, self.on_oom)
            ran_as = memory[1] if memory is not None and memory[0] == "accumulate" else None
            spec = trial_spec(self.space, {**params, **ran_shape(ran_as)}, device=self.device,
                              max_processes=self.max_processes)
            derived = _derived(spec)
            if ran_as is not None:
                derived[RAN_AS] = ran_as
            key = self._duplicate_key(params) if self.skip_duplicates else None
            skip = self._refusal(spec, params)
            run = self._runs.get(key) if skip is None and key is not None else None
            if skip is None and run is None:
                skip = self._skip(spec, memory)
            self._seen.add(_exact(params))
            if run is not None:
                self._duplicate(trial, derived, run)
                continue
            if skip is not None:
                reason, detail = skip
                _write(trial, {**derived, record.STATUS_REASON: reason, record.STATUS_DETAIL: detail,
                               PHASES: _phases(asked, None)})
                self.study.tell(trial, state=TrialState.PRUNED)
                self._emit("skipped", trial.number, reason=reason, detail=detail)
                continue
            self._tried.add(equivalence_key(spec))
            self._ran.setdefault(_exact(params), trial.number)
            if key is not None:
                self._runs.setdefault(key, (trial.number, trial._trial_id))
            return _Proposal(trial, params, spec, derived, asked)
        self._emit("exhausted", -1, detail=f"the constraints skipped {MAX_SKIPS_IN_A_ROW} proposed "
                                           "configurations in a row; stopping the search")
        return Searcher.FINISHED

    def _confirmation(self, run: ConfirmationRun) -> _Proposal:
        """A confirmation run as a new trial: the params the study's distributions can hold as its
        params, and the whole configuration, its seed and what the answer predicted in its
        ``confirmation`` record. It runs whatever ran before (a configuration the search tried
        runs again, with a new seed), on the devices the answer names: emulated on fewer where
        the machine has fewer (the math of W exactly, its time not)."""
        asked = time.time()
        params = dict(run.params)
        attrs = {record.ROLE: record.ROLE_CONFIRMATION, record.SEED: run.seed,
                 record.CONFIRMATION: {**run.record, "params": params}}
        trial = ask_at(self.study, held_by(self._distributions, params), self._distributions, attrs)
        world = int(params.get(record.WORLD_SIZE, 1))
        emulate = self.space.resources.emulate_ranks
        processes = processes_for(world, "auto" if emulate == "off" else emulate, self.max_processes)
        spec = trial_spec(self.space, params, device=self.device, max_processes=self.max_processes, seed=run.seed,
                          emulated_ranks=world // processes)
        return _Proposal(trial, params, spec, _derived(spec), asked)

    def _next_held(self) -> _Proposal | None:
        """The first configuration asked ahead that still runs (see ``_refreshed``)."""
        while self._held:
            proposal = self._refreshed(self._held.pop(0))
            if proposal is not None:
                return proposal
        return None

    def _refreshed(self, proposal: _Proposal) -> _Proposal | None:
        """A configuration asked ahead, under the memory ceilings learnt since it was asked: as
        it was, halved (``on_oom: accumulate``), or ``None`` when it is now skipped
        (``exceeds_memory``, recorded as at the ask)."""
        memory = self.ceilings.plan(proposal.params, self.on_oom)
        if memory is None:
            return proposal
        if memory[0] == "skip":
            _write(proposal.trial, {**proposal.derived, record.STATUS_REASON: REASON_EXCEEDS_MEMORY,
                                    record.STATUS_DETAIL: memory[1]["detail"], PHASES: _phases(proposal.asked, None)})
            self._tell(proposal.trial, state=TrialState.PRUNED)
            self._emit("skipped", proposal.trial.number, reason=REASON_EXCEEDS_MEMORY, detail=memory[1]["detail"])
            return None
        ran_as = memory[1]
        if RAN_AS in proposal.derived:
            return proposal
        spec = trial_spec(self.space, {**proposal.params, **ran_shape(ran_as)}, device=self.device,
                          max_processes=self.max_processes)
        return _Proposal(proposal.trial, proposal.params, spec, {**proposal.derived, RAN_AS: ran_as}, proposal.asked,
                         proposal.announced)

    def _unfusable(self, spec: TrialSpec) -> str | None:
        """Why a trial of ``spec`` runs on its own whatever its partners (``None``: it may fuse)."""
        if self.fuse == "false":
            return "search.fuse is false"
        if self._shapeless is not None:
            return self._shapeless
        if self.space.search.scheduler == "asha":
            return "ASHA judges each trial on its own reports"
        if spec.compile:
            return "a torch.compile'd model is not fused"
        # fuse: true fuses whatever the timing says, not what the model cannot do.
        return self.decisions.why_not(spec, timed=self.fuse == "auto")

    def _gather(self, first: _Proposal) -> tuple[list[_Proposal], str | None]:
        """``first`` and the configurations of its shape (``fusion_key``) the search has asked,
        asking ahead for more (at most twice ``search.fuse_max``, never past ``n_trials``): the
        group, and why it is only ``first`` where it is."""
        key = fusion_key(first.spec)
        cap, capped = self._fuse_cap(first)
        cap = min(cap, self._group_size.get(key, cap))
        group = [first]
        for held in list(self._held):
            if len(group) < cap and fusion_key(held.spec) == key:
                self._held.remove(held)
                fresh = self._refreshed(held)
                if fresh is not None and fusion_key(fresh.spec) == key:
                    group.append(fresh)
                elif fresh is not None:
                    self._held.append(fresh)
        asked = 0
        while (len(group) < cap and asked < 2 * self.fuse_max
               and self._launched + len(group) + len(self._held) < self.n_trials):
            proposal = self._propose(taken=len(group))
            if not isinstance(proposal, _Proposal):
                break
            asked += 1
            (group if fusion_key(proposal.spec) == key else self._held).append(proposal)
        if key not in self._group_size and len(group) > 1:
            # Keep the search's trial slots busy: a shape with more configurations than one group
            # needs is split into as many groups as the slots the other shapes and the trials
            # running leave (one group of twelve on one core of two, the other idle, took twice
            # as long when fusing did not pay; the digits CNN grid's b 8 split in two beside its
            # running b 32 group left a third group to run alone at the end).
            others = len({fusion_key(p.spec) for p in self._held} - {key})
            parts = max(1, min(len(group), self.slots - others - len(self._groups)))
            self._group_size[key] = size = -(-len(group) // parts)
            self._held[:0] = group[size:]
            group = group[:size]
        if len(group) > 1:
            return group, None
        if capped is not None:
            return group, capped
        # Those asked here and not of its shape wait in _held: they are the configurations it
        # could have been grouped with (counting ``asked`` too counted them twice).
        waiting = len(self._held)
        if not waiting:
            return group, "no partner of its shape: no other configuration was waiting to start"
        return group, (f"no partner of its shape among the {waiting} other configuration"
                       f"{'' if waiting == 1 else 's'} waiting to start")

    def _fuse_cap(self, first: _Proposal) -> tuple[int, str | None]:
        """The most members a group of ``first``'s shape may hold: ``search.fuse_max``, and on
        the CPU under ``resources.memory_per_worker`` as many as one member's peak memory (the
        largest of the completed trials of that shape, ``_peaks``) fits K times; with why it is 1
        where it is."""
        limit = first.spec.memory_limit_bytes
        peak = self._peaks.get(fusion_key(first.spec)) if limit is not None else None
        if limit is None or peak is None:
            return self.fuse_max, None
        fits = max(1, int(limit // peak))
        why = (f"one member's peak memory ({record.format_bytes(peak)}) fits "
               f"resources.memory_per_worker ({record.format_bytes(limit)}) once") if fits == 1 else None
        return min(self.fuse_max, fits), why

    def _note_peak(self, spec: TrialSpec, attrs: Mapping[str, Any]) -> None:
        """A completed trial's peak memory a member (a fused one's group peak over its members),
        kept per shape for ``_fuse_cap``."""
        peak = attrs.get(record.PEAK_MEMORY_BYTES)
        if spec.memory_limit_bytes is None or not isinstance(peak, (int, float)):
            return
        per_member = float(peak) / float(attrs.get(record.FUSED_MEMBERS) or 1)
        key = fusion_key(spec)
        self._peaks[key] = max(per_member, self._peaks.get(key, 0.0))

    def _launch(self, trial_id: str, group: list[_Proposal], why: str | None) -> dict[str, Any] | str:
        """Start ``group`` as one Tune trial: a trial of its own, or the members of a fused group
        (each still a trial of the study: ``fused_group``, ``fused_members``). ``why``: why a
        trial of its own is not fused."""
        leader = group[0]
        if self._over_budget(trial_id, leader.trial, leader.params, leader.derived):
            # The trial that does not fit says why the search stopped; the configurations asked
            # with it never started: back to the queue, for a resume with budget left.
            for proposal in group[1:] + self._held:
                self._unstarted(proposal, REASON_BUDGET, self.budget_stop or "")
            self._held = []
            return Searcher.FINISHED
        fused = len(group) > 1
        mids = [f"{trial_id}#{k}" for k in range(len(group))] if fused else [trial_id]
        self._groups[trial_id] = mids
        for mid, proposal in zip(mids, group):
            attrs = dict(proposal.derived)
            if fused:
                attrs.update({FUSED_GROUP: leader.trial.number, FUSED_MEMBERS: len(group), FUSE: "on"})
            elif why is not None and self.fuse != "false":
                attrs[FUSE] = f"off: {why}"
            _write(proposal.trial, attrs)
            self._proposals[mid] = proposal
            self._batch[mid] = proposal.spec.per_device_batch_size
            self._trials[mid] = proposal.trial
            self._curves[mid] = {k: [] for k in CURVE_METRICS}
            self._asked[mid] = proposal.asked
            if not proposal.announced:
                proposal.announced = True
                self._emit("started", proposal.trial.number, params=proposal.params)
        self._launched += len(group)
        # A shape whose timing already found that fusing pays is not timed into another answer.
        fuse = "true" if self.fuse == "auto" and self.decisions.paid(leader.spec) else self.fuse
        spec = group_spec([p.spec for p in group], fuse=fuse) if fused else leader.spec
        return {"trial": TrialTask(
            spec, leader.trial.number, trial_folder(self.runs_dir, leader.trial.number),
            timeout_s=self.space.search.trial_timeout_s, on_oom=self.on_oom,
            # A scheduler judges trials on every report (hpsearch.tune.trainable.REPORT_EVERY_S).
            report_every_s=None if self.space.search.scheduler == "asha" else REPORT_EVERY_S,
            members=tuple(p.trial.number for p in group))}

    def _queued(self) -> bool:
        return bool(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    def _over_budget(self, trial_id: str, trial: optuna.Trial, params: dict[str, Any], derived: dict[str, Any]) -> bool:
        """Whether the budget left cannot fit this proposed trial, predicted from the completed
        ones. If so it never starts: it is recorded FAIL ``budget`` (``resume`` with budget left
        runs it first) and the search proposes no more trials; the running ones go on."""
        if self.ledger is None:
            return False
        devices = trial_devices(params, self.space, self.max_processes)
        prediction = refusal = None
        if self.ledger.budget.limited:
            done = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            prediction = predict_trial(done, params, devices)
            refusal = self.ledger.refusal(prediction)
        if refusal is None:
            self.ledger.trial_proposed(trial_id, devices, prediction)
            return False
        self.budget_stop = refusal
        _write(trial, {**derived, record.STATUS_REASON: REASON_BUDGET, record.STATUS_DETAIL: refusal})
        self._tell(trial, state=TrialState.FAIL)
        self._emit("budget_stop", trial.number, detail=f"trial {trial.number} {refusal}; no more trials start")
        return True

    @_store_guard
    def check_budget(self) -> bool:
        """Whether the budget ran out, so the running trials must stop (the stopper asks about
        ten times a second). Writes what was spent to the study every few seconds, and tells the
        progress display every second."""
        if self.ledger is None:
            return False
        persist, emit = self.ledger.due()
        if persist:
            self.ledger.persist(self.study)
        if emit and self.ledger.budget.limited:
            self._emit("budget", -1, status=self.ledger.status())
        if not self.budget_ran_out:
            spent = self.ledger.exhausted()
            if spent is not None:
                self.budget_ran_out = True
                self.budget_stop = self.budget_stop or spent
                self._emit("budget_stop", -1, detail=f"{spent}: stopping the running trials")
                self._stop_open_trials()
        return self.budget_ran_out

    def _stop_open_trials(self) -> None:
        """Record the open trials as stopped by the budget now, at the limit. Tune stops their
        processes at their next report, or, for a trial still starting, 10 s later
        (``TuneController``'s forced clean-up), and only then tells the searcher; the study
        says when the budget stopped them. A trial whose final report already came completes."""
        for trial_id in list(self._trials):
            final = self._finals.get(trial_id)
            if final is not None:
                self.on_trial_complete(trial_id, final)
        self.fail_open_trials(REASON_BUDGET, f"stopped: {self.budget_stop}")

    def _refusal(self, spec: TrialSpec, params: dict[str, Any]) -> tuple[str, str] | None:
        """Why a proposed configuration is skipped before anything else: a cap of the
        constraints, or the sampler proposing a configuration of the study again."""
        broken = violation(spec, self.space.constraints)
        if broken is not None:
            return REASON_CONSTRAINT, broken
        earlier = self._ran.get(_exact(params))
        if earlier is not None:
            return REASON_EQUIVALENT, f"the same configuration as trial #{earlier}, which ran with the same seed"
        return None

    def _skip(self, spec: TrialSpec, memory: tuple[str, dict[str, Any]] | None) -> tuple[str, str] | None:
        """Why a proposed configuration that is no exact duplicate is skipped: equivalent to one
        tried (``constraints.skip_equivalent``), or above a batch that ran out of memory."""
        if self.space.constraints.skip_equivalent and equivalence_key(spec) in self._tried:
            return REASON_EQUIVALENT, (f"same effective batch {spec.effective_batch_size}, lr {spec.lr:.4g} and "
                                       "other settings as a trial already tried")
        if memory is not None and memory[0] == "skip":
            return REASON_EXCEEDS_MEMORY, memory[1]["detail"]
        return None

    @_store_guard
    def training_started(self, trial_id: str) -> None:
        """The trial got its resources and its ranks start (``TrainingStarted``)."""
        mids = [mid for mid in self._groups.get(trial_id, ()) if mid in self._trials]
        if not mids:
            return
        for mid in mids:
            trial = self._trials[mid]
            self._started.add(mid)
            _write(trial, {TRAINING_STARTED: time.time()})  # when its devices were reserved
            self._emit("training", trial.number)
        if self.ledger is not None:
            self.ledger.trial_training(trial_id)

    def _mid(self, trial_id: str, member: Any) -> str:
        """The member id of a result's ``MEMBER_KEY`` in Tune trial ``trial_id``."""
        return trial_id if member is None or len(self._groups.get(trial_id, ())) <= 1 else f"{trial_id}#{int(member)}"

    @_store_guard
    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if trial_id not in self._groups:
            return
        if result.get(FUSE_DECLINED_KEY):
            self._fuse_declined(trial_id, result)
            return
        if result.get(RESTARTED_KEY):
            # Ran out of memory and trains again halved (on_oom: accumulate), or split from a
            # group that ran out: its curves are the new run's alone (its evaluations come
            # again, at the same samples seen).
            members = result.get(MEMBERS_KEY)
            restarted = self._groups[trial_id] if members is None else [self._mid(trial_id, k) for k in members]
            self._record(trial_id, result, own=False)
            for mid in restarted:
                if mid in self._trials:
                    self._curves[mid] = {k: [] for k in CURVE_METRICS}
                    _write(self._trials[mid], {record.CURVES: self._curves[mid]})
            return
        member = result.get(MEMBER_KEY)
        if member is not None:
            self._fuse_decided(trial_id, result)
        if member is not None and (result.get(FINAL_KEY) or result.get(FAILED_KEY)):
            self._end(self._mid(trial_id, member), trial_id, result)  # a member ends: the others go on
            return
        if result.get(FAILED_KEY):
            return
        if result.get(FINAL_KEY):
            self._finals[trial_id] = result
        self._record(trial_id, result)

    def _record(self, trial_id: str, result: dict[str, Any], *, own: bool = True,
                skip: str | None = None) -> None:
        """Record the evaluations a Tune result carries (those held back, ``EARLIER_KEY``, then
        its own), each with the member it is about; ``skip``: a member whose are recorded by
        the caller."""
        for mid, reports in self._routed(trial_id, result, own=own).items():
            if mid == skip or mid not in self._trials:
                continue
            attrs, intermediates, events = self._epoch_records(mid, reports)
            _write(self._trials[mid], attrs, intermediates)
            for report in events:
                self._emit("result", self._trials[mid].number, result=report)

    def _routed(self, trial_id: str, result: dict[str, Any], *, own: bool = True) -> dict[str, list[dict[str, Any]]]:
        """The evaluations a result carries, per member id, in order."""
        mine = [result] if own and "evaluation" in result and not result.get(FAILED_KEY) else []
        routed: dict[str, list[dict[str, Any]]] = {}
        for report in [*result.get(EARLIER_KEY, ()), *mine]:
            routed.setdefault(self._mid(trial_id, report.get(MEMBER_KEY)), []).append(report)
        return routed

    def _epoch_records(self, mid: str, reports: list[dict[str, Any]]
                       ) -> tuple[dict[str, Any], list[tuple[int, float]], list[dict[str, Any]]]:
        """What a member's evaluations add to its trial: the attrs (the latest of each), the
        intermediate values, and the evaluations' reports."""
        attrs: dict[str, Any] = {}
        intermediates, events = [], []
        for report in reports:
            self._note_runtime(mid, report)
            new, intermediate = self._epoch_record(mid, report)
            attrs.update(new)
            if intermediate is not None:
                intermediates.append(intermediate)
            events.append(report)
        return attrs, intermediates, events

    def _epoch_record(self, trial_id: str, result: dict[str, Any]) -> tuple[dict[str, Any], tuple[int, float] | None]:
        """What one evaluation's report adds to the trial: the curves, the progress attrs and
        the intermediate value (nothing when that evaluation was already recorded)."""
        curves = self._curves[trial_id]
        if len(curves[record.SAMPLES_SEEN]) >= result["evaluation"]:
            return {}, None
        for key in CURVE_METRICS:
            curves[key].append(_finite_or_none(result.get(key)))
        attrs = {record.CURVES: curves, record.EPOCHS_COMPLETED: result.get(record.EPOCHS_COMPLETED),
                 record.SAMPLES_SEEN: result.get(record.SAMPLES_SEEN), "steps": result.get("steps")}
        value = result.get(self._metrics[0])
        if not (_is_finite(value) and record.SAMPLES_SEEN in result):
            return attrs, None
        # Intermediate values on a samples-seen axis, so batch sizes compare fairly. Written
        # through the storage: Trial.report refuses multi-objective studies.
        return attrs, (int(result[record.SAMPLES_SEEN]), float(value))  # type: ignore[arg-type]  # _is_finite

    def _fuse_declined(self, trial_id: str, result: dict[str, Any]) -> None:
        """A group did not train fused (fusing did not pay, or its model cannot be vectorized):
        its members train on their own, one after another, in the group's Tune trial (on the
        devices it holds), and no later group of that shape is formed, in this search or any
        later one of the study. Said once: a workload's refusal comes from each group of it
        that started before the first refusal came in."""
        why = str(result[FUSE_DECLINED_KEY])
        mids = [mid for mid in self._groups.get(trial_id, ()) if mid in self._trials]
        news = False
        for mid in mids:
            proposal = self._proposals[mid]
            if result.get(record.FUSED_STEP_S) is not None:  # timed: not at this batch or above
                news |= self.decisions.decline_at(proposal.spec, why)
            else:  # the model itself (vmap refuses it, it trains itself): none of this workload's
                news |= self.decisions.decline_workload(proposal.spec, why)
            _write(proposal.trial, {FUSE: f"off: {why}", FUSED_GROUP: None, FUSED_MEMBERS: None,
                                    record.FUSED_STEP_S: result.get(record.FUSED_STEP_S),
                                    record.SOLO_STEP_S: result.get(record.SOLO_STEP_S)})
        if news:
            self.decisions.persist(self.study)
            self._emit("fuse", -1, detail=f"{len(mids)} trials run on their own, one after another: {why}")  # not a record name

    def _fuse_decided(self, trial_id: str, result: dict[str, Any]) -> None:
        """A member's report under ``fuse: auto`` settles its shape: fusing stopped paying on
        the steady steps (no later group of the shape fuses), or, at its end, it paid (later
        groups fuse without timing a decision again)."""
        proposal = self._proposals.get(self._mid(trial_id, result.get(MEMBER_KEY)))
        if proposal is None or self.fuse != "auto":
            return
        stopped = result.get(record.FUSE_STOPPED_PAYING)
        if isinstance(stopped, str):
            if self.decisions.decline_at(proposal.spec, stopped):
                self.decisions.persist(self.study)
                said = f"later groups of trial {proposal.trial.number}'s shape train on their own: {stopped}"
                self._emit("fuse", -1, detail=said)  # not a record name: the event kind
        elif (result.get(FINAL_KEY) and result.get(FUSE) == "on" and result.get(record.FUSED_STEP_S) is not None
              and self.decisions.fuse(proposal.spec, proposal.trial.number)):
            self.decisions.persist(self.study)

    @_store_guard
    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        result = result or {}
        mids = self._groups.pop(trial_id, None)
        if mids is None:
            return
        if mids == [trial_id]:
            self._end(trial_id, trial_id, result, error)
            return
        # A fused group's Tune trial ended: its members' evaluations it carried are recorded, and
        # the members still open (the search stopped, the trial's process died) end with it.
        self._record(trial_id, result, own=MEMBER_KEY in result and not result.get(FINAL_KEY))
        for mid in mids:
            if mid in self._trials:
                self._end(mid, trial_id, {}, error)
        if self.ledger is not None:
            self.ledger.trial_ended(trial_id, None)

    def _end(self, mid: str, trial_id: str, result: dict[str, Any], error: bool = False) -> None:
        """Member ``mid`` (of Tune trial ``trial_id``) ended with ``result``: completed, failed,
        stopped early or cut short, as the result says."""
        trial = self._trials.get(mid)
        if trial is None:
            return
        # Tune hands the report a scheduler stopped the trial on to on_trial_complete only, and
        # a result's held-back evaluations come with it.
        self._record(trial_id, result, skip=mid)
        attrs, intermediates, _ = self._epoch_records(mid, self._routed(trial_id, result).get(mid, []))
        del self._trials[mid], self._curves[mid]
        proposal = self._proposals.pop(mid, None)
        if (self.interrupted or self.budget_ran_out) and self._never_started(mid, trial):
            # Stopped at the desk, waiting for its devices: nothing ran, so it is not cut short.
            self._asked.pop(mid, None)
            self._batch.pop(mid, None)
            self._end_device_time(mid, trial, attrs, final=False)
            self._requeue(trial)
            return
        attrs[PHASES] = _phases(self._asked.pop(mid, None), result.get(PHASES_KEY))
        ran_as = dict(result[RAN_AS]) if isinstance(result.get(RAN_AS), list) else None
        if ran_as is not None:  # its own process halved it (search.on_oom: accumulate)
            attrs[RAN_AS] = ran_as
        self._learn_memory(trial, result, ran_as, self._batch.pop(mid, None))
        attrs.update({key: _finite_or_none(result[key]) for key in RECORDED_METRICS if result.get(key) is not None})
        self._end_device_time(mid, trial, attrs, final=bool(result.get(FINAL_KEY)))
        _write(trial, attrs, intermediates)
        if result.get(FINAL_KEY):
            if proposal is not None:
                self._note_peak(proposal.spec, result)
            self._complete(trial, result)
        elif self.interrupted:
            # Whatever ended it after Ctrl-C (a terminal sends SIGINT to every process of the
            # search) is the interruption, not a fault of the trial.
            self._fail(trial, REASON_INTERRUPTED, "the search was stopped before this trial finished")
        elif self.budget_ran_out:
            # Likewise, whatever ended it once the budget ran out is the budget's stop.
            self._fail(trial, REASON_BUDGET, f"stopped: {self.budget_stop}")
        elif result.get(NOT_RUN_KEY):  # a member another of its shape showed cannot fit: skipped, as at the ask
            _write(trial, {record.STATUS_REASON: REASON_EXCEEDS_MEMORY,
                           record.STATUS_DETAIL: result.get(record.STATUS_DETAIL) or ""})
            self._tell(trial, state=TrialState.PRUNED)
            self._launched -= 1  # not counted toward n_trials, as a configuration skipped at the ask
            self._emit("skipped", trial.number, reason=REASON_EXCEEDS_MEMORY, detail=result.get(record.STATUS_DETAIL))
        elif result.get(FAILED_KEY):
            self._fail(trial, result.get(record.STATUS_REASON) or "error", result.get(record.STATUS_DETAIL) or "")
        elif error:
            self._fail(trial, "error", "the trial process raised; see its error file in the Tune run folder")
        elif self.space.search.scheduler == "asha":
            self._prune(trial, result)
        else:
            self._fail(trial, "stopped", "the trial stopped before its last epoch without a failure report")

    def _learn_memory(self, trial: optuna.Trial, result: dict[str, Any], ran_as: dict[str, Any] | None,
                      batch: int | None) -> None:
        """A trial that ran out of memory, or ran halved after it did, sets its configuration's
        ceiling (``hpsearch.planner.ceilings``)."""
        if result.get(FINAL_KEY) and batch is not None:
            self.ceilings.fit(trial.params, int((ran_as or {}).get(record.PER_DEVICE_BATCH_SIZE) or batch))
        ignored = None
        if ran_as is not None and isinstance(ran_as.get("out_of_memory_at"), int):
            ignored = self.ceilings.ran_out(trial.params, ran_as["out_of_memory_at"], trial=trial.number)
        if result.get(FAILED_KEY) and training_ran_out(result) and batch is not None:
            ignored = self.ceilings.ran_out(trial.params, batch, trial=trial.number)
        if ignored is not None:  # evidence that contradicts itself: said, not learnt
            self._emit("memory", trial.number, detail=ignored)

    def _complete(self, trial: optuna.Trial, result: dict[str, Any]) -> None:
        values = [result.get(m) for m in self._metrics]
        missing = [m for m, v in zip(self._metrics, values) if v is None]
        if missing:
            self._fail(trial, record.REASON_MISSING_METRIC, f"the trial reported no {', '.join(missing)}")
            return
        if not all(_is_finite(v) for v in values):
            self._fail(trial, record.REASON_DIVERGED, f"non-finite objective values {values}")
            return
        finite = [float(v) for v in values if v is not None]
        _write(trial, self.models.keep(trial.number, finite, result.get(MODEL_PATH), self.study))
        self._tell(trial, finite)
        self._emit("completed", trial.number, values=finite)

    def _prune(self, trial: optuna.Trial, result: dict[str, Any]) -> None:
        epochs = result.get("epoch", 0)  # fractional when it stopped between epochs
        samples = result.get(record.SAMPLES_SEEN, 0)
        detail = (f"ASHA stopped it after {epochs:g} of {self.space.workload.epochs} epochs ({samples} samples "
                  f"seen): {self._metrics[0]} {result.get(self._metrics[0])} did not make its rung's cutoff")
        _write(trial, {record.EPOCHS_COMPLETED: result.get(record.EPOCHS_COMPLETED, int(epochs)), record.SAMPLES_SEEN: samples,
                       record.STATUS_REASON: REASON_EARLY_STOPPED, record.STATUS_DETAIL: detail})
        self._tell(trial, state=TrialState.PRUNED)
        self._emit("pruned", trial.number, reason=REASON_EARLY_STOPPED, detail=detail)

    def fail_open_trials(self, reason: str, detail: str) -> None:
        """Record every trial still open (the search stopped under it) that ran as FAIL with
        ``reason``; those that never started (asked ahead, or waiting for their devices) go back
        to the study's queue (``_requeue``)."""
        for mid in list(self._trials):
            trial = self._trials.pop(mid)
            attrs: dict[str, Any] = {}
            self._end_device_time(mid, trial, attrs, final=False)
            if self._never_started(mid, trial):
                self._asked.pop(mid, None)
                self._requeue(trial)
                continue
            attrs[PHASES] = _phases(self._asked.pop(mid, None), None)
            _write(trial, attrs)
            self._fail(trial, reason, detail)
        for proposal in self._held:
            self._unstarted(proposal, reason, detail)
        self._held = []
        self._proposals.clear()
        # A trial that ran was told above, and the duplicates waiting for it ended with it; those
        # left wait for a configuration that went back to the queue without running: nothing ran
        # for them either, so they go back too (one left waiting would stay RUNNING for good).
        waiting = [trial for trials in self._awaiting.values() for trial in trials]
        self._awaiting.clear()
        for trial in waiting:
            self._requeue(trial)

    def _unstarted(self, proposal: _Proposal, reason: str, detail: str) -> None:
        """A configuration asked ahead that the stopped search never started: back to the queue
        (``_requeue``); a confirmation run, which is its round's and not the queue's, FAIL with
        ``reason``."""
        if not is_confirmation(proposal.trial.user_attrs):
            self._requeue(proposal.trial)
            return
        _write(proposal.trial, {PHASES: _phases(proposal.asked, None)})
        self._fail(proposal.trial, reason, detail)

    def _never_started(self, mid: str, trial: optuna.Trial) -> bool:
        """Whether member ``mid`` never got its devices (the search stopped first), and is one
        of the search's own configurations: a confirmation run is its round's, not the queue's."""
        return mid not in self._started and not is_confirmation(trial.user_attrs)

    def _requeue(self, trial: optuna.Trial) -> None:
        """Put a configuration the search asked but never started back in the study's queue
        (``hpsearch.store.return_to_queue``): not a failed trial, since nothing ran; ``resume``
        runs it first, under its own number. Ctrl-C with two slots had marked eleven
        configurations asked ahead for a fused group FAIL ``interrupted``."""
        return_to_queue(trial.storage, trial._trial_id)
        self._emit("queued", trial.number)

    def end_run(self) -> None:
        """The end of this run of the search: record the trials still open as cut short, by the
        budget (``budget``) or by a stop (``interrupted``), and write what the run spent."""
        if self.budget_ran_out and not self.interrupted:
            self.fail_open_trials(REASON_BUDGET, f"stopped: {self.budget_stop}")
        else:
            self.fail_open_trials(REASON_INTERRUPTED, "the search stopped before this trial finished")
        if self.ledger is not None:
            self.ledger.persist(self.study)

    def _note_runtime(self, mid: str, result: dict[str, Any]) -> None:
        # A fused member's device time is its share of the group's (device_share_s), and the
        # time since is shared among the group's members.
        share = result.get(record.DEVICE_SHARE_S)
        runtime = share if _is_finite(share) else result.get(RUNTIME_S)
        if _is_finite(runtime):
            members = result.get(FUSED_MEMBERS) if _is_finite(share) else 1
            self._last_runtime[mid] = (float(runtime), time.monotonic(), float(members or 1))  # type: ignore[arg-type]

    def _end_device_time(self, mid: str, trial: optuna.Trial, attrs: dict[str, Any], *, final: bool) -> None:
        """Give a trial that ends before its final report the device-seconds it used: its
        devices x (its last evaluation's ``runtime_s`` + the time since that report came; for a
        fused member its share of them), so that the study's device time, and the budget, count
        every trial that trained. A final report brings its own. Tells the budget's account the
        trial ended."""
        last = self._last_runtime.pop(mid, None)
        self._finals.pop(mid, None)
        if not final and DEVICE_SECONDS not in attrs and last is not None:
            runtime, at, members = last
            devices = trial_devices(trial.params, self.space, self.max_processes)
            attrs[DEVICE_SECONDS] = (runtime + max(0.0, time.monotonic() - at) / members) * devices
        if self.ledger is not None:  # compiling counts in what the budget spent (runtime_s leaves it out)
            self.ledger.trial_ended(mid, spent_device_seconds(attrs))

    def _duplicate_key(self, params: Mapping[str, Any]) -> Hashable:
        """The ``duplicate_key`` of a configuration of the space, as the space defines it (before
        the memory ceilings halve it: they do so alike for its duplicates)."""
        return duplicate_key(trial_spec(self.space, params, device=self.device, max_processes=self.max_processes))

    def _duplicate(self, trial: optuna.Trial, derived: dict[str, Any], run: tuple[int, int]) -> None:
        """Record the proposed ``trial`` as an exact duplicate of trial ``run`` (its number and
        storage id), which trained, or trains, the very same thing: it does not train, counts
        toward ``n_trials``, and ends as ``run`` ends, now if it has (``_take_on``), else when
        it does (``_settle``). Trials run concurrently, so ``run`` may still be training, or be
        asked ahead and not started."""
        number, trial_id = run
        _write(trial, {**derived, DUPLICATE_OF: number})
        self._launched += 1
        ran = self.study._storage.get_trial(trial_id)
        if ran.state.is_finished():
            self._take_on(trial, ran)
        else:
            self._awaiting.setdefault(trial_id, []).append(trial)

    def _tell(self, trial: optuna.Trial, values: Sequence[float] | None = None, *,
              state: TrialState | None = None) -> None:
        """``study.tell``, then the exact duplicates waiting for ``trial`` end as it did."""
        self.study.tell(trial, values, state=state)
        self._settle(trial._trial_id)

    def _settle(self, trial_id: int) -> None:
        """End the duplicates waiting for the trial of storage id ``trial_id``, which just ended."""
        waiting = self._awaiting.pop(trial_id, [])
        if waiting:
            ran = self.study._storage.get_trial(trial_id)
            for trial in waiting:
                self._take_on(trial, ran)

    def _take_on(self, trial: optuna.Trial, ran: optuna.trial.FrozenTrial) -> None:
        """End exact duplicate ``trial`` as ``ran``, the trial that trained it, ended: its state,
        objective values, measurements, curves and intermediate values (not its own bookkeeping,
        ``_RUN_OWN``), so every reader that reads the duplicate per rule reads what its training
        gave. A failure is recorded as the same failure: with the same seed the same training
        fails the same way (a diverged run diverges again). Cut short by the search
        (``interrupted``, ``budget``), both are, and ``resume`` runs one and records the other."""
        attrs = {k: v for k, v in ran.user_attrs.items() if k not in _RUN_OWN}
        reason = ran.user_attrs.get(STATUS_REASON)
        if ran.state != TrialState.COMPLETE:
            attrs[record.STATUS_DETAIL] = (f"not trained: the exact duplicate of trial #{ran.number}, which ended "
                                           f"{ran.state.name} ({reason}): {ran.user_attrs.get(record.STATUS_DETAIL) or '-'}")[:2000]
        _write(trial, attrs, sorted(ran.intermediate_values.items()))
        if reason in NOT_RUN_REASONS:
            self._launched -= 1  # neither counts toward n_trials, as the trial it duplicates
        if ran.state == TrialState.COMPLETE:
            self.study.tell(trial, ran.values)
            self._emit("completed", trial.number, values=list(ran.values), duplicate_of=ran.number)
        elif ran.state == TrialState.PRUNED:
            self.study.tell(trial, state=TrialState.PRUNED)
            self._emit("pruned", trial.number, reason=reason, detail=attrs[record.STATUS_DETAIL], duplicate_of=ran.number)
        else:
            self.study.tell(trial, state=TrialState.FAIL)
            self._emit("failed", trial.number, reason=reason, detail=attrs[record.STATUS_DETAIL], duplicate_of=ran.number)

    def _fail(self, trial: optuna.Trial, reason: str, detail: str) -> None:
        _write(trial, {record.STATUS_REASON: reason, **({record.STATUS_DETAIL: detail[:2000]} if detail else {})})
        self._tell(trial, state=TrialState.FAIL)
        self._emit("failed", trial.number, reason=reason, detail=detail)

    def _emit(self, kind: str, number: int, **data: Any) -> None:
        if self.on_event is not None:
            self.on_event(SearchEvent(kind, number, data))


class TrainingStarted(Callback):
    """Marks a trial ``training_started`` when its devices are reserved and its ranks start.

    Tune asks the searcher for a trial as soon as ``max_concurrent_trials`` allows; the trial
    may then wait for its devices (a two-rank trial behind a one-rank one on a small machine).
    Optuna holds it RUNNING all along, so readers tell waiting from training by this attr
    (``hpsearch.study.display_state``: PENDING until it is set). The trial driver says when
    with a first result flagged ``STARTED_KEY`` (``hpsearch.tune.trainable``).
    """

    def __init__(self, searcher: StudySearcher) -> None:
        self.searcher = searcher

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        if result.get(STARTED_KEY):
            self.searcher.training_started(trial.trial_id)


class InterruptStopper(Stopper):
    """Ends the whole Tune experiment once the searcher was told the search is interrupted,
    lost its store, or ran out of budget."""

    def __init__(self, searcher: StudySearcher, on_stop: Callable[[], None] | None = None) -> None:
        self.searcher = searcher
        self._on_stop = on_stop  # called once, when the search is first found stopping

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        # The budget is checked first: it also writes what the search spent, every few seconds.
        budget_ran_out = bool(self.searcher.check_budget())
        stop = self.searcher.interrupted or self.searcher.store_lost is not None or budget_ran_out
        if stop and self._on_stop is not None:
            on_stop, self._on_stop = self._on_stop, None
            on_stop()
        return stop


def _write(trial: optuna.Trial, attrs: dict[str, Any], intermediates: Sequence[tuple[int, float]] = ()) -> None:
    """The trial's new attrs (and intermediate values) in one transaction of the store."""
    if not attrs and not intermediates:
        return
    writer = getattr(trial.storage, "write_trial_record", None)  # the search's patient storage
    if writer is not None:
        writer(trial._trial_id, attrs, intermediates)
    else:
        write_trial_record(trial.storage, trial._trial_id, attrs, intermediates)


def _phases(asked: float | None, seen: Any) -> dict[str, float]:
    """A trial's phases as it records them: ``asked_at`` (wall clock), then each phase's seconds
    since it was asked, in ``PHASE_NAMES`` order, ``told`` being now. ``seen``: the phases the
    trial's process saw (its last result's ``PHASES_KEY``, ``[[phase, time], ...]``)."""
    told = time.time()
    start = told if asked is None else asked
    times = {"asked": start, **dict(seen or ()), "told": told}
    phases = {"asked_at": round(start, 3)}
    phases.update({name: round(float(times[name]) - start, 4) for name in PHASE_NAMES if _is_finite(times.get(name))})
    # A count and seconds, not times: kept as they are (hpsearch.trials.launcher).
    phases.update({name: round(float(times[name]), 4) for name in (record.FAILED_ATTEMPTS, record.FAILED_ATTEMPTS_S)
                   if _is_finite(times.get(name))})
    return phases


def _no_shared_shape(space: SearchSpace) -> str | None:
    """Why no two configurations of ``space`` can share a shape (``hpsearch.trials.spec.fusion_key``),
    ``None`` where some may: it searches none of the settings fused members may differ in, so
    configurations of one shape are one configuration, which runs once. The searcher then asks
    ahead for none: a search of four batch sizes and two slots had asked all twelve of its
    configurations at its first trial, looking for partners.

    Example:
        >>> from hpsearch.search_spaces import parse_space
        >>> text = "workload: {name: digits_mlp}\\nparameters:\\n  per_device_batch_size: {choices: [8, 16]}\\n"
        >>> _no_shared_shape(parse_space(text + "  base_lr: 0.01\\n"))[:52]
        'no two configurations of the space share a shape: it'
        >>> _no_shared_shape(parse_space(text + "  base_lr: {choices: [0.01, 0.1]}\\n")) is None
        True
    """
    own = (*(f for f in MEMBER_FIELDS if f != "hyperparameters"), *MEMBER_HYPERPARAMETERS)  # not a record name
    if any(name in own and _varies(p) for name, p in space.parameters.items()):
        return None
    return (f"no two configurations of the space share a shape: it searches none of {', '.join(own)}, "
            "which fused members may differ in")


def _varies(parameter: Parameter) -> bool:
    """Whether a searched parameter takes more than one value."""
    if isinstance(parameter, Fixed):
        return False
    if isinstance(parameter, Choice):
        return len(set(map(repr, parameter.choices))) > 1
    return parameter.low < parameter.high


def _derived(spec: TrialSpec) -> dict[str, Any]:
    """What the searcher records of a proposed trial from its spec, before it runs."""
    return {record.EFFECTIVE_BATCH_SIZE: spec.effective_batch_size, record.BASE_BATCH_SIZE: spec.base_batch_size,
            record.LR: spec.lr, record.WARMUP_EPOCHS: spec.warmup_epochs, record.LR_SCHEDULE: spec.schedule,
            EMULATED_RANKS: spec.emulated_ranks, record.SEED: spec.seed}


def _exact(params: dict[str, Any]) -> Hashable:
    """A configuration's exact parameters, as a key."""
    return record.params_key(params)


def _is_finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _finite_or_none(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v
