"""The whole hpsearch exception tree, in one place, at the bottom of the stack.

Every layer raises its part of the tree (the space parser ``SpaceError``, the trial engine
``TrialFailed`` and ``WorkloadError``, the service the rest), so the tree sits beside
``hpsearch.record`` below all of them and imports nothing of hpsearch: a rank or the space
parser names its error without importing the layers above it. ``hpsearch.search_spaces.errors``
and ``hpsearch.trials.errors`` name their layers' parts for the code that raises them; users
catch ``hpsearch.HPSearchError``.

Each class carries the exit code the CLI returns and the HTTP status the web app answers with.
They are translated in three places only: the CLI, the web app and the trial driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


class HPSearchError(Exception):
    """Base class of every error hpsearch raises on purpose.

    Attributes:
        exit_code: The CLI's exit status for this error.
        http_status: The web app's response status for this error.
    """

    exit_code: int = 1
    http_status: int = 500


class SpaceError(HPSearchError, ValueError):
    """A space file (or mapping) breaks the schema.

    The message names the key path (``parameters.base_lr.low``) and, when the space came from
    text, the file and line, so the user can go straight to the mistake.

    Attributes:
        key_path: Dotted path to the offending key, ``""`` for the whole document.
        line: 1-based line in the source text, or ``None`` when unknown.
        source: The file name (or ``"<string>"``) the space came from.
        reason: The rule that was broken, without location.
    """

    exit_code = 2
    http_status = 400

    def __init__(
        self,
        reason: str,
        *,
        key_path: str = "",
        line: int | None = None,
        source: str = "<string>",
    ) -> None:
        self.reason = reason
        self.key_path = key_path
        self.line = line
        self.source = source
        where = source if line is None else f"{source}:{line}"
        what = f" at '{key_path}'" if key_path else ""
        super().__init__(f"{where}{what}: {reason}")

    def __reduce__(self) -> tuple[object, ...]:
        # Rebuilt from its fields: the default (the message as the only argument) would put a
        # second location in front of it. A search checks its workload in another process and
        # raises the error that process sent back.
        return _rebuilt, (type(self), self.reason, self.key_path, self.line, self.source)


def _rebuilt(cls: type[SpaceError], reason: str, key_path: str, line: int | None, source: str) -> SpaceError:
    return cls(reason, key_path=key_path, line=line, source=source)


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
    it: it says so and goes on (``hpsearch.integrations.tracking``)."""

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
