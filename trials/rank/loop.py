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
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from hpsearch import record
from hpsearch.record import MEMORY_LIMIT_BYTES, MODEL_PATH
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
from hpsearch.trials.scaling import lr_at
from hpsearch.trials.spec import TrialSpec
from hpsearch.trials.workloads.base import Workload

__all__ = ["MODEL_FILE", "ClassCounts", "build_optimizer", "evaluate", "train"]

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
    count = 0
    for x, y in batches:
        with _compiling(clock, ("eval", tuple(x.shape))), autocast():
            out = model(x)
            loss = workload.loss_fn(out, y)
        # Turn either reduction into a per-sample sum so the average is over samples.
        loss_sum += loss.detach().double() * (len(y) if workload.loss_reduction == "mean" else 1)
        if workload.num_classes is not None:
            correct += (out.argmax(dim=1) == y).sum()
            classes.add(y)
        count += len(y)
    model.train()
    metrics = {record.VAL_LOSS: float(loss_sum) / max(count, 1)}
    if workload.num_classes is not None:
        (right,), most = classes.read(correct)
        metrics[record.VAL_ACCURACY] = right / max(count, 1)
        metrics.update(classes.chance(most, count))
    return metrics


class ClassCounts:
    """How often each class occurs among an evaluation's targets, for ``chance_accuracy``: the
    accuracy of always answering the validation set's commonest class. A classifier at or below
    it learned nothing (the quickstart's linear rule at B 512 ends at accuracy 0.078: one class
    answered for every image), and such a trial stands on no frontier
    (``hpsearch.study.frontier_candidates``).

    Counted on the device without a read per batch (targets outside ``0..num_classes-1``, an
    ignore index, are not counted), and read with the correct answers, so an evaluation reads
    the device no more often than before; targets that are not one class index per sample (soft
    labels) give no figure.
    """

    def __init__(self, num_classes: int | None, device: torch.device) -> None:
        self.counts = torch.zeros(num_classes or 1, dtype=torch.int64, device=device)
        self.classes = num_classes or 0
        self.usable = num_classes is not None

    def add(self, y: Any) -> None:
        if not self.usable:
            return
        if not (isinstance(y, torch.Tensor) and y.dim() == 1 and not y.is_floating_point() and not y.is_complex()):
            self.usable = False
            return
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


