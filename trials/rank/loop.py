"""The DDP training loop one rank runs, top to bottom.

Per step: A micro-batches of b samples on each of W ranks, so the effective batch is
B = b x W x A (docs/science.md). Gradients are all-reduced (averaged) by DDP on the last micro-step
only; the earlier micro-steps run under ``no_sync``. The LR is ``rule(base_lr, B / B0)`` after an
optional linear warmup. Rank 0 evaluates after every epoch (and every ``eval_every_samples``
samples when set) and reports; with ``save_model`` it writes the final weights before its last
report, which says where (``model_path``). A workload with ``WorkloadHooks`` (a LightningModule)
computes each micro-batch's loss itself and brings its own validation and optimizer; the rest
of the loop is the same.

The batches come from ``hpsearch.trials.rank.data`` (tensors on the device, or a ``DataLoader``),
in the same order either way. On CUDA the loop never waits for the device inside a step: the
losses and the gradient norms of the noise scale stay on the device and are read at the next
evaluation, and the clock is read after a synchronisation.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from hpsearch import record
from hpsearch.record import MODEL_PATH
from hpsearch.search_spaces import OPTIMIZERS
from hpsearch.trials.errors import TrialFailed, WorkloadError
from hpsearch.trials.rank.compute import CompileClock, set_precision, synchronize
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.data import EpochPlan, Feed, choose_data_path, copy_to, open_feed
from hpsearch.trials.rank.data_cache import keep_only_for, kept_data, warm_workload
from hpsearch.trials.rank.measure import (
    CommStats,
    NoiseScale,
    grad_vector,
    timed_allreduce_hook,
)
from hpsearch.trials.rank.memory import RankMemory, is_out_of_memory
from hpsearch.trials.rank.progress import Progress
from hpsearch.trials.rank.report import Reporter
from hpsearch.trials.rank.schedule import EvalSchedule, Evaluation
from hpsearch.trials.scaling import lr_at
from hpsearch.trials.spec import TrialSpec
from hpsearch.trials.workloads.base import Workload, check_data_fingerprint

__all__ = ["MODEL_FILE", "ClassCounts", "StepLayout", "build_optimizer", "evaluate", "train"]

#: The file rank 0 writes the final weights to, in the run folder (``TrialSpec.save_model``).
MODEL_FILE = "model.pt"


def build_optimizer(params: Any, spec: TrialSpec) -> torch.optim.Optimizer:
    """SGD (default), Adam or AdamW from the spec's ``optimizer`` (default ``sgd``),
    ``momentum`` (0), ``nesterov`` (false) and ``weight_decay`` (0) hyperparameters; Adam and
    AdamW take ``weight_decay`` only, with torch's other defaults. The LR is set per step by
    the loop."""
    hp = spec.hyperparameters
    name = str(hp.get("optimizer", "sgd")).lower()
    weight_decay = float(hp.get("weight_decay", 0.0))
    if name == "sgd":
        return torch.optim.SGD(
            params,
            lr=spec.base_lr,
            momentum=float(hp.get("momentum", 0.0)),
            nesterov=bool(hp.get("nesterov", False)),
            weight_decay=weight_decay,
        )
    if name in ("adam", "adamw"):
        cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        return cls(params, lr=spec.base_lr, weight_decay=weight_decay)
    # The space validator refuses any other name (OPTIMIZERS); a spec built by hand can still hold one.
    raise WorkloadError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {name!r}")


Autocast = Callable[[], contextlib.AbstractContextManager[Any]]


@torch.no_grad()
def evaluate(model: torch.nn.Module, workload: Workload, device: torch.device,
             batches: Iterable[Any], *, autocast: Autocast = contextlib.nullcontext,
             clock: CompileClock | None = None) -> dict[str, float]:
    """Mean validation loss and, for classifiers, accuracy over the whole validation set (a
    workload with hooks validates itself).

    ``batches`` are the validation set's batches on ``device`` (``Feed.validation``). The sums
    stay on the device until the end: one read per evaluation.
    """
    if workload.hooks is not None:
        with autocast():
            return workload.hooks.evaluate(model, device)
    model.eval()
    # float64 sums of float32 losses: the same numbers as summing Python floats.
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    classes = ClassCounts(workload.num_classes, device)
    count = targets = 0
    for x, y in batches:
        with _compiling(clock, ("eval", tuple(x.shape))), autocast():
            out = model(x)
            loss = workload.loss_fn(out, y)
        # Turn either reduction into a per-sample sum so the average is over samples.
        loss_sum += loss.detach().double() * (len(y) if workload.loss_reduction == "mean" else 1)
        if workload.num_classes is not None:
            # Classes on dimension 1, as cross_entropy takes them: (N, C) against (N,), or
            # (N, C, T) against (N, T) for a sequence (a language model's next tokens), where
            # accuracy is over every target position.
            correct += (out.argmax(dim=1) == y).sum()
            classes.add(y)
            targets += y.numel()
        count += len(y)
    model.train()
    metrics = {record.VAL_LOSS: float(loss_sum) / max(count, 1)}
    if workload.num_classes is not None:
        (right,), most = classes.read(correct)
        metrics[record.VAL_ACCURACY] = right / max(targets, 1)
        metrics.update(classes.chance(most, targets))
    return metrics


class ClassCounts:
    """How often each class occurs among an evaluation's targets, for ``chance_accuracy``: the
    accuracy of always answering the validation set's commonest class. A classifier at or below
    it learned nothing (the quickstart's linear rule at B 512 ends at accuracy 0.078: one class
    answered for every image), and such a trial stands on no frontier
    (``hpsearch.study.frontier_candidates``).

    Counted on the device without a read per batch (targets outside ``0..num_classes-1``, an
    ignore index, are not counted), and read with the correct answers, so an evaluation reads
    the device no more often than before. A sequence's targets, ``(N, T)``, count position by
    position; targets that are not class indices (soft labels) give no figure.
    """

    def __init__(self, num_classes: int | None, device: torch.device) -> None:
        self.counts = torch.zeros(num_classes or 1, dtype=torch.int64, device=device)
        self.classes = num_classes or 0
        self.usable = num_classes is not None

    def add(self, y: Any) -> None:
        if not self.usable:
            return
        if not (isinstance(y, torch.Tensor) and y.dim() >= 1 and not y.is_floating_point() and not y.is_complex()):
            self.usable = False
            return
        y = y.reshape(-1)  # a sequence's targets count position by position
        inside = ((y >= 0) & (y < self.classes)).long()
        self.counts.scatter_add_(0, y.long().clamp(0, self.classes - 1), inside)

    def read(self, correct: torch.Tensor) -> tuple[list[int], int | None]:
        """``correct`` (one count, or one per fused member) and the commonest class's count
        (``None`` where it cannot be told), in one read from the device."""
        flat = correct.reshape(-1)
        if not self.usable:
            return [int(v) for v in flat.tolist()], None
        values = [int(v) for v in torch.cat((flat, self.counts.max().reshape(1).to(flat.dtype))).tolist()]
        return values[:-1], values[-1]

    def chance(self, most: int | None, count: int) -> dict[str, float]:
        """``{chance_accuracy: most / count}``, or nothing where it cannot be told."""
        if most is None or count <= 0:
            return {}
        return {record.CHANCE_ACCURACY: most / count}


def _compiling(clock: CompileClock | None, key: Any) -> contextlib.AbstractContextManager[None]:
    return clock.step(key) if clock is not None and clock.enabled else contextlib.nullcontext()


@dataclass(frozen=True)
class StepLayout:
    """How a run's steps are laid out, fixed for the run (the solo and the fused loop alike)."""

    processes: int  # P
    mean_loss: bool  # the workload's loss is its batch's mean (else its sum)
    # The noise scale's pairs: under DDP, each process's gradient (small) against the reduced one
    # (big); on one process, each micro-batch against the accumulated step (``per_micro``).
    # W x A = 1 has no pair (``measurable`` false).
    per_micro: bool
    measurable: bool
    # On the CPU reading a loss costs nothing, so a non-finite one stops the trial in its step;
    # on CUDA it would stall the device's queue at every micro-step, so losses are read at the
    # evaluations (every epoch's end at least).
    check_every_step: bool

    @classmethod
    def of(cls, spec: TrialSpec, processes: int, workload: Workload, device: torch.device) -> StepLayout:
        """The layout of ``spec`` on ``processes`` processes."""
        micro_batches = spec.grad_accum_steps * spec.emulated_ranks  # a process's in each step
        return cls(processes=processes, mean_loss=workload.loss_reduction == "mean",
                   per_micro=processes == 1 and micro_batches > 1, measurable=processes * micro_batches > 1,
                   check_every_step=device.type != "cuda")


