"""The orchestrator: one search = one Tune experiment over one Optuna study.

``run_search`` and ``resume_search`` check the space and its workload, start (or join) Ray,
plan the search against the cluster (``hpsearch.planner.plan``), create or reopen the study, and
run the Tune experiment (``hpsearch.tune.experiment``, loaded while the workload is checked:
it imports Ray Tune); then, while the caller's ``next_round`` has confirmation runs for the
study (``hpsearch.planner.confirmation``: the answer it gives, run as new trials), one more Tune
experiment each, on the same Ray, desk and warm ranks. ``confirm_study`` runs only such
rounds. Trials launch their own ranks rather than run as Ray Train jobs (docs/design.md,
"Decisions").
"""

from __future__ import annotations

import glob
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, closing, contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import optuna
from optuna.trial import TrialState

from hpsearch import record
from hpsearch.errors import StoreError, StudyExistsError
from hpsearch.planner.budget import budget_of, budget_status, settle_orphans, spent_of, write_budget
from hpsearch.planner.plan import ConfirmationRun, SearchPlan, grid_progress, grid_warning, plan_search
from hpsearch.planner.sampler import create_sampler
from hpsearch.progress import SearchEvent
from hpsearch.record import ATTR_DATA_FINGERPRINT, ATTR_N_TRIALS
from hpsearch.search_spaces import Budget, SearchSpace
from hpsearch.store import (
    load_study,
    open_storage,
    patient_storage,
    redact_url,
    return_to_queue,
    space_of_study,
    sqlite_file,
    study_attrs,
    study_names,
)
from hpsearch.store.locks import study_lock
from hpsearch.store.ownership import Owner, claim_runs_dir, store_identity, study_uid
from hpsearch.store.settings import Settings, study_runs_dir
from hpsearch.study import is_confirmation
from hpsearch.study.reasons import (
    REASON_INTERRUPTED,
    counts_toward_n_trials,
    cut_short_by_the_search,
)
from hpsearch.tune.pools import LocalPool, PoolOptions
from hpsearch.workload_check import SearchCheck, check_for_search, check_study_data

if TYPE_CHECKING:
    from hpsearch.tune.reservations import Reservations  # imports Ray: loaded with the engine (``_engine``)

__all__ = ["RANKS_LOG", "NextRound", "confirm_study", "resume_search", "run_search"]

#: What a search calls once its trials are done, and after each confirmation round: the next
#: round's runs for the study on the plan's cluster, or none (confirmed, out of its budget, off).
NextRound = Callable[[optuna.Study, SearchPlan], Sequence[ConfirmationRun]]

log = logging.getLogger("hpsearch")