@dataclass
class _Progress:
    """Where training stands, for the reports: counted over all ranks, since the trial began."""

    start: float = field(default_factory=time.perf_counter)
    samples_seen: int = 0
    steps: int = 0
    evaluations: int = 0
    eval_seconds: float = 0.0  # rank 0's time in evaluation, left out of ``train_s``
    compile_seconds: float = 0.0  # training steps that compiled the model, left out of ``train_s``
    epoch_start: float = 0.0
    epoch_eval_seconds: float = 0.0
    epoch_compile_seconds: float = 0.0
    # This epoch's training loss as a per-sample sum: a float64 tensor on the device (0.0 before
    # the first step), read at evaluations.
    train_loss_sum: Any = 0.0
    train_count: int = 0


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

        On the CPU a norm kept as a tensor until the next evaluation held on to the heap: each
        step's one-number tensor, allocated after that step's gradient-sized temporaries, kept
        the allocator from reusing them (seen: a two-rank trial's resident memory grew by one
        gradient, 9 MiB, every step of its epoch, 1.5 GiB at 128 steps). Reading a number costs
        nothing there; on CUDA it would stall the device's queue, so there they wait.
        """
        self.big = float(self.big)
        if isinstance(self.local, torch.Tensor):
            self.local = float(self.local)
        self.micro = [(float(norm), divisor) for norm, divisor in self.micro]


def train(spec: TrialSpec, ctx: RankContext) -> dict[str, Any] | None:
    """Train ``spec`` on this rank; rank 0 returns the final metrics, other ranks ``None``.

    ``ctx.world_size`` is the number of processes P; each runs ``spec.emulated_ranks`` = V
    virtual ranks, so the logical world size is W = P x V. Process p plays logical ranks
    p*V .. p*V+V-1 with the samplers those ranks would have, so one process previews a
    W-device run with the same math. Expects the process group to be initialised when P > 1.

    Rank 0 evaluates and reports at the end of every epoch and, with
    ``spec.eval_every_samples`` = N, each time N more samples of the epoch were seen, counted
    from the epoch's start (not where that is within one step of its end: the epoch's
    evaluation stands for it), in validation batches no larger than the per-device batch.

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
    P, V, A, b = ctx.world_size, spec.emulated_ranks, spec.grad_accum_steps, spec.per_device_batch_size
    W = P * V
    if spec.world_size != W:
        raise WorkloadError(f"{P} processes x {V} emulated ranks must equal world_size {spec.world_size}")

    # Same seed on every rank: identical initial weights (DDP also broadcasts rank 0's). The
    # data come from the process's kept copy where they can (built with the generators put
    # back), so the model draws the same weights either way.
    torch.manual_seed(spec.seed)
    # The factory gets workload.options with the workload's own parameters (hidden...) over them.
    workload, data_cache = warm_workload(spec.workload, spec.factory_options, keep=spec.keep_data)
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
    mean_loss = workload.loss_reduction == "mean"

    # Logical rank r reads indices r, r+W, r+2W... of a per-epoch seeded shuffle (set_epoch),
    # in micro-batches of b; both data paths take them from this one plan.
    plan = EpochPlan(workload.train_set, world_size=W, first_rank=ctx.rank * V, virtual_ranks=V, batch_size=b,
                     accum=A, seed=spec.seed)
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
        setup = {record.DATA_PATH: path.kind, record.DATA_PATH_REASON: path.reason,
                 record.DATA_CACHE: data_cache, record.PRECISION: spec.precision,
                 record.SETUP_S: time.perf_counter() - began}
        if memory.limit is not None:
            setup[MEMORY_LIMIT_BYTES] = memory.limit
        memory.phase = "training"
        return _epochs(spec, ctx, workload, model, net, raw_model, optimizer, feed, plan, comm, clock, autocast,
                       setup, device, memory, P=P, V=V, A=A, mean_loss=mean_loss)
    finally:
        feed.close()


