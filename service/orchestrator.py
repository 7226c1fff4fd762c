"""The Ray Tune driver: one search = one Tune experiment over one Optuna study.

Each trial reserves all it needs at once, as one placement-group bundle of its W workers' CPUs
and GPUs on one node, and launches its ranks itself (``hpsearch.trials.launcher``). Ray Train's
TorchTrainer was measured slower to start (20-25 s per toy trial on 2 cores), reserves the
workers apart from the trial, and leaks placement groups when Tune stops a trial early
(ray-project/ray#54305), so it is not used.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from hpsearch.errors import ResourceError, StudyExistsError, TrialFailed
from hpsearch.progress import SearchEvent
from hpsearch.sampler import create_sampler, grid_size
from hpsearch.search_spaces import SearchSpace
from hpsearch.settings import Settings, default_runs_dir
from hpsearch.store import (
    ATTR_OBJECTIVES,
    ATTR_SPACE_TEXT,
    ATTR_VERSIONS,
    open_storage,
    redact_url,
    sqlite_file,
)

__all__ = ["SearchPlan", "plan_search", "run_search"]

log = logging.getLogger("hpsearch")


@dataclass(frozen=True)
class SearchPlan:
    """What a search will do, decided before any trial runs."""

    study_name: str
    storage: str
    runs_dir: Path
    n_trials: int
    device: str
    max_concurrent: int


def plan_search(space: SearchSpace, study_name: str, settings: Settings, cluster: dict[str, Any]) -> SearchPlan:
    """Check the space against the cluster and fix the search's numbers.

    Args:
        cluster: ``{"nodes": [{"CPU": n, "GPU": g}, ...]}``, the alive nodes' resources.

    Raises:
        ResourceError: some trial of the space could never be placed on any node.
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
    size = grid_size(space)
    # The space loader stores sampler names in their short form.
    if space.search.sampler in ("grid", "bruteforce") and size:
        n_trials = min(n_trials, size)
    max_concurrent = space.search.max_concurrent
    if max_concurrent is None:
        # As many of the smallest trials as the cluster holds: Tune asks the searcher for a
        # trial only when one could start, so trials do not sit RUNNING in the study while
        # they wait for resources.
        w_min = space.min_world_size()
        small = _trial_resources(w_min, space, device)
        max_concurrent = max(1, sum(min(int(n.get(k, 0) // v) for k, v in small.items() if v > 0) for n in nodes))
    runs = default_runs_dir(settings, sqlite_file(settings.storage)) / study_name
    return SearchPlan(study_name, settings.storage, runs, n_trials, device, max_concurrent)


def run_search(
    space: SearchSpace,
    study_name: str,
    settings: Settings,
    *,
    on_event: Callable[[SearchEvent], None] | None = None,
    on_plan: Callable[[SearchPlan], None] | None = None,
) -> SearchPlan:
    """Run a whole search: start (or join) Ray, create the study, run the Tune experiment.

    Nothing is written to the store until the space, the workload and the cluster's resources
    have been checked, so a bad search leaves no half-made study behind.

    Raises:
        StudyExistsError: the store already has a study of that name.
        ResourceError: a trial could never fit on the cluster.
        WorkloadError: the workload cannot be resolved.
    """
    from hpsearch.trials.workloads.base import resolve_workload

    storage = open_storage(settings.storage)
    if study_name in {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}:
        raise StudyExistsError(
            f"study {study_name!r} already exists in {redact_url(settings.storage)}; "
            "pick a new name with --study NAME or use another --storage"
        )
    resolve_workload(space.workload.name)
    with _ray_session(settings.ray_address) as cluster:
        plan = plan_search(space, study_name, settings, cluster)
        if on_plan is not None:
            on_plan(plan)
        study = _create_study(storage, study_name, space)
        _run_tune(space, study, plan, on_event)
    return plan


def _create_study(storage: optuna.storages.BaseStorage, name: str, space: SearchSpace) -> optuna.Study:
    from importlib.metadata import version

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
    study.set_user_attr(ATTR_SPACE_TEXT, space.source_text)
    study.set_user_attr(ATTR_OBJECTIVES, [o.metric for o in space.objectives])
    study.set_user_attr(ATTR_VERSIONS, {p: version(p) for p in ("hpsearch", "optuna", "ray", "torch")})
    return study


def _run_tune(space: SearchSpace, study: optuna.Study, plan: SearchPlan, on_event: Callable[[SearchEvent], None] | None) -> None:
    from hpsearch.searcher import StudySearcher
    from ray import tune

    trial_settings = dict(
        base_batch_size=space.scaling.base_batch_size,
        warmup_epochs=space.scaling.warmup_epochs,
        schedule=space.scaling.schedule,
        workload=space.workload.name,
        workload_options=dict(space.workload.options),
        epochs=space.workload.epochs,
        device=plan.device,
        cpus_per_worker=space.resources.cpus_per_worker,
        seed=space.search.seed,
    )
    plan.runs_dir.mkdir(parents=True, exist_ok=True)
    searcher = StudySearcher(study, space, plan.n_trials, trial_settings, plan.runs_dir, on_event=on_event)

    def resources(config: dict[str, Any]) -> Any:
        spec = config["spec"]
        need = _trial_resources(spec["world_size"], space, plan.device)
        # One bundle holding every worker: the trial starts only when all of it is free, and all
        # its ranks land on one node.
        return tune.PlacementGroupFactory([need], strategy="STRICT_PACK")

    tuner = tune.Tuner(
        tune.with_resources(_trainable, resources),
        tune_config=tune.TuneConfig(
            search_alg=searcher, num_samples=plan.n_trials, max_concurrent_trials=plan.max_concurrent
        ),
        run_config=tune.RunConfig(
            name="tune", storage_path=str(plan.runs_dir), verbose=0,
            failure_config=tune.FailureConfig(max_failures=0),
        ),
    )
    try:
        tuner.fit()
    finally:
        searcher.fail_open_trials("interrupted", "the search stopped before this trial finished")


def _trainable(config: dict[str, Any]) -> None:
    """One Tune trial: launch the ranks, forward rank 0's reports, record a failure as a result.

    This is the trial driver's error boundary: a failing trial reports its reason instead of
    raising, so the searcher records FAIL with ``status_reason`` and the search goes on.
    """
    import ray
    from hpsearch.searcher import FAILED_KEY, FINAL_KEY
    from hpsearch.trials.launcher import run_trial
    from hpsearch.trials.spec import TrialSpec
    from ray import tune

    node = ray.util.get_node_ip_address()
    spec = TrialSpec(**config["spec"])
    try:
        final = run_trial(spec, config["run_dir"], report=lambda m: tune.report({**m, "node": node}))
    except TrialFailed as exc:
        tune.report({FAILED_KEY: True, "status_reason": exc.reason, "status_detail": exc.detail, "node": node})
        return
    tune.report({**final, "epochs_completed": final["epoch"], "node": node, FINAL_KEY: True})


def _trial_resources(world_size: int, space: SearchSpace, device: str) -> dict[str, float]:
    processes = 1 if space.resources.emulate_ranks else world_size
    need = {"CPU": float(processes * space.resources.cpus_per_worker)}
    if device == "cuda":
        need["GPU"] = float(processes * space.resources.gpus_per_worker)
    return need


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
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(
            address=address or "local",
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
    try:
        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
        yield {"nodes": nodes}
    finally:
        if started:
            ray.shutdown()
