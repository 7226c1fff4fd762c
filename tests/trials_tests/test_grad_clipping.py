"""Gradient clipping (the ``max_grad_norm`` parameter): each optimizer step's whole gradient is
clipped to that L2 norm, once a step and after the all-reduce, as ``torch.nn.utils.clip_grad_norm_``
does it; fused members clip each their own gradient."""

from __future__ import annotations

import math

import pytest
import torch

from hpsearch import record
from hpsearch.search_spaces import SpaceError, parse_space
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.fused import FusedOptimizer, train_fused
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec, group_spec, trial_spec


def test_the_vectorized_clip_is_clip_grad_norm_for_each_member() -> None:
    torch.manual_seed(0)
    settings = [{"max_grad_norm": 0.5}, {}, {"max_grad_norm": 100.0}, {"max_grad_norm": 1e-3, "momentum": 0.9}]
    start = [torch.randn(5, 4), torch.randn(4)]
    k = len(settings)
    stacked = [p.unsqueeze(0).repeat(k, *[1] * p.dim()).clone() for p in start]
    fused = FusedOptimizer(stacked, "sgd", settings)
    solos = [([p.clone() for p in start], hp) for hp in settings]
    optimizers = [torch.optim.SGD(params, lr=0.1, momentum=hp.get("momentum", 0.0)) for params, hp in solos]
    for step in range(20):
        grads = [torch.randn_like(p) * (step + 1) for p in start]
        for m, ((params, hp), optimizer) in enumerate(zip(solos, optimizers)):
            for p, g in zip(params, grads):
                p.grad = (g * (m + 1)).clone()
            if "max_grad_norm" in hp:
                torch.nn.utils.clip_grad_norm_(params, hp["max_grad_norm"])
            optimizer.step()
        for p, g in zip(stacked, grads):
            p.grad = torch.stack([g * (m + 1) for m in range(k)])
        fused.step([0.1] * k)
        for m, (params, _) in enumerate(solos):
            for p, q in zip(params, stacked):
                assert torch.allclose(q[m], p, rtol=1e-6, atol=1e-6), (step, m, float((q[m] - p).abs().max()))


def _spec(**fields: object) -> TrialSpec:
    defaults: dict[str, object] = dict(per_device_batch_size=64, base_lr=0.5, base_batch_size=64, lr_rule="constant",
                                       epochs=1, workload="digits_mlp", save_model=False)
    defaults.update(fields)
    return TrialSpec(**defaults)  # type: ignore[arg-type]


def test_a_clipped_trial_trains_differently_and_within_its_norm_per_step() -> None:
    # SGD without momentum moves the weights by lr x the clipped gradient: at most lr x max_grad_norm a step.
    clipped, free = RankContext(), RankContext()
    spec = _spec(hyperparameters={"max_grad_norm": 0.05})
    train(spec, clipped)
    train(_spec(), free)
    assert clipped.reports[-1][record.TRAIN_LOSS] != free.reports[-1][record.TRAIN_LOSS]
    assert spec.max_grad_norm == 0.05 and _spec().max_grad_norm is None


def test_clipping_under_accumulation_clips_the_whole_step_once() -> None:
    # One batch of 64 and 4 micro-batches of 16 accumulated are the same step, clipped alike:
    # clipping each micro-batch would not be (docs/science.md, accumulation's caveats).
    whole, accumulated = RankContext(), RankContext()
    train(_spec(hyperparameters={"max_grad_norm": 0.05}), whole)
    train(_spec(per_device_batch_size=16, grad_accum_steps=4, hyperparameters={"max_grad_norm": 0.05}), accumulated)
    ours, theirs = whole.reports[-1], accumulated.reports[-1]
    assert ours[record.STEPS] == theirs[record.STEPS]
    assert ours[record.VAL_LOSS] == pytest.approx(theirs[record.VAL_LOSS], rel=1e-5)


def test_fused_members_with_their_own_max_grad_norm_train_what_they_train_alone() -> None:
    members = [_spec(base_lr=lr, hyperparameters={"momentum": 0.9, **hp}, eval_every_samples=64)
               for lr, hp in ((0.5, {"max_grad_norm": 0.05}), (0.2, {}), (0.5, {"max_grad_norm": 1.0}))]
    group = RankContext()
    train_fused(group_spec(members, fuse="true"), group)
    for k, member in enumerate(members):
        solo = RankContext()
        train(member, solo)
        mine = [r for r in group.reports if r.get(record.FUSED_MEMBER) == k]
        assert len(mine) == len(solo.reports)
        for ours, theirs in zip(mine, solo.reports):
            assert math.isclose(ours[record.TRAIN_LOSS], theirs[record.TRAIN_LOSS], rel_tol=1e-4)
            assert math.isclose(ours[record.VAL_LOSS], theirs[record.VAL_LOSS], rel_tol=1e-4)


def test_max_grad_norm_is_the_engines_and_must_be_positive() -> None:
    space = parse_space("parameters: {per_device_batch_size: 8, base_lr: 0.1, max_grad_norm: {choices: [0.5, 1.0]}}")
    spec = trial_spec(space, {"per_device_batch_size": 8, "base_lr": 0.1, "max_grad_norm": 0.5})
    assert spec.max_grad_norm == 0.5
    assert "max_grad_norm" not in spec.factory_options  # never handed to the workload's factory
    for bad in ("0", "-1", "abc", "{low: 0, high: 1}"):
        with pytest.raises(SpaceError, match="max_grad_norm"):
            parse_space(f"parameters: {{per_device_batch_size: 8, base_lr: 0.1, max_grad_norm: {bad}}}")
