"""Where a trial's ranks run: the warm rank pool of each node, as the engine reaches it.

A trial hands its ranks to a ``Ranks`` (``hpsearch.trials.ranks``): ``start`` a ticket, ``wait``
for its reports and exit codes, ``cancel`` it. One ``RankPool`` (``hpsearch.trials.pool``) per
node owns that node's warm rank processes. A trial's process reaches its node's pool one of two
ways, side by side here:

- **the search's own node** (a local Ray started by ``hpsearch start`` for CPU trials):
  ``LocalRanks`` runs the pool in the search's process, started before Ray so its processes
  import torch and the workload while ``ray.init`` runs, and serves it over a Unix socket;
  a trial talks to it through a ``PoolClient`` (``hpsearch.trials.pool_server``);
- **any other node** (a cluster, or GPU nodes, whose pool must know the GPU ids Ray assigns):
  a ``_PoolActor`` (a threaded Ray actor pinned to the node) holds the pool, and a trial talks
  to it through ``RayRanks``.

``node_ranks`` gives a trial the right one for the node its devices were reserved on
(``hpsearch.tune.reservations``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from hpsearch.errors import WorkloadError
from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.launcher import workload_module
from hpsearch.trials.mps import MpsDaemon, MpsError
from hpsearch.trials.pool import RankPool
from hpsearch.trials.pool_server import PoolClient, PoolServer
from hpsearch.trials.ranks import Status
from hpsearch.trials.spec import TrialSpec

__all__ = ["ACTOR_THREADS", "LocalRanks", "RayRanks", "cpu_prestart", "node_ranks", "start_pool_actor"]

# Named actors of the search's Ray job; names are per job (namespace), so concurrent searches on
# one cluster each find their own.
_POOL_NAME = "hpsearch-ranks-{node_id}"

#: Calls to a pool wait at most a second or so in the actor (``wait``), so one actor thread per
#: running trial is plenty.
ACTOR_THREADS = 256


class _PoolActor:
    """A node's ``RankPool``, as a threaded Ray actor (``start_pool_actor``), with the search's
    CUDA MPS daemon of the node where asked for (``hpsearch.trials.mps``)."""

    def __init__(self, preload: list[str], prestart: dict[str | None, int], reuse: bool,
                 sys_path: list[str], mps: str | None, shared: bool) -> None:
        self.mps_error: str | None = None
        self.mps: MpsDaemon | None = None
        if mps is not None:
            try:
                self.mps = MpsDaemon(mps, shared=shared)
            except MpsError as exc:
                self.mps_error = str(exc)
        env = self.mps.env if self.mps is not None else {}
        self.pool = RankPool(preload, prestart=prestart, reuse=reuse, sys_path=sys_path, env=env)

    def ready(self, timeout: float) -> bool:
        """Whether the pool's workers started ahead are warm, waiting up to ``timeout`` seconds."""
        return self.pool.wait_ready(timeout)

    def mps_state(self) -> tuple[str | None, str | None]:
        """What this node's trials record as ``mps`` (``None`` on a CPU node), and, for
        ``resources.mps: on``, why the daemon could not start."""
        return (self.mps.state if self.mps is not None else None), self.mps_error

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
        if self.mps is not None:
            self.mps.stop()


class RayRanks:
    """A trial's handle on its node's pool actor (a ``hpsearch.trials.ranks.Ranks``)."""

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


def start_pool_actor(node_id: str, resources: dict[str, float], options: dict[str, Any]) -> Any:
    """Start the pool actor of ``node_id`` (resources: the node's, as Ray reports them), with the
    search's ``options`` (``preload``, ``device``, ``cpus_per_worker``, ``gpus_per_worker``,
    ``ranks_at_once``, ``reuse``, ``sys_path``, ``mps``). It ends with the search's Ray job."""
    prestart: dict[str | None, int]
    per_rank = float(options["gpus_per_worker"])
    if options["device"] == "cuda":
        # The ids Ray gives a node's GPUs are 0..n-1; a GPU shared by ranks of several trials
        # (gpus_per_worker 0.5, 0.25...) has a warm process for each; a rank on several GPUs
        # starts its process when a trial first asks (its GPUs are known then).
        gpus = int(resources.get("GPU", 0))
        prestart = {str(g): round(1 / per_rank) for g in range(gpus)} if per_rank <= 1 else {}
    else:
        prestart = {None: cpu_prestart(resources.get("CPU", 0), options["cpus_per_worker"], options["ranks_at_once"])}
    # MPS only where there are GPUs: a cluster's head node often has none.
    mps = options.get("mps") if options["device"] == "cuda" and resources.get("GPU", 0) > 0 else None
    return ray.remote(_PoolActor).options(
        num_cpus=0, max_concurrency=ACTOR_THREADS, name=_POOL_NAME.format(node_id=node_id),
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote(options["preload"], prestart, options["reuse"], options["sys_path"], mps, per_rank < 1)


@contextlib.contextmanager
def node_ranks(node_id: str, local: tuple[str, bytes] | None) -> Iterator[Any]:
    """The ``Ranks`` of a node's pool: the search process's own, when ``local`` (its socket and
    key) says it serves this node, else the node's pool actor."""
    if local is None:
        yield RayRanks(ray.get_actor(_POOL_NAME.format(node_id=node_id)))
        return
    with PoolClient(*local) as client:
        yield client


class LocalRanks:
    """The warm rank pool of the search's own node, run by the search's process and served to
    that node's trials over a local socket (``hpsearch.trials.pool_server``).

    Started before Ray, so that its processes import torch, the loop and the workload while
    ``ray.init`` runs: a pool actor could start them only once Ray, then a worker process for
    the actor, had started (seconds on a small machine, all before the first trial's ranks).
    CPU searches only (on GPUs the pool's processes are keyed by the ids Ray assigns). What
    the ranks print goes to ``output`` (the search's runs folder), not to the search's terminal.
    """

    def __init__(self, *, workload: str, cpus_per_worker: int, ranks_at_once: int | None, reuse: bool,
                 output: Path) -> None:
        module = workload_module(workload)
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        prestart: dict[str | None, int] = {None: cpu_prestart(cpus, cpus_per_worker, ranks_at_once)}
        # The folders the log's first write will make: the deepest first.
        self._new_folders = [p for p in output.parents if not p.exists()]
        self.output = output
        self.pool = RankPool([module] if module else [], prestart=prestart, reuse=reuse, output=output)
        self.server = PoolServer(self.pool)

    @property
    def address(self) -> tuple[str, bytes]:
        """The socket and key a trial's ``PoolClient`` connects with."""
        return self.server.address, self.server.authkey

    def check(self, space: Any) -> Any:
        """``hpsearch.workloads.check_for_search`` of ``space``, run in one of the pool's warm
        processes (they import torch and the workload anyway; this process then never does).

        Raises:
            WorkloadError: as the check does; also when the process checking it dies.
            SpaceError: as the check does.
        """
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


def cpu_prestart(cpus: float, cpus_per_worker: int, ranks_at_once: int | None) -> int:
    """How many CPU rank processes a node's pool starts ahead: as many ranks as the node can run
    at once (``ranks_at_once``: fewer when the search runs fewer at once), so no trial waits for
    a rank process to start. Workers started on demand made a trial wait for their imports
    (1-3 CPU-seconds each) while other trials trained: a median 4.3 s on 16 cores. Forked from
    the pool's zygote, they cost milliseconds each (``hpsearch.trials.zygote``)."""
    slots = int(cpus // max(cpus_per_worker, 1))
    return max(0, slots if ranks_at_once is None else min(slots, ranks_at_once))
