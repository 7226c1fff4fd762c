"""A rank's memory in a trial: every trial records its peak (the largest over its ranks), a
per-device batch past ``memory_per_worker`` fails as ``out_of_memory`` with the figures in its
detail, and the cap holds for that trial only. Real ranks in a warm pool, a real allocator
failure: the workload's activations grow with the batch (``benchmarks.workloads.activations``)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.launcher import run_trial
from hpsearch.trials.node.pool import RankPool
from hpsearch.trials.rank.memory import RankMemory, is_out_of_memory
from hpsearch.trials.spec import TrialSpec

MiB = 2**20
# A warm rank process holds about 300-400 MiB before a trial (torch and the loop imported); at
# the default width 65536 each sample of the batch holds about 1 MiB more.
CAP = 600 * MiB
WIDE: dict[str, Any] = dict(base_lr=0.05, epochs=1, workload="benchmarks.workloads.activations:wide_mlp",
                            workload_options={"samples": 1024}, hyperparameters={"momentum": 0.9})
REPO = Path(__file__).resolve().parents[2]

# Workloads that hold memory on one rank only, written where the ranks import them from.
PLUGINS = '''
import torch
import torch.distributed as dist
from benchmarks.workloads.activations import load_points, wide_mlp

def greedy_rank_1(options):
    # Rank 1 asks for 1 GiB in its first step: under the cap, the allocator refuses it there.
    workload = wide_mlp({"samples": 1024}, load_points({"samples": 1024}))
    loss_fn = workload.loss_fn
    def loss(out, y):
        if dist.get_rank() == 1:
            torch.ones(2**28)
        return loss_fn(out, y)
    return type(workload)(workload.model, workload.train_set, workload.val_set, loss, "mean", 2)

def holding_rank_1(options):
    # Rank 1 holds 256 MiB more than rank 0 all through training.
    workload = wide_mlp({"samples": 1024}, load_points({"samples": 1024}))
    held = torch.ones(2**26) if options.get("hold") and dist.get_rank() == 1 else None
    loss_fn = workload.loss_fn
    def loss(out, y, held=held):
        return loss_fn(out, y)
    return type(workload)(workload.model, workload.train_set, workload.val_set, loss, "mean", 2)
'''


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "memory_plugins.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(REPO))  # benchmarks.workloads, for the ranks too
    return tmp_path


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[RankPool]:
    monkeypatch.syspath_prepend(str(REPO))
    made = RankPool(["benchmarks.workloads.activations"], prestart={None: 2})
    yield made
    made.close()


def _trial(pool: RankPool, run_dir: Path, **fields: Any) -> dict[str, Any]:
    return run_trial(TrialSpec(**{**WIDE, **fields}), run_dir, ranks=pool, collective_timeout_s=60)


def _data_limit(pid: int) -> str:
    """The soft ``Max data size`` of a process, as ``/proc/PID/limits`` shows it."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max data size"):
            return line.split()[3]
    raise AssertionError("no Max data size line")


def test_a_batch_past_memory_per_worker_fails_as_out_of_memory_and_its_process_is_replaced(
        pool: RankPool, tmp_path: Path) -> None:
    small = _trial(pool, tmp_path / "small", per_device_batch_size=8, memory_limit_bytes=CAP)
    before = {w["pid"] for w in pool.workers()}

    with pytest.raises(TrialFailed) as failed:
        _trial(pool, tmp_path / "large", per_device_batch_size=512, memory_limit_bytes=CAP)

    assert small["peak_memory_bytes"] > 0 and small["memory_limit_bytes"] == CAP
    assert failed.value.reason == "out_of_memory"
    detail = failed.value.detail
    assert detail.startswith("ran out of memory at per-device batch 512 (grad_accum_steps 1, world_size 1) on cpu: "
                             "asked for ")
    assert "the limit is 600 MiB (resources.memory_per_worker); peak so far " in detail
    assert "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate" in detail
    report = json.loads((tmp_path / "large" / "failure-rank0.json").read_text())
    assert report["reason"] == "out_of_memory"
    # The process that ran out is gone, replaced by a fresh one; the other stayed warm.
    after = {w["pid"] for w in pool.workers()}
    assert len(after) == 2 and len(before - after) == 1


