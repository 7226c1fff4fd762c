"""Launch one trial's W DDP ranks and stream rank 0's reports back to the caller.

Ranks are started with PyTorch's own process launcher (``torch.multiprocessing.start_processes``,
from a fork server on CPU, spawned on CUDA: see ``_start_method``) and meet through a ``TCPStore`` that this process hosts on a port the
OS picks, so concurrent trials on one node never race for a port. gloo on CPU, nccl on CUDA.

Rank 0 appends its per-epoch reports to ``metrics.jsonl`` in the trial's run folder; the
launcher tails that file while it waits for the ranks, so the caller sees each epoch as it
ends. A rank that fails writes ``failure-rank<r>.json`` with its reason before exiting; when any
rank dies, PyTorch's process context terminates the others and the launcher raises
``TrialFailed`` with the first reason found.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from hpsearch.trials.context import JsonlSink, RankContext
from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.spec import TrialSpec

__all__ = ["run_trial"]

Report = Callable[[dict[str, Any]], None]

_POLL_S = 0.2
_SIGNAL_SET = {int(s) for s in signal.Signals}


def run_trial(
    spec: TrialSpec,
    run_dir: str | os.PathLike[str],
    *,
    report: Report | None = None,
    collective_timeout_s: float = 300.0,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Run one trial: W ranks of the DDP loop, and return rank 0's final metrics.

    Args:
        spec: The trial's configuration.
        run_dir: A folder for this trial's files (created); it keeps ``metrics.jsonl``.
        report: Called in this process with each per-epoch report, as it arrives.
        collective_timeout_s: How long a rank waits in a collective before giving up, so a
            rank that dies cannot leave the others hanging.
        timeout_s: Wall-clock limit of the whole trial (``None``: none); past it the ranks are
            killed and the trial fails with reason ``timeout``.

    Returns:
        The last epoch's metrics plus the trial's derived measurements (``device_seconds``,
        ``samples_per_s``, ``effective_batch_size``, ``device``...).

    Raises:
        TrialFailed: a rank diverged, raised, or exited, or the trial ran out of time;
            ``reason`` says which.
    """
    import torch.distributed as dist
    import torch.multiprocessing as mp

    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    metrics_path = run / "metrics.jsonl"
    metrics_path.unlink(missing_ok=True)
    for stale in run.glob("failure-rank*"):
        stale.unlink()

    store = None
    port = 0
    nprocs = spec.processes
    if nprocs > 1:
        # wait_for_workers=False: the store must not block here before the ranks exist.
        store = dist.TCPStore("127.0.0.1", 0, nprocs, is_master=True, wait_for_workers=False,
                              timeout=timedelta(seconds=collective_timeout_s))
        port = store.port

    tail = _Tail(metrics_path)
    reports: list[dict[str, Any]] = []

    def drain() -> None:
        for line in tail.read_new():
            reports.append(line)
            if report is not None:
                report(line)

    context = mp.start_processes(
        _rank_main,
        args=(spec, str(run), port, collective_timeout_s, os.getpid()),
        nprocs=nprocs,
        join=False,
        start_method=_start_method(spec),
    )
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while not context.join(timeout=_POLL_S):
            drain()
            if deadline is not None and time.monotonic() > deadline:
                done = reports[-1]["epoch"] if reports else 0
                raise TrialFailed("timeout", f"the trial ran past its {timeout_s:g} s limit "
                                             f"(search.trial_timeout_s) after {done} of {spec.epochs} epochs")
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
        drain()
        for proc in context.processes:
            proc.join(timeout=5)
        raise _failure(run, exc, [proc.exitcode for proc in context.processes]) from None
    finally:
        # Reached also when the caller is interrupted: never leave ranks behind.
        for proc in context.processes:
            if proc.is_alive():
                proc.kill()
                proc.join()
        del store
    drain()
    if not reports:
        raise TrialFailed("no_result", "rank 0 finished without reporting any epoch")
    final = dict(reports[-1])
    runtime = float(final["runtime_s"])
    final.update(
        effective_batch_size=spec.effective_batch_size,
        world_size=spec.world_size,
        emulated_ranks=spec.emulated_ranks,
        device_seconds=runtime * nprocs,
        samples_per_s=final["samples_seen"] / runtime if runtime > 0 else float("nan"),
        device=_device_name(spec.device),
    )
    if spec.world_size * spec.grad_accum_steps == 1:
        # One process, one micro-batch per step: no two batch sizes to compare (SCIENCE.md).
        final["noise_scale"] = None
        final["noise_scale_note"] = "not measurable: world_size x grad_accum_steps = 1"
    return final