@dataclass
class _StepNorms:
    """One step's squared gradient norms for the noise scale, still on the device: the step's
    whole gradient (``big``), and either this process's own before the all-reduce (``local``,
    under DDP) or each micro-batch's with the divisor that makes it a mean (``micro``)."""

    big: Any
    samples: int
    local: Any = None
    micro: list[tuple[Any, float]] = field(default_factory=list)

    def read(self) -> None:
        """Turn the norms into Python floats now (the same numbers: float64 holds every float32).

        On the CPU a norm kept as a tensor until the next evaluation holds on to the heap: each
        step's one-number tensor, allocated after that step's gradient-sized temporaries, keeps
        the allocator from reusing them (a two-rank trial's resident memory grows by one
        gradient every step of its epoch). Reading a number costs nothing there; on CUDA it
        would stall the device's queue, so there they wait.
        """
        self.big = float(self.big)
        if isinstance(self.local, torch.Tensor):
            self.local = float(self.local)
        self.micro = [(float(norm), divisor) for norm, divisor in self.micro]


class _NoiseEstimate:
    """The epoch's gradient noise scale (``NoiseScale``) and the steps' norms waiting for it.

    The norms wait, on the device, until the next evaluation: under DDP their local norms are
    reduced there in one all-reduce (the same values as one scalar all-reduce per step, without
    a blocking collective in every step), and on CUDA no step waits to read a number.
    """

    def __init__(self, layout: StepLayout, device: torch.device) -> None:
        self.layout, self.device = layout, device
        self.scale = NoiseScale()
        self.pending: list[_StepNorms] = []

    def record(self, raw_model: torch.nn.Module, samples: int, micro: list[tuple[torch.Tensor, float]],
               local: Any) -> None:
        """A step of ``samples`` samples (this process's) is accumulated in ``raw_model``'s
        gradient: keep its norms (``micro`` on one process, ``local`` under DDP)."""
        norms = _StepNorms(grad_vector(raw_model).pow(2).sum(), samples, micro=micro)
        if self.layout.processes > 1:
            norms.local = local
        if self.layout.check_every_step:  # on the CPU
            norms.read()
        self.pending.append(norms)

    def flush(self) -> None:
        """Read the waiting steps' norms in one go (reducing their local norms over the processes
        in one all-reduce under DDP) and add each step's pair to the estimate."""
        pending, P, mean_loss = self.pending, self.layout.processes, self.layout.mean_loss
        if not pending:
            return
        norms = [p.big for p in pending] + [t for p in pending for t, _ in p.micro]
        # float64 holds every float32 norm exactly: the numbers float() of each would give (on the
        # CPU the steps have read them already: _StepNorms.read).
        on_device = [t for t in norms if isinstance(t, torch.Tensor)]
        read = iter(torch.stack([t.double() for t in on_device]).tolist() if on_device else [])
        numbers = iter([next(read) if isinstance(t, torch.Tensor) else t for t in norms])
        big = [next(numbers) for _ in pending]
        local: list[float] = []
        if P > 1:
            # On the device: NCCL reduces CUDA tensors only.
            reduced = torch.stack([torch.as_tensor(p.local, dtype=torch.float64, device=self.device)
                                   for p in pending])
            dist.all_reduce(reduced)
            local = reduced.tolist()
        for k, p in enumerate(pending):
            # Turn both into squared norms of mean gradients (a sum loss gives sums).
            big_sq = big[k] if mean_loss else big[k] / (p.samples * P) ** 2
            if p.micro:
                micro_sq = 0.0
                for _, divisor in p.micro:
                    micro_sq += next(numbers) / divisor ** 2
                self.scale.add(micro_sq / len(p.micro), p.samples / len(p.micro), big_sq, p.samples)
            elif P > 1:
                local_sq = local[k] / P
                local_sq = local_sq if mean_loss else local_sq / (P * p.samples) ** 2
                self.scale.add(local_sq, p.samples, big_sq, p.samples * P)
        pending.clear()

    def reset(self) -> None:
        """An epoch begins: the estimate is the epoch's own (the norms waiting stay)."""
        self.scale.reset()

    def value(self) -> float | None:
        """The report's ``noise_scale``: ``None`` where the layout gives no pair."""
        return self.scale.value() if self.layout.measurable else None


