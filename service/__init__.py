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

#: The installed version (``__getattr__`` reads it on first use).
__version__: str


def __getattr__(name: str) -> str:
    """``hpsearch.__version__``, read from the installed package's metadata when first asked:
    finding it scans the import path, 2 ms that every ``import hpsearch`` and every ``hpsearch``
    command paid for a string few of them read."""
    if name != "__version__":
        raise AttributeError(f"module 'hpsearch' has no attribute {name!r}")
    try:
        found = version("hpsearch")
    except PackageNotFoundError:  # running from a source tree that is not installed
        found = "0.0.0"
    globals()["__version__"] = found
    return found


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