def _start_method(spec: TrialSpec) -> str:
    """``forkserver`` for CPU ranks, ``spawn`` for CUDA ones.

    A spawned rank starts a fresh interpreter and imports torch, the loop and the workload
    before its first step: 2-3 s per trial on 2 cores, most of the per-trial overhead of a
    search of short trials (``benchmarks/orchestration.py``). A fork server is one clean process
    per trial process that imports all of that once (Tune reuses the trial process for the next
    trial, and the server with it) and forks each rank from itself, in milliseconds. Forking
    the trial process itself would be as fast but is not safe: a child forked from a process
    that already ran torch computations can deadlock in its thread pools (seen: gloo ranks
    forked from a test process hung in ``futex`` waits). CUDA ranks keep ``spawn``, the start
    PyTorch documents for CUDA.
    """
    if spec.device.startswith("cuda"):
        return "spawn"
    import multiprocessing

    from hpsearch.trials.errors import WorkloadError
    from hpsearch.trials.workloads.base import resolve_workload

    preload = ["__main__", "torch", "torch.distributed", "hpsearch.trials.loop",
               # what an optimizer's first construction imports (about 1 s)
               "torch._dynamo"]
    try:
        module = getattr(resolve_workload(spec.workload), "__module__", None)
    except WorkloadError:
        module = None  # the rank meets the error again and reports it as the trial's failure
    if module:
        preload.append(module)  # its imports (scikit-learn for digits: about 1 s)
    # Read when this process starts its fork server, at its first trial; later trials reuse it.
    multiprocessing.get_context("forkserver").set_forkserver_preload(preload)
    return "forkserver"


