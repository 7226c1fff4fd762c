"""The Ray Tune driver: one search = one Tune experiment over one Optuna study.

Each trial reserves all it needs at once, as one placement-group bundle of its W workers' CPUs
and GPUs on one node, and launches its ranks itself (``hpsearch.trials.launcher``). Ray Train's
TorchTrainer was measured slower to start (20-25 s per toy trial on 2 cores), reserves the
workers apart from the trial, and leaks placement groups when Tune stops a trial early
(ray-project/ray#54305), so it is not used.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna

from hpsearch.budget import BudgetLedger, BudgetSpent, budget_of, budget_status, settle_orphans, spent_of, write_budget
from hpsearch.errors import (
    ClusterError,
    ResourceError,
    SearchInterrupted,
    SpaceError,
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
from hpsearch.sampler import create_sampler, grid_points
from hpsearch.search_spaces import Budget, SearchSpace, parse_space
from hpsearch.settings import Settings, default_runs_dir
from hpsearch.store import (
    ATTR_N_TRIALS,
    ATTR_SPACE_TEXT,
    load_study,
    open_storage,
    patient_storage,
    redact_url,
    sqlite_file,
    study_attrs,
    study_names,
)

__all__ = ["SearchPlan", "plan_search", "resume_search", "run_search", "space_of_study"]

log = logging.getLogger("hpsearch")

_SEARCH_SAMPLERS = ("grid", "bruteforce")


@dataclass(frozen=True)
class SearchPlan:
    """What a search will do, decided before any trial runs.

    Attributes:
        n_trials: Trials to launch in this run (for ``resume``, the ones still missing).
        finished: Trials the study had already finished (``resume``; 0 for a new study).
        requeued: Configurations of interrupted trials queued to run again (``resume``).
        devices: The most devices one trial can use: the GPUs (CPU slots on a CPU cluster) of
            the largest node, in units of ``gpus_per_worker`` (``cpus_per_worker``).
        budget: The study's budget (``search.budget``, or the one given to start/resume).
        spent: What earlier runs of the study spent (``resume``; nothing for a new study).
        run_started: ``time.monotonic()`` when this run began: its wall-clock time counts
            from there (``None``: from the start of its trials).
    """

    study_name: str
    storage: str
    runs_dir: Path
    n_trials: int
    device: str
    max_concurrent: int
    finished: int = 0
    requeued: int = 0
    devices: int = 1
    budget: Budget = field(default_factory=Budget)
    spent: BudgetSpent = field(default_factory=BudgetSpent)
    run_started: float | None = None


def trial_settings(space: SearchSpace, device: str) -> dict[str, Any]:
    """The ``TrialSpec`` fields every trial of ``space`` shares (all but the parameters)."""
    return dict(
        base_batch_size=space.scaling.base_batch_size,
        warmup_epochs=space.scaling.warmup_epochs,
        schedule=space.scaling.schedule,
        workload=space.workload.name,
        workload_options=dict(space.workload.options),
        epochs=space.workload.epochs,
        eval_every_samples=space.workload.eval_every_samples,
        save_model=space.workload.save_model != "none",
        device=device,
        cpus_per_worker=space.resources.cpus_per_worker,
        seed=space.search.seed,
    )


def plan_search(space: SearchSpace, study_name: str, settings: Settings, cluster: dict[str, Any]) -> SearchPlan:
    """Check the space against the cluster and fix the search's numbers.

    Args:
        cluster: ``{"nodes": [{"CPU": n, "GPU": g}, ...]}``, the alive nodes' resources.

    Raises:
        ResourceError: some trial of the space could never be placed on any node.
        SpaceError: the constraints leave no configuration of a grid to run.
    """
    nodes = cluster["nodes"]
    has_gpu = any(n.get("GPU", 0) > 0 for n in nodes)
    device = space.resources.device
    if device == "auto":
        device = "cuda" if has_gpu else "cpu"
    if device == "cuda" and not has_gpu:
        raise ResourceError("resources.device is cuda but no node of the Ray cluster has a GPU")
    w_max = space.max_world_size()
    need = _trial_resources(w_max, space, device)
    if not any(all(node.get(k, 0) >= v for k, v in need.items()) for node in nodes):
        biggest = max(nodes, key=lambda n: (n.get("GPU", 0), n.get("CPU", 0)))
        raise ResourceError(
            f"a trial with world_size {w_max} needs {_fmt(need)} on one node, but the largest node "
            f"has {_fmt({k: biggest.get(k, 0) for k in need})}; lower parameters.world_size or "
            "resources.cpus_per_worker, or add a bigger node"
        )
    n_trials = space.search.n_trials
    if space.search.sampler in _SEARCH_SAMPLERS:
        runnable = runnable_grid_points(space, trial_settings(space, device))
        if not runnable:
            raise SpaceError("the constraints skip every configuration of the grid; loosen them",
                             key_path="constraints", source=space.source_path or "<space>")
        n_trials = min(n_trials, len(runnable))
    max_concurrent = space.search.max_concurrent
    if max_concurrent is None:
        # As many of the smallest trials as the cluster holds: Tune asks the searcher for a
        # trial only when one could start, so trials do not sit RUNNING in the study while
        # they wait for resources.
        w_min = space.min_world_size()
        small = _trial_resources(w_min, space, device)
        max_concurrent = max(1, sum(min(int(n.get(k, 0) // v) for k, v in small.items() if v > 0) for n in nodes))
    runs = _runs_dir(settings, study_name)
    kind, per_device = ("GPU", space.resources.gpus_per_worker) if device == "cuda" else \
        ("CPU", space.resources.cpus_per_worker)
    devices = max(1, max(int(n.get(kind, 0) // max(per_device, 1)) for n in nodes))
    return SearchPlan(study_name, settings.storage, runs, n_trials, device, max_concurrent, devices=devices)


def runnable_grid_points(space: SearchSpace, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The grid's configurations that the constraints let run (one of each equivalent set)."""
    from hpsearch.constraints import equivalence_key, violation
    from hpsearch.searcher import trial_spec

    runnable, seen = [], set()
    for point in grid_points(space):
        spec = trial_spec(point, space, settings)
        if violation(spec, space.constraints) is not None:
            continue
        if space.constraints.skip_equivalent:
            key = equivalence_key(spec)
            if key in seen:
                continue
            seen.add(key)
        runnable.append(point)
    return runnable


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
    storage = open_storage(settings.storage)
    with study_lock(settings.storage, study_name):
        if study_name in study_names(storage):
            raise StudyExistsError(
                f"study {study_name!r} already exists in {redact_url(settings.storage)}; "
                f"finish it with 'hpsearch resume {study_name}', or pick a new name with --study NAME"
            )
        # A typo, an unimportable plugin or an unknown option fails before anything is written.
        with _local_ranks(space, settings, study_name) as local, _checking_workload(space, local) as checked_workload, \
                _ray_session(settings.ray_address) as cluster:
            plan = replace(plan_search(space, study_name, settings, cluster),
                           budget=space.search.budget.merged(budget), run_started=started)
            reservations = _warm_ranks(space, plan, local)
            samples_per_epoch = checked_workload()
            if on_plan is not None:
                on_plan(plan)
            study = _create_study(_search_storage(settings, on_event), study_name, space)
            write_budget(study, plan.budget)
            for params in space.search.enqueue:  # the configurations the space runs first
                study.enqueue_trial(dict(params))
            _run_tune(space, study, plan, on_event, samples_per_epoch, reservations)
    return plan


