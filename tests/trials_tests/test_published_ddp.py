"""A published DDP check, reproduced through the workload plugin contract (docs/workloads.md,
"Loss reduction against raw DDP"): real DDP ranks, emulated ranks and gradient accumulation all
end at the article's weights when its summed loss is declared ``mean``."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
from published_ddp_workload import PUBLISHED, data, raw_ddp_rank

from hpsearch.trials.launcher import run_trial
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec

PLUGIN = "published_ddp_workload:make_workload"


def _spec(reduction: str, **shape: int) -> TrialSpec:
    # b=4, B0=8: the constant and linear rules both give lr 0.01 at B=8.
    return TrialSpec(per_device_batch_size=4, base_lr=0.01, lr_rule="constant", base_batch_size=8, epochs=2,
                     workload=PLUGIN, workload_options={"loss_reduction": reduction},
                     hyperparameters={"momentum": 0.9}, seed=0, save_model=True, **shape)


def _weights(folder: Path) -> list[float]:
    return torch.load(folder / "model.pt", weights_only=True)["weight"].flatten().tolist()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_articles_raw_ddp_script_ends_at_the_published_weights(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    out = tmp_path / "raw.pt"
    mp.spawn(raw_ddp_rank, args=(2, _free_port(), str(out)), nprocs=2)
    assert torch.load(out, weights_only=True)["weight"].flatten().tolist() == pytest.approx(PUBLISHED, abs=5e-5)


@pytest.mark.parametrize("shape", [
    pytest.param({"world_size": 2}, id="real-ddp-2-gloo-ranks"),
    pytest.param({"world_size": 2, "emulated_ranks": 2}, id="2-emulated-ranks"),
    pytest.param({"world_size": 1, "grad_accum_steps": 2}, id="accumulating-2-micro-batches"),
])
def test_a_summed_loss_declared_mean_ends_at_the_published_weights(tmp_path: Path, shape: dict[str, int]) -> None:
    spec = _spec("mean", **shape)
    if spec.processes > 1:
        run_trial(spec, tmp_path)
    else:
        train(spec, RankContext(run_dir=tmp_path))
    assert _weights(tmp_path) == pytest.approx(PUBLISHED, abs=5e-5)


def test_a_summed_loss_declared_sum_takes_one_processs_gradient_on_all_8_samples(tmp_path: Path) -> None:
    train(_spec("sum", world_size=2, emulated_ranks=2), RankContext(run_dir=tmp_path))
    # Each step's gradient is the sum over the 8 samples: twice raw DDP's, so the weights move
    # twice as far. SGD with momentum 0.9 over two steps of a constant gradient g: w = 1 - 0.029 g.
    expected = (1 - 0.029 * data().sum(dim=0)).tolist()
    assert _weights(tmp_path) == pytest.approx(expected, abs=1e-6)
    assert [1 - w for w in _weights(tmp_path)] == pytest.approx([2 * (1 - p) for p in PUBLISHED], abs=2e-4)
