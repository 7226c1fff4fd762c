"""hpsearch: batch-size / learning-rate scaling search for data-parallel PyTorch training.

Trials run concurrently on Ray Tune, each one a PyTorch DDP job whose learning rate follows a
scaling rule in the effective batch size; every trial lands in an Optuna study.

    >>> import hpsearch
    >>> search = hpsearch.start("space.yaml")        # doctest: +SKIP
    >>> search.frontier(x="runtime_s", y="val_accuracy")  # doctest: +SKIP
    >>> [s.name for s in hpsearch.list_studies()]    # doctest: +SKIP
    >>> hpsearch.delete_study("old-study")            # doctest: +SKIP

The ``hpsearch`` command calls only these functions and ``Search``'s methods.

``import hpsearch`` stays light: the API (``start``, ``load``...) loads with its first name used,
and torch, ray and plotly only when a search or a figure needs them.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

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
from hpsearch.search_spaces import SearchSpace, load_space

if TYPE_CHECKING:
    from hpsearch.search import DeletedStudy, Search, confirm, delete_study, list_studies, load, resume, start

#: The installed version (``__getattr__`` reads it on first use).
__version__: str

#: The Python API, loaded with its first name asked for (PEP 562): ``hpsearch.search`` brings
#: the store, the read model and the budget, which ``hpsearch --help`` and a script that only
#: validates a space do not need (docs/design.md, "Imports").
_API = frozenset({"DeletedStudy", "Search", "confirm", "delete_study", "list_studies", "load", "resume", "start"})


def __getattr__(name: str) -> Any:
    """The API's names (``_API``), and ``hpsearch.__version__``, read from the installed
    package's metadata when first asked (finding it scans the import path: 2 ms every command
    would pay for a string few of them read)."""
    if name in _API:
        value = getattr(importlib.import_module("hpsearch.search"), name)
    elif name == "__version__":
        try:
            value = version("hpsearch")
        except PackageNotFoundError:  # running from a source tree that is not installed
            value = "0.0.0"
    else:
        raise AttributeError(f"module 'hpsearch' has no attribute {name!r}")
    globals()[name] = value
    return value


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
    "confirm",
    "delete_study",
    "list_studies",
    "load",
    "load_space",
    "resume",
    "start",
]