def space_of_study(study: optuna.Study) -> SearchSpace:
    """The space a study was started with, parsed again from the text it keeps.

    Raises:
        SpaceError: the study was not made by hpsearch, or its text no longer validates.
    """
    text = study.user_attrs.get(ATTR_SPACE_TEXT)
    if not text:
        raise SpaceError(f"study {study.study_name!r} has no space text: it was not started by hpsearch start",
                         source=f"study {study.study_name}")
    return parse_space(str(text), source=f"study {study.study_name}", default_study=study.study_name)


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
    with study_lock(settings.storage, study_name):
        study = load_study(study_name, storage)
        space = space_of_study(study)
        if n_trials is not None:
            study.set_user_attr(ATTR_N_TRIALS, n_trials)
        if budget is not None:
            write_budget(study, budget_of(study, space.search.budget).merged(budget))
        target = int(study.user_attrs.get(ATTR_N_TRIALS, space.search.n_trials))
        settle_orphans(study, space)  # the device time of trials a dead search left RUNNING
        requeued = _requeue_interrupted(study, set(space.parameters))
        with _local_ranks(space, settings, study_name) as local, _checking_workload(space, local) as checked_workload, \
                _ray_session(settings.ray_address) as cluster:
            plan = plan_search(space, study_name, settings, cluster)
            reservations = _warm_ranks(space, plan, local)
            samples_per_epoch = checked_workload()
            finished = sum(counts_toward_n_trials(t) for t in study.get_trials(deepcopy=False))
            to_run = max(0, target - finished)
            if space.search.sampler in _SEARCH_SAMPLERS:
                runnable = {_key(p) for p in runnable_grid_points(space, trial_settings(space, plan.device))}
                taken = {_key(t.params) for t in study.get_trials(deepcopy=False)
                         if t.params and occupies_its_configuration(t)}
                to_run = min(to_run, len(runnable - taken))
            status = budget_status(study, space.search.budget)
            if status.spent_out:
                to_run = 0  # the budget is spent: 'resume --budget' with a larger one goes on
            plan = SearchPlan(plan.study_name, plan.storage, plan.runs_dir, to_run, plan.device,
                              plan.max_concurrent, finished=finished, requeued=requeued, devices=plan.devices,
                              budget=status.budget, spent=spent_of(study), run_started=started)
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
    from optuna.trial import TrialState

    storage = study._storage
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        storage.set_trial_user_attr(t._trial_id, "status_reason", REASON_INTERRUPTED)
        storage.set_trial_user_attr(t._trial_id, "status_detail", "the search stopped before this trial finished")
        storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
    # A finished trial cannot be written to again, so a rerun points back at its original
    # (``rerun_of``) and an interrupted trial counts as queued once some trial does.
    trials = study.get_trials(deepcopy=False)
    rerun = {t.user_attrs.get("rerun_of") for t in trials}
    queued = 0
    for t in trials:
        if cut_short_by_the_search(t) and t.number not in rerun and parameters <= set(t.params):
            study.enqueue_trial(dict(t.params), user_attrs={"rerun_of": t.number})
            queued += 1
    return queued