class _EpochLoss:
    """The epoch's training loss as a per-sample sum, on the device (a float64 tensor, 0.0
    before the first step) until an evaluation reads it, and the samples it sums over."""

    def __init__(self) -> None:
        self.total: Any = 0.0
        self.count = 0

    def add(self, step_loss: Any, count: int) -> None:
        self.total = self.total + step_loss
        self.count += count

    def mean(self) -> float:
        """The report's ``train_loss``."""
        return float(self.total) / max(self.count, 1)

    def check_finite(self, epoch: int, steps: int) -> None:
        """Raise ``diverged`` if a training loss since the epoch began was not finite (CUDA reads
        the losses here, at an evaluation after ``steps`` steps, rather than in every step)."""
        total = float(self.total)
        if not math.isfinite(total):
            raise TrialFailed(record.REASON_DIVERGED, f"non-finite training loss in epoch {epoch + 1}, found at the "
                                          f"evaluation after step {steps} (on CUDA the losses are read at "
                                          "evaluations, so it turned non-finite in that step or an earlier one of "
                                          "the epoch)")


@dataclass
class _Model:
    """The model a run trains, and its steps. ``raw_model`` keeps the weights' own names (for
    model.pt); ``net`` (compiled with ``compile``) trains and evaluates; ``model`` is ``net``,
    or DDP around it under several processes, so no_sync and the comm hook stay DDP's own.
    ``comm`` times the hook's all-reduces; ``clock`` the steps that compile."""

    workload: Workload
    raw_model: torch.nn.Module
    net: torch.nn.Module
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    comm: CommStats
    clock: CompileClock
    autocast: Autocast

    def accumulate(self, batches: Iterator[Any], order: list[tuple[int, int, int]], layout: StepLayout,
                   progress: Progress, loss: _EpochLoss, epoch: int) -> list[tuple[torch.Tensor, float]]:
        """Forward and backward over one optimizer step's micro-batches (``order`` names the
        virtual rank, the index in the epoch and the size of each; ``batches`` yields them in that
        order), leaving the step's gradient in the model and its losses in ``loss``. Returns each
        micro-batch's squared gradient norm and the divisor that makes it a mean's, for the noise
        scale on one process (on the device)."""
        workload, clock, P, mean_loss = self.workload, self.clock, layout.processes, layout.mean_loss
        # This process's samples in the step: its micro-batches times its virtual ranks.
        step_samples = sum(n for _, _, n in order)
        previous = None
        micro: list[tuple[torch.Tensor, float]] = []
        step_loss: torch.Tensor | None = None  # this step's, added to the epoch's once
        count = 0
        for j, (_, batch_idx, n) in enumerate(order):
            batch = next(batches)
            last = j == len(order) - 1
            # Skip the all-reduce on all but the last micro-step: gradients accumulate locally and
            # are reduced once (docs/science.md, the "DDP slower than one process" caveat). The
            # forward pass must sit inside no_sync too.
            sync = self.model.no_sync() if (P > 1 and not last) else contextlib.nullcontext()  # type: ignore[operator]
            began = clock.seconds
            shape = (tuple(batch[0].shape) if workload.hooks is None else n) if clock.enabled else None
            with sync, _compiling(clock, ("train", shape)):
                with self.autocast():
                    if workload.hooks is None:
                        x, y = batch
                        loss_value = workload.loss_fn(self.model(x), y)
                    else:
                        # The model computes the loss from the whole batch (a LightningModule's
                        # training_step, called through DDP's forward so the gradients are reduced).
                        loss_value = self.model(batch, batch_idx)
                # Make the step's gradient equal one process's gradient on all B samples.
                # mean: weight each micro-batch by its share of this process's samples (exact also
                # for a short last batch); DDP then averages the P processes.
                # sum: accumulation already sums; multiply by P to undo DDP's averaging.
                scale = n / step_samples if mean_loss else float(P)
                # x 1.0 changes no bit, forward or backward: skipped, two kernels fewer a step.
                (loss_value * scale if scale != 1.0 else loss_value).backward()  # type: ignore[no-untyped-call]
            progress.compiled(clock.seconds - began)
            if layout.per_micro:
                # This micro-batch's own gradient is the change it made to the accumulated one;
                # its squared norm over (scale or n)^2 is the squared norm of a mean gradient
                # (mean loss: delta = scale x the micro-batch's mean gradient; sum loss: delta is
                # the micro-batch's gradient sum).
                current = grad_vector(self.raw_model)
                delta = current if previous is None else current - previous
                previous = current
                micro.append((delta.pow(2).sum(), scale if mean_loss else n))
            value = loss_value.detach()
            if layout.check_every_step and not math.isfinite(number := float(value)):
                raise TrialFailed(record.REASON_DIVERGED, f"non-finite training loss {number} in epoch {epoch + 1}, "
                                              f"step {progress.steps + 1}")
            # A float64 sum of the float32 losses: the numbers a sum of Python floats gives.
            term = value.double() * (n if mean_loss else 1)
            step_loss = term if step_loss is None else step_loss + term
            count += n
        loss.add(step_loss, count)
        return micro

    def step(self, lr: float, max_grad_norm: float | None = None) -> None:
        """The optimizer's step at ``lr``, the gradient then cleared. With ``max_grad_norm`` the
        step's gradient (all-reduced, every micro-step in it) is clipped to that L2 norm first:
        once a step, so accumulation and emulated ranks clip what DDP would."""
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), max_grad_norm)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def validate(self, feed: Feed, device: torch.device) -> dict[str, float]:
        """``evaluate`` on the validation set (a workload with hooks validates itself)."""
        batches = feed.evaluation() if self.workload.hooks is None else ()
        return evaluate(self.net if self.workload.hooks is None else self.raw_model, self.workload, device, batches,
                        autocast=self.autocast, clock=self.clock)


