"""The whole hpsearch exception tree, in one place for users.

The root lives in ``hpsearch.search_spaces.errors`` (the lowest layer) so that every layer can
raise its part without importing upward; this module adds the orchestrator's errors.
"""

from __future__ import annotations

from typing import Any

from hpsearch.search_spaces.errors import HPSearchError, SpaceError
from hpsearch.trials.errors import TrialFailed, UnknownWorkloadError, WorkloadError

__all__ = [
    "AnalysisError",
    "ClusterError",
    "ColumnError",
    "HPSearchError",
    "NoAnswerError",
    "NoCompletedTrialError",
    "ResourceError",
    "SearchInterrupted",
    "SpaceError",
    "StoreError",
    "StoreLostError",
    "StudyBusyError",
    "StudyExistsError",
    "StudyNotFoundError",
    "TrackingError",
    "TrialFailed",
    "TrialNotFoundError",
    "UnknownWorkloadError",
    "WorkloadError",
]


class StoreError(HPSearchError):
    """The study store cannot be opened or used (bad URL, missing driver, unreachable server)."""

    exit_code = 2
    http_status = 503


class StudyNotFoundError(StoreError):
    """No study of that name is in the store."""

    http_status = 404


class TrialNotFoundError(StoreError):
    """The study has no trial of that number (or not one that can be used for what was asked)."""

    http_status = 404


class StudyExistsError(StoreError):
    """``start`` was asked to create a study whose name the store already holds."""

    http_status = 409


class StoreLostError(StoreError):
    """The store stopped answering during a search for longer than ``store_patience_s``.
    Finished trials are in the store; trials that were running stay RUNNING there until
    ``hpsearch resume`` marks them interrupted and runs them again."""

    exit_code = 1
    http_status = 503


class TrackingError(HPSearchError):
    """The experiment tracker (MLflow) did not answer, or refused what was logged, while a study
    was exported to it (``hpsearch export STUDY --to mlflow URI``). A running search never raises
    it: it says so and goes on (``hpsearch.tracking``)."""

    exit_code = 1
    http_status = 502


class StudyBusyError(StoreError):
    """Another orchestrator is writing this study (or, for SQLite, this database file, which
    takes one writer). Raised before anything is written."""

    exit_code = 3
    http_status = 409


class SearchInterrupted(HPSearchError):
    """The search was stopped by Ctrl-C or SIGTERM. The study is consistent: finished trials
    are kept, the ones cut short are FAIL with ``status_reason`` ``interrupted``, and
    ``hpsearch resume`` runs them again."""

    exit_code = 130
    http_status = 503


class NoCompletedTrialError(HPSearchError):
    """A study has no COMPLETE trial: ``start`` or ``resume`` ended with every trial failed,
    stopped or skipped, or ``best`` was asked of such a study. The message says how many trials
    ended how, and the most common reason. Exit status 4, so a script can tell it from bad
    input (2) and from a search that could not run."""

    exit_code = 4
    http_status = 404


class ResourceError(HPSearchError):
    """A trial of the space can never fit on the cluster (more workers, CPUs or GPUs than any
    node has). Raised before any trial runs."""

    exit_code = 2
    http_status = 400


class ClusterError(HPSearchError):
    """The Ray cluster named by ``--address`` / ``RAY_ADDRESS`` cannot be joined."""

    exit_code = 2
    http_status = 503


class ColumnError(HPSearchError, KeyError):
    """A table or figure was asked for a column (param, attr or metric) the study's trials lack."""

    exit_code = 2
    http_status = 400

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class AnalysisError(HPSearchError):
    """The analysis cannot answer from this study's trials (too few batch sizes reached the
    target, no trial measured what a fit needs...). The message says what is missing."""

    exit_code = 2
    http_status = 422


class NoAnswerError(AnalysisError):
    """The question was well formed, but this study's trials cannot answer it: no trial has
    what the analysis reads yet, no trial reached the target, too few batch sizes for a fit...
    The message says what is missing; more trials (or another target) would answer. Exit status
    5, so a script can tell it from bad input (2).

    Attributes:
        analysis: What the analysis found before it had to stop (a
            ``hpsearch.analysis.StudyAnalysis``), or ``None`` when it could not read the study.
    """

    exit_code = 5
    http_status = 422

    def __init__(self, message: str, analysis: Any = None) -> None:
        super().__init__(message)
        self.analysis = analysis
