"""A workload that trains by sleeping: it loads the orchestrator without loading the cores.

Ray Tune's scalability benchmarks time trials that sleep, so what is measured is the
orchestrator's own cost (reserving devices, starting ranks, passing reports, writing the
study), not the training's. Here the model's forward pass sleeps ``sample_s`` per sample of the
batch in training, and not at all in evaluation: a rank's epoch sleeps ``sample_s`` times its
share of the data, so a trial of W ranks is W times shorter and costs as many device-seconds.
The gradient is a real one, of a one-layer linear model on a few random points.

    workload: {name: "benchmarks.workloads.sleepy:sleepy", options: {samples: 64, sample_s: 0.03}}
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpsearch.trials.workloads.base import Workload, takes_options

__all__ = ["SleepyLinear", "sleepy"]


class SleepyLinear(nn.Linear):
    """A linear layer whose training forward pass sleeps ``sample_s`` per sample."""

    def __init__(self, features: int, classes: int, sample_s: float) -> None:
        super().__init__(features, classes)
        self.sample_s = sample_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            time.sleep(self.sample_s * len(x))
        return super().forward(x)


@takes_options("samples", "sample_s")
def sleepy(options: Mapping[str, Any]) -> Workload:
    """``samples`` training points (and an eighth as many for validation), 4 features, 2 classes;
    the forward pass sleeps ``sample_s`` seconds per training sample."""
    samples = int(options.get("samples", 64))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(samples + max(1, samples // 8), 4, generator=gen)
    y = (x[:, 0] > 0).long()
    train, val = TensorDataset(x[:samples], y[:samples]), TensorDataset(x[samples:], y[samples:])
    model = SleepyLinear(4, 2, float(options.get("sample_s", 0.03)))
    return Workload(model, train, val, nn.CrossEntropyLoss(), "mean", num_classes=2)