def _epochs(spec: TrialSpec, ctx: RankContext, workload: Workload, model: torch.nn.Module, net: torch.nn.Module,
            raw_model: torch.nn.Module, optimizer: torch.optim.Optimizer, feed: Feed, plan: EpochPlan,
            comm: CommStats, clock: CompileClock, autocast: Autocast, setup: dict[str, Any], device: torch.device,
            memory: RankMemory, *, P: int, V: int, A: int, mean_loss: bool) -> dict[str, Any] | None:
    """The epochs of ``train``, its objects built."""
    W = P * V
    steps_per_epoch = plan.steps_per_epoch
    # Noise scale pairs: under DDP, each process's gradient (small) against the reduced one (big);
    # on one process, each micro-batch against the accumulated step. W x A = 1 has no pair.
    noise = NoiseScale()
    per_micro = P == 1 and A * V > 1
    measurable = W * A > 1
    # The steps' norms wait here, on the device, until the next evaluation: under DDP their
    # local norms are reduced there in one all-reduce (the same values as one scalar all-reduce
    # per step, without a blocking collective in every step), and on CUDA no step waits to
    # read a number.
    pending: list[_StepNorms] = []
    # On the CPU reading a loss costs nothing, so a non-finite one stops the trial in its step;
    # on CUDA it would stall the device's queue at every micro-step, so losses are read at the
    # evaluations (every epoch's end at least).
    check_every_step = device.type != "cuda"

    save_to = ctx.run_dir / MODEL_FILE if spec.save_model and ctx.run_dir is not None else None
    every = spec.eval_every_samples
    # The periodic evaluations are counted within each epoch, from its start (as Lightning's
    # val_check_interval counts within an epoch): every N samples, then the epoch's end. Counted
    # over the whole run, their multiples drifted against the epoch's end and landed one or two
    # steps after it (an evaluation every 360 samples of a 1438-sample epoch at 8 a step came at
    # 1438 and again at 1446, at 7190 and again at 7206: 45 evaluations in 10 epochs, 5 of them
    # near-duplicates, where the epoch holds 4).
    next_eval: int | None = None
    progress = _Progress()
    metrics: dict[str, Any] = {}
    for epoch in range(spec.epochs):
        noise.reset()
        comm.seconds = 0.0
        progress.epoch_start = time.perf_counter()
        progress.epoch_eval_seconds = progress.epoch_compile_seconds = 0.0
        progress.train_loss_sum, progress.train_count = 0.0, 0
        next_eval = progress.samples_seen + every if every else None
        batches = feed.epoch(epoch)
        for step in range(steps_per_epoch):
            order = plan.step_order(step)
            # This process's samples in the step: its micro-batches times its virtual ranks.
            step_samples = sum(n for _, _, n in order)
            comm.local_sq_norm = 0.0
            micro = _accumulate(model, raw_model, workload, batches, order, step_samples, progress, clock, autocast,
                                P=P, mean_loss=mean_loss, per_micro=per_micro, check=check_every_step, epoch=epoch)
            # The LR for this step is the schedule at the step's start, in epochs done.
            lr = lr_at(epoch + step / steps_per_epoch, base_lr=spec.base_lr, peak_lr=spec.lr,
                       warmup_epochs=spec.warmup_epochs, schedule=spec.schedule, total_epochs=spec.epochs)
            if measurable:
                norms = _StepNorms(grad_vector(raw_model).pow(2).sum(), step_samples, micro=micro)
                if P > 1:
                    norms.local = comm.local_sq_norm
                if check_every_step:  # on the CPU
                    norms.read()
                pending.append(norms)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            ctx.lr_trace.append(lr)
            progress.steps += 1
            progress.samples_seen += step_samples * P
            end_of_epoch = step == steps_per_epoch - 1
            due = next_eval is not None and progress.samples_seen >= next_eval
            if due and step == steps_per_epoch - 2:
                due = False  # the epoch's end, one step on, evaluates for it
            if not (due or end_of_epoch):
                continue
            while every and next_eval is not None and next_eval <= progress.samples_seen:
                next_eval += every
            if not check_every_step:
                _check_finite(progress, epoch)
            # Every rank knows when an evaluation is due (the samples are counted alike), so
            # each joins the one all-reduce of the pending noise-scale norms.
            _flush_noise(pending, noise, P, mean_loss, device)
            final = end_of_epoch and epoch == spec.epochs - 1
            if ctx.is_main:
                metrics = _evaluate_and_report(
                    ctx, net, workload, feed, device, progress, comm, noise, optimizer, clock, autocast, setup,
                    memory, epoch=epoch + 1 if end_of_epoch else epoch + (step + 1) / steps_per_epoch,
                    epochs_completed=epoch + 1 if end_of_epoch else epoch, final=final, P=P,
                    measurable=measurable, save_to=save_to, raw_model=raw_model)
            elif final:
                memory.peak(P)  # joins rank 0's all-reduce of the peaks, after its last evaluation
        # The plan's micro-batches are all taken: run the feed to its end, so a loader's
        # iterator ends its epoch (and a loader without persistent workers stops them now).
        if next(batches, None) is not None:
            raise RuntimeError("the feed gave more micro-batches than the epoch's plan holds")
    if P > 1:
        # Hold every rank until rank 0 finished its last evaluation, so no rank tears the group
        # down while another still runs.
        dist.barrier()
    return metrics if ctx.is_main else None


