"""The DDP training loop one rank runs, top to bottom.

Per step: A micro-batches of b samples on each of W ranks, so the effective batch is
B = b x W x A (SCIENCE.md). Gradients are all-reduced (averaged) by DDP on the last micro-step
only; the earlier micro-steps run under ``no_sync``. The LR is ``rule(base_lr, B / B0)`` after an
optional linear warmup. Rank 0 evaluates after every epoch (and every ``eval_every_samples``
samples when set) and reports; with ``save_model`` it writes the final weights before its last
report, which says where (``model_path``). A workload with ``WorkloadHooks`` (a LightningModule)
computes each micro-batch's loss itself and brings its own validation and optimizer; the rest
of the loop is the same.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from hpsearch.search_spaces.record import MODEL_PATH
from hpsearch.trials.context import RankContext
from hpsearch.trials.errors import TrialFailed, WorkloadError
from hpsearch.trials.measure import (
    CommStats,
    NoiseScale,
    grad_vector,
    timed_allreduce_hook,
)
from hpsearch.trials.scaling import lr_at
from hpsearch.trials.spec import TrialSpec
from hpsearch.trials.workloads.base import Workload, build_workload

__all__ = ["MODEL_FILE", "build_optimizer", "evaluate", "train"]

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
    raise WorkloadError(f"optimizer must be one of sgd, adam, adamw, got {name!r}")


@torch.no_grad()
def evaluate(model: torch.nn.Module, workload: Workload, device: torch.device) -> dict[str, float]:
    """Mean validation loss and, for classifiers, accuracy over the whole validation set (a
    workload with hooks validates itself)."""
    if workload.hooks is not None:
        return workload.hooks.evaluate(model, device)
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for x, y in DataLoader(workload.val_set, batch_size=1024):
        x, y = x.to(device), y.to(device)
        out = model(x)
        loss = workload.loss_fn(out, y)
        # Turn either reduction into a per-sample sum so the average is over samples.
        loss_sum += float(loss) * (len(y) if workload.loss_reduction == "mean" else 1)
        if workload.num_classes is not None:
            correct += int((out.argmax(dim=1) == y).sum())
        count += len(y)
    model.train()
    metrics = {"val_loss": loss_sum / max(count, 1)}
    if workload.num_classes is not None:
        metrics["val_accuracy"] = correct / max(count, 1)
    return metrics


@dataclass
class _Progress:
    """Where training stands, for the reports: counted over all ranks, since the trial began."""

    start: float = field(default_factory=time.perf_counter)
    samples_seen: int = 0
    steps: int = 0
    evaluations: int = 0
    eval_seconds: float = 0.0  # rank 0's time in evaluation, left out of ``train_s``
    epoch_start: float = 0.0
    epoch_eval_seconds: float = 0.0
    train_loss_sum: float = 0.0  # this epoch's, as a per-sample sum
    train_count: int = 0


def train(spec: TrialSpec, ctx: RankContext) -> dict[str, Any] | None:
    """Train ``spec`` on this rank; rank 0 returns the final metrics, other ranks ``None``.

    ``ctx.world_size`` is the number of processes P; each runs ``spec.emulated_ranks`` = V
    virtual ranks, so the logical world size is W = P x V. Process p plays logical ranks
    p*V .. p*V+V-1 with the samplers those ranks would have, so one process previews a
    W-device run with the same math. Expects the process group to be initialised when P > 1.

    Rank 0 evaluates and reports at the end of every epoch and, with
    ``spec.eval_every_samples``, each time that many more samples were seen.

    Raises:
        TrialFailed: ``diverged`` when a loss becomes non-finite.
        WorkloadError: the workload or optimizer cannot be built.
    """
    device = torch.device(ctx.device)
    P, V, A, b = ctx.world_size, spec.emulated_ranks, spec.grad_accum_steps, spec.per_device_batch_size
    W = P * V
    if spec.world_size != W:
        raise WorkloadError(f"{P} processes x {V} emulated ranks must equal world_size {spec.world_size}")

    # Same seed on every rank: identical initial weights (DDP also broadcasts rank 0's).
    torch.manual_seed(spec.seed)
    # The factory gets workload.options with the workload's own parameters (hidden...) over them.
    workload = build_workload(spec.workload, spec.factory_options)
    model: torch.nn.Module = workload.model.to(device)
    comm = CommStats(world_size=P)
    if P > 1:
        model = DistributedDataParallel(model)
        model.register_comm_hook(comm, timed_allreduce_hook)
    raw_model = model.module if isinstance(model, DistributedDataParallel) else model
    mean_loss = workload.loss_reduction == "mean"

    # Logical rank r reads indices r, r+W, r+2W... of a per-epoch seeded shuffle (set_epoch).
    samplers: list[DistributedSampler[Any]] = [
        DistributedSampler(workload.train_set, num_replicas=W, rank=ctx.rank * V + v, shuffle=True, seed=spec.seed)
        for v in range(V)]
    collate = workload.hooks.collate_fn if workload.hooks is not None else None
    loaders = [DataLoader(workload.train_set, batch_size=b, sampler=s, drop_last=False, collate_fn=collate)
               for s in samplers]
    per_rank = len(samplers[0])  # DistributedSampler pads, so every logical rank gets as many
    micro_sizes = [min(b, per_rank - i) for i in range(0, per_rank, b)]
    steps_per_epoch = math.ceil(len(micro_sizes) / A)
    # A workload with its own optimizer (a LightningModule's configure_optimizers) builds it now,
    # with the model on its device; the loop sets its LR at every step all the same.
    own_optimizer = workload.hooks.optimizer if workload.hooks is not None else None
    optimizer = own_optimizer() if own_optimizer is not None else build_optimizer(model.parameters(), spec)

    # Noise scale pairs: under DDP, each process's gradient (small) against the reduced one (big);
    # on one process, each micro-batch against the accumulated step. W x A = 1 has no pair.
    noise = NoiseScale()
    per_micro = P == 1 and A * V > 1
    measurable = W * A > 1
    # Under DDP each step's pair needs the mean of the processes' local squared norms. The
    # estimators only sum, so the steps' pairs wait here and their local norms are reduced in
    # one all-reduce at the next evaluation: the same values as one scalar all-reduce per step,
    # without a blocking collective in every step.
    pending: list[tuple[float, float, int]] = []  # (local squared norm, big_sq, step_samples)

    save_to = ctx.run_dir / MODEL_FILE if spec.save_model and ctx.run_dir is not None else None
    every = spec.eval_every_samples
    next_eval = every if every else None
    progress = _Progress()
    metrics: dict[str, Any] = {}
    for epoch in range(spec.epochs):
        noise.reset()
        comm.seconds = 0.0
        progress.epoch_start = time.perf_counter()
        progress.epoch_eval_seconds = 0.0
        progress.train_loss_sum, progress.train_count = 0.0, 0
        for sampler in samplers:
            sampler.set_epoch(epoch)
        batches = [iter(loader) for loader in loaders]
        for step in range(steps_per_epoch):
            micro = range(step * A, min((step + 1) * A, len(micro_sizes)))
            # This process's samples in the step: its micro-batches times its virtual ranks.
            step_samples = sum(micro_sizes[i] for i in micro) * V
            order = [(v, i, micro_sizes[i]) for i in micro for v in range(V)]
            comm.local_sq_norm = 0.0
            micro_sq, micro_n = _accumulate(model, raw_model, workload, batches, order, step_samples, device,
                                            progress, P=P, mean_loss=mean_loss, per_micro=per_micro, epoch=epoch)
            # The LR for this step is the schedule at the step's start, in epochs done.
            lr = lr_at(epoch + step / steps_per_epoch, base_lr=spec.base_lr, peak_lr=spec.lr,
                       warmup_epochs=spec.warmup_epochs, schedule=spec.schedule, total_epochs=spec.epochs)
            if measurable:
                big_sq = float(grad_vector(raw_model).pow(2).sum())
                # Turn both into squared norms of mean gradients (a sum loss gives sums).
                big_sq = big_sq if mean_loss else big_sq / (step_samples * P) ** 2
                if per_micro:
                    noise.add(micro_sq / micro_n, step_samples / len(order), big_sq, step_samples)
                elif P > 1:
                    pending.append((comm.local_sq_norm, big_sq, step_samples))
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            ctx.lr_trace.append(lr)
            progress.steps += 1
            progress.samples_seen += step_samples * P
            end_of_epoch = step == steps_per_epoch - 1
            due = next_eval is not None and progress.samples_seen >= next_eval
            if not (due or end_of_epoch):
                continue
            while every and next_eval is not None and next_eval <= progress.samples_seen:
                next_eval += every
            # Every rank knows when an evaluation is due (the samples are counted alike), so
            # each joins the one all-reduce of the pending noise-scale norms.
            _flush_noise(pending, noise, P, mean_loss)
            if ctx.is_main:
                metrics = _evaluate_and_report(
                    ctx, raw_model, workload, device, progress, comm, noise, optimizer,
                    epoch=epoch + 1 if end_of_epoch else epoch + (step + 1) / steps_per_epoch,
                    epochs_completed=epoch + 1 if end_of_epoch else epoch,
                    final=end_of_epoch and epoch == spec.epochs - 1, P=P, measurable=measurable,
                    save_to=save_to)
    if P > 1:
        # Hold every rank until rank 0 finished its last evaluation, so no rank tears the group
        # down while another still runs.
        dist.barrier()
    return metrics if ctx.is_main else None


def _accumulate(model: torch.nn.Module, raw_model: torch.nn.Module, workload: Workload, batches: list[Any],
                order: list[tuple[int, int, int]], step_samples: int, device: torch.device, progress: _Progress, *,
                P: int, mean_loss: bool, per_micro: bool, epoch: int) -> tuple[float, int]:
    """Forward and backward over one optimizer step's micro-batches (``order`` names the virtual
    rank, the index in the epoch and the size of each), leaving the step's gradient in the
    model. Returns the per-micro-batch squared gradient norms' sum and count, for the noise
    scale on one process."""
    previous = None
    micro_sq, micro_n = 0.0, 0
    loss_sum, count = 0.0, 0  # this step's, added to the epoch's once
    for j, (v, batch_idx, n) in enumerate(order):
        batch = next(batches[v])
        last = j == len(order) - 1
        # Skip the all-reduce on all but the last micro-step: gradients accumulate locally and
        # are reduced once (SCIENCE.md, the "DDP slower than one process" caveat). The forward
        # pass must sit inside no_sync too.
        sync = model.no_sync() if (P > 1 and not last) else contextlib.nullcontext()  # type: ignore[operator]
        with sync:
            if workload.hooks is None:
                x, y = batch
                loss = workload.loss_fn(model(x.to(device)), y.to(device))
            else:
                # The model computes the loss from the whole batch (a LightningModule's
                # training_step, called through DDP's forward so the gradients are reduced).
                loss = model(batch, batch_idx)
            # Make the step's gradient equal one process's gradient on all B samples.
            # mean: weight each micro-batch by its share of this process's samples (exact also
            # for a short last batch); DDP then averages the P processes.
            # sum: accumulation already sums; multiply by P to undo DDP's averaging.
            scale = n / step_samples if mean_loss else float(P)
            (loss * scale).backward()  # type: ignore[no-untyped-call]
        if per_micro:
            # This micro-batch's own gradient is the change it made to the accumulated one;
            # rescale it to a mean over its len(y) samples.
            current = grad_vector(raw_model)
            delta = current if previous is None else current - previous
            previous = current
            # mean loss: delta = scale x (micro-batch mean gradient); sum loss: delta is the
            # micro-batch's gradient sum.
            micro_sq += float(delta.pow(2).sum()) / (scale if mean_loss else n) ** 2
            micro_n += 1
        value = float(loss.detach())
        if not math.isfinite(value):
            raise TrialFailed("diverged", f"non-finite training loss {value} in epoch {epoch + 1}, "
                                          f"step {progress.steps + 1}")
        loss_sum += value * (n if mean_loss else 1)
        count += n
    progress.train_loss_sum += loss_sum
    progress.train_count += count
    return micro_sq, micro_n


def _flush_noise(pending: list[tuple[float, float, int]], noise: NoiseScale, P: int, mean_loss: bool) -> None:
    """Reduce the waiting steps' local squared norms over the processes (one all-reduce) and
    add each step's pair to the noise-scale estimate."""
    if not pending:
        return
    local = torch.tensor([p[0] for p in pending], dtype=torch.float64)
    dist.all_reduce(local)
    for local_sum, (_, big_sq, step_samples) in zip(local.tolist(), pending):
        local_sq = local_sum / P
        local_sq = local_sq if mean_loss else local_sq / (P * step_samples) ** 2
        noise.add(local_sq, step_samples, big_sq, step_samples * P)
    pending.clear()


