"""Fused trials are exact: each member of a fused group trains what its solo run trains, step by
step (``hpsearch.trials.rank.fused``). Real workloads, real gloo ranks for W = 2, the solo runs
through the same loop a search's trials run."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from hpsearch import record
from hpsearch.trials.launcher import run_trial
from hpsearch.trials.node.pool import RankPool
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.fused import CLEAR_LOSS, PROBE_STEPS, FusedOptimizer, train_fused
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec, group_spec

STEPS = 50  # the first steps compared report by report
B = 16
#: A language model small enough to train a step per evaluation in this test: 35 steps an epoch.
TINY_LM = {"layers": 1, "width": 32, "heads": 2, "context": 16, "files": 2, "val_files": 1}


def _members(workload: str, optimizer: str, W: int, A: int, **common: Any) -> list[TrialSpec]:
    """Three configurations of one shape that differ in all a member may differ in."""
    if optimizer == "sgd":
        own = [(0.01, "linear", {"momentum": 0.9}),
               (0.03, "sqrt", {"momentum": 0.5, "nesterov": True, "weight_decay": 1e-3}),
               (0.005, "constant", {"momentum": 0.0, "weight_decay": 5e-4})]
    else:
        own = [(1e-3, "linear", {}), (2e-3, "sqrt", {"weight_decay": 1e-2}), (5e-4, "constant", {"weight_decay": 0.1})]
    options = {"val_fraction": 0.1} if workload.startswith("digits") else TINY_LM if workload == "text_lm" else {}
    fields: dict[str, Any] = dict(per_device_batch_size=B, world_size=W, grad_accum_steps=A, workload=workload,
                                  workload_options=options, epochs=1, eval_every_samples=B * W * A, seed=1,
                                  save_model=True)
    fields.update(common)
    return [TrialSpec(base_lr=lr, lr_rule=rule, hyperparameters={"optimizer": optimizer, **hp}, **fields)
            for lr, rule, hp in own]


@pytest.fixture(scope="module")
def pool() -> Iterator[RankPool]:
    made = RankPool([], prestart={None: 2})
    yield made
    made.close()


def _run(spec: TrialSpec, run: Path, pool: RankPool) -> list[dict[str, Any]]:
    """Rank 0's reports of ``spec`` (a fused group or a trial of its own): in this process at
    W = 1, in the pool's warm processes over gloo at W = 2."""
    run.mkdir(parents=True)
    if spec.processes == 1:
        ctx = RankContext(run_dir=run)
        (train_fused if spec.fused else train)(spec, ctx)
        return ctx.reports
    run_trial(spec, run, ranks=pool, collective_timeout_s=120)
    return _lines(run)