class _Tail:
    """Reads the complete JSON lines appended to a file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read_new(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        return [json.loads(line) for line in complete.splitlines() if line.strip()]


def _failure(run: Path, exc: Exception, exit_codes: list[int | None]) -> TrialFailed:
    """The root cause of a failed trial, in order of evidence:

    1. a rank killed by a signal (the OOM killer, a user's kill -9, a segfault; SIGTERM and
       SIGABRT excepted, see below): the survivors' own reports
       then only describe the hole it left, and how they describe it depends on where they
       were (a ``DistBackendError`` in a collective, or a ``RuntimeError`` re-raised from a
       communication hook's future), so they cannot outrank it;
    2. a rank's own failure report (diverged, workload error...), except ``peer_lost``, which a
       rank writes when another rank vanished under a collective;
    3. what PyTorch's process context saw.
    """
    reports = [json.loads(p.read_text()) for p in sorted(run.glob("failure-rank*.json"))]
    killed = [(rank, signal.Signals(-code)) for rank, code in enumerate(exit_codes)
              if code is not None and code < 0 and -code in _SIGNAL_SET]
    # SIGTERM is how the process context stops the surviving ranks; SIGABRT is what a C++
    # runtime raises in a rank whose peer went away mid-collective: symptoms, not causes.
    for rank, sig in killed:
        if sig not in (signal.SIGTERM, signal.SIGABRT):
            return TrialFailed("rank_exited", f"rank {rank} was killed by {sig.name}")
    for info in reports:
        if info["reason"] != "peer_lost":
            return TrialFailed(info["reason"], info["detail"])
    for rank, sig in killed:
        if sig != signal.SIGTERM:
            return TrialFailed("rank_exited", f"rank {rank} was killed by {sig.name}")
    if reports:
        return TrialFailed(reports[0]["reason"], reports[0]["detail"])
    index = getattr(exc, "error_index", None)
    last_line = str(exc).strip().splitlines()[-1] if str(exc).strip() else "no message"
    return TrialFailed("rank_exited", f"rank {'?' if index is None else index} exited: {last_line}")


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return f"cuda ({torch.cuda.get_device_name(0)})"
    return "cpu"


def _rank_main(
    local_rank: int, spec: TrialSpec, run_dir: str, port: int, collective_timeout_s: float, parent_pid: int
) -> None:
    """Entry point of one spawned rank (module level so that ``spawn`` can import it)."""
    _die_with_parent(parent_pid)
    # Ctrl-C in a terminal reaches every process of the foreground group; a rank stops only
    # when its launcher stops it, so that the trial's end is recorded as the search decides.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch
    import torch.distributed as dist

    from hpsearch.search_spaces.errors import HPSearchError
    from hpsearch.trials.loop import train

    # Ray sets OMP_NUM_THREADS for its workers and children inherit it; set torch's own thread
    # count per rank so W ranks share the trial's CPUs instead of oversubscribing them.
    torch.set_num_threads(max(1, spec.cpus_per_worker))
    rank, world = local_rank, spec.processes
    if spec.device == "cuda":
        torch.cuda.set_device(local_rank)
        device, backend = f"cuda:{local_rank}", "nccl"
    else:
        device, backend = "cpu", "gloo"
    run = Path(run_dir)
    ctx = RankContext(rank=rank, world_size=world, device=device,
                      sink=JsonlSink(run / "metrics.jsonl") if rank == 0 else None, run_dir=run)
    try:
        if world > 1:
            store = dist.TCPStore("127.0.0.1", port, world, is_master=False,
                                  timeout=timedelta(seconds=collective_timeout_s))
            dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                    timeout=timedelta(seconds=collective_timeout_s))
        train(spec, ctx)
    except TrialFailed as exc:
        _fail(run, rank, exc.reason, exc.detail)
    except dist.DistBackendError as exc:
        # A peer rank vanished (killed, crashed) under a collective: a symptom, not the cause.
        _fail(run, rank, "peer_lost", f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
    except HPSearchError as exc:
        _fail(run, rank, "workload_error", str(exc))
    except Exception as exc:  # the trial driver's boundary: record any workload crash
        traceback.print_exc(file=sys.stderr)
        _fail(run, rank, "workload_error", f"{type(exc).__name__}: {exc}")
    # Every collective of a finished rank completed (the loop ends in a barrier): its group
    # can be torn down. A rank that finished then leaves without the interpreter's teardown:
    # under load, gloo's background threads were seen aborting a finished rank at exit
    # ("terminate called without an active exception", SIGABRT), failing a trial whose
    # results were all reported.
    if dist.is_initialized():
        dist.destroy_process_group()
    _exit(0)


def _fail(run: Path, rank: int, reason: str, detail: str) -> NoReturn:
    """Report this rank's failure and leave at once, without tearing anything down.

    A rank that fails (a non-finite loss, most often) may have a gradient all-reduce in flight:
    the last micro-step's backward launched it, and its completion runs a Python callback (the
    timing comm hook). Tearing the process group down then deadlocks: the main thread holds
    the GIL while the gloo group's destructor joins its worker thread, which waits for the GIL
    to finish that callback (seen: a diverged two-rank trial's ranks hung at exit, both in
    futex waits, and the trial with them). The failure is on disk; the peers see the
    connection drop and stop too.
    """
    _write_failure(run, rank, reason, detail)
    _exit(1)


def _exit(code: int) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _write_failure(run: Path, rank: int, reason: str, detail: str) -> None:
    # Written aside and renamed into place: the process context may SIGTERM this rank while it
    # writes, and the launcher must never read half a report.
    final = run / f"failure-rank{rank}.json"
    partial = final.with_suffix(".json.partial")
    partial.write_text(json.dumps({"reason": reason, "detail": detail, "rank": rank}))
    os.replace(partial, final)


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to kill this rank when the trial process dies (even by SIGKILL), so a killed
    trial never leaves orphan ranks. Elsewhere this is a no-op."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        # The parent is the trial process (spawn) or its fork server, which exits when the
        # trial process does; either way, a trial process already gone means no rank.
        try:
            os.kill(parent_pid, 0)
        except ProcessLookupError:
            os._exit(1)
