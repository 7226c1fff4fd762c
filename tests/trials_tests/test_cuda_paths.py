"""The data paths, precisions and kept device copies on a real CUDA device (skipped without one;
``benchmarks/gpu.py`` measures their speed there)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.data_cache import kept_data
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

COMPARED = ("val_loss", "val_accuracy", "train_loss", "samples_seen", "steps", "last_lr", "noise_scale")
TEACHER: dict[str, Any] = dict(per_device_batch_size=256, grad_accum_steps=2, base_lr=0.05, epochs=2,
                               workload="teacher_mlp", workload_options={"samples": 20000, "width": 256},
                               hyperparameters={"momentum": 0.9}, device="cuda", seed=1)


def _train(**fields: Any) -> dict[str, Any]:
    final = train(TrialSpec(**{**TEACHER, **fields}), RankContext(device="cuda:0"))
    assert final is not None
    return final


def test_the_device_path_trains_as_the_loader_path_on_cuda() -> None:
    device, loader = _train(data="device"), _train(data="loader")
    assert device["data_path"] == "device" and "of the GPU's" in device["data_path_reason"]
    assert loader["data_path"] == "loader"
    for key in COMPARED:
        a, b = device[key], loader[key]
        assert a == b if not isinstance(a, float) else math.isclose(a, b, rel_tol=1e-4), key
    assert device["device"].startswith("cuda (")


def test_kept_data_and_their_device_copies_serve_the_next_trial() -> None:
    kept_data().clear()
    first, second = _train(seed=5), _train(seed=5)
    assert (first["data_cache"], second["data_cache"]) == ("built", "kept")
    assert {k: first[k] for k in COMPARED} == {k: second[k] for k in COMPARED}
    assert second["setup_s"] < first["setup_s"]


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_tf32_and_bf16_train_on_cuda(precision: str) -> None:
    final = _train(precision=precision)
    assert final["precision"] == precision and final["val_accuracy"] > 0.3


def test_a_diverging_trial_on_cuda_fails_at_the_next_evaluation_saying_so(tmp_path: Path) -> None:
    with pytest.raises(TrialFailed) as failed:
        _train(base_lr=1e8, eval_every_samples=4000)
    assert failed.value.reason == "diverged"
    assert "found at the evaluation after step" in failed.value.detail
