"""``SearchState``: what a running search knows, shared by the planner and the recorder.

The planner reads it to decide (what ran, what waits to start, what is running) and the recorder
updates it as trials report (their curves, their end, what they taught the memory ceilings and
the fuse decisions). It starts from the study, so a resumed search knows what earlier runs did.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from hpsearch import record
from hpsearch.planner.budget import BudgetLedger
from hpsearch.planner.ceilings import MemoryCeilings
from hpsearch.planner.constraints import equivalence_key
from hpsearch.planner.decisions import Proposal
from hpsearch.planner.fuse_decisions import FuseDecisions
from hpsearch.planner.plan import ConfirmationRun
from hpsearch.planner.report import TrialReport
from hpsearch.planner.sampler import distributions
from hpsearch.planner.saved_models import ModelKeeper
from hpsearch.progress import SearchEvent
from hpsearch.record import DUPLICATE_OF, RAN_AS, STATUS_REASON
from hpsearch.search_spaces import SearchSpace
from hpsearch.study import is_confirmation
from hpsearch.study.reasons import NOT_RUN_REASONS, occupies_its_configuration
from hpsearch.trials.spec import TrialSpec, duplicate_key, fusion_key, ran_shape, trial_spec

__all__ = ["Member", "SearchState", "exact"]


@dataclass
class Member:
    """A trial of the study that a Tune trial runs (alone, or as a member of its fused group):
    what it was proposed as, its curves so far, and its last evaluation's ``runtime_s`` (or
    share of its group's) with when that report came and how many members share the time since."""

    proposal: Proposal
    curves: dict[str, list[Any]] = field(default_factory=lambda: {k: [] for k in record.CURVE_METRICS})
    last_runtime: tuple[float, float, float] | None = None

    @property
    def trial(self) -> optuna.Trial:
        return self.proposal.trial


