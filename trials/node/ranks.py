"""``Ranks``: how a trial's driver sees the pool that runs its ranks, and ``Status``, what it
hears back.

A trial hands its W ranks to a ``Ranks`` and follows them through it: ``start`` gives a
ticket, ``wait`` returns rank 0's new reports (and, once every rank has ended, their exit codes
and failure reports), ``cancel`` stops them. Two implementations: the node's
``hpsearch.trials.node.pool.RankPool`` itself, in the same process (a script or a test), and a
``hpsearch.trials.node.pool_server.PoolClient`` of a pool served by another process (every trial of a
search, whichever node its ranks run on).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

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
              collective_timeout_s: float = ..., sys_path: Sequence[str] | None = ...) -> int:
        """Hand the trial's ranks to warm processes; returns the trial's ticket."""
        ...

    def wait(self, ticket: int, timeout: float) -> Status:
        """Wait up to ``timeout`` seconds for news of the ticket's ranks."""
        ...

    def cancel(self, ticket: int) -> None:
        """Stop the ticket's ranks that still run."""
        ...