def run_search(
    space: SearchSpace,
    study_name: str,
    settings: Settings,
    *,
    on_event: Callable[[SearchEvent], None] | None = None,
    on_plan: Callable[[SearchPlan], None] | None = None,
    budget: Budget | None = None,
    next_round: NextRound | None = None,
) -> SearchPlan:
    """Run a whole search: start (or join) Ray, create the study, run the Tune experiment, then
    the confirmation rounds ``next_round`` gives (none without it).

    Nothing is written to the store until the space, the workload and the cluster's resources
    have been checked, so a bad search leaves no half-made study behind. ``budget`` replaces
    the limits of the space's ``search.budget`` that it names (``Budget.merged``).

    Raises:
        StudyExistsError: the store already has a study of that name.
        StudyBusyError: another search writes this SQLite file or this study.
        ResourceError: a trial could never fit on the cluster.
        WorkloadError: the workload cannot be resolved.
        SearchInterrupted: Ctrl-C or SIGTERM stopped the search (the study stays consistent).
    """
    started = time.monotonic()  # the wall-clock budget counts Ray's start-up too
    _refuse_existing(settings, study_name)
    oversized = grid_warning(space)  # n_trials above the grid's size: said now, and the plan runs the grid once
    if oversized is not None:
        log.warning("warning: %s", oversized)
    # A typo, an unimportable plugin, an unknown option or a batch larger than the data fails
    # here: before Ray starts and before any file is written.
    with _local_pool(space, settings, study_name) as local:
        engine, found = _check_workload(space, local)
        samples_per_epoch = found.train_size
        with study_lock(settings.storage, study_name):
            _refuse_existing(settings, study_name)  # another search may have made it meanwhile
            with engine.ray_session(settings.ray_address) as cluster:
                plan = replace(plan_search(space, study_name, settings, cluster),
                               budget=space.search.budget.merged(budget), run_started=started)
                # Closed whatever happens before Tune's trials start (a failing on_plan, a store
                # that refuses the study): on a Ray the search joined, the nodes' pool actors and
                # their rank processes and MPS daemons outlived a failed start.
                with closing(engine.start_desk(space, plan, local)) as desk:
                    if on_plan is not None:
                        on_plan(plan)
                    study = _create_study(_search_storage(settings, on_event), study_name, space, plan.n_trials)
                    _record_data(study, found)
                    _claim_runs_dir(settings, study)
                    write_budget(study, plan.budget)
                    for params in space.search.enqueue:  # the configurations the space runs first
                        study.enqueue_trial(dict(params))
                    engine.run_tune(space, study, plan, on_event, samples_per_epoch, desk)
                    _confirm(engine, space, study, plan, next_round, on_event, samples_per_epoch, desk)
    return plan


def _confirm(engine: _Engine, space: SearchSpace, study: optuna.Study, plan: SearchPlan,
             next_round: NextRound | None, on_event: Callable[[SearchEvent], None] | None, samples_per_epoch: int,
             desk: Reservations) -> int:
    """Run the confirmation rounds ``next_round`` gives, each as a Tune experiment of its runs on
    the search's Ray and warm ranks, until it gives none; returns how many ran. Each round's
    budget account starts from what the study spent so far (``search.budget`` holds them too)."""
    rounds = 0
    while next_round is not None:
        runs = list(next_round(study, plan))
        if not runs:
            break
        rounds += 1
        engine.run_tune(space, study, replace(plan, n_trials=len(runs), spent=spent_of(study)), on_event,
                        samples_per_epoch, desk, confirmations=runs)
    return rounds


def _refuse_existing(settings: Settings, study_name: str) -> None:
    """Raise ``StudyExistsError`` when the store has a study of that name. A SQLite file that
    does not exist has none, and is not created by asking."""
    db = sqlite_file(settings.storage)
    if db is not None and not db.exists():
        return
    if study_name in study_names(open_storage(settings.storage)):
        raise StudyExistsError(
            f"study {study_name!r} already exists in {redact_url(settings.storage)}; "
            f"finish it with 'hpsearch resume {study_name}', or pick a new name with --study NAME"
        )


