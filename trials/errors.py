"""The trial engine's errors: its part of the tree in ``hpsearch.errors``, named here for the
code that raises them."""

from __future__ import annotations

from hpsearch.errors import HPSearchError, TrialFailed, UnknownWorkloadError, WorkloadError

__all__ = ["HPSearchError", "TrialFailed", "UnknownWorkloadError", "WorkloadError"]
