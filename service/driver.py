"""The trial driver: the Tune trainable every trial runs, its reservation, and the warm rank
pools on each node.

Tune starts a trial process per trial and reuses one only for an identical resource request,
so a search over world sizes used to pay a new Ray worker (seconds) at every change of shape.
Here every trial's Tune request is the same (the memory of its light driver process, no CPU),
so Tune always reuses a finished trial's process, and the trial reserves its devices itself:

1. ``Reservations`` (one actor per search) grants each trial W units on one node, a unit being
   a placement-group bundle of one rank's CPUs and GPUs, in the order trials asked (first come,
   first served: a two-rank trial is not starved by one-rank trials that keep taking a freed
   CPU). Ray's accounting holds every unit a trial runs on for as long as it runs; a finished
   trial's units go back to the desk, which hands them to the next trial at once (a new
   placement group right after a removed one waits about a second in Ray) and gives Ray back
   those no trial asks for within a few seconds.
2. The trial runs its ranks in the warm ``RankPool`` (``hpsearch.trials.pool``) of the node
   that holds its units: processes that already imported torch, the loop and the workload,
   whatever the trial's world size. On CUDA, rank ``r`` runs in the warm process of the GPU
   of its ``r``-th unit.

The trainable imports neither torch nor optuna.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from hpsearch.trials.launcher import workload_module
from hpsearch.trials.pool import RankPool, Status
from hpsearch.trials.spec import TrialSpec

__all__ = [
    "DRIVER_RESOURCES", "EARLIER_KEY", "FAILED_KEY", "FINAL_KEY", "REPORT_EVERY_S", "STARTED_KEY", "Grant",
    "LocalRanks", "Reservations", "cpu_prestart", "trainable", "trial_bundle",
]

#: Result flags the trainable sets: its devices are reserved and its ranks start, a failure
#: report, and the final (post-training) report.
STARTED_KEY = "hpsearch_started"
FAILED_KEY = "hpsearch_failed"
FINAL_KEY = "hpsearch_final"
#: Rank 0's reports a trial held back and passes on with its next result, oldest first.
EARLIER_KEY = "hpsearch_earlier"

#: A search without a scheduler passes a trial's reports to Tune at most this often (seconds):
#: the rest ride along with the next result (``EARLIER_KEY``). Each Tune result costs the trial's
#: process and Tune's controller some milliseconds of CPU (a Ray call, Tune's bookkeeping, the
#: study's write); a trial whose evaluations come ten times a second spent more on its reports
#: than on anything else of the search's (``benchmarks/orchestration.py``). A scheduler (ASHA)
#: judges trials on each report, so there every report goes to Tune at once, as Tune's own
#: result buffering does only for schedulers that allow it.
REPORT_EVERY_S = 1.0

#: What every trial asks of Tune: the memory of its driver process (no CPU: its ranks' CPUs
#: are in its reservation). The same for all trials, so Tune reuses trial processes.
DRIVER_RESOURCES: dict[str, float] = {"memory": float(256 * 2**20)}

# Named actors of the search's Ray job; names are per job (namespace), so concurrent searches on
# one cluster each find their own.
_POOL_NAME = "hpsearch-ranks-{node_id}"
_RESERVATIONS_NAME = "hpsearch-reservations"

# Calls to a pool wait at most this long in the actor (``wait``), so one actor thread per
# running trial is plenty.
_ACTOR_THREADS = 256

# How long units no trial holds stay reserved for the next trial before going back to Ray.
_IDLE_S = 5.0


class _PoolActor:
    """A node's ``RankPool``, as a threaded Ray actor (created by ``RankPools``)."""

    def __init__(self, preload: list[str], prestart: dict[str | None, int], reuse: bool,
                 sys_path: list[str]) -> None:
        self.pool = RankPool(preload, prestart=prestart, reuse=reuse, sys_path=sys_path)

    def ready(self) -> int:
        return os.getpid()

    def start(self, spec: TrialSpec, run_dir: str, gpu_ids: list[str] | None, collective_timeout_s: float,
              watch_pid: int | None, sys_path: list[str]) -> int:
        return self.pool.start(spec, run_dir, gpu_ids=gpu_ids, collective_timeout_s=collective_timeout_s,
                               watch_pid=watch_pid, sys_path=sys_path)

    def wait(self, ticket: int, timeout: float) -> Status:
        return self.pool.wait(ticket, timeout)

    def cancel(self, ticket: int) -> None:
        self.pool.cancel(ticket)

    def close(self) -> None:
        self.pool.close()


