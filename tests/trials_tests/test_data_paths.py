"""The two data paths (``workload.data``): tensor data gathered on the device by index, and a
DataLoader, train on the same samples in the same order, so on the CPU they give equal metrics
and equal final weights, bit for bit; ``auto`` picks the device path for tensor data and says
why; the loader's workers never outlive their trial."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hpsearch.trials.errors import TrialFailed, WorkloadError
from hpsearch.trials.launcher import run_trial
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec
from hpsearch.trials.workloads.cifar10 import TRAIN_BATCHES

# What differs between two runs of the same training: the clocks, the path itself and the run folder.
NOT_COMPARED = {"runtime_s", "train_s", "comm_fraction", "setup_s", "data_path", "data_path_reason", "data_cache",
                "peak_memory_bytes",
                "model_path"}

COMMON: dict[str, Any] = dict(base_lr=0.05, lr_rule="constant", epochs=2, workload="digits_mlp",
                              hyperparameters={"momentum": 0.9}, seed=3, save_model=True)

# (name, spec fields, real gloo ranks?). The digits' 1,438 training samples divide by none of
# the batch sizes, so every epoch ends on a short micro-batch (and a short step with A = 2).
CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("W1 A1 b100", dict(per_device_batch_size=100), False),
    ("W1 A2 b64, summed loss", dict(per_device_batch_size=64, grad_accum_steps=2,
                                    workload_options={"loss_reduction": "sum"}), False),
    ("W2 emulated, A2 b48", dict(per_device_batch_size=48, world_size=2, emulated_ranks=2, grad_accum_steps=2), False),
    ("W2 gloo, A1 b100", dict(per_device_batch_size=100, world_size=2), True),
    ("W2 gloo, A2 b40, evaluations between epochs", dict(per_device_batch_size=40, world_size=2, grad_accum_steps=2,
                                                         eval_every_samples=500), True),
    # 1,500 validation samples: evaluated in a batch of 1024 and one of 476 on both paths.
    ("W2 gloo, A1 b64, teacher", dict(per_device_batch_size=64, world_size=2, workload="teacher_mlp",
                                      workload_options={"samples": 3000, "val_fraction": 0.5}), True),
]


def _run(fields: dict[str, Any], run: Path, *, real: bool) -> tuple[list[dict[str, Any]], dict[str, torch.Tensor]]:
    """Every report of the trial and its final weights."""
    spec = TrialSpec(**{**COMMON, **fields})
    run.mkdir(parents=True)
    if real:
        reports: list[dict[str, Any]] = []
        run_trial(spec, run, report=reports.append)
    else:
        ctx = RankContext(run_dir=run)
        train(spec, ctx)
        reports = ctx.reports
    return reports, torch.load(run / "model.pt", weights_only=True)


def _assert_same_training(device: tuple[list[dict[str, Any]], dict[str, torch.Tensor]],
                          loader: tuple[list[dict[str, Any]], dict[str, torch.Tensor]]) -> None:
    (device_reports, device_weights), (loader_reports, loader_weights) = device, loader
    assert [r["data_path"] for r in device_reports] == ["device"] * len(device_reports)
    assert [r["data_path"] for r in loader_reports] == ["loader"] * len(loader_reports)
    assert [{k: v for k, v in r.items() if k not in NOT_COMPARED} for r in device_reports] == \
        [{k: v for k, v in r.items() if k not in NOT_COMPARED} for r in loader_reports]
    assert device_weights.keys() == loader_weights.keys()
    assert all(torch.equal(device_weights[k], loader_weights[k]) for k in device_weights)


@pytest.mark.parametrize(("fields", "real"), [(f, r) for _, f, r in CASES], ids=[name for name, _, _ in CASES])
def test_device_and_loader_paths_give_equal_metrics_and_weights(tmp_path: Path, fields: dict[str, Any],
                                                                real: bool) -> None:
    device = _run({**fields, "data": "device"}, tmp_path / "device", real=real)
    loader = _run({**fields, "data": "loader"}, tmp_path / "loader", real=real)
    _assert_same_training(device, loader)
    assert len(device[0]) >= 2 and device[0][-1]["final"]
    if fields.get("world_size", 1) * fields.get("grad_accum_steps", 1) > 1:
        assert device[0][-1]["noise_scale"] is not None  # measured, and equal on both paths


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent workers", "workers per epoch"])
def test_loader_workers_load_the_same_batches_and_leave_with_the_trial(
    tmp_path: Path, live_children: Callable[[], list[Any]], persistent: bool
) -> None:
    fields = dict(per_device_batch_size=64, grad_accum_steps=2, world_size=2, emulated_ranks=2, epochs=3,
                  eval_every_samples=1000)
    device = _run({**fields, "data": "device"}, tmp_path / "device", real=False)
    workers = _run({**fields, "data": "loader", "loader": {"workers": 2, "persistent_workers": persistent}},
                   tmp_path / "workers", real=False)
    _assert_same_training(device, workers)
    assert live_children() == []  # the worker processes ended with the trial (or with their epoch)


def test_a_warm_rank_process_ends_its_loader_workers_with_each_trial(tmp_path: Path) -> None:
    import psutil

    from hpsearch.trials.node.pool import RankPool

    pool = RankPool(["hpsearch.trials.workloads.digits"], prestart={None: 1})
    try:
        spec = TrialSpec(**{**COMMON, "save_model": False}, per_device_batch_size=64, data="loader",
                         loader={"workers": 2})
        first = run_trial(spec, tmp_path / "a", ranks=pool)
        (worker,) = pool.workers()
        assert psutil.Process(worker["pid"]).children() == []
        second = run_trial(spec, tmp_path / "b", ranks=pool)
        assert [(w["pid"], w["tasks"]) for w in pool.workers()] == [(worker["pid"], 2)]  # the same process again
        assert psutil.Process(worker["pid"]).children() == []
        clocks = NOT_COMPARED | {"device_seconds", "samples_per_s"}
        assert {k: v for k, v in first.items() if k not in clocks} == {k: v for k, v in second.items()
                                                                        if k not in clocks}
    finally:
        pool.close()


def test_auto_puts_tensor_data_on_the_device_and_says_why() -> None:
    final = train(TrialSpec(per_device_batch_size=64, base_lr=0.05, epochs=1, workload="digits_mlp"), RankContext())
    assert final is not None
    assert final["data_path"] == "device"
    assert "tensors" in final["data_path_reason"] and "cpu" in final["data_path_reason"]


# A dataset of (input, target) pairs that is not tensors, with a batched fetch that counts its calls.
PLUGIN = '''
import torch
from torch.utils.data import Dataset
from hpsearch.trials.workloads.digits import digits_mlp

class Pairs(Dataset):
    def __init__(self, data):
        self.data, self.batched = data, 0
    def __len__(self):
        return len(self.data)
    def __getitem__(self, i):
        return self.data[i]
    def __getitems__(self, indices):
        self.batched += 1
        return [self.data[i] for i in indices]

SEEN = []

def pairs(options):
    workload = digits_mlp({})
    train = Pairs(workload.train_set)
    SEEN.append(train)
    return type(workload)(workload.model, train, Pairs(workload.val_set), workload.loss_fn, "mean", 10)
'''


def test_data_that_are_not_tensors_take_the_loader_with_a_batched_fetch(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pairs_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    import pairs_plugin  # type: ignore[import-not-found]

    spec = dict(per_device_batch_size=100, base_lr=0.05, epochs=2, workload="pairs_plugin:pairs",
                hyperparameters={"momentum": 0.9})
    final = train(TrialSpec(**spec), RankContext())
    assert final is not None and final["data_path"] == "loader"
    assert "train_set is a pairs_plugin.Pairs, not tensors" in final["data_path_reason"]
    # One __getitems__ per micro-batch: 15 a epoch (1438 samples in batches of 100), no per-sample fetch.
    assert pairs_plugin.SEEN[-1].batched == 2 * 15
    # The same training as the digits' own tensors on the device.
    tensors = train(TrialSpec(**{**spec, "workload": "digits_mlp"}), RankContext())
    assert tensors is not None
    assert {k: v for k, v in final.items() if k not in NOT_COMPARED} == \
        {k: v for k, v in tensors.items() if k not in NOT_COMPARED}

    with pytest.raises(WorkloadError, match=r"workload.data is device, but its train_set is a pairs_plugin.Pairs, "
                                            r"not tensors .*; use data: auto or loader"):
        train(TrialSpec(**spec, data="device"), RankContext())


def test_asking_for_the_device_path_without_tensor_data_fails_the_trial_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pairs_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = TrialSpec(per_device_batch_size=100, base_lr=0.05, epochs=1, workload="pairs_plugin:pairs", data="device")
    with pytest.raises(TrialFailed) as info:
        run_trial(spec, tmp_path / "run")
    assert info.value.reason == "workload_error"
    assert "workload.data is device" in info.value.detail


def _cifar_folder(root: Path) -> Path:
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    for i, name in enumerate((*TRAIN_BATCHES, "test_batch")):
        rng = np.random.default_rng(i)
        batch = {b"data": rng.integers(0, 256, size=(40, 3072), dtype=np.uint8),
                 b"labels": [int(v) for v in rng.integers(0, 10, size=40)]}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    return folder


def test_uint8_images_are_kept_as_uint8_on_the_device_and_train_as_the_loader_trains(tmp_path: Path) -> None:
    # CIFAR-10's images stay uint8 where they are kept (a quarter of float32's bytes) and are
    # turned into floats a batch at a time: the same numbers as a sample at a time.
    fields = dict(per_device_batch_size=24, grad_accum_steps=2, workload="cifar10",
                  workload_options={"path": str(_cifar_folder(tmp_path)), "channels": 4}, epochs=1)
    device = _run({**fields, "data": "device"}, tmp_path / "device", real=False)
    loader = _run({**fields, "data": "loader"}, tmp_path / "loader", real=False)
    _assert_same_training(device, loader)
    # 240 uint8 images of 3,072 bytes and their int64 labels: 739,200 bytes.
    assert device[0][-1]["data_path_reason"] == "workload.data is device (722 KiB of tensors)"


@pytest.mark.parametrize(("samples", "world_size"), [(1438, 1), (1438, 3), (1000, 4), (3, 8), (52429, 2)])
def test_every_rank_reads_what_distributed_sampler_gives_it(samples: int, world_size: int) -> None:
    """The plan's order is DistributedSampler's (a seeded shuffle, padded by repeating it, every
    W-th from the rank), epoch by epoch: what a plain DDP script with that sampler reads."""
    from torch.utils.data import DistributedSampler

    from hpsearch.trials.rank.data import EpochPlan

    for first_rank in range(world_size):
        plan = EpochPlan(samples, world_size=world_size, first_rank=first_rank, virtual_ranks=world_size - first_rank,
                         batch_size=64, accum=1, seed=7)
        for epoch in (0, 1, 5):
            expected = []
            for rank in range(first_rank, world_size):
                sampler = DistributedSampler(range(samples), num_replicas=world_size, rank=rank, shuffle=True, seed=7)
                sampler.set_epoch(epoch)
                expected.append(list(sampler))
            assert plan.indices(epoch) == expected
            assert [t.dtype for t in plan.index_tensors(epoch)] == [torch.int64] * len(expected)