class SearchState:
    """What the running search knows (see the module's docstring); the arguments are
    ``hpsearch.tune.searcher.StudySearcher``'s."""

    def __init__(self, study: optuna.Study, space: SearchSpace, n_trials: int, device: str, runs_dir: Path,
                 on_event: Callable[[SearchEvent], None] | None = None, ledger: BudgetLedger | None = None,
                 max_processes: int | None = None, slots: int = 1,
                 confirmations: Sequence[ConfirmationRun] = ()) -> None:
        self.study, self.space, self.n_trials, self.device = study, space, n_trials, device
        self.runs_dir, self.on_event, self.ledger, self.max_processes = runs_dir, on_event, ledger, max_processes
        self.slots = max(1, slots)
        #: Set on Ctrl-C/SIGTERM: trials stopped from then on are ``interrupted``, not early-stopped.
        self.interrupted = False
        #: Set when the budget ran out: the running trials are stopped as ``budget``.
        self.budget_ran_out = False
        #: Why the budget stopped the search (set once it ran out, or could not fit the next
        #: trial): trials stopped from then on are ``budget``, not interrupted.
        self.budget_stop: str | None = None
        self.distributions = distributions(space)
        self.metrics = [o.metric for o in space.objectives]
        self.on_oom = str(getattr(space.search, "on_oom", "skip"))
        self.fuse = str(getattr(space.search, "fuse", "auto"))  # not a record name
        self.fuse_max = int(getattr(space.search, "fuse_max", 16))
        self.skip_duplicates = space.constraints.skip_duplicates
        #: How many trials this run launched (exact duplicates recorded count too).
        self.launched = 0
        #: Per running member id (the Tune trial's id for a trial of its own, ``<trial id>#<k>``
        #: for member k of a group): the member.
        self.open: dict[str, Member] = {}
        #: Per Tune trial, its members' ids.
        self.groups: dict[str, list[str]] = {}
        #: Member ids whose devices were reserved and whose ranks started: the trials that ran.
        #: One the search stops before that goes back to the queue.
        self.started: set[str] = set()
        #: Per Tune trial of its own, its final report once it came (it trained to its end).
        self.finals: dict[str, TrialReport] = {}
        #: Configurations asked ahead (for a fused group) and not started yet.
        self.held: list[Proposal] = []
        #: Study numbers of the trials the progress display was told started.
        self.announced: set[int] = set()
        #: Equivalence keys of the configurations tried (``constraints.skip_equivalent``).
        self.tried: set[Hashable] = set()
        # Every configuration tried, by its exact parameters: the trial that ran it. The seed is
        # the search's, so running one again trains the very same thing (random search and TPE
        # propose repeats, some diverging twice).
        self.ran: dict[Hashable, int] = {}
        #: Exact duplicates (``constraints.skip_duplicates``): per ``duplicate_key``, the trial
        #: that trains it (its number and storage id); per such trial still open (by storage id),
        #: the duplicates waiting for its end, which they take on when it comes.
        self.runs: dict[Hashable, tuple[int, int]] = {}
        self.awaiting: dict[int, list[optuna.Trial]] = {}
        #: Every configuration proposed so far, and how many the space has (None: infinitely
        #: many): a random search of a finite space stops once it proposed them all.
        self.seen: set[Hashable] = set()
        self.space_size = space.grid_size()
        self.said_exhausted = False
        #: What fuse: auto decided for each shape, as the study keeps it (a resume follows it).
        self.decisions = FuseDecisions.of_study(study)
        #: Per shape, the largest peak memory a member of its completed trials held.
        self.peaks: dict[Hashable, float] = {}
        #: Per shape, the size its groups take (its first group's configurations shared among
        #: the trial slots).
        self.group_size: dict[Hashable, int] = {}
        #: A confirmation round's runs, proposed first.
        self.confirming = list(confirmations)
        #: The data the study trains on (``hpsearch.data_fingerprint``): every trial's ranks check
        #: theirs against it (``TrialSpec.data_fingerprint``).
        recorded = study.user_attrs.get(record.ATTR_DATA_FINGERPRINT)
        self.data_fingerprint = str(recorded["sha256"]) if isinstance(recorded, Mapping) and "sha256" in recorded \
            else None
        #: Which completed trials keep their saved weights (``workload.save_model``).
        self.models = ModelKeeper.of_study(study, space.workload.save_model)
        trials = study.get_trials(deepcopy=False)
        #: Per configuration, the smallest per-device batch that ran out of memory (on this kind of device).
        self.ceilings = MemoryCeilings.of_trials(trials, device=device)
        for t in trials:
            self._learn(t)

    def _learn(self, t: optuna.trial.FrozenTrial) -> None:
        """What an earlier trial of the study tells the search: its configuration tried, its
        peak memory."""
        space = self.space
        if is_confirmation(t.user_attrs):
            return  # a run of the answer, with a seed of its own: no configuration of the space's
        if t.state == TrialState.COMPLETE and space.resources.memory_per_worker is not None and self.device == "cpu":
            self.note_peak(self.spec({**t.params, **ran_shape(t.user_attrs.get(RAN_AS))}), t.user_attrs)
        # A trial back in the queue (WAITING with its parameters: a stopped search never
        # started it) has not tried its configuration: it runs it when the queue gives it.
        queued = t.state == TrialState.WAITING
        if t.params and occupies_its_configuration(t) and t.user_attrs.get(STATUS_REASON) not in NOT_RUN_REASONS \
                and not queued:
            self.ran.setdefault(exact(t.params), t.number)
            if self.skip_duplicates and DUPLICATE_OF not in t.user_attrs:
                self.runs.setdefault(self.duplicate_key(t.params), (t.number, t._trial_id))
        if t.params and occupies_its_configuration(t):
            self.seen.add(exact(t.params))
            if space.constraints.skip_equivalent and not queued:
                self.tried.add(equivalence_key(self.spec(dict(t.params))))

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its searcher into the experiment state; the study (a live database
        # engine), the display callback and the open Optuna trials stay behind. The study itself
        # is the durable record.
        state = self.__dict__.copy()
        state.update(study=None, on_event=None, open={}, held=[], awaiting={})
        return state

    def spec(self, params: Mapping[str, Any], **given: Any) -> TrialSpec:
        """The spec of a configuration of the space, on this search's device."""
        given.setdefault("data_fingerprint", self.data_fingerprint)
        return trial_spec(self.space, params, device=self.device, max_processes=self.max_processes, **given)

    def duplicate_key(self, params: Mapping[str, Any]) -> Hashable:
        """The ``duplicate_key`` of a configuration of the space, as the space defines it (before
        the memory ceilings halve it: they do so alike for its duplicates)."""
        return duplicate_key(self.spec(params))

    def note_peak(self, spec: TrialSpec, attrs: Mapping[str, Any]) -> None:
        """A completed trial's peak memory a member (a fused one's group peak over its members),
        kept per shape for the fused groups' cap."""
        peak = attrs.get(record.PEAK_MEMORY_BYTES)
        if spec.memory_limit_bytes is None or not isinstance(peak, (int, float)):
            return
        per_member = float(peak) / float(attrs.get(record.FUSED_MEMBERS) or 1)
        key = fusion_key(spec)
        self.peaks[key] = max(per_member, self.peaks.get(key, 0.0))

    def mid(self, trial_id: str, member: int | None) -> str:
        """The member id of a report's ``member`` in Tune trial ``trial_id``."""
        return trial_id if member is None or len(self.groups.get(trial_id, ())) <= 1 else f"{trial_id}#{int(member)}"

    def emit(self, kind: str, number: int, **data: Any) -> None:
        """Tell the progress display."""
        if self.on_event is not None:
            self.on_event(SearchEvent(kind, number, data))

    def never_started(self, mid: str, trial: optuna.Trial) -> bool:
        """Whether member ``mid`` never got its devices (the search stopped first), and is one
        of the search's own configurations: a confirmation run is its round's, not the queue's."""
        return mid not in self.started and not is_confirmation(trial.user_attrs)

    def queued(self) -> bool:
        """Whether the study's queue holds a configuration to run (WAITING)."""
        return bool(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def exact(params: Mapping[str, Any]) -> Hashable:
    """A configuration's exact parameters, as a key."""
    return record.params_key(params)
