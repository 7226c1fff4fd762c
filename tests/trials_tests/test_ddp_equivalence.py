"""The math of the effective batch (docs/science.md): real DDP ranks, emulated ranks and gradient
accumulation must end with the same weights when they see the same samples."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hpsearch.trials.launcher import run_trial
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path / "model.pt", weights_only=True)


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.parametrize(("reduction", "base_lr"), [("mean", 0.05), ("sum", 0.005)])
def test_two_gloo_ranks_and_two_emulated_ranks_end_with_the_same_weights(
    tmp_path: Path, reduction: str, base_lr: float
) -> None:
    common = dict(per_device_batch_size=4, world_size=2, base_lr=base_lr, lr_rule="constant", epochs=2,
                  workload="digits_mlp", workload_options={"loss_reduction": reduction},
                  hyperparameters={"momentum": 0.9}, seed=3, save_model=True)
    real = run_trial(TrialSpec(**common), tmp_path / "ddp")
    emulated = run_trial(TrialSpec(**common, emulated_ranks=2), tmp_path / "emulated")

    assert _max_diff(_weights(tmp_path / "ddp"), _weights(tmp_path / "emulated")) <= 1e-6
    assert real["samples_seen"] == emulated["samples_seen"]
    assert real["device_seconds"] == pytest.approx(2 * real["runtime_s"])
    assert emulated["device_seconds"] == pytest.approx(emulated["runtime_s"])  # one process


def test_accumulating_two_micro_batches_of_4_matches_one_batch_of_8(tmp_path: Path) -> None:
    def final_weights(b: int, a: int, folder: str) -> dict[str, torch.Tensor]:
        run = tmp_path / folder
        run.mkdir()
        spec = TrialSpec(per_device_batch_size=b, grad_accum_steps=a, base_lr=0.05, lr_rule="constant", epochs=2,
                         workload="digits_mlp", hyperparameters={"momentum": 0.9}, seed=3, save_model=True)
        train(spec, RankContext(run_dir=run))
        return _weights(run)

    # 1438 training samples: the last step holds 6 samples, split 4 + 2 under accumulation;
    # the per-sample weighting keeps even that step exact.
    assert _max_diff(final_weights(4, 2, "accumulated"), final_weights(8, 1, "plain")) <= 1e-6
