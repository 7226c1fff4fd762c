"""An evaluation cadence in samples: rank 0 reports between epochs too, on the samples-seen
axis, without changing what the trial trains."""

from __future__ import annotations

from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec

# Clocks, and whether the process built the data or kept them from an earlier trial.
TIMINGS = {"runtime_s", "train_s", "comm_fraction", "setup_s", "data_cache", "peak_memory_bytes"}


def _reports(**kw: object) -> list[dict[str, object]]:
    spec = TrialSpec(per_device_batch_size=16, grad_accum_steps=2, base_lr=0.02, epochs=2, workload="digits_mlp",
                     hyperparameters={"momentum": 0.9}, seed=3, **kw)  # type: ignore[arg-type]
    ctx = RankContext()
    train(spec, ctx)
    return ctx.reports


def test_a_cadence_adds_evaluations_between_epochs_on_the_samples_axis() -> None:
    reports = _reports(eval_every_samples=400)
    samples = [r["samples_seen"] for r in reports]
    epoch_size = 1438  # the digits training split
    # A report at each first step past a multiple of 400 samples of its epoch (counted from the
    # epoch's start), and at each epoch's end.
    assert samples == sorted(samples) and samples[-1] == 2 * epoch_size
    assert [r["evaluation"] for r in reports] == list(range(1, len(reports) + 1))
    between = [r for r in reports if r["epoch"] not in (1, 2)]
    # 400, 800, 1200 into each of the two epochs of 1438 samples.
    multiples = [start + k * 400 for start in (0, epoch_size) for k in (1, 2, 3)]
    assert len(between) == len(multiples) and all(0 < float(r["epoch"]) < 2 for r in between)  # type: ignore[arg-type]
    assert [r["final"] for r in reports].count(True) == 1 and reports[-1]["final"]
    # Each report is at the first step at or past its multiple (a step is 32 samples).
    for r, multiple in zip(between, multiples):
        assert multiple <= int(r["samples_seen"]) < multiple + 32  # type: ignore[call-overload]


def test_evaluating_more_often_does_not_change_the_training() -> None:
    every_epoch = _reports()
    often = _reports(eval_every_samples=400)
    at_epoch_ends = [r for r in often if r["epoch"] in (1, 2)]
    drop = TIMINGS | {"evaluation"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in at_epoch_ends] == \
        [{k: v for k, v in r.items() if k not in drop} for r in every_epoch]


def test_training_time_leaves_the_evaluations_out() -> None:
    reports = _reports(eval_every_samples=200)
    for r in reports:
        assert 0 < float(r["train_s"]) < float(r["runtime_s"])  # type: ignore[arg-type]
    assert float(reports[-1]["train_s"]) >= float(reports[0]["train_s"])  # type: ignore[arg-type]
