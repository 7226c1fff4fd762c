"""Errors raised by the trial engine. Part of the tree rooted in ``hpsearch.search_spaces.errors``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpsearch.search_spaces.errors import HPSearchError

__all__ = ["TrialFailed", "UnknownWorkloadError", "WorkloadError"]


class WorkloadError(HPSearchError):
    """A workload cannot be found, loaded or built (bad name, plugin import error, bad options)."""

    exit_code = 2
    http_status = 400


class UnknownWorkloadError(WorkloadError):
    """The workload's name names nothing: no built-in of that name, or no callable of that name
    in its module (whose import worked). The space's ``workload.name`` is what to fix, so the
    space check reports it at that key and line."""


class TrialFailed(HPSearchError):
    """A trial ended without a result.

    The trial driver catches it and records the trial as FAIL with ``reason`` in
    ``status_reason``; the search goes on.

    Attributes:
        reason: A short machine-readable cause: ``diverged``, ``workload_error``,
            ``rank_exited``, ``timeout``.
        detail: A human-readable explanation (the exception text, the exit signal).
        measured: What the trial measured before it failed, by record name
            (``peak_memory_bytes``, ``memory_limit_bytes``, ``device`` of a rank that ran out of
            memory), recorded on the trial with its reason.
    """

    def __init__(self, reason: str, detail: str = "", measured: Mapping[str, Any] | None = None) -> None:
        self.reason = reason
        self.detail = detail
        self.measured = dict(measured or {})
        super().__init__(f"{reason}: {detail}" if detail else reason)
