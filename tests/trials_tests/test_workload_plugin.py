"""The plugin contract, through the example in examples/my_workload."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from hpsearch.search_spaces.loader import load_space
from hpsearch.trials.context import RankContext
from hpsearch.trials.loop import train
from hpsearch.trials.spec import TrialSpec
from hpsearch.trials.workloads.base import resolve_workload

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "my_workload"


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))


def test_resolves_and_builds(on_path: None) -> None:
    factory = resolve_workload("my_workload:make_workload")
    workload = factory({"samples": 64, "features": 3})
    assert workload.loss_reduction == "sum" and workload.num_classes is None
    assert len(workload.train_set) == 64 and len(workload.val_set) == 16
    x, y = workload.train_set[0]
    assert x.shape == (3,) and y.shape == (1,)


def test_trains_one_epoch_in_process(on_path: None) -> None:
    torch.set_num_threads(1)
    spec = TrialSpec(per_device_batch_size=16, base_lr=0.001, base_batch_size=16, epochs=1,
                     workload="my_workload:make_workload", workload_options={"samples": 128})
    final = train(spec, RankContext())
    assert final is not None
    assert final["epoch"] == 1 and final["steps"] == 8
    assert "val_accuracy" not in final  # regression
    assert math.isfinite(final["val_loss"])


def test_example_space_validates() -> None:
    space = load_space(EXAMPLE / "space.yaml")
    assert space.workload.name == "my_workload:make_workload"
