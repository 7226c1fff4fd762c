"""Synthetic data labelled by a fixed random "teacher" MLP: a workload whose size is set in YAML.

Inputs are standard normal vectors; each label is the argmax of a random teacher network with the
student's architecture, so the task is learnable exactly and accuracy is meaningful. The data
depend only on ``data_seed`` (drawn from a private generator), so every trial and every rank sees
the same data, while the student's initial weights follow the trial's seed as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpsearch.trials.errors import WorkloadError
from hpsearch.trials.workloads.base import Workload, builds_data, takes_options

__all__ = ["make_teacher_data", "teacher_data", "teacher_mlp"]

_KNOWN = ("samples", "features", "width", "depth", "classes", "val_fraction", "data_seed")
#: Every option shapes the data: the teacher has the student's architecture.
_DATA = _KNOWN


def _int(options: Mapping[str, Any], name: str, default: int, minimum: int) -> int:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise WorkloadError(f"teacher_mlp option {name!r} must be an integer >= {minimum}, got {value!r}")
    return value


def _teacher_logits(x: torch.Tensor, width: int, depth: int, classes: int, gen: torch.Generator) -> torch.Tensor:
    """A random ReLU MLP (He-scaled Gaussian weights, no biases) applied to ``x``."""
    h = x
    for _ in range(depth):
        w = torch.randn(h.shape[1], width, generator=gen) * (2.0 / h.shape[1]) ** 0.5
        h = torch.relu(h @ w)
    w = torch.randn(h.shape[1], classes, generator=gen) / h.shape[1] ** 0.5
    logits: torch.Tensor = h @ w
    return logits


def make_teacher_data(
    samples: int = 4096,
    features: int = 32,
    width: int = 64,
    depth: int = 2,
    classes: int = 10,
    val_fraction: float = 0.2,
    data_seed: int = 0,
) -> tuple[TensorDataset, TensorDataset]:
    """(train, validation) datasets of ``(x, label)``, x of shape (features,), labels in [0, classes).

    The teacher's logits are centred per class over the whole data set before the argmax (the
    same as shifting the teacher's output bias), so the classes are roughly balanced.

    Example:
        >>> train, val = make_teacher_data(samples=100, val_fraction=0.2)
        >>> len(train), len(val), tuple(train[0][0].shape)
        (80, 20, (32,))
    """
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)) or not 0.0 < val_fraction < 1.0:
        raise WorkloadError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    n_val = round(samples * val_fraction)
    if n_val < 1 or n_val >= samples:
        raise WorkloadError(
            f"samples x val_fraction must leave at least one training and one validation sample, "
            f"got samples={samples}, val_fraction={val_fraction}"
        )
    gen = torch.Generator().manual_seed(data_seed)
    x = torch.randn(samples, features, generator=gen)
    logits = _teacher_logits(x, width, depth, classes, gen)
    y = (logits - logits.mean(dim=0)).argmax(dim=1)
    # The samples are i.i.d., so the last n_val are as good a validation set as any.
    n_train = samples - n_val
    return TensorDataset(x[:n_train], y[:n_train]), TensorDataset(x[n_train:], y[n_train:])


def teacher_data(options: Mapping[str, Any]) -> tuple[TensorDataset, TensorDataset]:
    """The (train, validation) data ``teacher_mlp`` trains on for these options."""
    return make_teacher_data(
        _int(options, "samples", 4096, 2), _int(options, "features", 32, 1), _int(options, "width", 64, 1),
        _int(options, "depth", 2, 0), _int(options, "classes", 10, 2), options.get("val_fraction", 0.2),
        _int(options, "data_seed", 0, 0))


@takes_options(*_KNOWN)
@builds_data(teacher_data, options=_DATA)
def teacher_mlp(options: Mapping[str, Any], data: tuple[TensorDataset, TensorDataset]) -> Workload:
    """A student MLP learning a random teacher MLP's labels; size and length set by the options.

    Options:
        samples (int, 4096): data set size, training plus validation.
        features (int, 32): input dimension.
        width (int, 64): hidden units per layer, for the student and the teacher.
        depth (int, 2): hidden layers, for the student and the teacher.
        classes (int, 10): number of labels (the teacher's argmax).
        val_fraction (float, 0.2): share of ``samples`` held out for validation.
        data_seed (int, 0): seeds the teacher and the inputs (not the student's weights).
    """
    features = _int(options, "features", 32, 1)
    width = _int(options, "width", 64, 1)
    depth = _int(options, "depth", 2, 0)
    classes = _int(options, "classes", 10, 2)
    train, val = data
    layers: list[nn.Module] = []
    fan_in = features
    for _ in range(depth):
        layers += [nn.Linear(fan_in, width), nn.ReLU()]
        fan_in = width
    layers.append(nn.Linear(fan_in, classes))
    return Workload(nn.Sequential(*layers), train, val, nn.CrossEntropyLoss(), "mean", num_classes=classes)
