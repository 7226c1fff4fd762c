"""The orchestrator: one search = one Tune experiment over one Optuna study.

``run_search`` and ``resume_search`` check the space and its workload, start (or join) Ray,
plan the search against the cluster (``hpsearch.tune.plan``), create or reopen the study, and
run the Tune experiment: the ``StudySearcher`` asks and tells the study
(``hpsearch.tune.searcher``), and every trial runs ``hpsearch.tune.trainable``. Ray Train's
TorchTrainer was measured slower to start (20-25 s per toy trial on 2 cores), reserves the
workers apart from the trial, and leaks placement groups when Tune stops a trial early
(ray-project/ray#54305), so trials launch their own ranks.
"""

from __future__ import annotations

import glob
import importlib
import logging
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import optuna
from optuna.trial import TrialState

from hpsearch.budget import BudgetLedger, budget_of, budget_status, settle_orphans, spent_of, write_budget
from hpsearch.errors import (
    SearchInterrupted,
    StoreError,
    StoreLostError,
    StudyExistsError,
)
from hpsearch.locks import study_lock
from hpsearch.progress import SearchEvent
from hpsearch.reasons import (
    REASON_INTERRUPTED,
    counts_toward_n_trials,
    cut_short_by_the_search,
    occupies_its_configuration,
)
from hpsearch.sampler import create_sampler
from hpsearch.search_spaces import Budget, SearchSpace, record
from hpsearch.search_spaces.record import ATTR_N_TRIALS
from hpsearch.settings import Settings, study_runs_dir
from hpsearch.store import (
    load_study,
    open_storage,
    patient_storage,
    redact_url,
    space_of_study,
    sqlite_file,
    study_attrs,
    study_names,
)
from hpsearch.tune.plan import SEARCH_SAMPLERS, SearchPlan, plan_search, runnable_grid_points
from hpsearch.tune.ray_session import ray_session
from hpsearch.tune.rungs import asha_scheduler
from hpsearch.workloads import check_for_search

__all__ = ["RANKS_LOG", "resume_search", "run_search"]

log = logging.getLogger("hpsearch")


