"""hpsearch: batch-size / learning-rate scaling search for data-parallel PyTorch training.

Trials run concurrently on Ray Tune, each one a PyTorch DDP job whose learning rate follows a
scaling rule in the effective batch size; every trial lands in an Optuna study.

    >>> import hpsearch
    >>> search = hpsearch.start("space.yaml")        # doctest: +SKIP
    >>> search.frontier(x="runtime_s", y="val_accuracy")  # doctest: +SKIP
    >>> [s.name for s in hpsearch.list_studies()]    # doctest: +SKIP
    >>> hpsearch.delete_study("old-study")            # doctest: +SKIP

The ``hpsearch`` command calls only these functions and ``Search``'s methods.

``import hpsearch`` stays light: torch, ray and plotly load only when a search or a figure needs
them.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from hpsearch.errors import (
    ColumnError,
    HPSearchError,
    NoAnswerError,
    NoCompletedTrialError,
    ResourceError,
    SearchInterrupted,
    SpaceError,
    StoreError,
    StudyBusyError,
    StudyExistsError,
    StudyNotFoundError,
    TrialFailed,
    WorkloadError,
)
from hpsearch.search import DeletedStudy, Search, delete_study, list_studies, load, resume, start
from hpsearch.search_spaces import SearchSpace, load_space

try:
    __version__ = version("hpsearch")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = [
    "ColumnError",
    "DeletedStudy",
    "HPSearchError",
    "NoAnswerError",
    "NoCompletedTrialError",
    "ResourceError",
    "Search",
    "SearchInterrupted",
    "SearchSpace",
    "SpaceError",
    "StoreError",
    "StudyBusyError",
    "StudyExistsError",
    "StudyNotFoundError",
    "TrialFailed",
    "WorkloadError",
    "__version__",
    "delete_study",
    "list_studies",
    "load",
    "load_space",
    "resume",
    "start",
]