def train(spec: TrialSpec, ctx: RankContext) -> dict[str, Any] | None:
    """Train ``spec`` on this rank; rank 0 returns the final metrics, other ranks ``None``.

    ``ctx.world_size`` is the number of processes P; each runs ``spec.emulated_ranks`` = V
    virtual ranks, so the logical world size is W = P x V. Process p plays logical ranks
    p*V .. p*V+V-1 with the samplers those ranks would have, so one process previews a
    W-device run with the same math. Expects the process group to be initialised when P > 1.

    Rank 0 evaluates and reports at the end of every epoch and, with
    ``spec.eval_every_samples`` = N, each time N more samples of the epoch were seen, counted
    from the epoch's start (not where that is within one step of its end: the epoch's
    evaluation stands for it), in validation batches no larger than the per-device batch
    (``hpsearch.trials.rank.schedule``).

    Each report carries ``peak_memory_bytes``, the most memory this rank held since the trial
    began; the final one the largest over the processes (``hpsearch.trials.rank.memory``). With
    ``spec.memory_limit_bytes`` the rank's memory is capped on the CPU for the trial.

    Raises:
        TrialFailed: ``diverged`` when a loss becomes non-finite; ``out_of_memory`` when the
            device's memory, or the cap, ran out.
        WorkloadError: the workload or optimizer cannot be built.

    A fused group (``spec.fused``) trains in ``hpsearch.trials.rank.fused``.
    """
    if spec.fused:
        raise ValueError("a fused group trains in hpsearch.trials.rank.fused.train_fused")
    device = torch.device(ctx.device)
    if spec.keep_data and (spec.memory_limit_bytes is not None or device.type == "cuda"):
        keep_only_for(spec.workload, spec.factory_options)
    # What the process keeps for trials is the trial's own (a fresh process would build it),
    # whatever else earlier trials left is not (hpsearch.trials.rank.memory).
    kept = kept_data().bytes if spec.keep_data else 0
    with RankMemory(device, spec.memory_limit_bytes, kept_bytes=kept) as memory:
        try:
            return _train(spec, ctx, device, memory)
        except (MemoryError, RuntimeError) as exc:
            # Out of memory is an outcome a batch-size search learns from, not a workload's
            # error: the search does not start the same configuration at this batch or above.
            if not is_out_of_memory(exc):
                raise
            raise memory.failure(exc, spec) from None