def resume_search(
    study_name: str,
    settings: Settings,
    *,
    n_trials: int | None = None,
    on_event: Callable[[SearchEvent], None] | None = None,
    on_plan: Callable[[SearchPlan], None] | None = None,
    budget: Budget | None = None,
    study: optuna.Study | None = None,
    next_round: NextRound | None = None,
) -> SearchPlan | None:
    """Finish a study whose search was stopped (killed, interrupted, out of budget, or extended),
    then run the confirmation rounds ``next_round`` gives.

    Completed, pruned and failed trials stay as they are. Trials left RUNNING by a dead
    orchestrator become FAIL with ``status_reason`` ``interrupted``; their configurations, and
    those of trials the budget stopped, are queued to run first. Then trials run until the study
    has ``n_trials`` finished ones (the space's ``n_trials``, or the new total given here, which
    the study keeps), or its budget is spent. ``budget`` replaces the limits of the study's
    budget that it names (the study keeps it); the budget counts what every run spent.
    ``study``: the study, when the caller has loaded it already (``hpsearch.resume``).

    A grid study's total is at most its grid's configurations (a larger one is said and
    clamped); when every configuration has run and none is to run again, it says so and returns
    ``None`` without starting Ray or checking the workload (docs/search.md, "A grid's size").

    Raises:
        StudyNotFoundError: no such study in the store.
        StudyBusyError: another search writes this study (or this SQLite file).
        SpaceError: the study was not started by hpsearch, or its space no longer validates.
        SearchInterrupted: Ctrl-C or SIGTERM stopped the search again.
    """
    started = time.monotonic()  # the wall-clock budget counts Ray's start-up too
    # Loaded once: an Optuna study object reads its trials from the store at each call, so the
    # one loaded before the lock sees what a search that held it last wrote.
    study = study if study is not None else load_study(study_name, open_storage(settings.storage))
    space = space_of_study(study)
    target = n_trials if n_trials is not None else int(study.user_attrs.get(ATTR_N_TRIALS, space.search.n_trials))
    trials = study.get_trials(deepcopy=False)
    grid = grid_progress(space, trials)
    if grid is not None and target > grid.configurations:
        # A grid runs each configuration once: more is a total the study can never reach.
        given = f"--n-trials {target}" if n_trials is not None else f"the study's n_trials {target}"
        log.warning("warning: %s is more than the grid's %d configurations: the study's total is %d",
                    given, grid.configurations, grid.configurations)
        target = grid.configurations
    if grid is not None and grid.exhausted and not _left_to_rerun(trials):
        # Nothing the search could run: said, and ended before the workload check and Ray
        # (Ray's start-up and shutdown cost seconds, here to run nothing). The answer's confirmation
        # is 'hpsearch confirm', which starts what it needs.
        with study_lock(settings.storage, study_name):
            study.set_user_attr(ATTR_N_TRIALS, target)
        log.warning("warning: study %r: %s; nothing to run (a grid runs each configuration once: widen its choices "
                    "in a new study for more; 'hpsearch confirm %s' runs its answer as new trials)",
                    study_name, grid.describe(), study_name)
        return None
    with _local_pool(space, settings, study_name) as local:
        engine, found = _check_workload(space, local)  # before Ray, before the study changes
        samples_per_epoch = found.train_size
        # Other data than the study's (another Python's standard library for text_lm) stop the
        # resume here, before anything runs or is written.
        check_study_data(study_name, study.user_attrs.get(ATTR_DATA_FINGERPRINT), found, space.workload.name)
        with study_lock(settings.storage, study_name):
            _record_data(study, found)
            _claim_runs_dir(settings, study)
            if n_trials is not None or target != study.user_attrs.get(ATTR_N_TRIALS):
                study.set_user_attr(ATTR_N_TRIALS, target)
            if budget is not None:
                write_budget(study, budget_of(study, space.search.budget).merged(budget))
            settle_orphans(study, space)  # the device time of trials a dead search left RUNNING
            requeued = _requeue_interrupted(study, set(space.parameters))
            with engine.ray_session(settings.ray_address) as cluster, ExitStack() as stack:
                plan = plan_search(space, study_name, settings, cluster)
                desk = stack.enter_context(closing(engine.start_desk(space, plan, local)))  # as in run_search
                finished = sum(counts_toward_n_trials(t) for t in study.get_trials(deepcopy=False))
                to_run = max(0, target - finished)
                grid = grid_progress(space, study.get_trials(deepcopy=False))  # the interrupted ones requeued
                if grid is not None:
                    to_run = min(to_run, grid.left)
                status = budget_status(study, space.search.budget)
                if status.spent_out:
                    to_run = 0  # the budget is spent: 'resume --budget' with a larger one goes on
                plan = replace(plan, n_trials=to_run, finished=finished, requeued=requeued, budget=status.budget,
                               spent=spent_of(study), run_started=started)
                if on_plan is not None:
                    on_plan(plan)
                # The same study through the search's patient storage, with the space's sampler.
                study = optuna.load_study(study_name=study_name, storage=_search_storage(settings, on_event),
                                          sampler=create_sampler(space))
                if to_run:
                    engine.run_tune(space, study, plan, on_event, samples_per_epoch, desk)
                if not status.spent_out:
                    _confirm(engine, space, study, plan, next_round, on_event, samples_per_epoch, desk)
    return plan


