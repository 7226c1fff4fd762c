"""``Ranks``: where a trial's ranks run, named once.

A trial hands its W ranks to a ``Ranks`` and follows them through it: ``start`` gives a
ticket, ``wait`` returns rank 0's new reports (and, once every rank has ended, their exit codes
and failure reports), ``cancel`` stops them. Three implementations, one per process hop:

- ``hpsearch.trials.pool.RankPool``: the warm rank processes of a node, in this process;
- ``hpsearch.trials.pool_server.PoolClient``: a ``RankPool`` served by another process of the
  node over a Unix socket (the search's own process, on its node);
- ``hpsearch.tune.pools.RayRanks``: a ``RankPool`` held by a Ray actor on the node.

Trial code never imports Ray: the Ray one lives with the engine (``hpsearch.tune``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from hpsearch.trials.spec import TrialSpec

__all__ = ["Ranks", "Status"]


@dataclass
class Status:
    """What a trial's ranks did since the last look.

    Attributes:
        reports: Rank 0's new reports (``metrics.jsonl`` lines), in order.
        codes: Every rank's exit code (0: finished cleanly) once all have ended, else ``None``.
        failures: The ranks' failure reports (``failure-rank<r>.json``), once all have ended.
        report_times: When rank 0 wrote each report (wall-clock seconds), in the order of ``reports``.
        handed_at: When the pool sent the trial's ranks to their workers.
        ready_at: When the last of the trial's ranks began (its worker reset and on its way),
            once all have.
    """

    reports: list[dict[str, Any]]
    codes: list[int] | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)
    report_times: list[float] = field(default_factory=list)
    handed_at: float | None = None
    ready_at: float | None = None


class Ranks(Protocol):
    """Where a trial's ranks run (see the module's docstring for the implementations)."""

    def start(self, spec: TrialSpec, run_dir: str, *, gpu_ids: Sequence[str] | None = ...,
              collective_timeout_s: float = ..., watch_pid: int | None = ...,
              sys_path: Sequence[str] | None = ...) -> int:
        """Hand the trial's ranks to warm processes; returns the trial's ticket."""
        ...

    def wait(self, ticket: int, timeout: float) -> Status:
        """Wait up to ``timeout`` seconds for news of the ticket's ranks."""
        ...

    def cancel(self, ticket: int) -> None:
        """Stop the ticket's ranks that still run."""
        ...