def _accumulate(model: torch.nn.Module, raw_model: torch.nn.Module, workload: Workload, batches: Iterator[Any],
                order: list[tuple[int, int, int]], step_samples: int, progress: _Progress, clock: CompileClock,
                autocast: Autocast, *, P: int, mean_loss: bool, per_micro: bool, check: bool,
                epoch: int) -> list[tuple[torch.Tensor, float]]:
    """Forward and backward over one optimizer step's micro-batches (``order`` names the virtual
    rank, the index in the epoch and the size of each; ``batches`` yields them in that order),
    leaving the step's gradient in the model. Returns each micro-batch's squared gradient norm
    and the divisor that makes it a mean's, for the noise scale on one process (on the device)."""
    previous = None
    micro: list[tuple[torch.Tensor, float]] = []
    step_loss: torch.Tensor | None = None  # this step's, added to the epoch's once
    count = 0
    for j, (_, batch_idx, n) in enumerate(order):
        batch = next(batches)
        last = j == len(order) - 1
        # Skip the all-reduce on all but the last micro-step: gradients accumulate locally and
        # are reduced once (docs/science.md, the "DDP slower than one process" caveat). The forward
        # pass must sit inside no_sync too.
        sync = model.no_sync() if (P > 1 and not last) else contextlib.nullcontext()  # type: ignore[operator]
        began = clock.seconds
        shape = (tuple(batch[0].shape) if workload.hooks is None else n) if clock.enabled else None
        with sync, _compiling(clock, ("train", shape)):
            with autocast():
                if workload.hooks is None:
                    x, y = batch
                    loss = workload.loss_fn(model(x), y)
                else:
                    # The model computes the loss from the whole batch (a LightningModule's
                    # training_step, called through DDP's forward so the gradients are reduced).
                    loss = model(batch, batch_idx)
            # Make the step's gradient equal one process's gradient on all B samples.
            # mean: weight each micro-batch by its share of this process's samples (exact also
            # for a short last batch); DDP then averages the P processes.
            # sum: accumulation already sums; multiply by P to undo DDP's averaging.
            scale = n / step_samples if mean_loss else float(P)
            # x 1.0 changes no bit, forward or backward: skipped, two kernels fewer a step.
            (loss * scale if scale != 1.0 else loss).backward()  # type: ignore[no-untyped-call]
        progress.compile_seconds += clock.seconds - began
        progress.epoch_compile_seconds += clock.seconds - began
        if per_micro:
            # This micro-batch's own gradient is the change it made to the accumulated one;
            # its squared norm over (scale or n)^2 is the squared norm of a mean gradient
            # (mean loss: delta = scale x the micro-batch's mean gradient; sum loss: delta is
            # the micro-batch's gradient sum).
            current = grad_vector(raw_model)
            delta = current if previous is None else current - previous
            previous = current
            micro.append((delta.pow(2).sum(), scale if mean_loss else n))
        value = loss.detach()
        if check and not math.isfinite(number := float(value)):
            raise TrialFailed(record.REASON_DIVERGED, f"non-finite training loss {number} in epoch {epoch + 1}, "
                                          f"step {progress.steps + 1}")
        # A float64 sum of the float32 losses: the numbers a sum of Python floats gives.
        term = value.double() * (n if mean_loss else 1)
        step_loss = term if step_loss is None else step_loss + term
        count += n
    progress.train_loss_sum = progress.train_loss_sum + step_loss
    progress.train_count += count
    return micro


def _check_finite(progress: _Progress, epoch: int) -> None:
    """Raise ``diverged`` if a training loss since the epoch began was not finite (CUDA reads
    the losses here, at an evaluation, rather than in every step)."""
    total = float(progress.train_loss_sum)
    if not math.isfinite(total):
        raise TrialFailed(record.REASON_DIVERGED, f"non-finite training loss in epoch {epoch + 1}, found at the evaluation "
                                      f"after step {progress.steps} (on CUDA the losses are read at evaluations, "
                                      "so it turned non-finite in that step or an earlier one of the epoch)")


def _flush_noise(pending: list[_StepNorms], noise: NoiseScale, P: int, mean_loss: bool, device: torch.device) -> None:
    """Read the waiting steps' norms in one go (reducing their local norms over the processes in
    one all-reduce under DDP) and add each step's pair to the noise-scale estimate."""
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
        reduced = torch.stack([torch.as_tensor(p.local, dtype=torch.float64, device=device) for p in pending])
        dist.all_reduce(reduced)
        local = reduced.tolist()
    for k, p in enumerate(pending):
        # Turn both into squared norms of mean gradients (a sum loss gives sums).
        big_sq = big[k] if mean_loss else big[k] / (p.samples * P) ** 2
        if p.micro:
            micro_sq = 0.0
            for _, divisor in p.micro:
                micro_sq += next(numbers) / divisor ** 2
            noise.add(micro_sq / len(p.micro), p.samples / len(p.micro), big_sq, p.samples)
        elif P > 1:
            local_sq = local[k] / P
            local_sq = local_sq if mean_loss else local_sq / (P * p.samples) ** 2
            noise.add(local_sq, p.samples, big_sq, p.samples * P)
    pending.clear()


