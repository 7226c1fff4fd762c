"""An example workload plugin: the smallest thing hpsearch can train that is not built in.

hpsearch calls ``make_workload(options)`` with the ``workload.options`` mapping of the space file
and trains the returned ``Workload`` with its own DDP loop, LR scaling rules and measurements.
Name it in a space file as ``workload: {name: "my_workload:make_workload"}`` and put this folder
on ``PYTHONPATH``.

The contract, in short:

- Build everything inside the factory. The engine seeds torch just before calling it, so every
  rank builds the same initial weights; draw the *data* from a generator of your own so it does
  not depend on the trial's seed.
- Return map-style datasets of ``(input, target)`` pairs: the engine shards ``train_set`` across
  ranks with ``DistributedSampler`` and evaluates ``val_set`` after every epoch.
- Declare how ``loss_fn`` reduces over the batch (``"mean"`` or ``"sum"``).
- Set ``num_classes`` for a classifier (accuracy is the argmax); leave it ``None`` for regression.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpsearch.trials.errors import WorkloadError
from hpsearch.trials.workloads.base import Workload

__all__ = ["make_workload"]

_KNOWN = {"samples", "features", "noise"}


def make_workload(options: Mapping[str, Any]) -> Workload:
    """Noisy linear regression y = x . w + noise, fitted by a linear model with a summed MSE loss.

    Options:
        samples (int, 512): training samples (a quarter as many again for validation).
        features (int, 8): input dimension.
        noise (float, 0.1): standard deviation of the label noise.
    """
    unknown = set(options) - _KNOWN
    if unknown:
        # Raise WorkloadError for bad options: the trial is recorded as failed with this message.
        raise WorkloadError(f"unknown options {sorted(unknown)}; my_workload takes {sorted(_KNOWN)}")
    samples = int(options.get("samples", 512))
    features = int(options.get("features", 8))
    noise = float(options.get("noise", 0.1))

    gen = torch.Generator().manual_seed(1234)  # fixed data, independent of the trial's seed
    n = samples + samples // 4
    w = torch.randn(features, 1, generator=gen)
    x = torch.randn(n, features, generator=gen)
    y = x @ w + noise * torch.randn(n, 1, generator=gen)
    train = TensorDataset(x[:samples], y[:samples])
    val = TensorDataset(x[samples:], y[samples:])

    return Workload(
        model=nn.Linear(features, 1),
        train_set=train,
        val_set=val,
        # Summed over the batch: declared as "sum" so the engine can normalise it.
        loss_fn=nn.MSELoss(reduction="sum"),
        loss_reduction="sum",
        num_classes=None,  # regression: val_loss is recorded, val_accuracy is not
    )
