"""Fused trials: the K members of a group (``search.fuse``, ``TrialSpec.fused``) train as one
model vectorized over a leading member dimension, in the loop of ``hpsearch.trials.rank.loop``.

The members share everything that shapes the computation (``hpsearch.trials.spec.fusion_key``)
and differ in their LR (base LR, rule, warmup) and the optimizer's settings. The math is each
member's solo run's:

- **Weights.** The workload's model is built once, seeded as a solo run seeds it, and copied K
  times: every member starts from the weights its solo run starts from. Its parameters and
  buffers are stacked (``[K, ...]``) and the model runs through ``torch.func.functional_call``
  under ``torch.func.vmap`` over the members, the batch shared.
- **Data.** One feed, the solo run's (``EpochPlan``): every member reads exactly its solo
  run's micro-batches, in the same order.
- **Gradients.** Each member's loss is its own mean (or sum); the backward pass of their sum
  gives each member's stacked slice exactly its own gradient (the members share no weight).
  Under DDP the stacked gradients of all members go in one all-reduce per step (averaged, as
  DDP averages), with each member's step loss beside them, so every rank sees the same
  non-finite losses.
- **Optimizer.** ``FusedOptimizer``: SGD (momentum, nesterov, weight decay), Adam and AdamW, the
  arithmetic of ``torch.optim``'s, with a hyperparameter per member.
- **BatchNorm** keeps running statistics per member (stacked buffers, updated in place under
  vmap). **Dropout** draws its masks per member (``randomness="different"``): they differ from
  a solo run's, so a model with dropout matches its solo runs in distribution, not number for
  number.

Members leave on their own: one whose training or validation loss turns non-finite is reported
``diverged`` with its metrics so far, and its slice is dropped from the stacks; the others go on.

Time is reported honestly (docs/trials.md, "Fused trials", and ``hpsearch.trials.rank.solo_time``):
the group's steps are timed fused and, on the same batches, for one member alone, and a
member's ``runtime_s`` is an estimate of its solo run's (``runtime_basis: solo_estimate``); the
group's own is ``fused_runtime_s``. With ``fuse: auto`` a group whose fused step costs a member at
least its solo step (on the first steps) stops there and says so (``FuseDeclined``): its members
then train on their own, one after another, on the group's devices.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.func import functional_call, vmap

from hpsearch import record
from hpsearch.search_spaces import MAX_GRAD_NORM, OPTIMIZERS
from hpsearch.trials.errors import WorkloadError
from hpsearch.trials.rank.compute import set_precision, synced_time, synchronize
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.data import EpochPlan, Feed, choose_data_path, copy_to, open_feed
from hpsearch.trials.rank.data_cache import kept_data, warm_workload
from hpsearch.trials.rank.loop import ClassCounts, StepLayout
from hpsearch.trials.rank.measure import NoiseScale
from hpsearch.trials.rank.memory import RankMemory, is_out_of_memory
from hpsearch.trials.rank.progress import Progress
from hpsearch.trials.rank.report import Reporter
from hpsearch.trials.rank.schedule import EvalSchedule, Evaluation
from hpsearch.trials.rank.solo_time import (
    CLEAR_LOSS,
    PROBE_STEPS,
    FuseDeclined,
    SoloProbe,
    SoloRun,
    fuse_verdict,
    solo_estimate,
)
from hpsearch.trials.scaling import lr_at
from hpsearch.trials.spec import TrialSpec
from hpsearch.trials.workloads.base import Workload, check_data_fingerprint

# CLEAR_LOSS, PROBE_STEPS, FuseDeclined, fuse_verdict and solo_estimate are ``solo_time``'s, named here too.
__all__ = ["CLEAR_LOSS", "PROBE_STEPS", "FuseDeclined", "FusedModel", "FusedOptimizer", "fusable", "fuse_verdict",
           "solo_estimate", "train_fused"]

# Report keys of a group's rank 0 (``hpsearch.record``): the member a report is about, a
# member's failure, and why a group did not train fused.
MEMBER, MEMBER_FAILED, FUSE_DECLINED = record.FUSED_MEMBER, record.MEMBER_FAILED, record.FUSE_DECLINED


class FusedModel:
    """K copies of ``model`` as stacked parameters and buffers, run vectorized over the members.

    Args:
        model: The workload's model, on its device, with the weights every member starts from.
        k: Members.
    """

    def __init__(self, model: torch.nn.Module, k: int) -> None:
        self.module = model
        self.k = k
        self.params = {name: _stacked(p.detach(), k).requires_grad_(p.requires_grad)
                       for name, p in model.named_parameters()}
        self.buffers = {name: _stacked(b, k) for name, b in model.named_buffers()}

    def trainable(self) -> list[torch.Tensor]:
        return [p for p in self.params.values() if p.requires_grad]

    def keep(self, index: torch.Tensor) -> None:
        """Keep only the members at ``index`` (positions in the stacks)."""
        self.params = {n: p.detach().index_select(0, index).requires_grad_(p.requires_grad)
                       for n, p in self.params.items()}
        self.buffers = {n: b.index_select(0, index) for n, b in self.buffers.items()}
        self.k = len(index)

    def losses(self, loss_fn: Callable[..., torch.Tensor], x: Any, y: Any,
               autocast: Callable[[], contextlib.AbstractContextManager[Any]]) -> torch.Tensor:
        """Each member's loss on the shared batch, ``[K]``, in training mode."""
        module = self.module
        module.train()

        def one(params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], x: Any, y: Any) -> torch.Tensor:
            with autocast():
                return loss_fn(functional_call(module, (params, buffers), (x,)), y)

        return vmap(one, in_dims=(0, 0, None, None), randomness="different")(self.params, self.buffers, x, y)

    @torch.no_grad()
    def evaluate(self, workload: Workload, batches: Iterable[Any],
                 autocast: Callable[[], contextlib.AbstractContextManager[Any]]) -> list[dict[str, float]]:
        """Each member's mean validation loss (and accuracy for a classifier), as ``evaluate``
        of ``hpsearch.trials.rank.loop`` gives a solo model's."""
        module = self.module
        module.eval()
        classes = workload.num_classes is not None

        def one(params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], x: Any,
                y: Any) -> tuple[torch.Tensor, torch.Tensor]:
            with autocast():
                out = functional_call(module, (params, buffers), (x,))
                loss = workload.loss_fn(out, y)
            correct = (out.argmax(dim=1) == y).sum() if classes else torch.zeros((), dtype=torch.int64)
            return loss, correct

        run = vmap(one, in_dims=(0, 0, None, None), randomness="different")
        device = next(iter(self.params.values())).device
        loss_sum = torch.zeros(self.k, dtype=torch.float64, device=device)
        correct = torch.zeros(self.k, dtype=torch.int64, device=device)
        seen = ClassCounts(workload.num_classes, device)  # the members share the targets
        count = targets = 0
        for x, y in batches:
            loss, right = run(self.params, self.buffers, x, y)
            loss_sum += loss.detach().double() * (len(y) if workload.loss_reduction == "mean" else 1)
            correct += right.to(device)
            if classes:
                seen.add(y)
                targets += y.numel()  # a sequence's positions each count, as in loop.evaluate
            count += len(y)
        module.train()
        losses = loss_sum.tolist()
        rights, most = seen.read(correct)
        chance = seen.chance(most, targets)
        out = []
        for k in range(self.k):
            metrics = {record.VAL_LOSS: losses[k] / max(count, 1)}
            if classes:
                metrics[record.VAL_ACCURACY] = rights[k] / max(targets, 1)
                metrics.update(chance)
            out.append(metrics)
        return out

    @torch.no_grad()
    def evaluate_one(self, workload: Workload, batches: Iterable[Any],
                     autocast: Callable[[], contextlib.AbstractContextManager[Any]]) -> float:
        """Member 0's validation loss alone, as a solo run computes it (no ``vmap``): timed by
        the caller for the solo estimate."""
        module = self.module
        module.eval()
        params = {n: p.detach()[0] for n, p in self.params.items()}
        buffers = {n: b[0] for n, b in self.buffers.items()}
        loss_sum, count = 0.0, 0
        for x, y in batches:
            with autocast():
                out = functional_call(module, (params, buffers), (x,))
                loss = workload.loss_fn(out, y)
            if workload.num_classes is not None:
                float((out.argmax(dim=1) == y).sum())
            loss_sum += float(loss) * (len(y) if workload.loss_reduction == "mean" else 1)
            count += len(y)
        module.train()
        return loss_sum / max(count, 1)

    def state_dict(self, k: int) -> dict[str, torch.Tensor]:
        """Member ``k``'s weights and buffers as the model's own state dict."""
        state = {n: p.detach()[k].clone() for n, p in self.params.items()}
        state.update({n: b[k].clone() for n, b in self.buffers.items()})
        return {n: state[n] for n in self.module.state_dict() if n in state}