def _key(params: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(params.items()))


@contextmanager
def _checking_workload(space: SearchSpace, local: Any) -> Iterator[Callable[[], int]]:
    """Check the space's workload (``hpsearch.workloads.check_for_search``) in a thread while Ray
    starts; yields a function that waits for the check and returns the training set's size or
    raises its error.

    The check imports torch and the workload's module and builds the data: seconds at the start
    of every search, which a search of short trials pays in full (``benchmarks/search_span.py``).
    With a local rank pool (``local``, ``hpsearch.driver.LocalRanks``) it runs in one of the
    pool's warm processes, which import all that anyway, so the search's own process never
    imports torch (about 1.2 CPU-seconds, on cores Ray's start needs too). Its errors still
    come before anything is written. Ray Tune and the searcher are imported meanwhile (about
    1 s that would otherwise come after ``ray.init``).
    """
    from concurrent.futures import ThreadPoolExecutor

    from hpsearch.workloads import check_for_search

    def check() -> int:
        found = check_for_search(space) if local is None else local.check(space)
        for warning in found.warnings:
            log.warning("warning: %s", warning)
        import hpsearch.searcher  # noqa: F401  (and ray.tune with it)

        return found.train_size

    with ThreadPoolExecutor(1, thread_name_prefix="hpsearch-workload-check") as pool:
        yield pool.submit(check).result


