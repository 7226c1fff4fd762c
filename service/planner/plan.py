"""A search's plan: its space checked against the cluster, and its numbers fixed before any
trial runs (the device, how many trials, how many at once, the devices one trial may use)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch.budget import BudgetSpent, BudgetStatus
from hpsearch.constraints import equivalence_key, violation
from hpsearch.errors import ResourceError, SpaceError
from hpsearch.reasons import occupies_its_configuration
from hpsearch.record import NOT_RUN_REASONS, STATUS_REASON, params_key
from hpsearch.sampler import grid_points
from hpsearch.search_spaces import Budget, SearchSpace
from hpsearch.settings import Settings, study_runs_dir
from hpsearch.study import is_confirmation
from hpsearch.trials.spec import processes_for, trial_spec

if TYPE_CHECKING:
    import optuna

__all__ = ["SEARCH_SAMPLERS", "ConfirmationRun", "GridProgress", "SearchPlan", "grid_configurations", "grid_progress",
           "grid_warning", "plan_search", "runnable_grid_points", "trial_bundle"]

#: Samplers that walk a finite set of configurations (a grid): a search runs at most that many.
SEARCH_SAMPLERS = ("grid", "bruteforce")


@dataclass(frozen=True)
class SearchPlan:
    """What a search will do, decided before any trial runs.

    Attributes:
        n_trials: Trials to launch in this run (for ``resume``, the ones still missing).
        finished: Trials the study had already finished (``resume``; 0 for a new study).
        requeued: Configurations of interrupted trials queued to run again (``resume``).
        devices: The most processes one trial can have: the GPUs (CPU slots on a CPU cluster)
            of the whole cluster (``resources.span_nodes: auto``) or of the largest node
            (``false``), a GPU per rank (``gpus_per_worker``, or a whole GPU for a share of one:
            two ranks of one trial never share a GPU), ``cpus_per_worker`` CPUs per rank. A
            trial of a larger world size plays its ranks on this many processes
            (``resources.emulate_ranks: auto``).
        node_devices: The most processes one node holds: a trial of more spans nodes.
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
    node_devices: int = 1
    budget: Budget = field(default_factory=Budget)
    spent: BudgetSpent = field(default_factory=BudgetSpent)
    run_started: float | None = None

    def budget_status(self) -> BudgetStatus:
        """The budget and what earlier runs spent of it, as the search starts."""
        return BudgetStatus.of(self.budget, self.spent)


@dataclass(frozen=True)
class ConfirmationRun:
    """One run of a confirmation round (``hpsearch.confirmation``): the study's answer as a new
    trial, apart from ``n_trials``.

    Attributes:
        params: The answer's exact configuration (``Recommendation.params()``).
        seed: A seed no earlier run of that configuration used.
        record: What the trial records as its ``confirmation`` attr (its round, the devices the
            answer was for, the target, what the answer predicted before it ran).
    """

    params: Mapping[str, Any]
    seed: int
    record: Mapping[str, Any]


