"""Same seed and configuration, same metrics on CPU; optimizers other than SGD train too."""

from __future__ import annotations

import pytest

from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec

# Clocks, and whether the process built the data or kept them from an earlier trial.
TIMINGS = {"runtime_s", "train_s", "comm_fraction", "setup_s", "data_cache", "peak_memory_bytes"}


def _run(**kw: object) -> dict:
    spec = TrialSpec(per_device_batch_size=32, grad_accum_steps=2, base_lr=0.02, epochs=2, workload="digits_cnn",
                     hyperparameters={"momentum": 0.9}, **kw)  # type: ignore[arg-type]
    ctx = RankContext()
    train(spec, ctx)
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in ctx.reports]


def test_same_seed_gives_the_same_metrics_every_epoch() -> None:
    assert _run(seed=5) == _run(seed=5)


def test_another_seed_gives_other_metrics() -> None:
    assert _run(seed=5) != _run(seed=6)


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_adam_type_optimizers_train(optimizer: str) -> None:
    spec = TrialSpec(per_device_batch_size=32, base_lr=0.003, lr_rule="sqrt", epochs=3, workload="digits_mlp",
                     hyperparameters={"optimizer": optimizer, "weight_decay": 0.01})
    final = train(spec, RankContext())
    assert final is not None and final["val_accuracy"] > 0.85
