"""What a node's pool and its rank processes say to each other, as typed values.

The pool (``hpsearch.trials.node.pool``) hands a rank process a ``RankTask`` (one rank of one
trial) or a ``Call`` (a function to run where torch and the workload are imported). The process
says ``Ready`` once it is warm, then, for a task, ``Began``, ``Reported`` after each report rank 0
appended to ``metrics.jsonl``, and ``Done`` when the rank finished cleanly (a rank that fails
writes its reason to a file and exits instead); for a call, ``Returned`` or ``Raised``.

The zygote (``hpsearch.trials.rank.zygote``) is asked to ``Fork`` a rank process and answers
``Forked``, later ``Exited``. Each value crosses a ``multiprocessing`` connection as a pickle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpsearch.trials.spec import TrialSpec

__all__ = [
    "RANKS_LOG_ENV",
    "Began", "Call", "Done", "Exited", "Fork", "Forked", "Raised", "RankTask", "Ready", "Reported", "Returned",
    "ToPool",
]

#: Where the pool sends what its ranks print (``ranks.log``), told to each rank, so that a
#: workload's failure can say where its traceback is.
RANKS_LOG_ENV = "HPSEARCH_RANKS_LOG"


# ---- the pool to a rank process ----------------------------------------------------------------


@dataclass(frozen=True)
class RankTask:
    """One rank of one trial.

    Attributes:
        spec: The trial's configuration.
        run_dir: The trial's folder (``metrics.jsonl``, ``failure-rank<r>.json``, ``model.pt``).
        rank: This rank, ``0 .. processes - 1``.
        processes: The trial's process group size (``spec.processes``: fewer than its world
            size where ranks are emulated).
        rendezvous: Where the trial's processes meet: a file (a ``torch.distributed.FileStore``)
            when they all run on one node, or ``tcp://HOST:PORT``, rank 0's node address, where
            rank 0 serves a ``torch.distributed.TCPStore`` (a trial that spans nodes).
        collective_timeout_s: How long a collective waits for a rank that does not come.
        sys_path: The trial's import path (its workload module may live there).
        env: Variables the rank runs with, beside the process's own (the network interface a
            trial that spans nodes talks over, ``hpsearch.trials.node.network.rank_environment``);
            the process's environment is put back after the rank.
    """

    spec: TrialSpec
    run_dir: str
    rank: int
    processes: int
    rendezvous: str
    collective_timeout_s: float
    sys_path: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Call:
    """``target`` (``"module:function"``) called with ``args`` in a warm rank process."""

    target: str
    args: tuple[Any, ...]
    sys_path: tuple[str, ...]


# ---- a rank process (or the zygote) to the pool ------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """The process imported what it preloads and waits for work."""

    pid: int


@dataclass(frozen=True)
class Began:
    """The process was reset and started its rank (``at``: its own clock, wall seconds)."""

    rank: int
    at: float


@dataclass(frozen=True)
class Reported:
    """Rank 0 appended a report to ``metrics.jsonl``."""

    rank: int
    at: float


@dataclass(frozen=True)
class Done:
    """The rank finished cleanly; the process is free for the next task."""

    rank: int


@dataclass(frozen=True)
class Returned:
    """What a ``Call`` returned."""

    value: Any


@dataclass(frozen=True)
class Raised:
    """What a ``Call`` raised (an exception that cannot be pickled comes as a ``RuntimeError``
    naming it)."""

    error: BaseException


#: What a rank process sends its pool.
ToPool = Ready | Began | Reported | Done | Returned | Raised


# ---- the pool and its zygote --------------------------------------------------------------------


@dataclass(frozen=True)
class Fork:
    """Fork a rank process (seeing only ``gpu``, when given); two descriptors follow on the
    connection: the new process's socket and the writing end of the pipe it prints into."""

    request: int
    gpu: str | None


@dataclass(frozen=True)
class Forked:
    request: int
    pid: int


@dataclass(frozen=True)
class Exited:
    """A forked process ended; ``code`` as ``subprocess`` gives it (negative: a signal)."""

    pid: int
    code: int