def _train(spec: TrialSpec, ctx: RankContext, device: torch.device, memory: RankMemory) -> dict[str, Any] | None:
    """``train`` under its memory's watch."""
    began = time.perf_counter()
    P, V, b = ctx.world_size, spec.emulated_ranks, spec.per_device_batch_size
    W = P * V
    if spec.world_size != W:
        raise WorkloadError(f"{P} processes x {V} emulated ranks must equal world_size {spec.world_size}")

    # Same seed on every rank: identical initial weights (DDP also broadcasts rank 0's). The
    # data come from the process's kept copy where they can (built with the generators put
    # back), so the model draws the same weights either way.
    torch.manual_seed(spec.seed)
    # The factory gets workload.options with the workload's own parameters (hidden...) over them.
    workload, data_cache = warm_workload(spec.workload, spec.factory_options, keep=spec.keep_data)
    check_data_fingerprint(workload, spec.data_fingerprint, spec.workload)
    path = choose_data_path(spec.data, workload, device, gpu_share=spec.gpu_share)
    autocast = set_precision(spec.precision, device)
    raw_model: torch.nn.Module = workload.model.to(device)
    # The compiled module is what trains and evaluates; raw_model keeps the weights' own names
    # for model.pt. DDP wraps the compiled module, so no_sync and the comm hook stay DDP's own.
    net: torch.nn.Module = torch.compile(raw_model) if spec.compile else raw_model  # type: ignore[assignment]
    clock = CompileClock(enabled=spec.compile, device=device)
    model: torch.nn.Module = net
    comm = CommStats(world_size=P)
    if P > 1:
        model = DistributedDataParallel(net)
        model.register_comm_hook(comm, timed_allreduce_hook)
    layout = StepLayout.of(spec, P, workload, device)

    # Logical rank r reads indices r, r+W, r+2W... of a per-epoch seeded shuffle (set_epoch),
    # in micro-batches of b; both data paths take them from this one plan.
    plan = EpochPlan(workload.train_set, world_size=W, first_rank=ctx.rank * V, virtual_ranks=V, batch_size=b,
                     accum=spec.grad_accum_steps, seed=spec.seed)
    kept_copy = kept_data()

    def on_device(tensors: tuple[torch.Tensor, ...], where: torch.device) -> tuple[torch.Tensor, ...]:
        return kept_copy.on_device(tensors, where, gpu_share=spec.gpu_share)

    feed = open_feed(path, workload, plan, device, loader=spec.loader, cpus=spec.cpus_per_worker, seed=spec.seed,
                     to_device=on_device if spec.keep_data else copy_to)
    memory.eval_batch = feed.eval_batch
    try:
        # A workload with its own optimizer (a LightningModule's configure_optimizers) builds it
        # now, with the model on its device; the loop sets its LR at every step all the same.
        own_optimizer = workload.hooks.optimizer if workload.hooks is not None else None
        optimizer = own_optimizer() if own_optimizer is not None else build_optimizer(model.parameters(), spec)
        synchronize(device)  # the weights and data copied: the clock starts with training
        ctx.training_started = time.time()
        reporter = Reporter(ctx, memory, spec, Reporter.run_setup(spec, path, data_cache, memory, began),
                            tokens_per_sample=workload.tokens_per_sample)
        memory.phase = "training"
        trained = _Model(workload, raw_model, net, model, optimizer, comm, clock, autocast)
        return _epochs(spec, trained, feed, plan, layout, reporter)
    finally:
        feed.close()


