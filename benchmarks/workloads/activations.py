"""A workload whose memory grows with the per-device batch: one very wide hidden layer.

Its weights are small (``features x width + width x 2`` numbers, about 9 MiB at the default
width) but every training sample keeps ``width`` activations twice for the backward pass (the
layer's output and its ReLU's) and as many gradients, about 1 MiB a sample at the default
width 65536: a per-device batch of 64 holds about 64 MiB more than the rank process itself, one
of 512 about 512 MiB. It is what the out-of-memory tests and benchmarks train, on the CPU
under ``resources.memory_per_worker`` and on a GPU at large batches.

    workload: {name: "benchmarks.workloads.activations:wide_mlp", options: {samples: 1024, width: 65536}}

With ``grow_after_samples`` the model holds more activations per sample once it has trained on
that many samples (``grow`` more products of ``batch x width`` kept for the backward pass, default 3): a trial that runs out of
memory part-way, after it has reported, as a run whose memory creeps up (a cache, a growing
sequence length) does. The numbers it computes are the same either way.

The validation set is an eighth of the training set and at most 128 samples, so evaluation
(in batches of 1024, without gradients) never holds more than a small training batch would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpsearch.trials.workloads.base import Workload, builds_data, takes_options

__all__ = ["load_points", "wide_mlp"]

FEATURES = 32


def load_points(options: Mapping[str, Any]) -> tuple[TensorDataset, TensorDataset]:
    """``samples`` training points and an eighth as many (at most 128) for validation: 32
    Gaussian features, labelled by the sign of a fixed random projection (learnable)."""
    samples = int(options.get("samples", 1024))
    gen = torch.Generator().manual_seed(0)
    val = min(128, max(1, samples // 8))
    x = torch.randn(samples + val, FEATURES, generator=gen)
    y = (x @ torch.randn(FEATURES, generator=gen) > 0).long()
    return TensorDataset(x[:samples], y[:samples]), TensorDataset(x[samples:], y[samples:])


class _WideMLP(nn.Module):
    """``Linear -> ReLU -> Linear``; past ``grow_after`` training samples, each forward keeps
    ``grow`` more ``batch x width`` tensors for its backward pass (products by a mask of ones on
    the ReLU's non-zero outputs: the same numbers)."""

    def __init__(self, width: int, grow_after: int | None, grow: int) -> None:
        super().__init__()
        self.hidden, self.relu, self.out = nn.Linear(FEATURES, width), nn.ReLU(), nn.Linear(width, 2)
        self.grow_after, self.grow, self.trained_on = grow_after, grow, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.relu(self.hidden(x))
        if self.training:
            if self.grow_after is not None and self.trained_on >= self.grow_after:
                for _ in range(self.grow):
                    h = h * (h > 0).to(h.dtype).add_(h == 0)  # x 1 everywhere, a new tensor saved
            self.trained_on += x.shape[0]
        return self.out(h)


@takes_options("samples", "width", "grow_after_samples", "grow")
@builds_data(load_points, options=["samples"])
def wide_mlp(options: Mapping[str, Any], data: tuple[TensorDataset, TensorDataset]) -> Workload:
    """A two-layer perceptron of ``width`` hidden units (default 65536) on ``load_points``."""
    width = int(options.get("width", 65536))
    grow_after = options.get("grow_after_samples")
    model = _WideMLP(width, None if grow_after is None else int(grow_after), int(options.get("grow", 3)))
    train, val = data
    return Workload(model, train, val, nn.CrossEntropyLoss(), "mean", num_classes=2)
