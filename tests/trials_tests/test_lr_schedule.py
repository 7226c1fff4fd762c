"""The LR the optimizer applies at every step equals the formulas of docs/science.md: the rule's peak
base_lr x f(B / B0), Goyal's linear warmup from base_lr (or a warmup from zero), then the schedule."""

from __future__ import annotations

import math

import pytest

from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec

EPOCHS, WARMUP, B0, BASE = 5, 2.0, 8, 0.01
TRAIN_SIZE = 1438


def _expected(rule: str, schedule: str, batch: int, warmup_from: str = "base_lr") -> list[float]:
    k = batch / B0
    peak = BASE * {"constant": 1.0, "linear": k, "sqrt": math.sqrt(k)}[rule]
    steps_per_epoch = math.ceil(TRAIN_SIZE / batch)
    warmup_steps = WARMUP * steps_per_epoch
    out = []
    for s in range(EPOCHS * steps_per_epoch):
        e = s / steps_per_epoch  # epochs done when the step starts
        if e < WARMUP:
            # From zero, step s of the warmup's n runs at peak x (s + 1) / n: none at LR 0.
            out.append(peak * (s + 1) / warmup_steps if warmup_from == "zero" else BASE + (peak - BASE) * e / WARMUP)
            continue
        t = (e - WARMUP) / (EPOCHS - WARMUP)
        if schedule == "none":
            out.append(peak)
        elif schedule == "cosine":
            out.append(peak * (1 + math.cos(math.pi * t)) / 2)
        else:
            out.append(peak * (0.1 if t >= 0.5 else 1.0) * (0.1 if t >= 0.75 else 1.0))
    return out


@pytest.mark.parametrize("schedule", ["none", "cosine", "step"])
@pytest.mark.parametrize("rule", ["constant", "linear", "sqrt"])
def test_applied_lr_equals_the_formula_at_every_step(rule: str, schedule: str) -> None:
    spec = TrialSpec(per_device_batch_size=256, base_lr=BASE, base_batch_size=B0, lr_rule=rule,
                     warmup_epochs=WARMUP, schedule=schedule, epochs=EPOCHS, workload="digits_mlp")
    ctx = RankContext()
    train(spec, ctx)
    assert ctx.lr_trace == pytest.approx(_expected(rule, schedule, 256), rel=1e-12, abs=1e-15)


def test_accumulation_counts_optimizer_steps_not_micro_batches() -> None:
    spec = TrialSpec(per_device_batch_size=64, grad_accum_steps=4, base_lr=BASE, base_batch_size=B0,
                     lr_rule="linear", epochs=1, workload="digits_mlp")
    ctx = RankContext()
    final = train(spec, ctx)
    assert final is not None
    assert final["steps"] == len(ctx.lr_trace) == math.ceil(math.ceil(TRAIN_SIZE / 64) / 4)
    assert ctx.lr_trace[0] == pytest.approx(BASE * 256 / B0)


@pytest.mark.parametrize("schedule", ["none", "cosine"])
@pytest.mark.parametrize("rule", ["constant", "sqrt"])
def test_a_warmup_from_zero_rises_from_the_first_step_to_the_peak(rule: str, schedule: str) -> None:
    spec = TrialSpec(per_device_batch_size=256, base_lr=BASE, base_batch_size=B0, lr_rule=rule, warmup_epochs=WARMUP,
                     warmup_from="zero", schedule=schedule, epochs=EPOCHS, workload="digits_mlp")
    ctx = RankContext()
    train(spec, ctx)
    expected = _expected(rule, schedule, 256, warmup_from="zero")
    assert ctx.lr_trace == pytest.approx(expected, rel=1e-12, abs=1e-15)
    steps_per_epoch = math.ceil(TRAIN_SIZE / 256)
    # Even at B = B0 (the constant rule) the warmup does something: it starts near zero, not at base_lr.
    assert 0 < ctx.lr_trace[0] <= spec.lr / (WARMUP * steps_per_epoch) * (1 + 1e-12)
    assert ctx.lr_trace[int(WARMUP * steps_per_epoch) - 1] == pytest.approx(spec.lr, rel=1e-12)


def test_fused_members_warm_up_from_zero_as_they_do_alone() -> None:
    from hpsearch.trials.rank.fused import train_fused
    from hpsearch.trials.spec import group_spec

    members = [TrialSpec(per_device_batch_size=256, base_lr=base, base_batch_size=B0, lr_rule="sqrt",
                         warmup_epochs=WARMUP, warmup_from="zero", schedule="cosine", epochs=EPOCHS,
                         workload="digits_mlp", hyperparameters={"momentum": 0.9})
               for base in (BASE, 2 * BASE)]
    group = RankContext()
    train_fused(group_spec(members, fuse="true"), group)
    solo = RankContext()
    train(members[0], solo)
    # The group traces its first member's LR, step by step the solo run's.
    assert group.lr_trace == pytest.approx(solo.lr_trace, rel=1e-12)
    assert group.lr_trace[0] == pytest.approx(members[0].lr / (WARMUP * math.ceil(TRAIN_SIZE / 256)), rel=1e-12)