#: Where the ranks of a local CPU search write what they print, in the study's runs folder.
RANKS_LOG = "ranks.log"


@contextmanager
def _local_ranks(space: SearchSpace, settings: Settings, study_name: str) -> Iterator[Any]:
    """The warm rank pool of this machine, started before Ray when the search starts a local
    Ray for CPU trials (``hpsearch.driver.LocalRanks``): its processes import torch and the
    workload while Ray starts. ``None`` when the search joins a running Ray, or may run on GPUs
    (there the pool actors start once Ray says which GPUs there are)."""
    ray = sys.modules.get("ray")  # not imported yet: not initialized either
    if settings.ray_address or (ray is not None and ray.is_initialized()) or not _cpu_only(space):
        yield None
        return
    from hpsearch.driver import LocalRanks

    local = LocalRanks(workload=space.workload.name, cpus_per_worker=space.resources.cpus_per_worker,
                       largest_trial=_largest_trial(space), reuse=space.resources.reuse_workers,
                       output=_runs_dir(settings, study_name) / RANKS_LOG)
    try:
        yield local
    finally:
        local.close()


def _runs_dir(settings: Settings, study_name: str) -> Path:
    """The study's runs folder: its trials' files, Tune's state, ``RANKS_LOG``."""
    return default_runs_dir(settings, sqlite_file(settings.storage)) / study_name


def _cpu_only(space: SearchSpace) -> bool:
    """Whether the search's trials run on CPU whatever Ray finds: ``device: cpu``, or ``auto``
    on a machine with no NVIDIA device."""
    import glob

    device = space.resources.device
    return device == "cpu" or (device == "auto" and not glob.glob("/dev/nvidia[0-9]*"))


def _largest_trial(space: SearchSpace) -> int:
    return 1 if space.resources.emulate_ranks else space.max_world_size()