def plan_search(space: SearchSpace, study_name: str, settings: Settings, cluster: dict[str, Any]) -> SearchPlan:
    """Check the space against the cluster and fix the search's numbers.

    Args:
        cluster: ``{"alive_nodes": [{"CPU": n, "GPU": g}, ...]}``, the alive nodes' resources.

    Raises:
        ResourceError: some trial of the space could never be placed on any node.
        SpaceError: the constraints leave no configuration of a grid to run.
    """
    nodes = cluster["alive_nodes"]
    has_gpu = any(n.get("GPU", 0) > 0 for n in nodes)
    device = space.resources.device
    if device == "auto":
        device = "cuda" if has_gpu else "cpu"
    if device == "cuda" and not has_gpu:
        raise ResourceError("resources.device is cuda but no node of the Ray cluster has a GPU")
    kind, per_device = ("GPU", space.resources.gpus_per_worker) if device == "cuda" else \
        ("CPU", space.resources.cpus_per_worker)
    # The most processes one trial can have on a node: a rank per GPU (two ranks of one trial
    # never share a GPU: NCCL refuses it), or per cpus_per_worker CPUs; with span_nodes: auto,
    # a trial may have as many as the cluster holds, on several nodes.
    node_devices = max(int(n.get(kind, 0) // max(per_device, 1)) for n in nodes)
    spans = space.resources.span_nodes == "auto"
    devices = sum(int(n.get(kind, 0) // max(per_device, 1)) for n in nodes) if spans else node_devices
    w_max = space.max_world_size()
    processes = processes_for(w_max, space.resources.emulate_ranks, devices)
    need = _trial_resources(processes, space, device)
    # A trial that spans nodes fits where the nodes' shares, as ``devices`` counts them, hold it.
    spanning = spans and node_devices < processes <= devices
    if not spanning and not any(_fits(node, processes, need, device, space) for node in nodes):
        biggest = max(nodes, key=lambda n: (n.get("GPU", 0), n.get("CPU", 0)))
        ranks = f"{processes} processes (world_size {w_max})" if processes != w_max else f"world_size {w_max}"
        apart = " on as many GPUs (two ranks of one trial never share a GPU)" if device == "cuda" else ""
        emulate = ("set resources.emulate_ranks: auto to play its ranks on the devices the cluster has, "
                   if space.resources.emulate_ranks == "off" else "")
        span = "set resources.span_nodes: auto to run it across nodes, " if not spans and len(nodes) > 1 else ""
        largest = _fmt({k: biggest.get(k, 0) for k in need})
        if spans and len(nodes) > 1 and 1 <= node_devices < processes:
            where = (f", but the cluster's {len(nodes)} nodes hold {devices} processes in all (the largest node "
                     f"has {largest})")
        else:
            where = f"{apart} on one node, but the largest node has {largest}"
        raise ResourceError(
            f"a trial with {ranks} needs {_fmt(need)}{where}; {span}{emulate}lower parameters.world_size or "
            "resources.cpus_per_worker, or add a bigger node"
        )
    n_trials = space.search.n_trials
    if space.search.sampler in SEARCH_SAMPLERS:
        runnable = runnable_grid_points(space, device, max(devices, 1))
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
        small = _trial_resources(processes_for(w_min, space.resources.emulate_ranks, devices), space, device)
        max_concurrent = max(1, sum(min(int(n.get(k, 0) // v) for k, v in small.items() if v > 0) for n in nodes))
    runs = study_runs_dir(settings, study_name)
    return SearchPlan(study_name, settings.storage, runs, n_trials, device, max_concurrent, devices=max(1, devices),
                      node_devices=max(1, node_devices))


def runnable_grid_points(space: SearchSpace, device: str, max_processes: int | None = None) -> list[dict[str, Any]]:
    """The grid's configurations that the constraints let run (one of each equivalent set)."""
    runnable, seen = [], set()
    for point in grid_points(space):
        spec = trial_spec(space, point, device=device, max_processes=max_processes)
        if violation(spec, space.constraints) is not None:
            continue
        if space.constraints.skip_equivalent:
            key = equivalence_key(spec)
            if key in seen:
                continue
            seen.add(key)
        runnable.append(point)
    return runnable


def grid_configurations(space: SearchSpace) -> int | None:
    """How many trials a grid search of ``space`` runs at most: its configurations that the
    constraints let run (``runnable_grid_points``); ``None`` for a sampler that is not a grid.

    Example:
        >>> from hpsearch.search_spaces import space_from_mapping
        >>> grid_configurations(space_from_mapping({"search": {"sampler": "grid"}, "parameters": {
        ...     "per_device_batch_size": {"choices": [8, 16]}, "base_lr": {"choices": [0.1, 0.2]}}}))
        4
    """
    if space.search.sampler not in SEARCH_SAMPLERS:
        return None
    # Which configurations the constraints let run depends on the batch, the LR and the other
    # settings (``violation``, ``equivalence_key``), not on the device: so this count holds
    # before Ray says what the cluster has, for ``validate`` and ``status`` too.
    return len(runnable_grid_points(space, "cpu"))


def grid_warning(space: SearchSpace) -> str | None:
    """One sentence where a grid has fewer configurations than ``search.n_trials`` (the search
    then runs each once), else ``None``: ``validate`` and ``start`` say it."""
    configurations = grid_configurations(space)
    if configurations is None or space.search.n_trials <= configurations:
        return None
    size = space.grid_size() or 0
    skipped = f" ({size - configurations} of its {size} skipped by the constraints)" if size > configurations else ""
    return (f"search.n_trials is {space.search.n_trials} but the grid has {configurations} configurations{skipped}: "
            f"the search runs each once, {configurations} trials")


@dataclass(frozen=True)
class GridProgress:
    """How far a grid study went through its grid.

    Attributes:
        configurations: The grid's configurations a search runs (``grid_configurations``).
        left: Those no trial of the study holds yet: every trial holds its configuration but
            the ones the search cut short, which ``resume`` runs again, and confirmation runs.
        skipped: Configurations held by a trial that never ran (``exceeds_memory``...).
    """

    configurations: int
    left: int
    skipped: int = 0

    @property
    def exhausted(self) -> bool:
        """Whether every configuration of the grid has been tried: nothing new to propose."""
        return self.left == 0

    def describe(self) -> str:
        """``grid exhausted: all 4 configurations ran`` or ``grid: 3 of 4 configurations ran, 1 left``."""
        ran = "ran" if not self.skipped else f"ran or were skipped ({self.skipped} never ran)"
        if self.exhausted:
            return f"grid exhausted: all {self.configurations} configurations {ran}"
        return f"grid: {self.configurations - self.left} of {self.configurations} configurations {ran}, {self.left} left"

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``hpsearch status --json``)."""
        return {"configurations": self.configurations, "left": self.left, "skipped": self.skipped,
                "exhausted": self.exhausted}


def grid_progress(space: SearchSpace, trials: Iterable[optuna.trial.FrozenTrial]) -> GridProgress | None:
    """How far ``trials`` went through the grid of ``space``; ``None`` when its sampler is not a grid."""
    if space.search.sampler not in SEARCH_SAMPLERS:
        return None
    # Optuna is loaded by now (``trials`` are its); imported here so that ``hpsearch --help``,
    # which imports this module for the grid's warning, stays without it.
    from optuna.trial import TrialState

    runnable = {params_key(p) for p in runnable_grid_points(space, "cpu")}  # device: as grid_configurations
    held: dict[Any, bool] = {}
    for t in trials:
        # A trial back in the queue (WAITING) holds its configuration to run next: not run yet.
        if (t.params and occupies_its_configuration(t) and t.state != TrialState.WAITING
                and not is_confirmation(t.user_attrs)):
            key = params_key(t.params)
            held[key] = held.get(key, False) or t.user_attrs.get(STATUS_REASON) not in NOT_RUN_REASONS
    return GridProgress(len(runnable), len(runnable - set(held)), sum(1 for k in runnable if held.get(k) is False))


def _trial_resources(processes: int, space: SearchSpace, device: str) -> dict[str, float]:
    """What a trial of ``processes`` processes reserves, in all."""
    return trial_bundle(processes, device, space.resources.cpus_per_worker, space.resources.gpus_per_worker)


def _fits(node: dict[str, float], processes: int, need: dict[str, float], device: str, space: SearchSpace) -> bool:
    """Whether a trial of ``processes`` processes fits on ``node``: its CPUs and GPUs in all, and
    on CUDA a GPU of its own for each process (shares of a GPU go to ranks of other trials)."""
    if any(node.get(k, 0) < v for k, v in need.items()):
        return False
    return device != "cuda" or processes * max(space.resources.gpus_per_worker, 1) <= node.get("GPU", 0)


def _fmt(res: dict[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in res.items())


def trial_bundle(processes: int, device: str, cpus_per_worker: int, gpus_per_worker: float) -> dict[str, float]:
    """The devices ``processes`` ranks reserve (one rank's: a unit)."""
    need = {"CPU": float(processes * cpus_per_worker)}
    if device == "cuda":
        need["GPU"] = float(processes * gpus_per_worker)
    return need