def run_search(
    space: SearchSpace,
    study_name: str,
    settings: Settings,
    *,
    on_event: Callable[[SearchEvent], None] | None = None,
    on_plan: Callable[[SearchPlan], None] | None = None,
    budget: Budget | None = None,
) -> SearchPlan:
    """Run a whole search: start (or join) Ray, create the study, run the Tune experiment.

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
    # A typo, an unimportable plugin, an unknown option or a batch larger than the data fails
    # here: before Ray starts and before any file is written.
    with _local_ranks(space, settings, study_name) as local:
        samples_per_epoch = _check_workload(space, local)
        with study_lock(settings.storage, study_name):
            _refuse_existing(settings, study_name)  # another search may have made it meanwhile
            with ray_session(settings.ray_address) as cluster:
                plan = replace(plan_search(space, study_name, settings, cluster),
                               budget=space.search.budget.merged(budget), run_started=started)
                reservations = _warm_ranks(space, plan, local)
                if on_plan is not None:
                    on_plan(plan)
                study = _create_study(_search_storage(settings, on_event), study_name, space)
                write_budget(study, plan.budget)
                for params in space.search.enqueue:  # the configurations the space runs first
                    study.enqueue_trial(dict(params))
                _run_tune(space, study, plan, on_event, samples_per_epoch, reservations)
    return plan


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
) -> SearchPlan:
    """Finish a study whose search was stopped (killed, interrupted, out of budget, or extended).

    Completed, pruned and failed trials stay as they are. Trials left RUNNING by a dead
    orchestrator become FAIL with ``status_reason`` ``interrupted``; their configurations, and
    those of trials the budget stopped, are queued to run first. Then trials run until the study
    has ``n_trials`` finished ones (the space's ``n_trials``, or the new total given here, which
    the study keeps), or its budget is spent. ``budget`` replaces the limits of the study's
    budget that it names (the study keeps it); the budget counts what every run spent.

    Raises:
        StudyNotFoundError: no such study in the store.
        StudyBusyError: another search writes this study (or this SQLite file).
        SpaceError: the study was not started by hpsearch, or its space no longer validates.
        SearchInterrupted: Ctrl-C or SIGTERM stopped the search again.
    """
    started = time.monotonic()  # the wall-clock budget counts Ray's start-up too
    storage = open_storage(settings.storage)
    space = space_of_study(load_study(study_name, storage))
    with _local_ranks(space, settings, study_name) as local:
        samples_per_epoch = _check_workload(space, local)  # before Ray, before the study changes
        with study_lock(settings.storage, study_name):
            study = load_study(study_name, storage)
            if n_trials is not None:
                study.set_user_attr(ATTR_N_TRIALS, n_trials)
            if budget is not None:
                write_budget(study, budget_of(study, space.search.budget).merged(budget))
            target = int(study.user_attrs.get(ATTR_N_TRIALS, space.search.n_trials))
            settle_orphans(study, space)  # the device time of trials a dead search left RUNNING
            requeued = _requeue_interrupted(study, set(space.parameters))
            with ray_session(settings.ray_address) as cluster:
                plan = plan_search(space, study_name, settings, cluster)
                reservations = _warm_ranks(space, plan, local)
                finished = sum(counts_toward_n_trials(t) for t in study.get_trials(deepcopy=False))
                to_run = max(0, target - finished)
                if space.search.sampler in SEARCH_SAMPLERS:
                    runnable = {_key(p) for p in runnable_grid_points(space, plan.device, plan.devices)}
                    taken = {_key(t.params) for t in study.get_trials(deepcopy=False)
                             if t.params and occupies_its_configuration(t)}
                    to_run = min(to_run, len(runnable - taken))
                status = budget_status(study, space.search.budget)
                if status.spent_out:
                    to_run = 0  # the budget is spent: 'resume --budget' with a larger one goes on
                plan = replace(plan, n_trials=to_run, finished=finished, requeued=requeued, budget=status.budget,
                               spent=spent_of(study), run_started=started)
                if on_plan is not None:
                    on_plan(plan)
                if to_run:
                    study = optuna.load_study(study_name=study_name, storage=_search_storage(settings, on_event),
                                              sampler=create_sampler(space))
                    _run_tune(space, study, plan, on_event, samples_per_epoch, reservations)
    return plan


def _requeue_interrupted(study: optuna.Study, parameters: set[str]) -> int:
    """Mark the trials a dead orchestrator left RUNNING as interrupted, and queue the
    configuration of every trial the search cut short (interrupted, or stopped by the budget)
    not queued yet to run again. Returns how many were queued.

    A trial killed while its parameters were being chosen (the sampler writes them one by one)
    has only some of ``parameters``: it never ran and has no configuration to rerun, so it is
    marked interrupted and not queued."""
    storage = study._storage
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        storage.set_trial_user_attr(t._trial_id, record.STATUS_REASON, REASON_INTERRUPTED)
        storage.set_trial_user_attr(t._trial_id, record.STATUS_DETAIL, "the search stopped before this trial finished")
        storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
    # A finished trial cannot be written to again, so a rerun points back at its original
    # (``rerun_of``) and an interrupted trial counts as queued once some trial does.
    trials = study.get_trials(deepcopy=False)
    rerun = {t.user_attrs.get(record.RERUN_OF) for t in trials}
    queued = 0
    for t in trials:
        if cut_short_by_the_search(t) and t.number not in rerun and parameters <= set(t.params):
            study.enqueue_trial(dict(t.params), user_attrs={record.RERUN_OF: t.number})
            queued += 1
    return queued


def _key(params: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(params.items()))


def _check_workload(space: SearchSpace, local: Any) -> int:
    """Check the space's workload (``hpsearch.workloads.check_for_search``) before Ray starts;
    return the training set's size, or raise the check's error.

    The check imports torch and the workload's module and builds the data once. With a local
    rank pool (``local``, ``hpsearch.tune.pools.LocalRanks``) it runs in one of the pool's warm
    processes, which import all that anyway, so the search's own process never imports torch
    (about 1.2 CPU-seconds). Ray Tune and the searcher are imported meanwhile, in a thread
    (about 1 s that would otherwise come after the check).
    """
    with ThreadPoolExecutor(1, thread_name_prefix="hpsearch-import-tune") as pool:
        pool.submit(importlib.import_module, "hpsearch.tune.searcher")  # and ray.tune with it
        found = check_for_search(space) if local is None else local.check(space)
    for warning in found.warnings:
        log.warning("warning: %s", warning)
    return int(found.train_size)


#: Where the ranks of a local CPU search write what they print, in the study's runs folder.
RANKS_LOG = "ranks.log"


@contextmanager
def _local_ranks(space: SearchSpace, settings: Settings, study_name: str) -> Iterator[Any]:
    """The warm rank pool of this machine, started before Ray when the search starts a local
    Ray for CPU trials (``hpsearch.tune.pools.LocalRanks``): its processes import torch and the
    workload while Ray starts. ``None`` when the search joins a running Ray, or may run on GPUs
    (there the pool actors start once Ray says which GPUs there are)."""
    ray = sys.modules.get("ray")  # not imported yet: not initialized either
    if settings.ray_address or (ray is not None and ray.is_initialized()) or not _cpu_only(space):
        yield None
        return
    from hpsearch.tune.pools import LocalRanks  # imports ray (0.3 s): after the pool's processes start

    local = LocalRanks(workload=space.workload.name, cpus_per_worker=space.resources.cpus_per_worker,
                       ranks_at_once=_ranks_at_once(space), reuse=space.resources.reuse_workers,
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


def _ranks_at_once(space: SearchSpace) -> int | None:
    """The most ranks the search runs at once, where its space bounds it (``search.max_concurrent``
    trials of its largest world size); ``None``: as many as the nodes hold."""
    if space.search.max_concurrent is None:
        return None
    largest = 1 if space.resources.emulate_ranks == "on" else space.max_world_size()
    return space.search.max_concurrent * largest


def _warm_ranks(space: SearchSpace, plan: SearchPlan, local: Any) -> Any:
    """Start the search's reservation desk and warm rank pools (``hpsearch.tune.reservations``) as soon as
    Ray runs, so their processes import torch and the workload while the search checks the
    workload, writes the study and sets Tune up. They end with the Ray session (and are closed
    explicitly after the trials, for a cluster that outlives the search). ``local``: this
    machine's pool, already started (``_local_ranks``)."""
    from hpsearch.tune.reservations import Reservations  # imports ray: only once Ray runs

    mps = space.resources.mps
    reservations = Reservations(workload=space.workload.name, device=plan.device,
                                cpus_per_worker=space.resources.cpus_per_worker,
                                gpus_per_worker=space.resources.gpus_per_worker,
                                ranks_at_once=_ranks_at_once(space), reuse=space.resources.reuse_workers,
                                mps=mps, local=local if plan.device == "cpu" else None)
    if mps == "on" and plan.device == "cuda":
        try:
            reservations.refuse_without_mps()  # before the study is written
        except BaseException:
            reservations.close()
            raise
    return reservations


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