def test_peak_memory_grows_with_the_batch_and_the_cap_holds_for_its_trial_only(
        pool: RankPool, tmp_path: Path) -> None:
    peaks = {b: _trial(pool, tmp_path / f"b{b}", per_device_batch_size=b, memory_limit_bytes=CAP)["peak_memory_bytes"]
             for b in (8, 256)}
    # Each warm process is back to no limit of its own between trials ...
    assert {_data_limit(w["pid"]) for w in pool.workers()} == {"unlimited"}
    # ... so the batch that the cap refused runs in them when no cap is asked for.
    free = _trial(pool, tmp_path / "free", per_device_batch_size=512)

    assert 0 < peaks[8] < peaks[256] < free["peak_memory_bytes"]
    # About 1 MiB a sample more: far more than the noise of what a warm process holds.
    assert peaks[256] - peaks[8] > 64 * MiB
    assert "memory_limit_bytes" not in free


def test_a_ranks_out_of_memory_is_the_trials_reason_over_its_peers_lost_connection(
        plugins: Path, pool: RankPool, tmp_path: Path) -> None:
    with pytest.raises(TrialFailed) as failed:
        _trial(pool, tmp_path / "run", per_device_batch_size=8, world_size=2, workload="memory_plugins:greedy_rank_1",
               workload_options={}, memory_limit_bytes=CAP)

    assert failed.value.reason == "out_of_memory"
    assert "asked for 1 GiB more; the limit is 600 MiB (resources.memory_per_worker)" in failed.value.detail
    reasons = {p.name: json.loads(p.read_text())["reason"] for p in (tmp_path / "run").glob("failure-rank*.json")}
    assert reasons["failure-rank1.json"] == "out_of_memory"
    assert reasons.get("failure-rank0.json", "peer_lost") == "peer_lost"  # or stopped by the pool before it wrote


def test_a_trial_records_the_largest_peak_over_its_ranks(plugins: Path, pool: RankPool, tmp_path: Path) -> None:
    spec: dict[str, Any] = dict(per_device_batch_size=8, world_size=2, workload="memory_plugins:holding_rank_1")
    alike = _trial(pool, tmp_path / "alike", **spec, workload_options={})
    held = _trial(pool, tmp_path / "held", **spec, workload_options={"hold": True})

    # Only rank 1 held the 256 MiB; rank 0, which reports, did not: the figure is the maximum.
    # Half of it is the bound: the second trial runs in warm processes, whose memory beyond a
    # fresh process's at its start is carried, not counted (hpsearch.trials.rank.memory), and
    # that includes what the first trial set up once (its process group): 181 MiB was seen.
    assert held["peak_memory_bytes"] - alike["peak_memory_bytes"] > 128 * MiB


def test_the_gpu_code_path_records_peak_memory_cuda_as_cpu_giving_the_cpu_figure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # HPSEARCH_CUDA_AS_CPU runs a CUDA trial's ranks on the CPU in the warm process of their GPU
    # id: the peak is then the CPU's (resident memory), and there is no GPU total to record.
    monkeypatch.setenv("HPSEARCH_CUDA_AS_CPU", "1")
    monkeypatch.syspath_prepend(str(REPO))
    pool = RankPool(["benchmarks.workloads.activations"], prestart={"0": 1, "1": 1})
    try:
        final = run_trial(TrialSpec(**{**WIDE, "per_device_batch_size": 16, "world_size": 2, "device": "cuda"}),
                          tmp_path / "run", ranks=pool, gpu_ids=["0", "1"])
    finally:
        pool.close()

    assert final["gpu_ids"] == ["0", "1"]
    assert final["peak_memory_bytes"] > 64 * MiB  # at least what torch itself holds resident
    assert "memory_limit_bytes" not in final