def confirm_study(
    study_name: str,
    settings: Settings,
    next_round: NextRound,
    *,
    on_event: Callable[[SearchEvent], None] | None = None,
    on_plan: Callable[[SearchPlan], None] | None = None,
) -> SearchPlan:
    """Run confirmation rounds on a study (``hpsearch confirm``): start (or join) Ray and the warm
    ranks as ``resume_search`` does, and run the rounds ``next_round`` gives, none of the
    search's own trials. A study started before confirmation existed is confirmable.

    Raises:
        StudyNotFoundError: no such study in the store.
        StudyBusyError: another search writes this study (or this SQLite file).
        SpaceError: the study was not started by hpsearch, or its space no longer validates.
        SearchInterrupted: Ctrl-C or SIGTERM stopped it (the runs cut short are marked).
    """
    started = time.monotonic()
    study = load_study(study_name, open_storage(settings.storage))
    space = space_of_study(study)
    with _local_pool(space, settings, study_name) as local:
        engine, found = _check_workload(space, local)
        samples_per_epoch = found.train_size
        check_study_data(study_name, study.user_attrs.get(ATTR_DATA_FINGERPRINT), found, space.workload.name)
        with study_lock(settings.storage, study_name):
            _record_data(study, found)
            _claim_runs_dir(settings, study)
            settle_orphans(study, space)
            _requeue_interrupted(study, set(space.parameters))  # a dead search's trials marked, not rerun here
            with engine.ray_session(settings.ray_address) as cluster, ExitStack() as stack:
                plan = plan_search(space, study_name, settings, cluster)
                desk = stack.enter_context(closing(engine.start_desk(space, plan, local)))
                status = budget_status(study, space.search.budget)
                plan = replace(plan, n_trials=0, finished=sum(counts_toward_n_trials(t) for t in
                                                             study.get_trials(deepcopy=False)),
                               budget=status.budget, spent=spent_of(study), run_started=started)
                if on_plan is not None:
                    on_plan(plan)
                study = optuna.load_study(study_name=study_name, storage=_search_storage(settings, on_event),
                                          sampler=create_sampler(space))
                _confirm(engine, space, study, plan, next_round, on_event, samples_per_epoch, desk)
    return plan


def _claim_runs_dir(settings: Settings, study: optuna.Study) -> None:
    """Write this store's study into its runs folder's owner marker (``hpsearch.store.ownership``), so
    that ``delete --files`` on a copy of the store does not delete the files this study uses."""
    runs_dir = study_runs_dir(settings, study.study_name)
    claim_runs_dir(runs_dir, Owner(store_identity(settings.storage, runs_dir), study.study_name, study_uid(study)))


