"""The nodes' warm rank pools of a search: what they are started with, and the one the search's
own process runs.

One ``RankPool`` (``hpsearch.trials.node.pool``) per node owns that node's warm rank processes,
and a ``PoolServer`` (``hpsearch.trials.node.pool_server``) serves it: every trial reaches its ranks
through a ``PoolClient`` on the pool's ``PoolAddress``, which the trial's grant carries
(``hpsearch.tune.reservations``, the one module that knows where each node's pool is). Two
hosts, one way in:

- ``LocalPool`` (here): the search's own process, for its own node, when the search starts a
  local Ray for CPU trials. It starts before Ray, so its processes import torch and the
  workload while ``ray.init`` runs (docs/design.md, "Ray on a small machine"). Served on a Unix
  socket. It also checks the search's workload in one of its warm processes.
- a pool actor (``hpsearch.tune.reservations``), on every other node.

This module does not import Ray: the search starts its local pool before Ray loads.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpsearch.errors import WorkloadError
from hpsearch.search_spaces import SearchSpace
from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.node.pool import RankPool
from hpsearch.trials.node.pool_server import PoolAddress, PoolServer
from hpsearch.trials.workloads.base import workload_module_name

__all__ = ["LocalPool", "PoolOptions", "cpu_prestart"]


@dataclass(frozen=True)
class PoolOptions:
    """What every node's pool of a search is started with.

    Attributes:
        preload: Modules its rank processes import ahead (the workload's).
        device: ``cpu`` or ``cuda``.
        cpus_per_worker, gpus_per_worker: What a rank reserves.
        ranks_at_once: The most ranks the search runs at once (``None``: as many as fit).
        reuse: ``resources.reuse_workers``.
        mps: ``resources.mps``.
        sys_path: The import path its rank processes start with (the search's).
    """

    preload: tuple[str, ...]
    device: str
    cpus_per_worker: int
    gpus_per_worker: float
    ranks_at_once: int | None
    reuse: bool
    mps: str
    sys_path: tuple[str, ...]

    @classmethod
    def of_space(cls, space: SearchSpace, device: str, sys_path: list[str]) -> PoolOptions:
        """The pools' options of a search of ``space`` on ``device``."""
        module = workload_module_name(space.workload.name)
        return cls(preload=(module,) if module else (), device=device,
                   cpus_per_worker=space.resources.cpus_per_worker, gpus_per_worker=space.resources.gpus_per_worker,
                   ranks_at_once=_ranks_at_once(space), reuse=space.resources.reuse_workers, mps=space.resources.mps,
                   sys_path=tuple(sys_path))


def _ranks_at_once(space: SearchSpace) -> int | None:
    """The most ranks the search runs at once, where its space bounds it (``search.max_concurrent``
    trials of its largest world size); ``None``: as many as the nodes hold."""
    if space.search.max_concurrent is None:
        return None
    largest = 1 if space.resources.emulate_ranks == "on" else space.max_world_size()
    return space.search.max_concurrent * largest


class LocalPool:
    """The warm rank pool of the search's own node, run by the search's process and served to
    that node's trials on a Unix socket. CPU searches on a local Ray only (on GPUs the pool's
    processes are keyed by the ids Ray assigns). What the ranks print goes to ``output`` (the
    search's runs folder), not to the search's terminal.
    """

    def __init__(self, options: PoolOptions, output: Path) -> None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        prestart: dict[str | None, int] = {None: cpu_prestart(cpus, options.cpus_per_worker, options.ranks_at_once)}
        # The folders the log's first write will make: the deepest first.
        self._new_folders = [p for p in output.parents if not p.exists()]
        self.output = output
        self.pool = RankPool(options.preload, prestart=prestart, reuse=options.reuse, output=output)
        self.server = PoolServer(self.pool)

    @property
    def address(self) -> PoolAddress:
        """Where this node's trials reach the pool."""
        return self.server.address

    def check(self, space: SearchSpace) -> Any:
        """``hpsearch.workload_check.check_for_search`` of ``space``, run in one of the pool's warm
        processes (they import torch and the workload anyway; this process then never does).

        Raises:
            WorkloadError: as the check does; also when the process checking it dies.
            SpaceError: as the check does.
        """
        try:
            return self.pool.call("hpsearch.workload_check:check_for_search", space)
        except TrialFailed as exc:  # the process itself went (a crash in the workload's code)
            raise WorkloadError(f"workload {space.workload.name!r} could not be checked: {exc.detail}; "
                                f"what it printed is in {self.output}") from None

    def close(self) -> None:
        self.server.close()
        self.pool.close()
        # A search that failed its checks leaves nothing behind: no empty log, no empty folder.
        # One that ran trials keeps its log, empty where no rank printed: a log that existed
        # only when a rank printed left users looking for a file the docs named.
        ran = self.output.parent.is_dir() and any(p != self.output for p in self.output.parent.iterdir())
        with contextlib.suppress(OSError):
            if ran:
                self.output.touch()
            elif self.output.stat().st_size == 0:
                self.output.unlink()
        for folder in self._new_folders:
            with contextlib.suppress(OSError):  # not empty: the search wrote there
                folder.rmdir()


def cpu_prestart(cpus: float, cpus_per_worker: int, ranks_at_once: int | None) -> int:
    """How many CPU rank processes a node's pool starts ahead: as many ranks as the node can run
    at once (``ranks_at_once``: fewer when the search runs fewer at once), so no trial waits for
    a rank process to start (docs/design.md, "Warm rank processes"). Forked from the pool's
    zygote, they cost milliseconds each."""
    slots = int(cpus // max(cpus_per_worker, 1))
    return max(0, slots if ranks_at_once is None else min(slots, ranks_at_once))