def _stacked(t: torch.Tensor, k: int) -> torch.Tensor:
    return t.detach().unsqueeze(0).expand(k, *t.shape).clone()


class FusedOptimizer:
    """SGD, Adam or AdamW over stacked parameters, a hyperparameter per member: the arithmetic
    of ``torch.optim``'s single-tensor steps (checked step by step in the tests).

    Args:
        params: The stacked parameters (``FusedModel.trainable``), member dimension first.
        kind: ``sgd``, ``adam`` or ``adamw`` (``optimizer``, shared by the group).
        hyperparameters: Per member, its optimizer settings (``momentum``, ``nesterov``,
            ``weight_decay``; ``betas`` and ``eps`` for Adam's).
    """

    def __init__(self, params: list[torch.Tensor], kind: str, hyperparameters: Sequence[Mapping[str, Any]]) -> None:
        if kind not in OPTIMIZERS:
            raise WorkloadError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {kind!r}")
        self.params = params
        self.kind = kind
        device = params[0].device if params else torch.device("cpu")

        def vector(name: str, default: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.tensor([hp.get(name, default) for hp in hyperparameters], dtype=dtype, device=device)

        self.weight_decay = vector("weight_decay", 0.0)
        self.decays = bool((self.weight_decay != 0).any())
        self.momentum = vector("momentum", 0.0)
        self.nesterov = vector("nesterov", False, torch.bool)
        betas = [tuple(hp.get("betas", (0.9, 0.999))) for hp in hyperparameters]
        self.beta1 = torch.tensor([b[0] for b in betas], dtype=torch.float64)
        self.beta2 = torch.tensor([b[1] for b in betas], dtype=torch.float64)
        self.eps = vector("eps", 1e-8)
        # A member without max_grad_norm is clipped to inf: a factor of 1, no change.
        self.max_grad_norm = vector(MAX_GRAD_NORM, math.inf, torch.float32)
        self.clips = bool(torch.isfinite(self.max_grad_norm).any())
        self.state: list[dict[str, torch.Tensor]] = [{} for _ in params]
        self.steps = 0

    def keep(self, index: torch.Tensor, params: list[torch.Tensor]) -> None:
        """Keep only the members at ``index``; ``params`` are the model's new stacks."""
        self.params = params
        cpu = index.cpu()
        for name in ("weight_decay", "momentum", "nesterov", "eps", "max_grad_norm"):
            setattr(self, name, getattr(self, name).index_select(0, index))
        self.beta1, self.beta2 = self.beta1.index_select(0, cpu), self.beta2.index_select(0, cpu)
        self.state = [{n: s.index_select(0, index) for n, s in state.items()} for state in self.state]

    @torch.no_grad()
    def step(self, lr: Sequence[float]) -> None:
        """One step at each member's ``lr``, its gradient first clipped to its ``max_grad_norm``."""
        self.steps += 1
        if self.clips:
            self._clip()
        device = self.params[0].device if self.params else torch.device("cpu")
        lrs = torch.tensor(list(lr), dtype=torch.float64)
        if self.kind == "sgd":
            rate = lrs.to(device=device, dtype=torch.float32)
            for p, state in zip(self.params, self.state):
                if p.grad is not None:
                    self._sgd(p, p.grad, state, rate)
        else:
            # Python floats in torch's step, float64 here, one float32 each in the end.
            step_size = (lrs / (1 - self.beta1 ** self.steps)).to(device=device, dtype=torch.float32)
            correction2 = ((1 - self.beta2 ** self.steps) ** 0.5).to(device=device, dtype=torch.float32)
            one_less = (1 - self.beta1).to(device=device, dtype=torch.float32)
            one_less2 = (1 - self.beta2).to(device=device, dtype=torch.float32)
            beta2 = self.beta2.to(device=device, dtype=torch.float32)
            decay = (1 - lrs * self.weight_decay.double().cpu()).to(device=device, dtype=torch.float32)
            coefficients = _AdamStep(step_size, correction2, one_less, one_less2, beta2, decay)
            for p, state in zip(self.params, self.state):
                if p.grad is not None:
                    self._adam(p, p.grad, state, coefficients)

    def _clip(self) -> None:
        """``torch.nn.utils.clip_grad_norm_`` per member: each member's L2 norm over all its
        parameters' gradients (the norm of the per-parameter norms, as torch takes it), and its
        gradients scaled by ``min(1, max_norm / (norm + 1e-6))``."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return
        norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads])
        total = torch.linalg.vector_norm(norms, dim=0)
        factor = torch.clamp(self.max_grad_norm / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(factor.view((-1,) + (1,) * (g.dim() - 1)))

    def _sgd(self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, torch.Tensor], lr: torch.Tensor) -> None:
        view = (-1,) + (1,) * (p.dim() - 1)
        # addcmul with the member's coefficient rounds as torch's add(alpha=...) does (bit for bit).
        d_p = torch.addcmul(grad, p, self.weight_decay.view(view)) if self.decays else grad
        buf = state.get("momentum_buffer")
        if buf is None:
            buf = state["momentum_buffer"] = d_p.clone()
        else:
            buf.mul_(self.momentum.view(view)).add_(d_p)
        d_p = torch.where(self.nesterov.view(view), torch.addcmul(d_p, buf, self.momentum.view(view)), buf)
        p.addcmul_(d_p, -lr.view(view))

    def _adam(self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, torch.Tensor], step: _AdamStep) -> None:
        view = (-1,) + (1,) * (p.dim() - 1)
        if self.decays:
            if self.kind == "adamw":
                p.mul_(step.decay.view(view))
            else:
                grad = torch.addcmul(grad, p, self.weight_decay.view(view))
        if "exp_avg" not in state:
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, step.one_less.view(view).expand_as(grad))
        # The coefficients as torch's steps have them: 1 - beta in float64, then one float32.
        exp_avg_sq.mul_(step.beta2.view(view)).add_(step.one_less2.view(view) * (grad * grad))
        denom = (exp_avg_sq.sqrt() / step.correction2.view(view)).add_(self.eps.view(view))
        p.addcmul_(exp_avg / denom, -step.step_size.view(view))

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None


@dataclass(frozen=True)
class _AdamStep:
    """One Adam step's coefficients, a float32 value per member, computed once for every
    parameter: the step size (LR over the first moment's bias correction), the second moment's
    bias correction's root, 1 - beta1, 1 - beta2, beta2, and AdamW's decay factor (1 - lr x
    weight decay)."""

    step_size: torch.Tensor
    correction2: torch.Tensor
    one_less: torch.Tensor
    one_less2: torch.Tensor
    beta2: torch.Tensor
    decay: torch.Tensor


@dataclass
class _Member:
    """One member's own state in the group: its spec, its LR so far, its noise scale and its
    last metrics."""

    index: int
    spec: TrialSpec
    noise: NoiseScale = field(default_factory=NoiseScale)
    lr: float = 0.0
    share: float = 0.0  # of the group's wall time, seconds
    metrics: dict[str, Any] = field(default_factory=dict)


def fusable(workload: Workload, optimizer: str = "sgd") -> str | None:
    """Why ``workload`` cannot train fused under ``optimizer`` (``None``: it can).

    Adam and AdamW with BatchNorm are not fused: the bias of a layer a BatchNorm follows has a
    gradient of zero but for rounding (the normalisation removes any shift), and Adam divides
    that rounding noise by its own size into full-size steps of either sign. A vectorized
    convolution rounds in another order than the solo one, so a fused member's biases wander
    another way than its solo run's; training does not see it (the batch statistics remove it)
    but the running statistics lag behind it, and validation does: a BatchNorm CNN's member
    ends about 1e-2 relative from its solo run in ``val_loss`` over one epoch, while its
    training losses stay within 3e-8. SGD moves such a bias by its gradient, the noise's own
    size: the same model under SGD stays within 1e-6.
    """
    if workload.hooks is not None:
        return "the workload trains itself (a LightningModule or hooks): its steps cannot be vectorized"
    if optimizer in ("adam", "adamw") and any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
                                               for m in workload.model.modules()):
        return (f"{optimizer} with BatchNorm is not fused: Adam turns the rounding noise of a bias a "
                "BatchNorm follows into full-size steps, which the running statistics carry into the "
                "validation metrics (a fused member would end up to 1e-2 from its solo run)")
    return None


def train_fused(spec: TrialSpec, ctx: RankContext) -> dict[str, Any] | None:
    """Train the fused group ``spec`` (``spec.fused``) on this rank; rank 0 reports each member's
    evaluations (``MEMBER`` in every report) and returns the group's last report.

    Raises:
        TrialFailed: ``out_of_memory`` for the whole group (the caller splits it), or a fault of
            the group's ranks.
    """
    device = torch.device(ctx.device)
    kept = kept_data().bytes if spec.keep_data else 0
    with RankMemory(device, spec.memory_limit_bytes, kept_bytes=kept) as memory:
        try:
            return _Group(spec, ctx, device, memory).run()
        except (MemoryError, RuntimeError) as exc:
            if not is_out_of_memory(exc):
                raise
            raise memory.failure(exc, spec) from None


class _Group:
    """``train_fused``'s state: the group's model, optimizer, feed and members."""

    def __init__(self, spec: TrialSpec, ctx: RankContext, device: torch.device, memory: RankMemory) -> None:
        self.spec, self.ctx, self.device, self.memory = spec, ctx, device, memory
        self.P, self.V = ctx.world_size, spec.emulated_ranks
        self.members = [_Member(int(own["member"]), spec.member(k)) for k, own in enumerate(spec.fused)]
        self.pending: list[tuple[torch.Tensor, torch.Tensor | None, list[tuple[torch.Tensor, float]], int]] = []
        k = len(self.members)
        # Per member, since the epoch began: its training losses as a per-sample sum (rank 0's
        # own, as a solo run reports), and the step losses summed over the ranks (non-finite
        # when the member diverged on any rank).
        self.loss_sums = torch.zeros(k, dtype=torch.float64, device=device)
        self.nonfinite = torch.zeros(k, dtype=torch.float64, device=device)
        self.train_count = 0

    def run(self) -> dict[str, Any] | None:
        spec, ctx, device, P, V = self.spec, self.ctx, self.device, self.P, self.V
        began = time.perf_counter()
        if spec.world_size != P * V:
            raise WorkloadError(f"{P} processes x {V} emulated ranks must equal world_size {spec.world_size}")
        torch.manual_seed(spec.seed)  # the members' weights: each solo run's
        workload, data_cache = warm_workload(spec.workload, spec.factory_options, keep=spec.keep_data)
        check_data_fingerprint(workload, spec.data_fingerprint, spec.workload)
        why = fusable(workload, str(spec.hyperparameters.get("optimizer", "sgd")).lower())
        if why is not None:
            return self._declined(why, {})
        self.workload = workload
        self.layout = StepLayout.of(spec, P, workload, device)
        path = choose_data_path(spec.data, workload, device, gpu_share=spec.gpu_share)
        self.autocast = set_precision(spec.precision, device)
        model = workload.model.to(device)
        solo = SoloRun(copy.deepcopy(model), lambda: self.members[0].spec, workload.loss_fn, self.autocast)
        self.model = FusedModel(model, len(self.members))
        kind = str(spec.hyperparameters.get("optimizer", "sgd")).lower()
        self.optimizer = FusedOptimizer(self.model.trainable(), kind,
                                        [m.spec.hyperparameters for m in self.members])
        self.plan = EpochPlan(workload.train_set, world_size=P * V, first_rank=ctx.rank * V, virtual_ranks=V,
                              batch_size=spec.per_device_batch_size, accum=spec.grad_accum_steps, seed=spec.seed)
        self.probe = SoloProbe(spec, self.plan.steps_per_epoch, self.layout, device, solo)
        kept_copy = kept_data()

        def on_device(tensors: tuple[torch.Tensor, ...], where: torch.device) -> tuple[torch.Tensor, ...]:
            return kept_copy.on_device(tensors, where, gpu_share=spec.gpu_share)

        feed = open_feed(path, workload, self.plan, device, loader=spec.loader, cpus=spec.cpus_per_worker,
                         seed=spec.seed, to_device=on_device if spec.keep_data else copy_to)
        self.memory.eval_batch = feed.eval_batch
        try:
            synchronize(device)
            ctx.training_started = time.time()
            self.reporter = Reporter(ctx, self.memory, spec, Reporter.run_setup(spec, path, data_cache, self.memory, began),
                                     tokens_per_sample=workload.tokens_per_sample)
            self.memory.phase = "training"
            return self._epochs(feed)
        except FuseDeclined as declined:
            return self._declined(declined.why, declined.measured)
        finally:
            feed.close()

    # ---- the epochs ----

    def _epochs(self, feed: Feed) -> dict[str, Any] | None:
        spec, ctx, P = self.spec, self.ctx, self.P
        steps_per_epoch = self.plan.steps_per_epoch
        mean_loss = self.layout.mean_loss
        self.comm_seconds, self.comm_calls = 0.0, 0
        self.progress = progress = Progress()
        self.accounted = progress.start
        probe = self.probe
        schedule = EvalSchedule(epochs=spec.epochs, steps_per_epoch=steps_per_epoch, every_samples=spec.eval_every_samples)
        last: dict[str, Any] | None = None
        for epoch in range(spec.epochs):
            for m in self.members:
                m.noise.reset()
            self.loss_sums.zero_()
            self.nonfinite.zero_()
            self.train_count = 0
            progress.start_epoch()
            self.comm_epoch = 0.0
            schedule.start_epoch(epoch, progress.samples_seen)
            batches = feed.epoch(epoch)
            for step in range(steps_per_epoch):
                order = self.plan.step_order(step)
                step_samples = sum(n for _, _, n in order)
                timed = probe.times(progress.steps)
                timed_start = synced_time(self.device) if timed else 0.0
                micro_batches = [next(batches) for _ in order]
                fetched = synced_time(self.device) - timed_start if timed else 0.0
                norms = self._first_step(micro_batches, order, step_samples, mean_loss, epoch, step,
                                         steps_per_epoch) if progress.steps == 0 else \
                    self._step(micro_batches, order, step_samples, mean_loss, epoch, step, steps_per_epoch)
                if timed:
                    probe.timed_step(synced_time(self.device) - timed_start, fetched,
                                     (micro_batches, order, step_samples), progress.steps, len(self.members))
                progress.stepped(step_samples * P)
                if norms is not None:
                    self.pending.append(norms)
                self._leave_nonfinite(epoch)
                if not self.members:
                    break
                point = schedule.after_step(step, progress.samples_seen)
                if point is None:
                    continue
                self._flush_noise(mean_loss)
                last = self._evaluate_and_report(feed, point)
                if not self.members:
                    break
            if not self.members:
                break
            if next(batches, None) is not None:
                raise RuntimeError("the feed gave more micro-batches than the epoch's plan holds")
        if P > 1:
            dist.barrier()
        return last if ctx.is_main else None

    def _first_step(self, *args: Any) -> Any:
        """The first step, where an operation ``vmap`` refuses shows: the group declines."""
        try:
            return self._step(*args)
        except (RuntimeError, NotImplementedError) as exc:
            if is_out_of_memory(exc):
                raise
            raise FuseDeclined(f"the model cannot be vectorized over members: {type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''}") from None

    def _step(self, micro_batches: list[Any], order: list[tuple[int, int, int]], step_samples: int, mean_loss: bool,
              epoch: int, step: int, steps_per_epoch: int) -> Any:
        """One optimizer step of every member; returns the step's noise-scale norms (per member)."""
        P = self.P
        model, params = self.model, self.model.trainable()
        previous = None
        micro: list[tuple[torch.Tensor, float]] = []
        step_loss = torch.zeros(model.k, dtype=torch.float64, device=self.device)
        for (_, _, n), (x, y) in zip(order, micro_batches):
            losses = model.losses(self.workload.loss_fn, x, y, self.autocast)
            scale = n / step_samples if mean_loss else float(P)
            total = losses.sum() * scale if scale != 1.0 else losses.sum()
            total.backward()  # type: ignore[no-untyped-call]
            if self.layout.per_micro:
                current = _member_grads(params)
                delta = current if previous is None else current - previous
                previous = current
                micro.append((delta.pow(2).sum(dim=1), scale if mean_loss else n))
            step_loss += losses.detach().double() * (n if mean_loss else 1)
        self.train_count += step_samples
        local_sq = None
        if P > 1:
            local_sq = _member_grads(params).pow(2).sum(dim=1).double()
            self._all_reduce(params, step_loss)
        else:
            self.nonfinite += step_loss
        self.loss_sums += step_loss
        norms = None
        if self.layout.measurable:
            norms = (_member_grads(params).pow(2).sum(dim=1), local_sq, micro, step_samples)
        lrs = []
        for m in self.members:
            m.lr = lr_at(epoch + step / steps_per_epoch, base_lr=m.spec.base_lr, peak_lr=m.spec.lr,
                         warmup_epochs=m.spec.warmup_epochs, schedule=m.spec.schedule, total_epochs=m.spec.epochs,
                         warmup_from=m.spec.warmup_from, step_epochs=1 / steps_per_epoch)
            lrs.append(m.lr)
        self.optimizer.step(lrs)
        self.optimizer.zero_grad()
        self.ctx.lr_trace.append(lrs[0])
        return norms

    def _all_reduce(self, params: list[torch.Tensor], step_loss: torch.Tensor) -> None:
        """One all-reduce of every member's gradient, averaged over the processes as DDP averages,
        with the members' step losses summed beside them (each rank then sees every rank's)."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads] + [step_loss.to(grads[0].dtype) if grads else step_loss])
        began = time.perf_counter()
        n_grad = flat.numel() - step_loss.numel()
        flat[:n_grad].div_(self.P)
        dist.all_reduce(flat)
        self.comm_seconds += time.perf_counter() - began
        self.comm_epoch += time.perf_counter() - began
        self.comm_calls += 1
        offset = 0
        for p, g in zip(params, grads):
            n = g.numel()
            p.grad = flat[offset:offset + n].view_as(p)
            offset += n
        self.nonfinite += flat[n_grad:].double()

    # ---- members leaving ----

    def _leave_nonfinite(self, epoch: int) -> None:
        """Drop the members whose training loss turned non-finite (read every step on the CPU;
        on CUDA at evaluations, as a solo run reads them)."""
        if not self.layout.check_every_step:
            return
        self._drop_nonfinite(epoch, f"in epoch {epoch + 1}, step {self.progress.steps}")

    def _drop_nonfinite(self, epoch: int, where: str) -> None:
        sums = self.nonfinite.tolist()
        gone = [k for k, v in enumerate(sums) if not math.isfinite(v)]
        for k in gone:
            self._leave(k, record.REASON_DIVERGED, f"non-finite training loss {where}")
        self._remove(gone)

    def _leave(self, k: int, reason: str, detail: str) -> None:
        self._account()
        member = self.members[k]
        if self.ctx.is_main:
            so_far = {key: value for key, value in member.metrics.items() if key != "evaluation"}
            self.ctx.report({**so_far, MEMBER: member.index, MEMBER_FAILED: reason,
                             record.STATUS_DETAIL: detail, "final": False, record.DEVICE_SHARE_S: member.share})

    def _account(self) -> None:
        """Share the wall time since the last account among the members training in it."""
        now = time.perf_counter()
        for m in self.members:
            m.share += (now - self.accounted) / len(self.members)
        self.accounted = now

    def _remove(self, gone: list[int]) -> None:
        if not gone:
            return
        self._account()
        keep = [k for k in range(len(self.members)) if k not in gone]
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        self.members = [self.members[k] for k in keep]
        self.nonfinite = self.nonfinite.index_select(0, index)
        self.loss_sums = self.loss_sums.index_select(0, index)
        self.pending = [(big.index_select(0, index), None if local is None else local.index_select(0, index),
                         [(t.index_select(0, index), d) for t, d in micro], samples)
                        for big, local, micro, samples in self.pending]
        if not keep:
            return
        self.model.keep(index)
        self.optimizer.keep(index, self.model.trainable())

    # ---- evaluations ----

    def _flush_noise(self, mean_loss: bool) -> None:
        P = self.P
        for big, local, micro, samples in self.pending:
            big_l = big.double().tolist()
            local_l = local.tolist() if local is not None else None
            micro_l = [(t.double().tolist(), d) for t, d in micro]
            if P > 1 and local is not None:
                reduced = local.clone()
                dist.all_reduce(reduced)
                local_l = reduced.tolist()
            for k, m in enumerate(self.members):
                big_sq = big_l[k] if mean_loss else big_l[k] / (samples * P) ** 2
                if micro_l:
                    micro_sq = sum(v[k] / d ** 2 for v, d in micro_l)
                    m.noise.add(micro_sq / len(micro_l), samples / len(micro_l), big_sq, samples)
                elif P > 1 and local_l is not None:
                    local_sq = local_l[k] / P
                    local_sq = local_sq if mean_loss else local_sq / (P * samples) ** 2
                    m.noise.add(local_sq, samples, big_sq, samples * P)
        self.pending = []

    def _evaluate_and_report(self, feed: Feed, point: Evaluation) -> dict[str, Any] | None:
        """Every rank: drop the diverged members (read here on CUDA); rank 0: evaluate every
        member and report each; every rank then drops those whose validation loss is not finite."""
        progress, reporter, epoch = self.progress, self.reporter, point.epoch
        if not self.layout.check_every_step:
            self._drop_nonfinite(int(epoch), f"found at the evaluation after step {progress.steps}")
            if not self.members:
                return None
        probe = self.probe
        probe.before_evaluation(progress.steps, len(self.members))
        synchronize(self.device)
        began = time.perf_counter()
        epoch_seconds = progress.epoch_train_seconds(began)
        measured: list[dict[str, float]] = []
        if self.ctx.is_main:
            progress.evaluations += 1
            measured = reporter.evaluate(lambda: self._measure(feed))
        peak = reporter.peak_memory(point.final)
        last: dict[str, Any] | None = None
        diverged: list[int] = []
        if self.ctx.is_main:
            now = time.perf_counter()
            progress.evaluated(now - began, untimed=probe.solo_eval_timing_s if progress.evaluations == 1 else 0.0)
            wall = now - progress.start - probe.seconds
            train_losses = (self.loss_sums / max(self.train_count, 1)).tolist()
            self._account()
            for k, m in enumerate(self.members):
                metrics = {
                    **progress.where(point), record.TRAIN_LOSS: train_losses[k], **measured[k], record.LAST_LR: m.lr,
                    record.COMM_FRACTION: probe.comm_fraction(self.comm_epoch, epoch_seconds),
                    record.ALLREDUCE_CALLS: self.comm_calls,
                    record.NOISE_SCALE: m.noise.value() if self.layout.measurable else None,
                    **reporter.setup,
                    MEMBER: m.index, record.FUSED_MEMBERS: len(self.spec.fused), record.FUSE: "on",
                    record.RUNTIME_BASIS: "solo_estimate", record.FUSED_RUNTIME_S: wall,
                    record.RUNTIME_S: probe.estimate(wall - progress.eval_seconds, progress.evaluations,
                                                     progress.eval_seconds),
                    record.TRAIN_S: probe.estimate(wall - progress.eval_seconds, 0, progress.eval_seconds),
                    record.FUSED_STEP_S: probe.fused_step_s, record.SOLO_STEP_S: probe.solo_step_s,
                    record.PEAK_MEMORY_BYTES: peak, record.DEVICE_SHARE_S: m.share,
                }
                if probe.stopped_paying is not None:
                    metrics[record.FUSE_STOPPED_PAYING] = probe.stopped_paying
                if point.final:
                    metrics[record.DEVICE] = reporter.device_name()
                    path = reporter.model_path(f"model-member{m.index}.pt")
                    if path is not None and math.isfinite(metrics[record.VAL_LOSS]):
                        # Each member's weights as its solo run's model.pt holds them.
                        torch.save(self.model.state_dict(k), path)
                        metrics[record.MODEL_PATH] = str(path.resolve())
                m.metrics = metrics
                if not math.isfinite(metrics[record.VAL_LOSS]):
                    diverged.append(k)
                    continue
                reporter.report(metrics)
                last = metrics
            for k in diverged:
                self._leave(k, record.REASON_DIVERGED, f"non-finite validation loss after {epoch:g} epochs")
        self._share_removal(diverged)
        return last

    def _measure(self, feed: Feed) -> list[dict[str, float]]:
        """Rank 0's evaluation of every member; at the first, one member's timed alone as well."""
        measured = self.model.evaluate(self.workload, feed.evaluation(), self.autocast)
        self.probe.time_evaluation(lambda: self.model.evaluate_one(self.workload, feed.evaluation(), self.autocast))
        return measured

    def _share_removal(self, diverged: list[int]) -> None:
        """Rank 0 found members whose validation loss is not finite: every rank drops them."""
        if self.P > 1:
            flags = torch.zeros(len(self.members), dtype=torch.int64, device=self.device)
            for k in diverged:
                flags[k] = 1
            dist.broadcast(flags, src=0)
            diverged = [k for k, v in enumerate(flags.tolist()) if v]
        self._remove(diverged)

    def _declined(self, why: str, measured: dict[str, Any]) -> dict[str, Any] | None:
        report = {"final": True, FUSE_DECLINED: why, **measured, record.RUNTIME_S: 0.0,
                  record.SAMPLES_SEEN: 0, "epoch": 0, "evaluation": 0}
        if self.P > 1:
            dist.barrier()
        if self.ctx.is_main:
            self.ctx.report(report)
            return report
        return None


def _member_grads(params: list[torch.Tensor]) -> torch.Tensor:
    """Each member's whole gradient as one row, ``[K, n]``."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(p.shape[0], -1)
                      for p in params], dim=1)