def _requeue_interrupted(study: optuna.Study, parameters: set[str]) -> int:
    """Put the trials a dead orchestrator left RUNNING that never started (no
    ``training_started``: asked ahead, or waiting for their devices) back in the queue as they
    are, mark those that trained interrupted, and queue the configuration of every trial the
    search cut short (interrupted, or stopped by the budget) not queued yet to run again.
    Returns how many were queued, both kinds.

    A trial killed while its parameters were being chosen (the sampler writes them one by one)
    has only some of ``parameters``: it never ran and has no configuration to rerun, so it is
    marked interrupted and not queued. A confirmation run is its round's: marked, not queued."""
    storage = study._storage
    returned = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not t.user_attrs.get(record.TRAINING_STARTED) and parameters <= set(t.params) \
                and not is_confirmation(t.user_attrs):
            return_to_queue(storage, t._trial_id)  # nothing ran: not a failed trial
            returned += 1
            continue
        storage.set_trial_user_attr(t._trial_id, record.STATUS_REASON, REASON_INTERRUPTED)
        storage.set_trial_user_attr(t._trial_id, record.STATUS_DETAIL, "the search stopped before this trial finished")
        storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
    # A finished trial cannot be written to again, so a rerun points back at its original
    # (``rerun_of``) and an interrupted trial counts as queued once some trial does.
    trials = study.get_trials(deepcopy=False)
    rerun = {t.user_attrs.get(record.RERUN_OF) for t in trials}
    queued = 0
    for t in trials:
        # A confirmation run cut short is not rerun as one of the search's own (its seed and
        # configuration are its round's): the next round, if its answer still needs one, runs anew.
        if cut_short_by_the_search(t) and t.number not in rerun and parameters <= set(t.params) \
                and not is_confirmation(t.user_attrs):
            study.enqueue_trial(dict(t.params), user_attrs={record.RERUN_OF: t.number})
            queued += 1
    return returned + queued


def _left_to_rerun(trials: Sequence[optuna.trial.FrozenTrial]) -> bool:
    """Whether ``resume`` has trials of the study to run again: ones a dead search left RUNNING
    (marked interrupted, then rerun), ones queued, or ones the search cut short that no trial
    has rerun yet (``_requeue_interrupted``)."""
    rerun = {t.user_attrs.get(record.RERUN_OF) for t in trials}
    return any(t.state in (TrialState.RUNNING, TrialState.WAITING)
               or (cut_short_by_the_search(t) and t.number not in rerun and not is_confirmation(t.user_attrs))
               for t in trials)


def _record_data(study: optuna.Study, found: SearchCheck) -> None:
    """Record the data the study trains on (``hpsearch.data_fingerprint``), where its workload
    names them and the study has none recorded yet: its trials' ranks check theirs against it."""
    attr = found.fingerprint_attr()
    if attr is not None and ATTR_DATA_FINGERPRINT not in study.user_attrs:
        study.set_user_attr(ATTR_DATA_FINGERPRINT, attr)


def _check_workload(space: SearchSpace, local: LocalPool | None) -> tuple[_Engine, SearchCheck]:
    """Check the space's workload (``hpsearch.workload_check.check_for_search``) before Ray starts,
    loading the engine meanwhile (``_engine``); return the engine and what the check found (the
    training set's size, the data's fingerprint), or raise the check's error.

    The check imports torch and the workload's module and builds the data once. With a local
    rank pool (``local``) it runs in one of the pool's warm processes, which import all that
    anyway, so the search's own process never imports torch (about 1.2 CPU-seconds). Ray Tune
    loads meanwhile, in a thread (about 1 s that would otherwise come after the check).
    """
    with ThreadPoolExecutor(1, thread_name_prefix="hpsearch-import-tune") as pool:
        engine = pool.submit(_engine)
        found = check_for_search(space) if local is None else local.check(space)
    for warning in found.warnings:
        log.warning("warning: %s", warning)
    return engine.result(), found


#: What Ray reads from the environment as it loads, set before it does (a user's own settings win).
RAY_ENVIRONMENT = {
    # Tune's default CSV/JSON/TensorBoard loggers would write every result a second time; the
    # study is the record.
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
    # Tune's newer console output prints its own tables even at verbose=0; hpsearch shows its
    # own progress, so use the classic reporter, which verbose=0 silences.
    "RAY_AIR_NEW_OUTPUT": "0",
    # hpsearch handles Ctrl-C itself (the study must record which trials were cut short).
    "TUNE_DISABLE_SIGINT_HANDLER": "1",
    # A trial's first report says only that its devices were reserved (the driver's STARTED_KEY);
    # Tune's strict check wants the scheduler's metric in every report and would end every ASHA
    # search on that one. The searcher records a trial that never reports its metric itself.
    "TUNE_DISABLE_STRICT_METRIC_CHECKING": "1",
}


