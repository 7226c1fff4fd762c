"""The teacher_mlp built-in: deterministic synthetic data, option checks, and a short run."""

from __future__ import annotations

import pytest
import torch

from hpsearch.trials.errors import WorkloadError
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec
from hpsearch.trials.workloads.base import resolve_workload
from hpsearch.trials.workloads.teacher import make_teacher_data, teacher_mlp


def test_is_a_builtin() -> None:
    assert resolve_workload("teacher_mlp") is teacher_mlp


def test_sizes_and_shapes_follow_the_options() -> None:
    w = teacher_mlp({"samples": 500, "features": 7, "width": 16, "depth": 3, "classes": 4, "val_fraction": 0.1})
    assert (len(w.train_set), len(w.val_set)) == (450, 50)
    x, y = w.train_set[0]
    assert x.shape == (7,) and y.dtype == torch.long
    assert w.num_classes == 4 and w.loss_reduction == "mean"
    assert w.model(torch.zeros(2, 7)).shape == (2, 4)
    assert sum(isinstance(m, torch.nn.Linear) for m in w.model) == 4  # 3 hidden + output


def test_data_depend_on_data_seed_only() -> None:
    a, _ = make_teacher_data(samples=200, data_seed=0)
    torch.manual_seed(123)  # the trial seed must not change the data
    b, _ = make_teacher_data(samples=200, data_seed=0)
    c, _ = make_teacher_data(samples=200, data_seed=1)
    assert torch.equal(a.tensors[0], b.tensors[0]) and torch.equal(a.tensors[1], b.tensors[1])
    assert not torch.equal(a.tensors[0], c.tensors[0])


def test_every_class_occurs() -> None:
    train_set, _ = make_teacher_data(samples=4096, classes=10)
    counts = torch.bincount(train_set.tensors[1], minlength=10)
    assert int(counts.min()) > 0


@pytest.mark.parametrize(
    "options",
    [{"sample": 10}, {"samples": 0}, {"classes": 1}, {"width": 2.5}, {"depth": True}, {"val_fraction": 1.0},
     {"samples": 2, "val_fraction": 0.1}],
)
def test_bad_options_are_workload_errors(options: dict[str, object]) -> None:
    with pytest.raises(WorkloadError):
        teacher_mlp(options)


def test_trains_in_process_and_beats_chance() -> None:
    torch.set_num_threads(1)
    spec = TrialSpec(per_device_batch_size=32, base_lr=0.05, base_batch_size=32, epochs=3,
                     workload="teacher_mlp", workload_options={"samples": 2048},
                     hyperparameters={"momentum": 0.9})
    final = train(spec, RankContext())
    assert final is not None and final["epoch"] == 3
    assert final["val_accuracy"] > 0.3  # chance is 0.1