def _lines(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def _check_exact(members: list[TrialSpec], tmp_path: Path, pool: RankPool, within: float = 1e-4,
                 weights_within: float | None = None) -> None:
    """``within``: the losses' bound over the first steps; ``weights_within``: the bound on the
    weights the epoch ends with (default ``max(1e-3, 10 * within)``)."""
    group = _run(group_spec(members, fuse="true"), tmp_path / "group", pool)
    for k, member in enumerate(members):
        solo = _run(member, tmp_path / f"solo{k}", pool)
        mine = [r for r in group if r.get(record.FUSED_MEMBER) == k]
        assert len(mine) == len(solo) >= min(STEPS, len(solo))
        # The running training loss after each of the first steps (one evaluation a step), so
        # each step's own loss, and the validation loss after it.
        for ours, theirs in list(zip(mine, solo))[:STEPS]:
            assert ours[record.SAMPLES_SEEN] == theirs[record.SAMPLES_SEEN]
            assert _rel(ours[record.TRAIN_LOSS], theirs[record.TRAIN_LOSS]) <= within
            assert _rel(ours[record.VAL_LOSS], theirs[record.VAL_LOSS]) <= within
        assert _rel(mine[-1][record.VAL_LOSS], solo[-1][record.VAL_LOSS]) <= max(1e-3, 10 * within)
        assert abs(mine[-1][record.VAL_ACCURACY] - solo[-1][record.VAL_ACCURACY]) <= max(1e-3, 5 * within)
        assert mine[-1][record.LAST_LR] == pytest.approx(solo[-1][record.LAST_LR], rel=1e-12)
        # The weights it ends with are its solo run's, in the solo run's own state-dict form.
        fused_weights = torch.load(tmp_path / "group" / f"model-member{k}.pt", weights_only=True)
        solo_weights = torch.load(tmp_path / f"solo{k}" / "model.pt", weights_only=True)
        assert fused_weights.keys() == solo_weights.keys()
        for name, value in solo_weights.items():
            ours, theirs = fused_weights[name].double(), value.double()
            bound = max(1e-3, 10 * within) if weights_within is None else weights_within
            assert float((ours - theirs).norm()) <= bound * float(theirs.norm()) + 1e-6, name


#: One of each workload, optimizer, world size and accumulation, run by default; the slow test
#: below runs the rest of their product.
REPRESENTATIVE = [
    ("digits_mlp", "sgd", 1, 1),
    ("digits_cnn", "adamw", 1, 1),
    ("digits_cnn", "sgd", 1, 2),
    ("teacher_mlp", "sgd", 2, 1),
    ("digits_mlp", "adamw", 2, 2),
    ("text_lm", "sgd", 1, 1),
    ("text_lm", "adamw", 1, 1),
]
EVERY_OTHER = [case for case in itertools.product(["digits_mlp", "digits_cnn", "teacher_mlp", "text_lm"], ["sgd", "adamw"],
                                                  [1, 2], [1, 2]) if case not in REPRESENTATIVE]


@pytest.mark.parametrize(("workload", "optimizer", "W", "A"), REPRESENTATIVE)
def test_each_member_trains_what_its_solo_run_trains(workload: str, optimizer: str, W: int, A: int, tmp_path: Path,
                                                     pool: RankPool) -> None:
    _check_exact(_members(workload, optimizer, W, A), tmp_path, pool, within=_within(workload, optimizer, W, A),
                 weights_within=_weights_within(workload, optimizer, W, A))


def _within(workload: str, optimizer: str, W: int, A: int) -> float:
    """How close a member's losses stay to its solo run's over the first steps.

    The CNN at an effective batch of 32 (two ranks, or two micro-batches a step): a vectorized
    convolution sums in another order than the solo one, 1e-8 relative at the first steps, and
    the difference grows with training. With AdamW, where a weight's gradient is near zero,
    Adam's normalisation makes that rounding a full-size update: the first member (LR 4e-3, no
    weight decay) drifts to 1e-3 relative over 50 steps, where an LR changed by 1e-6 moves it by
    1e-5 (docs/trials.md, "Fused trials"). With SGD it depends on the CPU's convolution kernels:
    within 1e-4 on an AMD EPYC, while on an Intel Xeon the validation loss of the first member
    drifts to 5.5e-4 relative by step 50 (its running training loss stays within 4e-6).
    """
    return 2e-3 if workload == "digits_cnn" and W * A == 2 else 1e-4


def _weights_within(workload: str, optimizer: str, W: int, A: int) -> float:
    """How close each of a member's weight tensors at the end of its epoch stays to its solo
    run's: the same rounding drift as above, left to grow over a whole epoch. On one AMD EPYC
    host, after the epoch's 90 SGD steps at W = A = 1, the CNN's first convolution ended 1.2e-3
    relative apart and its last layer's bias (norm 0.22) 7.3e-3, while its losses stayed within
    1e-4 at every step compared and its final accuracy within 1e-3; other hosts stayed within 1e-3."""
    within = _within(workload, optimizer, W, A)
    return max(1e-2, 10 * within) if workload == "digits_cnn" else max(1e-3, 10 * within)


@pytest.mark.slow
@pytest.mark.parametrize(("workload", "optimizer", "W", "A"), EVERY_OTHER)
def test_every_workload_optimizer_world_size_and_accumulation(workload: str, optimizer: str, W: int, A: int,
                                                               tmp_path: Path, pool: RankPool) -> None:
    _check_exact(_members(workload, optimizer, W, A), tmp_path, pool, within=_within(workload, optimizer, W, A),
                 weights_within=_weights_within(workload, optimizer, W, A))


def test_emulated_ranks_fuse_as_they_train_alone(tmp_path: Path, pool: RankPool) -> None:
    _check_exact(_members("digits_mlp", "sgd", 2, 1, emulated_ranks=2), tmp_path, pool)


@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw"])
def test_the_vectorized_step_is_torch_optims_step_for_each_member(kind: str) -> None:
    torch.manual_seed(0)
    settings = {
        "sgd": [{"momentum": 0.9}, {"momentum": 0.5, "nesterov": True, "weight_decay": 1e-2}, {"weight_decay": 1e-3}],
        "adam": [{}, {"weight_decay": 1e-2}, {"betas": (0.8, 0.99), "eps": 1e-6}],
        "adamw": [{"weight_decay": 1e-2}, {}, {"weight_decay": 0.1, "betas": (0.95, 0.9)}],
    }[kind]
    lrs = [0.1, 0.03, 0.01] if kind == "sgd" else [1e-3, 3e-3, 1e-2]
    start = [torch.randn(5, 4), torch.randn(4)]
    stacked = [p.unsqueeze(0).repeat(3, *[1] * p.dim()).clone() for p in start]
    fused = FusedOptimizer(stacked, kind, settings)
    solos = []
    for k, hp in enumerate(settings):
        params = [p.clone() for p in start]
        cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[kind]
        extra = {"weight_decay": hp.get("weight_decay", 0.0)}
        if kind == "sgd":
            extra.update(momentum=hp.get("momentum", 0.0), nesterov=hp.get("nesterov", False))
        else:
            extra.update(betas=hp.get("betas", (0.9, 0.999)), eps=hp.get("eps", 1e-8))
        solos.append((params, cls(params, lr=lrs[k], **extra)))
    for step in range(30):
        grads = [torch.randn_like(p) for p in start]
        for k, (params, optimizer) in enumerate(solos):
            for p, g in zip(params, grads):
                p.grad = (g * (k + 1)).clone()
            optimizer.step()
        for p, g in zip(stacked, grads):
            p.grad = torch.stack([g * (k + 1) for k in range(3)])
        fused.step(lrs)
        for k, (params, _) in enumerate(solos):
            for p, q in zip(params, stacked):
                assert torch.allclose(q[k], p, rtol=1e-6, atol=1e-7), (step, k)


def test_a_batchnorm_model_keeps_running_statistics_per_member(tmp_path: Path, pool: RankPool, plugins: Path) -> None:
    members = _members("fused_plugins:batchnorm", "sgd", 1, 1)
    _check_exact(members, tmp_path, pool)
    # Each member's running statistics are its own (they differ between members, as their
    # weights do), and equal its solo run's (checked with the weights above).
    stats = [torch.load(tmp_path / "group" / f"model-member{k}.pt", weights_only=True)["1.running_mean"]
             for k in range(3)]
    assert not torch.allclose(stats[0], stats[1])


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_adam_with_batchnorm_is_not_fused_and_says_why(optimizer: str, tmp_path: Path, plugins: Path) -> None:
    """Under Adam a bias a BatchNorm follows takes full-size steps out of its gradient's rounding
    noise, which a vectorized convolution rounds otherwise than the solo one: a BatchNorm CNN's
    fused member ended 1.3e-2 from its solo run in val_loss over one epoch. Such a group
    declines before its first step (``fusable``), the same under ``fuse: true``."""
    members = _members("fused_plugins:batchnorm", optimizer, 1, 1)
    ctx = RankContext(run_dir=tmp_path)
    train_fused(group_spec(members, fuse="true"), ctx)
    assert len(ctx.reports) == 1
    assert ctx.reports[0][record.FUSE_DECLINED].startswith(f"{optimizer} with BatchNorm is not fused")
    assert ctx.reports[0].get(record.FUSED_STEP_S) is None  # decided by the model, before any step


def test_dropout_draws_its_masks_per_member(tmp_path: Path, plugins: Path) -> None:
    # Two members with the same configuration: under one shared mask they would train alike.
    twin = TrialSpec(per_device_batch_size=B, base_lr=0.05, workload="fused_plugins:dropout", epochs=1,
                     hyperparameters={"momentum": 0.9}, seed=1)
    ctx = RankContext(run_dir=tmp_path)
    train_fused(group_spec([twin, twin], fuse="true"), ctx)
    finals = [r for r in ctx.reports if r.get("final")]
    assert [r[record.FUSE] for r in finals] == ["on", "on"]
    assert finals[0][record.VAL_LOSS] != finals[1][record.VAL_LOSS]
    solo = RankContext()
    train(twin, solo)
    for final in finals:  # the same training in distribution
        assert abs(final[record.VAL_ACCURACY] - solo.reports[-1][record.VAL_ACCURACY]) <= 0.1


def test_a_diverging_member_leaves_and_the_others_train_on_exactly(tmp_path: Path) -> None:
    steady = TrialSpec(per_device_batch_size=B, base_lr=0.01, workload="digits_mlp", epochs=2,
                       hyperparameters={"momentum": 0.9}, seed=1)
    wild = TrialSpec(per_device_batch_size=B, base_lr=1e12, workload="digits_mlp", epochs=2,
                     hyperparameters={"momentum": 0.9}, seed=1)
    ctx = RankContext(run_dir=tmp_path)
    train_fused(group_spec([steady, wild], fuse="true"), ctx)
    left = [r for r in ctx.reports if r.get(record.MEMBER_FAILED)]
    assert [(r[record.FUSED_MEMBER], r[record.MEMBER_FAILED]) for r in left] == [(1, record.REASON_DIVERGED)]
    assert left[0][record.STATUS_DETAIL].startswith("non-finite training loss in epoch 1")
    finals = [r for r in ctx.reports if r.get("final")]
    assert [r[record.FUSED_MEMBER] for r in finals] == [0]
    alone = RankContext()
    train(steady, alone)
    assert _rel(finals[0][record.VAL_LOSS], alone.reports[-1][record.VAL_LOSS]) <= 1e-4
    # Its time is honest: a solo estimate, the group's wall time beside it.
    assert finals[0][record.RUNTIME_BASIS] == "solo_estimate"
    assert finals[0][record.FUSED_RUNTIME_S] > 0 and math.isfinite(finals[0][record.RUNTIME_S])


def test_after_a_member_leaves_the_others_match_their_solo_runs_step_by_step(tmp_path: Path) -> None:
    # A report every step: the survivor's losses are its solo run's before the other member
    # left (at its second or third step) and at every step after, not only at the end.
    common: dict[str, Any] = dict(per_device_batch_size=B, workload="digits_mlp", epochs=2,
                                  hyperparameters={"momentum": 0.9}, seed=1, eval_every_samples=B)
    steady, wild = TrialSpec(base_lr=0.01, **common), TrialSpec(base_lr=1e12, **common)
    ctx = RankContext(run_dir=tmp_path)
    train_fused(group_spec([steady, wild], fuse="true"), ctx)
    (left,) = [r for r in ctx.reports if r.get(record.MEMBER_FAILED)]
    assert (left[record.FUSED_MEMBER], left[record.MEMBER_FAILED]) == (1, record.REASON_DIVERGED)
    mine = [r for r in ctx.reports if r.get(record.FUSED_MEMBER) == 0 and not r.get(record.MEMBER_FAILED)]
    assert ctx.reports.index(mine[0]) < ctx.reports.index(left) < ctx.reports.index(mine[-1])
    alone = RankContext()
    train(steady, alone)
    assert len(mine) == len(alone.reports) > 150  # about one a step over two epochs
    for ours, theirs in zip(mine, alone.reports):
        assert ours[record.STEPS] == theirs[record.STEPS]
        assert _rel(ours[record.TRAIN_LOSS], theirs[record.TRAIN_LOSS]) <= 1e-4
        assert _rel(ours[record.VAL_LOSS], theirs[record.VAL_LOSS]) <= 1e-4


def test_the_step_times_are_timed_again_a_quarter_into_the_run(tmp_path: Path) -> None:
    """The first steps are slower than the steady ones, unevenly fused and alone: the solo
    estimate's step times are measured again a quarter into the run, and the reports from then
    on carry those."""
    common: dict[str, Any] = dict(per_device_batch_size=B, workload="digits_mlp", epochs=2, seed=1,
                                  hyperparameters={"momentum": 0.9}, eval_every_samples=8 * B)
    ctx = RankContext(run_dir=tmp_path)
    train_fused(group_spec([TrialSpec(base_lr=lr, **common) for lr in (0.003, 0.01, 0.03)], fuse="true"), ctx)
    mine = [r for r in ctx.reports if r.get(record.FUSED_MEMBER) == 0]
    total = mine[-1][record.STEPS]
    times = [(r[record.STEPS], r[record.FUSED_STEP_S], r[record.SOLO_STEP_S]) for r in mine]
    first = [t[1:] for t in times if t[0] <= total // 4]
    steady = [t[1:] for t in times if t[0] > total // 4 + PROBE_STEPS + 1]
    assert first and steady and len(set(first)) == 1 and len(set(steady)) == 1
    assert first[0] != steady[0]
    assert all(v > 0 for v in first[0] + steady[0])


def test_a_model_vmap_refuses_declines_to_fuse_and_says_why(tmp_path: Path, plugins: Path) -> None:
    spec = TrialSpec(per_device_batch_size=B, base_lr=0.01, workload="fused_plugins:reads_a_number", epochs=1, seed=1)
    ctx = RankContext(run_dir=tmp_path)
    train_fused(group_spec([spec, spec], fuse="true"), ctx)
    assert len(ctx.reports) == 1
    assert ctx.reports[0][record.FUSE_DECLINED].startswith("the model cannot be vectorized over members")


def test_auto_follows_its_own_step_times_and_declines_on_the_first_where_fusing_clearly_loses(
        tmp_path: Path) -> None:
    """A wide CNN at b 128 on the CPU, one thread as a trial's rank has: six members fused cost
    a member 1.3-1.4x its solo step on one host, 2x on an AMD EPYC, and less than its solo step
    on a CI host. Whatever the host, ``auto`` keeps to what it timed: a group that declined
    timed a member's fused step at or above its solo step, one that went on below it. Where the
    first timed step already lost clearly (``CLEAR_LOSS``), the group declines after that one
    step, not the probe's eight (ten fused steps, a whole trial's worth of the b 128 grid's).
    One step's timing is noisy on a shared CPU, so three groups run."""
    specs = [TrialSpec(per_device_batch_size=128, base_lr=lr, workload="digits_cnn", epochs=1, seed=1,
                       workload_options={"channels": 32}) for lr in (0.001, 0.003, 0.01, 0.03, 0.1, 0.3)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a trial's rank process sets it (cpus_per_worker: 1)
    declines = []
    try:
        for attempt in range(3):
            ctx = RankContext(run_dir=tmp_path / str(attempt))
            train_fused(group_spec(specs, fuse="auto"), ctx)
            if len(ctx.reports) == 1 and ctx.reports[0].get(record.FUSE_DECLINED):
                declined = ctx.reports[0]
                assert declined[record.FUSE_DECLINED].startswith("fusing did not pay on cpu: a step of 6 members fused")
                assert declined[record.FUSED_STEP_S] / 6 >= declined[record.SOLO_STEP_S]
                declines.append(declined)
            else:
                finals = [r for r in ctx.reports if r.get("final")]
                assert len(finals) == 6 and not any(r.get(record.FUSE_DECLINED) for r in ctx.reports)
                assert all(r[record.FUSED_STEP_S] / 6 < r[record.SOLO_STEP_S] for r in finals), finals[0]
    finally:
        torch.set_num_threads(threads)
    clear = [d for d in declines if d[record.FUSED_STEP_S] / 6 >= 2 * CLEAR_LOSS * d[record.SOLO_STEP_S]]
    assert all(d[record.FUSE_DECLINED].endswith("(timed on 1 step)") for d in clear), clear


PLUGINS = '''
import torch
from torch import nn
from torch.utils.data import TensorDataset
from hpsearch.trials.workloads.base import Workload


def _data():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(640, 12, generator=gen)
    y = (x[:, :3].sum(dim=1) > 0).long() + (x[:, 3] > 1).long()
    return TensorDataset(x[128:], y[128:]), TensorDataset(x[:128], y[:128])


def _workload(model):
    train, val = _data()
    return Workload(model, train, val, nn.CrossEntropyLoss(), "mean", num_classes=3)


def batchnorm(options):
    return _workload(nn.Sequential(nn.Linear(12, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 3)))


def dropout(options):
    return _workload(nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, 3)))


class ReadsANumber(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 3)

    def forward(self, x):
        if float(self.fc.weight.abs().max()) > 1e9:  # a Python number out of a member's weight: vmap cannot
            x = x * 0
        return self.fc(x)


def reads_a_number(options):
    return _workload(ReadsANumber())
'''


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "fused_plugins.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(folder))
    return folder
