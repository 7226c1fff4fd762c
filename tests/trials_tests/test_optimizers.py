"""Every optimizer a space may name is one the trial loop builds, solo and fused: the validator's
list and the loop's are one list (``hpsearch.search_spaces.OPTIMIZERS``)."""

from __future__ import annotations

import pytest
import torch

from hpsearch.search_spaces import OPTIMIZERS, parse_space
from hpsearch.trials.rank.fused import FusedOptimizer
from hpsearch.trials.rank.loop import build_optimizer
from hpsearch.trials.spec import trial_spec


@pytest.mark.parametrize("name", [*OPTIMIZERS, "AdamW"])
def test_every_optimizer_the_space_accepts_is_built_by_the_trial_loop(name: str) -> None:
    space = parse_space(f"parameters: {{per_device_batch_size: 8, base_lr: 0.1, lr_rule: linear, optimizer: {name}}}")
    spec = trial_spec(space, {"per_device_batch_size": 8, "base_lr": 0.1, "lr_rule": "linear", "optimizer": name})
    optimizer = build_optimizer([torch.nn.Parameter(torch.zeros(2))], spec)
    assert type(optimizer).__name__.lower() == name.lower()


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_every_optimizer_the_space_accepts_trains_fused(name: str) -> None:
    FusedOptimizer([torch.zeros(2, 3, requires_grad=True)], name, [{}, {}])
