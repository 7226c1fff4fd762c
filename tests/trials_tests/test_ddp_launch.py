"""Real DDP ranks over gloo, launched the way a trial launches them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.launcher import run_trial
from hpsearch.trials.spec import TrialSpec
from hpsearch.trials.workloads.digits import load_digits_split

TRAIN_SIZE = len(load_digits_split()[0])


def test_two_gloo_ranks_train_and_rank0_reports_every_epoch(
    tmp_path: Path, live_children: Callable[[], list[Any]]
) -> None:
    # lr 0.05 after the rule: stable on every CPU tried (0.2 trained on one and collapsed to
    # chance on another, whose kernels round differently).
    spec = TrialSpec(per_device_batch_size=16, world_size=2, base_lr=0.0125, base_batch_size=8, lr_rule="linear",
                     epochs=3, hyperparameters={"momentum": 0.9}, seed=1)
    seen: list[dict] = []
    final = run_trial(spec, tmp_path, report=seen.append)

    assert [r["epoch"] for r in seen] == [1, 2, 3]
    # Two ranks each read half of every epoch (DistributedSampler), together the whole set.
    assert [r["samples_seen"] for r in seen] == [TRAIN_SIZE * e for e in (1, 2, 3)]
    assert [r["steps"] for r in seen] == [-(-TRAIN_SIZE // 32) * e for e in (1, 2, 3)]
    assert final["effective_batch_size"] == 32
    assert seen[-1]["last_lr"] == pytest.approx(0.0125 * 32 / 8)
    assert final["device_seconds"] == pytest.approx(2 * final["runtime_s"])
    assert final["val_accuracy"] > 0.8  # ten classes: chance is 0.1
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 3
    assert live_children() == []


def test_diverging_trial_fails_with_reason_diverged(
    tmp_path: Path, live_children: Callable[[], list[Any]]
) -> None:
    spec = TrialSpec(per_device_batch_size=64, world_size=2, base_lr=1e6, epochs=3,
                     hyperparameters={"momentum": 0.9})
    with pytest.raises(TrialFailed) as info:
        run_trial(spec, tmp_path)
    assert info.value.reason == "diverged"
    assert live_children() == []


def test_raising_workload_fails_with_its_message_and_leaves_no_rank_behind(
    tmp_path: Path, live_children: Callable[[], list[Any]]
) -> None:
    spec = TrialSpec(per_device_batch_size=8, world_size=2, base_lr=0.1, epochs=1,
                     workload="digits_cnn", workload_options={"no_such_option": 1})
    with pytest.raises(TrialFailed) as info:
        run_trial(spec, tmp_path)
    assert info.value.reason == "workload_error"
    assert "no_such_option" in info.value.detail
    assert live_children() == []


RAISER = '''
from hpsearch.trials.workloads.digits import digits_mlp

def make(options):
    workload = digits_mlp({})
    check_labels(workload)
    return workload

def check_labels(workload):
    raise ValueError("labels out of range")
'''


def test_a_workload_error_names_the_users_file_and_line_and_where_its_traceback_is(
    tmp_path: Path, live_children: Callable[[], list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpsearch.trials.node.pool import RankPool

    (tmp_path / "raiser.py").write_text(RAISER)
    monkeypatch.syspath_prepend(str(tmp_path))
    log = tmp_path / "runs" / "ranks.log"
    pool = RankPool([], prestart={None: 1}, output=log)
    try:
        spec = TrialSpec(per_device_batch_size=8, world_size=1, base_lr=0.1, epochs=1, workload="raiser:make")
        with pytest.raises(TrialFailed) as info:
            run_trial(spec, tmp_path / "run", ranks=pool)
    finally:
        pool.close()
    assert info.value.reason == "workload_error"
    assert info.value.detail == f"ValueError at raiser.py:10: labels out of range (traceback in {log.resolve()})"
    assert 'raiser.py", line 10, in check_labels' in log.read_text()
    assert live_children() == []


KILLER = '''
import os, signal
from hpsearch.trials.workloads.digits import digits_mlp

def make(options):
    # Rank 1 dies as if the OOM killer took it, while rank 0 waits in a collective.
    workload = digits_mlp({})
    loss_fn = workload.loss_fn
    def dying_loss(out, y):
        import torch.distributed as dist
        if dist.is_initialized() and dist.get_rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return loss_fn(out, y)
    return type(workload)(workload.model, workload.train_set, workload.val_set, dying_loss, "mean", 10)
'''


def test_a_killed_rank_ends_the_trial_with_its_signal_and_no_rank_left(
    tmp_path: Path, live_children: Callable[[], list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "killer.py").write_text(KILLER)
    monkeypatch.syspath_prepend(str(tmp_path))  # spawned ranks inherit the parent's sys.path
    spec = TrialSpec(per_device_batch_size=8, world_size=2, base_lr=0.1, epochs=1, workload="killer:make")
    with pytest.raises(TrialFailed) as info:
        run_trial(spec, tmp_path / "run", collective_timeout_s=30)
    assert info.value.reason == "rank_exited", info.value.detail
    assert "SIGKILL" in info.value.detail
    assert live_children() == []


HANGER = '''
import time
from hpsearch.trials.workloads.digits import digits_mlp

def make(options):
    # A data loader stuck on a dead file system: the third step never returns.
    workload = digits_mlp({})
    loss_fn = workload.loss_fn
    calls = []
    def hanging_loss(out, y):
        calls.append(1)
        if len(calls) == 3:
            time.sleep(3600)
        return loss_fn(out, y)
    return type(workload)(workload.model, workload.train_set, workload.val_set, hanging_loss, "mean", 10)
'''


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_hung_trial_fails_with_reason_timeout_and_no_rank_left(
    tmp_path: Path, live_children: Callable[[], list[Any]], monkeypatch: pytest.MonkeyPatch, world_size: int
) -> None:
    (tmp_path / "hanger.py").write_text(HANGER)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = TrialSpec(per_device_batch_size=8, world_size=world_size, base_lr=0.1, epochs=1, workload="hanger:make")
    with pytest.raises(TrialFailed) as info:
        run_trial(spec, tmp_path / "run", timeout_s=4)
    assert info.value.reason == "timeout"
    assert "ran past its 4 s limit (search.trial_timeout_s) after 0 of 1 epochs" in info.value.detail
    assert live_children() == []
