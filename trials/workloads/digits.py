"""scikit-learn's bundled 8x8 digits: a CPU-sized stand-in for CIFAR-10 that needs no download.

1,797 images of 10 classes. The train/validation split is fixed by ``split_seed`` so every
trial of a study, and every rank of a trial, sees the same split.
"""

from __future__ import annotations

import gzip
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpsearch.trials.errors import WorkloadError
from hpsearch.trials.workloads.base import Workload, builds_data, takes_options

__all__ = ["digits_cnn", "digits_data", "digits_mlp", "load_digits_split"]

#: The options the data depend on (both models train on the same data).
_DATA = ("val_fraction", "split_seed")


def load_digits_split(
    val_fraction: float = 0.2, split_seed: int = 0
) -> tuple[TensorDataset, TensorDataset]:
    """The digits data as (train, validation) tensors, pixels scaled to [0, 1], shape (N, 1, 8, 8).

    Example:
        >>> train, val = load_digits_split()
        >>> len(train), len(val)
        (1438, 359)
    """
    if not 0.0 < val_fraction < 1.0:
        raise WorkloadError(f"val_fraction must be in (0, 1), got {val_fraction}")
    pixels, target = _bundled_digits()
    x = torch.tensor(pixels / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(target, dtype=torch.long)
    order = torch.from_numpy(np.random.default_rng(split_seed).permutation(len(y)))
    n_val = round(len(y) * val_fraction)
    val_idx, train_idx = order[:n_val], order[n_val:]
    return TensorDataset(x[train_idx], y[train_idx]), TensorDataset(x[val_idx], y[val_idx])


def _bundled_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits, ``(pixels (1797, 64) in 0..16, labels)``: what its ``load_digits``
    returns, read from the file it ships without importing scikit-learn, which pulls in SciPy's
    statistics and pandas (2.5 s of every rank process's start and of the search's workload
    check, on a loaded 2-core machine)."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without running it
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(folders[0], "datasets", "data", "digits.csv.gz") if folders else None
    if path is None or not path.is_file():  # another layout: let scikit-learn find it
        from sklearn.datasets import load_digits

        digits = load_digits()
        return digits.data, digits.target
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",")
    return table[:, :-1], table[:, -1].astype(int)


def digits_data(options: Mapping[str, Any]) -> tuple[TensorDataset, TensorDataset]:
    """The (train, validation) split of the digits for these options."""
    return load_digits_split(options.get("val_fraction", 0.2), options.get("split_seed", 0))


@takes_options("channels", *_DATA, "loss_reduction")
@builds_data(digits_data, options=_DATA)
def digits_cnn(options: Mapping[str, Any], data: tuple[TensorDataset, TensorDataset]) -> Workload:
    """A small two-layer CNN on digits (the default workload).

    Options:
        channels (int, 16): width of the first convolution (the second has twice as many).
        val_fraction (float, 0.2), split_seed (int, 0): the validation split.
        loss_reduction ("mean" or "sum", "mean"): how the cross-entropy reduces over a batch.
    """
    c = int(options.get("channels", 16))
    train, val = data
    model = nn.Sequential(
        nn.Conv2d(1, c, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(c, 2 * c, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(2 * c * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )
    return _classifier(model, train, val, options)


@takes_options("hidden", *_DATA, "loss_reduction")
@builds_data(digits_data, options=_DATA)
def digits_mlp(options: Mapping[str, Any], data: tuple[TensorDataset, TensorDataset]) -> Workload:
    """A one-hidden-layer MLP on digits.

    Options:
        hidden (int, 64): hidden units.
        val_fraction (float, 0.2), split_seed (int, 0): the validation split.
        loss_reduction ("mean" or "sum", "mean"): how the cross-entropy reduces over a batch.
    """
    h = int(options.get("hidden", 64))
    train, val = data
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, h), nn.ReLU(), nn.Linear(h, 10))
    return _classifier(model, train, val, options)


def _classifier(model: nn.Module, train: TensorDataset, val: TensorDataset, options: Mapping[str, Any]) -> Workload:
    reduction = options.get("loss_reduction", "mean")
    if reduction not in ("mean", "sum"):
        raise WorkloadError(f"loss_reduction must be mean or sum, got {reduction!r}")
    return Workload(model, train, val, nn.CrossEntropyLoss(reduction=reduction), reduction, num_classes=10)