def _create_study(storage: optuna.storages.BaseStorage, name: str, space: SearchSpace) -> optuna.Study:
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
    for key, value in study_attrs(space.source_text, [o.metric for o in space.objectives],
                                  space.search.n_trials).items():
        study.set_user_attr(key, value)
    return study


def _run_tune(space: SearchSpace, study: optuna.Study, plan: SearchPlan,
              on_event: Callable[[SearchEvent], None] | None, samples_per_epoch: int, reservations: Any) -> None:
    # Ray Tune, and the engine's modules that import it (1-2 s): only once a search runs.
    from ray import tune

    from hpsearch.tune.searcher import InterruptStopper, StudySearcher, TrainingStarted
    from hpsearch.tune.trainable import DRIVER_RESOURCES, trainable

    plan.runs_dir.mkdir(parents=True, exist_ok=True)
    ledger = BudgetLedger(plan.budget, plan.spent, plan.run_started if plan.run_started is not None else time.monotonic())
    searcher = StudySearcher(study, space, plan.n_trials, plan.device, plan.runs_dir, max_processes=plan.devices,
                             on_event=on_event, ledger=ledger)

    stopper = InterruptStopper(searcher)
    tuner = tune.Tuner(
        # The same request for every trial, so Tune always reuses a finished trial's process;
        # each trial then reserves its own devices (hpsearch.tune.trainable).
        tune.with_resources(trainable, tune.PlacementGroupFactory([DRIVER_RESOURCES])),
        tune_config=tune.TuneConfig(
            search_alg=searcher, num_samples=plan.n_trials, max_concurrent_trials=plan.max_concurrent,
            scheduler=_scheduler(space, samples_per_epoch, study),
            # A new trial runs in the process of a finished one: no Ray worker to start.
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name="tune", storage_path=str(plan.runs_dir), verbose=0, stop=stopper, callbacks=[TrainingStarted(searcher)],
            failure_config=tune.FailureConfig(max_failures=0),
        ),
    )
    try:
        with _stop_on_signals(searcher):
            tuner.fit()
    except StoreLostError:
        raise  # nothing more can be written; resume marks the open trials interrupted
    finally:
        reservations.close()
        if searcher.store_lost is None:
            searcher.end_run()  # open trials: 'budget' or 'interrupted'; what the run spent
    if searcher.store_lost is not None:
        raise searcher.store_lost
    if searcher.interrupted:
        raise SearchInterrupted(
            f"search interrupted; finished trials are kept and the ones cut short are marked "
            f"'interrupted': run 'hpsearch resume {plan.study_name}' to finish the study"
        )


def _scheduler(space: SearchSpace, samples_per_epoch: int, study: optuna.Study) -> Any:
    """ASHA on the first objective with its budget in samples seen, its rungs rebuilt from the
    study's earlier trials (``hpsearch.tune.rungs``), or ``None``."""
    if space.search.scheduler != "asha":
        return None
    return asha_scheduler(space, samples_per_epoch, study.get_trials(deepcopy=False))


@contextmanager
def _stop_on_signals(searcher: Any) -> Iterator[None]:
    """On the first Ctrl-C or SIGTERM, stop the search cleanly: running trials end as
    ``interrupted``. A second Ctrl-C interrupts at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: Any) -> None:
        searcher.interrupted = True  # InterruptStopper ends the Tune experiment on its next step
        for sig, old in previous.items():
            signal.signal(sig, old)

    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