class _Engine(Protocol):
    """What a search calls of ``hpsearch.tune.experiment``, in this order; mypy checks the
    module against it where ``_engine`` returns it."""

    def ray_session(self, address: str | None) -> AbstractContextManager[dict[str, Any]]: ...

    def start_desk(self, space: SearchSpace, plan: SearchPlan, local: LocalPool | None) -> Reservations: ...

    def run_tune(self, space: SearchSpace, study: optuna.Study, plan: SearchPlan,
                 on_event: Callable[[SearchEvent], None] | None, samples_per_epoch: int, desk: Reservations,
                 confirmations: Sequence[ConfirmationRun] = ...) -> None: ...


def _engine() -> _Engine:
    """``hpsearch.tune.experiment``, with Ray's environment set before Ray loads."""
    for name, value in RAY_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    # Ray Tune and the modules that import it: 1-2 s, loaded only once a search is sure to run.
    from hpsearch.tune import experiment

    return experiment


#: Where the ranks of a local CPU search write what they print, in the study's runs folder.
RANKS_LOG = "ranks.log"


@contextmanager
def _local_pool(space: SearchSpace, settings: Settings, study_name: str) -> Iterator[LocalPool | None]:
    """The warm rank pool of this machine, started before Ray when the search starts a local
    Ray for CPU trials (``hpsearch.tune.pools.LocalPool``): its processes import torch and the
    workload while Ray starts. ``None`` when the search joins a running Ray, or may run on GPUs
    (there the pool actors start once Ray says which GPUs there are)."""
    ray = sys.modules.get("ray")  # not imported yet: not initialized either
    if settings.ray_address or (ray is not None and ray.is_initialized()) or not _cpu_only(space):
        yield None
        return
    local = LocalPool(PoolOptions.of_space(space, "cpu", sys.path),
                      output=study_runs_dir(settings, study_name) / RANKS_LOG)
    try:
        yield local
    finally:
        local.close()


def _cpu_only(space: SearchSpace) -> bool:
    """Whether the search's trials run on CPU whatever Ray finds: ``device: cpu``, or ``auto``
    on a machine with no NVIDIA device."""
    device = space.resources.device
    return device == "cpu" or (device == "auto" and not glob.glob("/dev/nvidia[0-9]*"))


def _search_storage(settings: Settings, on_event: Callable[[SearchEvent], None] | None) -> optuna.storages.BaseStorage:
    """The store as the search writes it: patient with a database that restarts."""
    try:
        patience = float(settings.store_patience_s)
    except ValueError:
        patience = -1.0
    if not patience >= 0:
        raise StoreError(f"HPSEARCH_STORE_PATIENCE_S must be a number of seconds >= 0, got {settings.store_patience_s!r}")

    def on_wait(message: str) -> None:
        if on_event is not None:
            on_event(SearchEvent("store", -1, {"detail": message}))
        else:
            log.warning(message)

    return patient_storage(settings.storage, patience, on_wait)


def _create_study(storage: optuna.storages.BaseStorage, name: str, space: SearchSpace,
                  n_trials: int | None = None) -> optuna.Study:
    """The study of a new search; ``n_trials`` is its total of finished trials as planned (a
    grid's size where ``search.n_trials`` is larger: its status then reads "4 of 4", not "4 of 8");
    ``search.n_trials`` where not given."""
    if n_trials is None:
        n_trials = space.search.n_trials
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        directions=[o.direction for o in space.objectives],
        sampler=create_sampler(space),
    )
    with warnings.catch_warnings():
        # Metric names show up in optuna-dashboard; the API is stable enough for that use.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([o.metric for o in space.objectives])
    for key, value in study_attrs(space.source_text, [o.metric for o in space.objectives], n_trials).items():
        study.set_user_attr(key, value)
    return study