def _evaluate_and_report(ctx: RankContext, net: torch.nn.Module, workload: Workload, feed: Feed, device: torch.device,
                         progress: _Progress, comm: CommStats, noise: NoiseScale, optimizer: torch.optim.Optimizer,
                         clock: CompileClock, autocast: Autocast, setup: dict[str, Any], memory: RankMemory, *,
                         epoch: float, epochs_completed: int, final: bool, P: int, measurable: bool,
                         save_to: Path | None = None, raw_model: torch.nn.Module) -> dict[str, Any]:
    """Rank 0: evaluate the model and report where training stands; at the final evaluation,
    write the weights to ``save_to`` first, and report the largest peak memory over the
    processes (each joins that all-reduce), else rank 0's own so far (a trial stopped early
    keeps it)."""
    synchronize(device)  # the steps queued so far count as training time
    began = time.perf_counter()
    # Training time of the epoch so far: the evaluations and the compiling steps left out.
    epoch_seconds = began - progress.epoch_start - progress.epoch_eval_seconds - progress.epoch_compile_seconds
    progress.evaluations += 1
    batches = feed.evaluation() if workload.hooks is None else ()  # a hooks workload validates itself
    memory.phase = "evaluation"
    measured = evaluate(net if workload.hooks is None else raw_model, workload, device, batches, autocast=autocast,
                        clock=clock)
    memory.phase = "training"
    metrics = {
        "epoch": epoch,
        record.EPOCHS_COMPLETED: epochs_completed,
        "evaluation": progress.evaluations,
        "final": final,
        record.SAMPLES_SEEN: progress.samples_seen,
        record.STEPS: progress.steps,
        record.TRAIN_LOSS: float(progress.train_loss_sum) / max(progress.train_count, 1),
        **measured,
        record.LAST_LR: optimizer.param_groups[0]["lr"],
        record.COMM_FRACTION: min(1.0, comm.seconds / epoch_seconds) if P > 1 and epoch_seconds > 0 else 0.0,
        record.ALLREDUCE_CALLS: comm.calls,
        record.NOISE_SCALE: noise.value() if measurable else None,
        **setup,
    }
    if clock.enabled:
        metrics[record.COMPILE_S] = clock.seconds
    if not math.isfinite(metrics[record.VAL_LOSS]):
        raise TrialFailed(record.REASON_DIVERGED, f"non-finite validation loss after {epoch:g} epochs")
    now = time.perf_counter()
    progress.eval_seconds += now - began
    progress.epoch_eval_seconds += now - began
    # The evaluation's own time counts in the runtime, not in the training time. Compiling counts
    # in neither (it is compile_s): its cost depends on what torch.compile's caches held, not on
    # the configuration (four trials of one shape, one at a time: runtime 26.67 s for the first,
    # 0.66-0.70 s for the others, which found it cached), and the runtime is the frontier's axis.
    wall = now - progress.start
    metrics[record.RUNTIME_S] = wall - clock.seconds
    metrics[record.TRAIN_S] = wall - progress.eval_seconds - progress.compile_seconds
    if final:
        metrics[record.DEVICE] = f"cuda ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "cpu"
    metrics[record.PEAK_MEMORY_BYTES] = memory.peak(P if final else 1)
    if final and save_to is not None:
        # Written before the final report (and outside the timed part), so the report can say
        # where: the searcher records the path, and a trial cut short leaves no file behind.
        torch.save(raw_model.state_dict(), save_to)
        metrics[MODEL_PATH] = str(save_to.resolve())
    ctx.report(metrics)
    return metrics