def test_what_counts_as_out_of_memory() -> None:
    with pytest.raises(RuntimeError) as cpu:
        torch.empty(2**62, dtype=torch.uint8)  # the CPU allocator's own refusal

    assert is_out_of_memory(cpu.value)
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB."))
    try:
        raise RuntimeError("the step failed") from MemoryError()
    except RuntimeError as wrapped:
        assert is_out_of_memory(wrapped)
    assert not is_out_of_memory(RuntimeError("Expected all tensors to be on the same device"))
    assert not is_out_of_memory(ValueError("can't allocate memory"))


def test_the_cap_is_put_back_when_the_trial_ends_even_by_an_error() -> None:
    import resource

    before = resource.getrlimit(resource.RLIMIT_DATA)
    with pytest.raises(ZeroDivisionError), RankMemory(torch.device("cpu"), 2**40) as memory:
        # The trial's cap, raised by what earlier trials of this process left mapped (none in a
        # fresh process; this test shares its process with other in-process trials).
        assert memory.limit == 2**40
        assert resource.getrlimit(resource.RLIMIT_DATA)[0] == 2**40 + memory.carried_data
        1 / 0  # noqa: B018
    assert resource.getrlimit(resource.RLIMIT_DATA) == before


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_batch_past_the_gpus_memory_fails_as_out_of_memory_with_the_gpus_figures() -> None:
    from hpsearch.trials.rank.context import RankContext
    from hpsearch.trials.rank.loop import train

    total = torch.cuda.get_device_properties(0).total_memory
    width = 2**20  # 8 MiB of activations a sample kept for the backward pass
    batch = 2 ** math.ceil(math.log2(total / (8 * MiB)))  # asks for more than the GPU has
    wide = {**WIDE, "device": "cuda"}
    small = train(TrialSpec(**{**wide, "per_device_batch_size": 8, "workload_options": {"width": width}}),
                  RankContext(device="cuda:0"))
    with pytest.raises(TrialFailed) as failed:
        train(TrialSpec(**{**wide, "per_device_batch_size": batch,
                           "workload_options": {"width": width, "samples": batch}}), RankContext(device="cuda:0"))

    assert small is not None and 0 < small["peak_memory_bytes"] < total and small["memory_limit_bytes"] == total
    assert failed.value.reason == "out_of_memory"
    assert f"ran out of memory at per-device batch {batch}" in failed.value.detail
    assert "(the GPU's total memory)" in failed.value.detail and "free on the GPU" in failed.value.detail
    assert "OutOfMemoryError: CUDA out of memory" in failed.value.detail


def test_a_two_rank_trials_memory_does_not_grow_with_the_steps_of_its_epoch(pool: RankPool, tmp_path: Path) -> None:
    # Each step's noise-scale norms once waited for the evaluation as one-number tensors, and on
    # the CPU each kept a gradient's worth (9 MiB here) of the heap from being reused: 64 steps
    # held about 500 MiB more than 8 did.
    few = _trial(pool, tmp_path / "few", per_device_batch_size=32, world_size=2,
                 workload_options={"samples": 512})["peak_memory_bytes"]
    many = _trial(pool, tmp_path / "many", per_device_batch_size=4, world_size=2,
                  workload_options={"samples": 512})["peak_memory_bytes"]

    assert many < few + 64 * MiB


def test_data_kept_for_other_trials_neither_count_in_a_capped_trials_peak_nor_run_it_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One warm process serves three trials in turn.
    monkeypatch.syspath_prepend(str(REPO))
    pool = RankPool(["benchmarks.workloads.activations"], prestart={None: 1})
    try:
        before = _trial(pool, tmp_path / "before", per_device_batch_size=256, memory_limit_bytes=CAP)
        # A trial of other data, 2**21 samples (about 270 MiB), which its process keeps.
        other = _trial(pool, tmp_path / "other", per_device_batch_size=8192, lr_rule="constant",
                       workload_options={"samples": 2**21, "width": 16})
        again = _trial(pool, tmp_path / "again", per_device_batch_size=256, memory_limit_bytes=CAP)
    finally:
        pool.close()

    assert other["data_cache"] == "built"
    # The capped trial holds what it held before the other data came, and its own data were kept.
    assert abs(again["peak_memory_bytes"] - before["peak_memory_bytes"]) < 64 * MiB
    assert again["data_cache"] == "kept"