class _RemoteRanks:
    """A trial's handle on its node's pool actor (``hpsearch.trials.launcher.Ranks``)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def start(self, spec: TrialSpec, run_dir: str, *, gpu_ids: Sequence[str] | None = None,
              collective_timeout_s: float = 300.0, watch_pid: int | None = None,
              sys_path: Sequence[str] | None = None) -> int:
        ref = self.actor.start.remote(spec, run_dir, None if gpu_ids is None else list(gpu_ids),
                                      collective_timeout_s, watch_pid, list(sys_path or sys.path))
        return int(ray.get(ref))

    def wait(self, ticket: int, timeout: float) -> Status:
        status: Status = ray.get(self.actor.wait.remote(ticket, timeout))
        return status

    def cancel(self, ticket: int) -> None:
        ray.get(self.actor.cancel.remote(ticket))


@dataclass
class Grant:
    """What ``reserve`` gives a trial: one reserved unit (a placement-group bundle of one rank's
    CPUs and GPUs) per rank, all on one node, and, on CUDA, the GPU ids of each unit in rank
    order."""

    units: list[tuple[int, int]]  # (group, bundle index)
    node_id: str
    node_ip: str
    gpu_ids: list[str] | None
    pool: tuple[str, bytes] | None = None  # the search process's own pool: its socket and key


@dataclass
class _Group:
    pg: Any
    node_id: str
    node_ip: str
    gpu_ids: list[list[str]] | None
    free: list[bool]


class _ReservationsActor:
    """Grants trials their units, one trial at a time in the order asked (``asyncio.Lock`` wakes
    its waiters first in, first out), and owns the nodes' rank pools (started with it on every
    alive node, and on a node that joins later when a unit first lands there), so they end
    with it.

    A trial's units go back to the desk when it ends, not to Ray: the next trial, whatever its
    world size, takes free units of one node at once, where creating a placement group right
    after removing one waits about a second for Ray to see the freed resources. Units nobody
    asks for are returned to Ray after ``_IDLE_S``, so an idle search does not sit on devices,
    and a trial that cannot be served from free units gets a new group of its size (idle groups
    that could never serve it are returned first, so that they make room for it).
    """

    def __init__(self, pool_options: dict[str, Any]) -> None:
        self._turn = asyncio.Lock()
        self._released = asyncio.Event()
        self._options = pool_options
        self._pools: dict[str, Any] = {}
        self._groups: dict[int, _Group] = {}
        self._ids = itertools.count()
        self._idle_check: asyncio.TimerHandle | None = None
        # The node whose pool the search's own process serves (``LocalRanks``), if any.
        self._local: dict[str, Any] | None = pool_options.get("local")
        for node in ray.nodes():
            if node.get("Alive"):
                self._pool(node["NodeID"], node["Resources"])

    async def reserve(self, processes: int) -> Grant:
        from ray.util.placement_group import placement_group, remove_placement_group

        o = self._options
        unit = trial_bundle(1, o["device"], o["cpus_per_worker"], o["gpus_per_worker"])
        async with self._turn:
            pending = None
            try:
                while (grant := self._take(processes)) is None:
                    self._return_idle(keep_for=processes)
                    if pending is None:
                        pending = placement_group([unit] * processes, strategy="STRICT_PACK")
                        placed = asyncio.ensure_future(self._placed(pending))
                    self._released.clear()
                    released = asyncio.ensure_future(self._released.wait())
                    await asyncio.wait({placed, released}, return_when=asyncio.FIRST_COMPLETED)
                    released.cancel()
                    if placed.done():
                        self._groups[next(self._ids)] = placed.result()
                        pending = None
            finally:
                if pending is not None:  # served from units another trial freed meanwhile
                    placed.cancel()
                    remove_placement_group(pending)
            self._schedule_idle_return()
            return grant

    async def release(self, units: list[tuple[int, int]]) -> None:
        for group, index in units:
            self._groups[group].free[index] = True
        self._released.set()
        self._schedule_idle_return()

    def _schedule_idle_return(self) -> None:
        if self._idle_check is not None:
            self._idle_check.cancel()

        def check() -> None:
            if not self._turn.locked():  # else the waiting trial returns what it cannot use
                self._return_idle()

        self._idle_check = asyncio.get_running_loop().call_later(_IDLE_S, check)

    def _take(self, processes: int) -> Grant | None:
        """``processes`` free units of one node, or ``None``; the node's busiest groups first, so
        that idle ones empty out and can go back to Ray."""
        by_node: dict[str, list[tuple[int, int]]] = {}
        order = sorted(self._groups.items(), key=lambda item: item[1].free.count(True))
        for gid, g in order:
            by_node.setdefault(g.node_id, []).extend((gid, i) for i, free in enumerate(g.free) if free)
        node_id = next((n for n, units in by_node.items() if len(units) >= processes), None)
        if node_id is None:
            return None
        units = by_node[node_id][:processes]
        for gid, i in units:
            self._groups[gid].free[i] = False
        group = self._groups[units[0][0]]
        gpu_ids = None
        if group.gpu_ids is not None:
            gpu_ids = [g for gid, i in units for g in self._groups[gid].gpu_ids[i]]  # type: ignore[index]
        return Grant(units, node_id, group.node_ip, gpu_ids, self._local_pool(node_id))

    def _local_pool(self, node_id: str) -> tuple[str, bytes] | None:
        """The socket and key of the search process's pool, if it serves ``node_id``."""
        local = self._local
        return (local["address"], local["authkey"]) if local and local["node_id"] == node_id else None

    def _return_idle(self, keep_for: int = 0) -> None:
        """Give Ray back the groups no trial holds, except, with ``keep_for``, those on a node
        where the desk holds enough units for a trial of that many ranks once they free up."""
        from ray.util.placement_group import remove_placement_group

        held: dict[str, int] = {}
        for g in self._groups.values():
            held[g.node_id] = held.get(g.node_id, 0) + len(g.free)
        for gid, g in list(self._groups.items()):
            if all(g.free) and not (keep_for and held[g.node_id] >= keep_for):
                remove_placement_group(g.pg)
                del self._groups[gid]

    async def _placed(self, pg: Any) -> _Group:
        from ray.util.placement_group import placement_group_table

        await pg.ready()
        node_id = str(placement_group_table(pg)["bundles_to_node_id"][0])
        node: dict[str, Any] = next((n for n in ray.nodes() if n["NodeID"] == node_id), {})
        if node_id not in self._pools:
            self._pool(node_id, node.get("Resources", {}))
        n = len(pg.bundle_specs)
        gpus = pg.bundle_specs[0].get("GPU", 0)
        gpu_ids = list(await asyncio.gather(*(_bundle_gpus(pg, i, gpus) for i in range(n)))) if gpus else None
        return _Group(pg, node_id, str(node.get("NodeManagerAddress", "?")), gpu_ids, [True] * n)

    def _pool(self, node_id: str, resources: dict[str, float]) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        o = self._options
        if self._local_pool(node_id) is not None:
            self._pools[node_id] = None  # served by the search's process
            return
        prestart: dict[str | None, int]
        if o["device"] == "cuda":
            # Whole GPUs, one process each: the ids Ray gives a node's GPUs are 0..n-1.
            gpus = int(resources.get("GPU", 0))
            prestart = {str(g): 1 for g in range(gpus)} if o["gpus_per_worker"] == 1 else {}
        else:
            prestart = {None: cpu_prestart(resources.get("CPU", 0), o["cpus_per_worker"], o["largest_trial"])}
        self._pools[node_id] = ray.remote(_PoolActor).options(
            num_cpus=0, max_concurrency=_ACTOR_THREADS, name=_POOL_NAME.format(node_id=node_id),
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(o["preload"], prestart, o["reuse"], o["sys_path"])

    def close(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for g in self._groups.values():
            with contextlib.suppress(Exception):
                remove_placement_group(g.pg)
        self._groups.clear()
        for actor in self._pools.values():
            if actor is None:
                continue
            with contextlib.suppress(Exception):  # already gone with its node: nothing to stop
                ray.get(actor.close.remote(), timeout=15)


class Reservations:
    """The search's reservation desk and rank pools (an actor); ``close`` ends them all.

    Args:
        workload: The workload every trial trains; its module is imported ahead by the ranks.
        device: ``cpu`` or ``cuda``.
        cpus_per_worker, gpus_per_worker: What a rank reserves.
        largest_trial: The most processes one trial of the search runs.
        reuse: ``resources.reuse_workers``.
        local: The pool the search's process already runs for its own node, if any: no pool
            actor is started there, and trials on that node use this one.
    """

    def __init__(self, *, workload: str, device: str, cpus_per_worker: int, gpus_per_worker: int,
                 largest_trial: int, reuse: bool, local: LocalRanks | None = None) -> None:
        module = workload_module(workload)
        options: dict[str, Any] = dict(
            preload=[module] if module else [], device=device, cpus_per_worker=cpus_per_worker,
            gpus_per_worker=gpus_per_worker, largest_trial=largest_trial, reuse=reuse, sys_path=list(sys.path))
        if local is not None:
            options["local"] = dict(node_id=ray.get_runtime_context().get_node_id(),
                                    address=local.server.address, authkey=local.server.authkey)
        self.actor: Any = ray.remote(_ReservationsActor).options(
            num_cpus=0, max_concurrency=_ACTOR_THREADS, name=_RESERVATIONS_NAME).remote(options)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            ray.get(self.actor.close.remote(), timeout=30)
        ray.kill(self.actor)


class LocalRanks:
    """The warm rank pool of the search's own node, run by the search's process and served to
    that node's trials over a local socket (``hpsearch.trials.pool_server``).

    Started before Ray, so that its processes import torch, the loop and the workload while
    ``ray.init`` runs: a pool actor could start them only once Ray, then a worker process for
    the actor, had started (seconds on a small machine, all before the first trial's ranks).
    CPU searches only (on GPUs the pool's processes are keyed by the ids Ray assigns). What
    the ranks print goes to ``output`` (the search's runs folder), not to the search's terminal.
    """

    def __init__(self, *, workload: str, cpus_per_worker: int, largest_trial: int, reuse: bool,
                 output: Path) -> None:
        from hpsearch.trials.pool_server import PoolServer

        module = workload_module(workload)
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        prestart: dict[str | None, int] = {None: cpu_prestart(cpus, cpus_per_worker, largest_trial)}
        # The folders the log's first write will make: the deepest first.
        self._new_folders = [p for p in output.parents if not p.exists()]
        self.output = output
        self.pool = RankPool([module] if module else [], prestart=prestart, reuse=reuse, output=output)
        self.server = PoolServer(self.pool)

    def check(self, space: Any) -> Any:
        """``hpsearch.workloads.check_for_search`` of ``space``, run in one of the pool's warm
        processes (they import torch and the workload anyway; this process then never does).

        Raises:
            WorkloadError: as the check does; also when the process checking it dies.
            SpaceError: as the check does.
        """
        from hpsearch.errors import WorkloadError
        from hpsearch.trials.errors import TrialFailed

        try:
            return self.pool.call("hpsearch.workloads:check_for_search", space)
        except TrialFailed as exc:  # the process itself went (a crash in the workload's code)
            raise WorkloadError(f"workload {space.workload.name!r} could not be checked: {exc.detail}; "
                                f"what it printed is in {self.output}") from None

    def close(self) -> None:
        self.server.close()
        self.pool.close()
        # A search that failed its checks leaves nothing behind: no empty log, no empty folder.
        with contextlib.suppress(OSError):
            if self.output.stat().st_size == 0:
                self.output.unlink()
        for folder in self._new_folders:
            with contextlib.suppress(OSError):  # not empty: the search wrote there
                folder.rmdir()


def cpu_prestart(cpus: float, cpus_per_worker: int, largest_trial: int) -> int:
    """How many CPU rank processes a node's pool starts ahead: as many ranks as the node runs
    at once, but not hundreds of idle processes on a big node for a search of small trials (the
    pool grows when trials need more)."""
    slots = int(cpus // max(cpus_per_worker, 1))
    return max(0, min(slots, max(largest_trial, 2)))


def trial_bundle(processes: int, device: str, cpus_per_worker: int, gpus_per_worker: int) -> dict[str, float]:
    """The devices ``processes`` ranks reserve (one rank's: a unit)."""
    need = {"CPU": float(processes * cpus_per_worker)}
    if device == "cuda":
        need["GPU"] = float(processes * gpus_per_worker)
    return need


@contextlib.contextmanager
def _reserved(processes: int) -> Iterator[Grant]:
    """Hold a trial's devices, on one node, for the block's duration."""
    desk = ray.get_actor(_RESERVATIONS_NAME)
    grant: Grant = ray.get(desk.reserve.remote(processes))
    try:
        yield grant
    finally:
        with contextlib.suppress(ray.exceptions.RayError):  # the search is ending: nothing to return to
            ray.get(desk.release.remote(grant.units))


async def _bundle_gpus(group: Any, index: int, gpus: float) -> list[str]:
    """The ids of the GPUs in a bundle, as Ray assigns them to work placed in it."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    probe = ray.remote(num_cpus=0, num_gpus=gpus)(ray.get_gpu_ids).options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index))
    return [str(g) for g in await probe.remote()]


def trainable(config: dict[str, Any]) -> None:
    """One Tune trial: reserve its devices, run its ranks in that node's pool, forward rank 0's
    reports, and record a failure as a result.

    This is the trial driver's error boundary: a failing trial reports its reason instead of
    raising, so the searcher records FAIL with ``status_reason`` and the search goes on.
    """
    from ray import tune

    from hpsearch.trials.errors import TrialFailed
    from hpsearch.trials.launcher import run_trial

    spec = TrialSpec(**config["spec"])
    with _reserved(spec.processes) as grant:
        # The ranks' node's IP and its Ray node id: several nodes may share an IP (containers,
        # or a test cluster on one machine); the id tells them apart.
        where = {"node": grant.node_ip, "node_id": grant.node_id}
        tune.report({STARTED_KEY: True, **where})
        reports = _Reports(where, config.get("report_every_s"))
        try:
            with _ranks(grant) as ranks:
                final = run_trial(spec, config["run_dir"], report=reports.forward,
                                  timeout_s=config.get("timeout_s"), ranks=ranks, gpu_ids=grant.gpu_ids)
        except TrialFailed as exc:
            tune.report(reports.last({FAILED_KEY: True, "status_reason": exc.reason, "status_detail": exc.detail}))
            return
    tune.report(reports.last({**final, FINAL_KEY: True}))


class _Reports:
    """A trial's reports on their way to Tune: each at once, or, with ``every_s``, at most one
    result that often, the reports between riding along with it (``EARLIER_KEY``)."""

    def __init__(self, where: dict[str, Any], every_s: float | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.where = where
        self.every_s = every_s
        self.held: list[dict[str, Any]] = []
        self.sent = self._clock()

    def forward(self, metrics: dict[str, Any]) -> None:
        """One of rank 0's reports. The last evaluation goes out once, merged into the final
        report (``last``): a scheduler that stops a trial on that report would otherwise cut
        off its final measurements."""
        if metrics.get("final"):
            return
        self.held.append(metrics)
        if self.every_s is None or self._clock() - self.sent >= self.every_s:
            from ray import tune

            latest = self.held.pop()
            tune.report(self.last(latest))
            self.sent = self._clock()

    def last(self, result: dict[str, Any]) -> dict[str, Any]:
        """``result`` as Tune gets it: with the trial's node, and the reports held back."""
        out = {**result, **self.where}
        if self.held:
            out[EARLIER_KEY], self.held = self.held, []
        return out


@contextlib.contextmanager
def _ranks(grant: Grant) -> Iterator[Any]:
    """The pool of the grant's node: the search process's own, or the node's pool actor."""
    if grant.pool is None:
        yield _RemoteRanks(ray.get_actor(_POOL_NAME.format(node_id=grant.node_id)))
        return
    from hpsearch.trials.pool_server import PoolClient

    with PoolClient(*grant.pool) as client:
        yield client