def _evaluate_and_report(ctx: RankContext, raw_model: torch.nn.Module, workload: Workload, device: torch.device,
                         progress: _Progress, comm: CommStats, noise: NoiseScale, optimizer: torch.optim.Optimizer,
                         *, epoch: float, epochs_completed: int, final: bool, P: int,
                         measurable: bool, save_to: Path | None = None) -> dict[str, Any]:
    """Rank 0: evaluate the model and report where training stands; at the final evaluation,
    write the weights to ``save_to`` first."""
    began = time.perf_counter()
    epoch_seconds = began - progress.epoch_start - progress.epoch_eval_seconds  # training time of the epoch so far
    progress.evaluations += 1
    metrics = {
        "epoch": epoch,
        "epochs_completed": epochs_completed,
        "evaluation": progress.evaluations,
        "final": final,
        "samples_seen": progress.samples_seen,
        "steps": progress.steps,
        "train_loss": progress.train_loss_sum / max(progress.train_count, 1),
        **evaluate(raw_model, workload, device),
        "lr": optimizer.param_groups[0]["lr"],
        "comm_fraction": min(1.0, comm.seconds / epoch_seconds) if P > 1 and epoch_seconds > 0 else 0.0,
        "allreduce_calls": comm.calls,
        "noise_scale": noise.value() if measurable else None,
    }
    if not math.isfinite(metrics["val_loss"]):
        raise TrialFailed("diverged", f"non-finite validation loss after {epoch:g} epochs")
    now = time.perf_counter()
    progress.eval_seconds += now - began
    progress.epoch_eval_seconds += now - began
    # The evaluation's own time counts in the wall time, not in the training time.
    metrics["runtime_s"] = now - progress.start
    metrics["train_s"] = metrics["runtime_s"] - progress.eval_seconds
    if final:
        metrics["device"] = f"cuda ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "cpu"
    if final and save_to is not None:
        # Written before the final report (and outside the timed part), so the report can say
        # where: the searcher records the path, and a trial cut short leaves no file behind.
        torch.save(raw_model.state_dict(), save_to)
        metrics[MODEL_PATH] = str(save_to.resolve())
    ctx.report(metrics)
    return metrics
