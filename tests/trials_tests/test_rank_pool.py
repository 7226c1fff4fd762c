"""Warm rank processes: reused by trials of any shape, and never changing a result."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.launcher import run_trial
from hpsearch.trials.node.pool import RankPool
from hpsearch.trials.spec import TrialSpec

# Workloads that misbehave on purpose, written where the ranks import them from.
PLUGINS = '''
import os, random, signal
import torch
from hpsearch.trials.workloads.digits import digits_mlp

def polluter(options):
    # Leaves the process changed in every way a workload can: the next trial in this process
    # must not notice.
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    torch.manual_seed(1234); torch.rand(10)
    random.seed(99); random.random()
    import numpy; numpy.random.seed(7); numpy.random.rand()
    torch.use_deterministic_algorithms(True)
    torch.set_float32_matmul_precision("medium")
    workload = digits_mlp({})
    return type(workload)(workload.model.double(), _Double(workload.train_set), _Double(workload.val_set),
                          workload.loss_fn, "mean", 10)

class _Double(torch.utils.data.Dataset):
    def __init__(self, data): self.data = data
    def __len__(self): return len(self.data)
    def __getitem__(self, i):
        x, y = self.data[i]
        return x.double(), y

def killer(options):
    # Rank 1 dies as if the OOM killer took it, while rank 0 waits in a collective.
    workload = digits_mlp({})
    loss_fn = workload.loss_fn
    def dying_loss(out, y):
        import torch.distributed as dist
        if dist.is_initialized() and dist.get_rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return loss_fn(out, y)
    return type(workload)(workload.model, workload.train_set, workload.val_set, dying_loss, "mean", 10)

def where(options):
    # Notes which GPU each rank's process was given.
    import torch.distributed as dist
    rank = dist.get_rank() if dist.is_initialized() else 0
    with open(options["log"], "a") as f:
        f.write(f"{rank} {os.getpid()} {os.environ.get('CUDA_VISIBLE_DEVICES')}\\n")
    return digits_mlp({})
'''

# The divergence the launcher test uses: a CNN at lr 1e6 reaches a non-finite loss.
DIVERGING = dict(per_device_batch_size=64, world_size=2, base_lr=1e6, epochs=3, workload="digits_cnn",
                 hyperparameters={"momentum": 0.9})
OK = dict(per_device_batch_size=32, base_lr=0.05, epochs=1, workload="digits_mlp", hyperparameters={"momentum": 0.9})

# Trials of mixed shapes, with a failure of every kind between them; ``None`` marks where a
# result is compared.
SEQUENCE: list[tuple[str, dict[str, Any]]] = [
    ("ok W2", dict(OK, world_size=2)),
    ("ok W1", dict(OK, world_size=1, per_device_batch_size=16)),
    ("diverged W2", DIVERGING),
    ("ok W2 after NaN", dict(OK, world_size=2, seed=3)),
    ("workload error W1", dict(OK, workload_options={"no_such_option": 1})),
    ("ok W1 after error", dict(OK, seed=4)),
    ("killed rank W2", dict(OK, world_size=2, workload="plugins:killer")),
    ("ok W2 after kill", dict(OK, world_size=2, seed=5)),
    ("polluter W1", dict(OK, workload="plugins:polluter")),
    ("ok W1 after polluter", dict(OK, seed=6)),
    ("ok W2 emulated", dict(OK, world_size=2, emulated_ranks=2, seed=7)),
]

# What must be bit-identical: everything rank 0 measured but the clock.
COMPARED = ("val_loss", "val_accuracy", "train_loss", "samples_seen", "steps", "last_lr", "noise_scale",
            "effective_batch_size", "epochs_completed")


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "plugins.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _run(pool: RankPool, run_dir: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for i, (name, fields) in enumerate(SEQUENCE):
        try:
            final = run_trial(TrialSpec(**fields), run_dir / f"t{i}", ranks=pool, collective_timeout_s=60)
            results[name] = {k: final.get(k) for k in COMPARED}
        except TrialFailed as exc:
            results[name] = exc.reason
    return results


@pytest.fixture
def pools() -> Iterator[list[RankPool]]:
    made: list[RankPool] = []
    yield made
    for pool in made:
        pool.close()


def test_warm_workers_give_bit_identical_results_to_fresh_ones_across_shapes_and_failures(
    plugins: Path, tmp_path: Path, pools: list[RankPool]
) -> None:
    warm = RankPool(["hpsearch.trials.workloads.digits"], prestart={None: 2})
    fresh = RankPool(["hpsearch.trials.workloads.digits"], reuse=False)
    pools += [warm, fresh]

    reused = _run(warm, tmp_path / "warm")
    reference = _run(fresh, tmp_path / "fresh")

    assert reused == reference
    assert reused["diverged W2"] == "diverged"
    assert reused["workload error W1"] == "workload_error"
    assert reused["killed rank W2"] == "rank_exited"
    assert all(isinstance(v, dict) for k, v in reused.items() if k.startswith("ok"))
    # The warm pool really reused its processes: the clean trials ran in the same two
    # processes across shapes (each failure took its processes with it, replaced since).
    workers = warm.workers()
    assert len(workers) == 2
    assert sum(w["tasks"] for w in workers) >= 2
    assert all(w["tasks"] <= 1 for w in fresh.workers())


def test_a_failed_rank_process_is_replaced_and_never_reused(
    plugins: Path, tmp_path: Path, pools: list[RankPool]
) -> None:
    pool = RankPool(["hpsearch.trials.workloads.digits"], prestart={None: 2})
    pools.append(pool)
    run_trial(TrialSpec(**dict(OK, world_size=2)), tmp_path / "a", ranks=pool)
    before = {w["pid"] for w in pool.workers()}
    with pytest.raises(TrialFailed):
        run_trial(TrialSpec(**DIVERGING), tmp_path / "b", ranks=pool)
    after = {w["pid"] for w in pool.workers()}
    assert len(after) == 2 and not (before & after)  # both ranks of the diverged trial replaced
    run_trial(TrialSpec(**dict(OK, world_size=1)), tmp_path / "c", ranks=pool)
    assert {w["pid"] for w in pool.workers()} == after  # a clean trial leaves its process warm


def test_cuda_ranks_run_in_the_warm_process_of_their_assigned_gpu(
    plugins: Path, tmp_path: Path, pools: list[RankPool], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The GPU path on a machine without one: every rank process belongs to one device id, as
    # on a GPU node; HPSEARCH_CUDA_AS_CPU runs the math on the CPU.
    monkeypatch.setenv("HPSEARCH_CUDA_AS_CPU", "1")
    log = tmp_path / "where.log"
    pool = RankPool(["hpsearch.trials.workloads.digits"], prestart={"0": 1, "1": 1})
    pools.append(pool)
    spec = dict(OK, device="cuda", workload="plugins:where", workload_options={"log": str(log)})
    final = run_trial(TrialSpec(**dict(spec, world_size=2)), tmp_path / "a", ranks=pool, gpu_ids=["1", "0"])
    run_trial(TrialSpec(**dict(spec, world_size=1)), tmp_path / "b", ranks=pool, gpu_ids=["0"])
    run_trial(TrialSpec(**dict(spec, world_size=1)), tmp_path / "c", ranks=pool, gpu_ids=["1"])

    seen = [line.split() for line in log.read_text().splitlines()]
    seen[:2] = sorted(seen[:2])  # the two ranks of the first trial write in either order
    assert [(rank, gpu) for rank, _, gpu in seen] == [("0", "1"), ("1", "0"), ("0", "0"), ("0", "1")]
    # One warm process per device, kept across trials: the same pid each time a GPU is used.
    pid_of = {gpu: pid for _, pid, gpu in seen[:2]}
    assert [pid_of[gpu] for _, _, gpu in seen[2:]] == [pid for _, pid, _ in seen[2:]]
    assert final["gpu_ids"] == ["1", "0"]
    assert sorted(w["gpu"] for w in pool.workers()) == ["0", "1"]


def test_a_trial_sees_each_report_as_rank_0_writes_it_without_polling(tmp_path: Path, pools: list[RankPool]) -> None:
    # A trial's process waits on its ranks with a long timeout: every epoch's report still
    # reaches it while the ranks train, and it is woken once per report, not at a polling rate.
    pool = RankPool(["hpsearch.trials.workloads.digits"], prestart={None: 2})
    pools.append(pool)
    epochs = 4
    ticket = pool.start(TrialSpec(**dict(OK, world_size=2, epochs=epochs)), str(tmp_path / "run"))
    looks, reports, first_seen = 0, [], None
    while True:
        status = pool.wait(ticket, 30.0)
        looks += 1
        reports += status.reports
        if first_seen is None and reports:
            first_seen = time.time()
        if status.codes is not None:
            break
    last_written = (tmp_path / "run" / "metrics.jsonl").stat().st_mtime
    assert status.codes == [0, 0]
    assert [r["epoch"] for r in reports] == list(range(1, epochs + 1)) and reports[-1]["final"]
    assert first_seen is not None and first_seen < last_written  # epoch 1 arrived before the last epoch ended
    # One look per report (two lines may land in one), and the last look collects the exit codes.
    assert looks <= len(reports) + 1


def test_a_function_called_in_a_warm_process_returns_or_raises_as_it_would_here(
    plugins: Path, tmp_path: Path, pools: list[RankPool]
) -> None:
    # How the search checks its workload without importing torch itself.
    from hpsearch.search_spaces import SpaceError, parse_space
    from hpsearch.workload_check import check_for_search

    pool = RankPool(["hpsearch.trials.workloads.digits"], prestart={None: 1})
    pools.append(pool)
    good = parse_space("workload: {name: digits_mlp}\nparameters: {per_device_batch_size: 8, base_lr: 0.1}")
    assert pool.call("hpsearch.workload_check:check_for_search", good) == check_for_search(good)
    bad = parse_space("workload: {name: digits_mlp}\nparameters: {per_device_batch_size: 8, base_lr: 0.1, hiden: 4}",
                      source="space.yaml")
    with pytest.raises(SpaceError) as here:
        check_for_search(bad)
    with pytest.raises(SpaceError) as there:
        pool.call("hpsearch.workload_check:check_for_search", bad)
    assert str(there.value) == str(here.value) and there.value.key_path == "parameters.hiden"
    # A process that dies in the call fails it, and is replaced.
    before = {w["pid"] for w in pool.workers()}
    with pytest.raises(TrialFailed, match="rank_exited"):
        pool.call("os:_exit", 3)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not [w for w in pool.workers() if w["state"] == "idle"]:
        time.sleep(0.1)
    assert pool.call("os:getpid") not in before