def _epochs(spec: TrialSpec, trained: _Model, feed: Feed, plan: EpochPlan, layout: StepLayout,
            reporter: Reporter) -> dict[str, Any] | None:
    """The epochs of ``train``, its objects built."""
    ctx, comm, P = reporter.ctx, trained.comm, layout.processes
    steps_per_epoch = plan.steps_per_epoch
    noise = _NoiseEstimate(layout, reporter.device)
    schedule = EvalSchedule(epochs=spec.epochs, steps_per_epoch=steps_per_epoch, every_samples=spec.eval_every_samples)
    progress = Progress()
    metrics: dict[str, Any] = {}
    for epoch in range(spec.epochs):
        noise.reset()
        comm.seconds = 0.0
        progress.start_epoch()
        loss = _EpochLoss()
        schedule.start_epoch(epoch, progress.samples_seen)
        batches = feed.epoch(epoch)
        for step in range(steps_per_epoch):
            order = plan.step_order(step)
            step_samples = sum(n for _, _, n in order)  # this process's
            comm.local_sq_norm = 0.0
            micro = trained.accumulate(batches, order, layout, progress, loss, epoch)
            # The LR for this step is the schedule at the step's start, in epochs done.
            lr = lr_at(epoch + step / steps_per_epoch, base_lr=spec.base_lr, peak_lr=spec.lr,
                       warmup_epochs=spec.warmup_epochs, schedule=spec.schedule, total_epochs=spec.epochs,
                       warmup_from=spec.warmup_from, step_epochs=1 / steps_per_epoch)
            if layout.measurable:
                noise.record(trained.raw_model, step_samples, micro, comm.local_sq_norm)
            trained.step(lr, spec.max_grad_norm)
            ctx.lr_trace.append(lr)
            progress.stepped(step_samples * P)
            point = schedule.after_step(step, progress.samples_seen)
            if point is None:
                continue
            if not layout.check_every_step:
                loss.check_finite(epoch, progress.steps)
            # Every rank knows when an evaluation is due (the samples are counted alike), so
            # each joins the one all-reduce of the pending noise-scale norms.
            noise.flush()
            if ctx.is_main:
                metrics = _evaluate_and_report(reporter, point, progress, trained, feed, loss, noise)
            elif point.final:
                reporter.peak_memory(final=True)  # joins rank 0's all-reduce of the peaks, after its last evaluation
        # The plan's micro-batches are all taken: run the feed to its end, so a loader's
        # iterator ends its epoch (and a loader without persistent workers stops them now).
        if next(batches, None) is not None:
            raise RuntimeError("the feed gave more micro-batches than the epoch's plan holds")
    if P > 1:
        # Hold every rank until rank 0 finished its last evaluation, so no rank tears the group
        # down while another still runs.
        dist.barrier()
    return metrics if ctx.is_main else None


