"""CIFAR-10 from a local copy of the standard "python version" folder (nothing is downloaded).

The folder holds ``data_batch_1`` .. ``data_batch_5`` and ``test_batch``, each a pickled dict
with ``b"data"`` (uint8, shape (N, 3072), channel-major rows of 32x32 images) and ``b"labels"``
(a list of N ints in 0..9). Images stay uint8 in memory (150 MB for the full training set, on
the device too) and are scaled to float [0, 1], shape (3, 32, 32), as they are used: a sample
at a time through a loader, a whole batch at a time on the device (``TensorData``'s transform).

The files are read with an unpickler that only admits what a numpy array needs, so a tampered
file fails with ``WorkloadError`` instead of running code.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from hpsearch.trials.errors import WorkloadError
from hpsearch.trials.workloads.base import Workload, builds_data, takes_options
from hpsearch.trials.workloads.tensors import TensorData

__all__ = ["TRAIN_BATCHES", "CifarImages", "cifar10", "cifar10_data", "load_cifar10", "read_batch"]

TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
_BATCHES = (*TRAIN_BATCHES, "test_batch")
_PIXELS = 3 * 32 * 32

# (module, name) pairs a CIFAR batch file may reference: numpy's array reconstruction under the
# old (numpy.core) and new (numpy._core) module names, and the codec protocol 2 uses for bytes.
_ALLOWED_GLOBALS = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy._core.numeric", "_frombuffer"),
    ("_codecs", "encode"),
}


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("numpy.core"):
            module = "numpy._core" + module[len("numpy.core"):]
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR-10 batch file")
        return super().find_class(module, name)


def _unit_float(images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 pixels to float in [0, 1], an image or a batch of them."""
    return images.float().div_(255.0), labels


class CifarImages(TensorData):
    """uint8 images (N, 3, 32, 32) and int64 labels; items are ``(float image in [0, 1], label)``."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        super().__init__(images, labels, transform=_unit_float)

    @property
    def images(self) -> torch.Tensor:
        return self.tensors[0]

    @property
    def labels(self) -> torch.Tensor:
        return self.tensors[1]


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch file as (uint8 images (N, 3072), int64 labels (N,)).

    Raises:
        WorkloadError: the file is missing, not a CIFAR-10 batch pickle, or inconsistent.
    """
    if not path.is_file():
        raise WorkloadError(f"CIFAR-10 batch file not found: {path}")
    try:
        with path.open("rb") as f:
            batch = _ArrayUnpickler(f, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError) as exc:
        raise WorkloadError(f"{path} is not a CIFAR-10 batch pickle: {exc}") from exc
    if not isinstance(batch, dict):
        raise WorkloadError(f"{path} must hold a dict with b'data' and b'labels', got {type(batch).__name__}")
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if data is None or labels is None:
        raise WorkloadError(f"{path} must hold a dict with b'data' and b'labels', got keys {sorted(map(repr, batch))}")
    data = np.asarray(data)
    labels = np.asarray(labels, dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != _PIXELS:
        raise WorkloadError(f"{path}: b'data' must be uint8 of shape (N, {_PIXELS}), got {data.dtype} {data.shape}")
    if labels.shape != (data.shape[0],):
        raise WorkloadError(f"{path}: {data.shape[0]} images but {labels.size} labels")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise WorkloadError(f"{path}: labels must be in 0..9, got {labels.min()}..{labels.max()}")
    return data, labels


def _dataset(parts: list[tuple[np.ndarray, np.ndarray]], limit: int | None = None) -> CifarImages:
    data = np.concatenate([d for d, _ in parts])[:limit]
    labels = np.concatenate([y for _, y in parts])[:limit]
    return CifarImages(torch.from_numpy(data).reshape(-1, 3, 32, 32), torch.from_numpy(labels))


def load_cifar10(
    path: str | Path, limit: int | None = None, val_source: str = "test_batch"
) -> tuple[CifarImages, CifarImages]:
    """(train, validation) datasets from a CIFAR-10 python folder.

    Args:
        path: The folder with ``data_batch_1`` .. ``data_batch_5`` and ``test_batch``.
        limit: Keep only the first ``limit`` training samples (in file order).
        val_source: The batch file validated on: ``test_batch``, or one ``data_batch_k``, which
            is then left out of training.

    Raises:
        WorkloadError: the folder or a file is missing or malformed, or an option is invalid.
    """
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise WorkloadError(f"CIFAR-10 folder not found: {folder} (expected data_batch_1..5 and test_batch)")
    if val_source not in _BATCHES:
        raise WorkloadError(f"val_source must be one of {', '.join(_BATCHES)}, got {val_source!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise WorkloadError(f"limit must be a positive integer, got {limit!r}")
    train = _dataset([read_batch(folder / name) for name in TRAIN_BATCHES if name != val_source], limit)
    val = _dataset([read_batch(folder / val_source)])
    return train, val


def cifar10_data(options: Mapping[str, Any]) -> tuple[CifarImages, CifarImages]:
    """The (train, validation) data ``cifar10`` trains on for these options."""
    if not isinstance(options.get("path"), str) or not options["path"]:
        raise WorkloadError("the cifar10 workload needs option 'path': the CIFAR-10 python folder")
    return load_cifar10(options["path"], options.get("limit"), options.get("val_source", "test_batch"))


@takes_options("path", "limit", "val_source", "channels")
@builds_data(cifar10_data, options=("path", "limit", "val_source"))
def cifar10(options: Mapping[str, Any], data: tuple[CifarImages, CifarImages]) -> Workload:
    """A small CNN (two convolutions, two linear layers) on a local CIFAR-10 copy.

    Options:
        path (str, required): the CIFAR-10 python folder (``data_batch_1..5``, ``test_batch``).
        limit (int, all): train on the first ``limit`` training samples only.
        val_source (str, "test_batch"): the batch file used for validation.
        channels (int, 32): width of the first convolution (the second has twice as many).
    """
    c = options.get("channels", 32)
    if isinstance(c, bool) or not isinstance(c, int) or c < 1:
        raise WorkloadError(f"channels must be a positive integer, got {c!r}")
    train, val = data
    model = nn.Sequential(
        nn.Conv2d(3, c, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(c, 2 * c, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(2 * c * 8 * 8, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    )
    return Workload(model, train, val, nn.CrossEntropyLoss(), "mean", num_classes=10)
