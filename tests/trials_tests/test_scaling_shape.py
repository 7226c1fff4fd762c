"""The reference experiment's shape on the built-in digits workload (docs/science.md): with a constant
LR, accuracy falls as the batch grows; scaling the LR linearly recovers most of it."""

from __future__ import annotations

import pytest
import torch

from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec


def _accuracy(batch: int, rule: str) -> float:
    torch.set_num_threads(1)
    spec = TrialSpec(per_device_batch_size=batch, base_lr=0.01, base_batch_size=8, lr_rule=rule, epochs=10,
                     hyperparameters={"momentum": 0.9}, seed=0)
    final = train(spec, RankContext())
    assert final is not None
    return float(final["val_accuracy"])


@pytest.fixture(scope="module")
def accuracy() -> dict[tuple[int, str], float]:
    return {(b, r): _accuracy(b, r) for b, r in [(8, "constant"), (128, "constant"), (128, "linear")]}


def test_constant_lr_loses_accuracy_as_the_batch_grows(accuracy: dict[tuple[int, str], float]) -> None:
    assert accuracy[(8, "constant")] > 0.95
    assert accuracy[(128, "constant")] < accuracy[(8, "constant")] - 0.15


def test_linear_rule_recovers_most_of_the_gap(accuracy: dict[tuple[int, str], float]) -> None:
    gap = accuracy[(8, "constant")] - accuracy[(128, "constant")]
    recovered = accuracy[(128, "linear")] - accuracy[(128, "constant")]
    assert recovered > 0.5 * gap