def _evaluate_and_report(reporter: Reporter, point: Evaluation, progress: Progress, trained: _Model, feed: Feed,
                         loss: _EpochLoss, noise: _NoiseEstimate) -> dict[str, Any]:
    """Rank 0: evaluate the model and report where training stands; at the final evaluation,
    write the weights to the run folder first (``save_model``), and report the largest peak
    memory over the processes (each joins that all-reduce), else rank 0's own so far (a trial
    stopped early keeps it)."""
    device, comm, clock = reporter.device, trained.comm, trained.clock
    synchronize(device)  # the steps queued so far count as training time
    began = time.perf_counter()
    epoch_seconds = progress.epoch_train_seconds(began)
    progress.evaluations += 1
    measured = reporter.evaluate(lambda: trained.validate(feed, device))
    P = reporter.ctx.world_size
    metrics = {
        **progress.where(point),
        record.TRAIN_LOSS: loss.mean(),
        **measured,
        record.LAST_LR: trained.optimizer.param_groups[0]["lr"],
        record.COMM_FRACTION: min(1.0, comm.seconds / epoch_seconds) if P > 1 and epoch_seconds > 0 else 0.0,
        record.ALLREDUCE_CALLS: comm.calls,
        record.NOISE_SCALE: noise.value(),
        **reporter.setup,
    }
    if clock.enabled:
        metrics[record.COMPILE_S] = clock.seconds
    if not math.isfinite(metrics[record.VAL_LOSS]):
        raise TrialFailed(record.REASON_DIVERGED, f"non-finite validation loss after {point.epoch:g} epochs")
    now = time.perf_counter()
    progress.evaluated(now - began)
    # The evaluation's own time counts in the runtime, not in the training time. Compiling counts
    # in neither (it is compile_s): its cost depends on what torch.compile's caches hold, not on
    # the configuration (a shape's first trial compiles, the ones after find it cached), and the
    # runtime is the frontier's axis.
    wall = now - progress.start
    metrics[record.RUNTIME_S] = wall - clock.seconds
    metrics[record.TRAIN_S] = wall - progress.eval_seconds - progress.compile_seconds
    if point.final:
        metrics[record.DEVICE] = reporter.device_name()
    metrics[record.PEAK_MEMORY_BYTES] = reporter.peak_memory(point.final)
    save_to = reporter.model_path(MODEL_FILE) if point.final else None
    if save_to is not None:
        # Written before the final report (and outside the timed part), so the report can say
        # where: the searcher records the path, and a trial cut short leaves no file behind.
        torch.save(trained.raw_model.state_dict(), save_to)
        metrics[MODEL_PATH] = str(save_to.resolve())
    reporter.report(metrics)
    return metrics
