"""An example workload plugin: the smallest thing hpsearch can train that is not built in.

hpsearch calls ``make_workload(options)`` with the ``workload.options`` mapping of the space file,
each parameter of the space that the engine does not own (``hidden`` here) merged over it, and
trains the returned ``Workload`` with its own DDP loop, LR scaling rules and measurements. Name it
in a space file as ``workload: {name: "my_workload:make_workload"}`` and put this folder on
``PYTHONPATH``.

The contract, in short:

- Build everything inside the factory. The engine seeds torch just before calling it, so every
  rank builds the same initial weights; draw the *data* from a generator of your own so it does
  not depend on the trial's seed.
- Return map-style datasets of ``(input, target)`` pairs: the engine shards ``train_set`` across
  ranks with ``DistributedSampler`` and evaluates ``val_set`` after every epoch.
- Declare how ``loss_fn`` reduces over the batch (``"mean"`` or ``"sum"``).
- Say which options the factory takes with ``@takes_options(...)``: a misspelt option or searched
  parameter is then refused by ``hpsearch validate``, with the names it takes.
- Set ``num_classes`` for a classifier (accuracy is the argmax); leave it ``None`` for regression.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpsearch.trials.errors import WorkloadError
from hpsearch.trials.workloads.base import Workload, takes_options

__all__ = ["make_workload"]


@takes_options("samples", "features", "noise", "hidden")
def make_workload(options: Mapping[str, Any]) -> Workload:
    """Noisy linear regression y = x . w + noise, fitted by a linear model (or a one-hidden-layer
    MLP) with a summed MSE loss.

    Options:
        samples (int, 512): training samples (a quarter as many again for validation).
        features (int, 8): input dimension.
        noise (float, 0.1): standard deviation of the label noise.
        hidden (int, 0): hidden units of the model; 0 is a linear model. Search it like any
            parameter: ``parameters: {hidden: {choices: [0, 16]}}``.
    """
    samples = int(options.get("samples", 512))
    features = int(options.get("features", 8))
    noise = float(options.get("noise", 0.1))
    hidden = options.get("hidden", 0)
    if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 0:
        # Raise WorkloadError for bad options: the trial is recorded as failed with this message.
        raise WorkloadError(f"hidden must be an integer >= 0, got {hidden!r}")

    gen = torch.Generator().manual_seed(1234)  # fixed data, independent of the trial's seed
    n = samples + samples // 4
    w = torch.randn(features, 1, generator=gen)
    x = torch.randn(n, features, generator=gen)
    y = x @ w + noise * torch.randn(n, 1, generator=gen)
    train = TensorDataset(x[:samples], y[:samples])
    val = TensorDataset(x[samples:], y[samples:])

    # Built after the data: the engine seeded torch just before calling this function, so every
    # rank (and a torchrun re-run of the trial) starts from the same weights.
    model = nn.Linear(features, 1) if hidden == 0 else nn.Sequential(
        nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 1))
    return Workload(
        model=model,
        train_set=train,
        val_set=val,
        # Summed over the batch: declared as "sum" so the engine can normalise it.
        loss_fn=nn.MSELoss(reduction="sum"),
        loss_reduction="sum",
        num_classes=None,  # regression: val_loss is recorded, val_accuracy is not
    )