def _warm_ranks(space: SearchSpace, plan: SearchPlan, local: Any) -> Any:
    """Start the search's reservation desk and warm rank pools (``hpsearch.driver``) as soon as
    Ray runs, so their processes import torch and the workload while the search checks the
    workload, writes the study and sets Tune up. They end with the Ray session (and are closed
    explicitly after the trials, for a cluster that outlives the search). ``local``: this
    machine's pool, already started (``_local_ranks``)."""
    from hpsearch.driver import Reservations

    return Reservations(workload=space.workload.name, device=plan.device,
                        cpus_per_worker=space.resources.cpus_per_worker,
                        gpus_per_worker=space.resources.gpus_per_worker,
                        largest_trial=_largest_trial(space), reuse=space.resources.reuse_workers,
                        local=local if plan.device == "cpu" else None)


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
    from ray import tune

    from hpsearch.driver import DRIVER_RESOURCES, trainable
    from hpsearch.searcher import InterruptStopper, StudySearcher, TrainingStarted

    plan.runs_dir.mkdir(parents=True, exist_ok=True)
    ledger = BudgetLedger(plan.budget, plan.spent, plan.run_started if plan.run_started is not None else time.monotonic())
    searcher = StudySearcher(study, space, plan.n_trials, trial_settings(space, plan.device), plan.runs_dir,
                             on_event=on_event, ledger=ledger)

    stopper = InterruptStopper(searcher)
    tuner = tune.Tuner(
        # The same request for every trial, so Tune always reuses a finished trial's process;
        # each trial then reserves its own devices (hpsearch.driver).
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
    study's earlier trials (``hpsearch.rungs``), or ``None``."""
    if space.search.scheduler != "asha":
        return None
    from hpsearch.rungs import asha_scheduler

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


def _trial_resources(world_size: int, space: SearchSpace, device: str) -> dict[str, float]:
    from hpsearch.driver import trial_bundle

    processes = 1 if space.resources.emulate_ranks else world_size
    return trial_bundle(processes, device, space.resources.cpus_per_worker, space.resources.gpus_per_worker)


def _fmt(res: dict[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in res.items())


@contextmanager
def _ray_session(address: str | None) -> Iterator[dict[str, Any]]:
    """Start a local Ray (or join ``address``) for the search; shut down only what we started."""
    # Tune's default CSV/JSON/TensorBoard loggers would write every result a second time; the
    # study is the record.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # Tune's newer console output prints its own tables even at verbose=0; hpsearch shows its
    # own progress, so use the classic reporter, which verbose=0 silences.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # hpsearch handles Ctrl-C itself (the study must record which trials were cut short).
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    # A trial's first report says only that its devices were reserved (the driver's STARTED_KEY);
    # Tune's strict check wants the scheduler's metric in every report and ended every ASHA search
    # on that one. The searcher records a trial that never reports its metric itself.
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    import ray

    started = not ray.is_initialized()
    if started:
        if address:
            _check_reachable(address)
        try:
            ray.init(
                address=address or "local",
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
            )
        except ConnectionError as exc:
            if not address:
                raise
            raise ClusterError(
                f"cannot join the Ray cluster at {address}: {str(exc).splitlines()[0]}. Check the "
                "address ('ray status' on the head node prints it); if the cluster uses token "
                "authentication, set RAY_AUTH_MODE=token and the cluster's RAY_AUTH_TOKEN here"
            ) from None
    try:
        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
        yield {"nodes": nodes}
    finally:
        if started:
            _shutdown_ray(local_head=not address)


def _shutdown_ray(*, local_head: bool) -> None:
    """End the search's Ray session: the local Ray it started (``local_head``), all of it, or its
    connection to a cluster.

    In the search's own thread, before anything else runs. It used to run in a thread of its
    own while the CLI printed its report, to hide the 1.1-1.35 s it took: then about one
    ``hpsearch resume`` in four on a short study ended with Ray's "the core worker has already
    been shutdown" and exit code 1 once the shutdown had become quicker (the main thread touched
    Ray while that thread tore it down; none in 18 runs with the shutdown in this thread, nor in
    12 with a garbage collection before it). With the autoscaler monitor stopped first it takes
    0.35 s, so it is no longer worth the race.
    """
    import ray

    if local_head:
        _stop_autoscaler_monitor()
    ray.shutdown()


def _stop_autoscaler_monitor() -> None:
    """Stop a local Ray's autoscaler monitor before the rest of it. ``ray.shutdown`` stops it
    after the GCS it reports to; asked to stop then, it tries to report once more, and Ray waits
    a second before killing it: 1.1-1.35 s of every local search's end, against 0.35 s with the
    monitor stopped first (measured on Ray 2.60, 2 cores). The monitor scales a cluster; a
    local Ray about to stop has nothing for it to do. Through Ray's private node handle (Ray
    has no public call for this): where that handle is missing, nothing is done."""
    import ray

    node = getattr(getattr(ray, "_private", None), "worker", None)
    kill = getattr(getattr(node, "_global_node", None), "kill_monitor", None)
    if kill is None:
        return
    with contextlib.suppress(OSError, RuntimeError, TypeError):  # already gone, or other internals
        kill(check_alive=False)


def _check_reachable(address: str) -> None:
    """Fail fast on a ``host:port`` where nothing listens: Ray itself retries for minutes."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return  # "auto" and other forms: left to Ray
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ClusterError(
            f"cannot join the Ray cluster at {address}: nothing answers there ({exc.strerror or exc}); "
            "check the address ('ray status' on the head node prints it) and that the head node runs"
        ) from None
