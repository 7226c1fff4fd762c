"""A warm rank process: ``python -m hpsearch.trials.rank.process [MODULE ...]``.

Started by a ``RankPool`` (``hpsearch.trials.node.pool``), or forked from its zygote
(``hpsearch.trials.rank.zygote``), with one end of a socket pair (its fd in
``HPSEARCH_WORKER_FD``). It has imported torch, the training loop and the given modules once,
says ``Ready``, then runs one rank of one trial per ``RankTask`` it receives
(``hpsearch.trials.rank.messages``) and says ``Done`` after each rank that finished cleanly. A
rank that fails in any way writes ``failure-rank<r>.json`` in the trial's run folder and exits,
so no process that saw an error is ever reused.

Before every task the process is put back into the state it had when it became ready (see
``_FreshState``): reuse must never change a result.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import pickle
import random
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NoReturn

import numpy
import torch
import torch.distributed as dist

from hpsearch import record
from hpsearch.errors import HPSearchError
from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.rank import data_cache
from hpsearch.trials.rank.context import JsonlSink, RankContext
from hpsearch.trials.rank.fused import train_fused
from hpsearch.trials.rank.lifetime import die_with_parent, leave
from hpsearch.trials.rank.loop import train
from hpsearch.trials.rank.messages import RANKS_LOG_ENV, Began, Call, Done, Raised, RankTask, Ready, Reported, Returned

__all__ = ["import_modules", "main", "rank_device", "run_rank"]

# What an optimizer's first construction imports (about 1 s), beside torch and the loop that
# this module imports.
_ALWAYS = ("torch._dynamo",)


def main(argv: list[str]) -> None:
    conn = Connection(int(os.environ.pop("HPSEARCH_WORKER_FD")))
    die_with_parent()
    # Ctrl-C in a terminal reaches every process of the foreground group; a rank stops only
    # when its pool stops it, so that the trial's end is recorded as the search decides.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import_modules(argv)  # already done in a process forked by the zygote
    fresh = _FreshState.capture()
    # What was imported stays for the process's life: keep the collector from walking it again
    # after every rank (a full collection over torch's objects takes 0.2-0.5 s a trial).
    gc.freeze()
    conn.send(Ready(os.getpid()))
    while True:
        try:
            work: RankTask | Call = conn.recv()
        except (EOFError, OSError):
            leave(0)
        fresh.restore()
        added = _extend_path(work.sys_path)
        if isinstance(work, Call):
            conn.send(_called(work))
            _forget(added, fresh)
            continue
        # Reset and on its way: the trial's "ready" phase, by this process's clock (the pool's
        # monitor may read the message a tick later, after training began).
        conn.send(Began(work.rank, time.time()))

        def reported(rank: int = work.rank) -> None:
            conn.send(Reported(rank, time.time()))

        run_rank(work, on_report=reported)
        # Done first, clean up after: the trial ends now, and the next task waits in the socket
        # until this process is clean.
        conn.send(Done(work.rank))
        _forget(added, fresh)


def import_modules(modules: list[str]) -> None:
    """Import what makes a rank process warm beside torch and the loop: ``modules`` (the
    workload's)."""
    for name in _ALWAYS:
        try:
            importlib.import_module(name)
        except Exception:  # a broken install: each trial fails on it and says why
            traceback.print_exc(file=sys.stderr)
    for name in modules:
        # A workload module that cannot import: the search's workload check reports it before
        # any trial runs (a warm process may start before that check), and so does each trial.
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def _called(call: Call) -> Returned | Raised:
    """Run a ``Call`` for ``RankPool.call``: what it returned, or what it raised (an exception
    that cannot cross the socket as itself crosses as a ``RuntimeError`` naming it)."""
    module, _, name = call.target.partition(":")
    try:
        return Returned(getattr(importlib.import_module(module), name)(*call.args))
    except Exception as exc:  # the caller's to handle: errors cross as values
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        return Raised(exc)


def rank_device(spec_device: str) -> tuple[str, str]:
    """``(torch device, process-group backend)`` of a rank of a trial on ``spec_device``.

    A CUDA rank's worker sees only its own GPU (``CUDA_VISIBLE_DEVICES``), so its device is
    always ``cuda:0``. ``HPSEARCH_CUDA_AS_CPU=1`` runs CUDA trials' ranks on the CPU with gloo
    while keeping everything else of the GPU path (the GPUs Ray reserves, the worker of each
    device): the way to exercise that path on a machine without a GPU.
    """
    if spec_device.startswith("cuda") and os.environ.get("HPSEARCH_CUDA_AS_CPU") != "1":
        return "cuda:0", "nccl"
    return "cpu", "gloo"


def run_rank(task: RankTask, on_report: Callable[[], None] | None = None) -> None:
    """Run one rank of a trial in this process, in a process group of its own. Returns only
    if the rank finished cleanly; on any failure, writes the reason and exits the process.
    ``on_report`` is called after rank 0 appended a report to ``metrics.jsonl``."""
    spec, rank, processes = task.spec, task.rank, task.processes
    # Ray sets OMP_NUM_THREADS for its workers and children inherit it; set torch's own thread
    # count per rank so W ranks share the trial's CPUs instead of oversubscribing them.
    torch.set_num_threads(max(1, spec.cpus_per_worker))
    device, backend = rank_device(spec.device)
    if device.startswith("cuda"):
        torch.cuda.set_device(0)
    run = Path(task.run_dir)
    sink = _announced(JsonlSink(run / "metrics.jsonl"), on_report) if rank == 0 else None
    ctx = RankContext(rank=rank, world_size=processes, device=device, sink=sink, run_dir=run)
    try:
        if processes > 1:
            timeout = timedelta(seconds=task.collective_timeout_s)
            with _environment(dict(task.env)):  # read as the process group is made
                store = _rendezvous(task, timeout)
                dist.init_process_group(backend, store=store, rank=rank, world_size=processes, timeout=timeout)
        (train_fused if spec.fused else train)(spec, ctx)
    except TrialFailed as exc:
        _fail(run, ctx, exc.reason, exc.detail, exc.measured)
    except dist.DistBackendError as exc:
        # A peer rank vanished (killed, crashed) under a collective: a symptom, not the cause.
        _fail(run, ctx, record.REASON_PEER_LOST, f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
    except HPSearchError as exc:
        _fail(run, ctx, record.REASON_WORKLOAD_ERROR, str(exc))
    except Exception as exc:  # the trial driver's boundary: record any workload crash
        if _peer_lost(exc):
            _fail(run, ctx, record.REASON_PEER_LOST, f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
        traceback.print_exc(file=sys.stderr)
        _fail(run, ctx, record.REASON_WORKLOAD_ERROR, workload_error_detail(exc))
    # Every collective of a finished rank completed (the loop ends in a barrier), so its group
    # can be torn down and the process serve the next trial.
    if dist.is_initialized():
        dist.destroy_process_group()


def workload_error_detail(exc: BaseException) -> str:
    """What a trial records of an error its workload raised: the error, where in the user's
    code it was raised, its message and where its traceback went (``ValueError at
    my_workload.py:42: bad labels (traceback in .../ranks.log)``). "ValueError: bad labels"
    alone sent users searching their code for the line.

    Example:
        >>> try:
        ...     int("x")
        ... except ValueError as exc:
        ...     detail = workload_error_detail(exc)
        >>> detail.startswith("ValueError at <doctest "), "invalid literal for int()" in detail
        (True, True)
    """
    frame = _users_frame(exc)
    at = f" at {os.path.basename(frame.filename)}:{frame.lineno}" if frame is not None else ""
    log = os.environ.get(RANKS_LOG_ENV)
    where = f"traceback in {log}" if log else "traceback in what the rank printed"
    return f"{type(exc).__name__}{at}: {exc} ({where})"


def _users_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of ``exc``'s traceback in the user's code: in neither hpsearch,
    torch nor Python's own library, and, where one is, outside installed packages (numpy
    raising for the user's call is the user's line)."""
    # This package (``hpsearch.trials``) by its own path, and the others of hpsearch where loaded:
    # a rank imports no orchestrator code of its own accord (the import contracts).
    loaded = [sys.modules.get(name) for name in ("hpsearch", "hpsearch.search_spaces")]
    ours = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
            *(os.path.dirname(m.__file__ or "") + os.sep for m in (*filter(None, loaded), torch, os)))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not os.path.abspath(f.filename).startswith(ours)]
    own = [f for f in frames if f"{os.sep}site-packages{os.sep}" not in f.filename]
    chosen = own or frames
    return chosen[-1] if chosen else None


#: How long the ranks of a trial that spans nodes wait to meet at rank 0's address before the
#: trial fails, naming it (a firewall, a wrong interface): seconds, from this variable.
RENDEZVOUS_TIMEOUT_ENV = "HPSEARCH_RENDEZVOUS_TIMEOUT_S"
_RENDEZVOUS_TIMEOUT_S = 60.0
_ARRIVED = "hpsearch/arrived"


def _rendezvous(task: RankTask, timeout: timedelta) -> Any:
    """The store the trial's processes meet at: a file on one node; across nodes, a TCP store
    that rank 0 serves at its node's address, which every other rank reaches within a bounded
    time or fails naming the address (never waits for ever on a rank 0 it cannot reach)."""
    if not task.rendezvous.startswith("tcp://"):
        on_node = dist.FileStore(task.rendezvous, task.processes)
        on_node.set_timeout(timeout)
        return on_node
    host, _, port = task.rendezvous.removeprefix("tcp://").rpartition(":")
    meet_s = float(os.environ.get(RENDEZVOUS_TIMEOUT_ENV) or _RENDEZVOUS_TIMEOUT_S)
    try:
        store = dist.TCPStore(host, int(port), task.processes, is_master=task.rank == 0,
                              timeout=timedelta(seconds=meet_s), wait_for_workers=False)
        # Every rank checks in and waits for the others, within ``meet_s`` too: making the
        # process group would wait for a missing rank for the whole collective timeout.
        arrived = store.add(_ARRIVED, 1)
        deadline = time.monotonic() + meet_s
        while arrived < task.processes:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{task.processes - arrived} of its {task.processes} ranks did not come")
            time.sleep(0.01)
            arrived = store.add(_ARRIVED, 0)
    except (RuntimeError, TimeoutError, OSError) as exc:  # torch's DistNetworkError is a RuntimeError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TrialFailed(record.REASON_PEER_LOST,
                          f"rank {task.rank} could not meet the trial's other ranks at rank 0's address "
                          f"{host}:{port} within {meet_s:g} s ({first})") from None
    store.set_timeout(timeout)
    return store


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Any:
    """``env`` set in this process for the block; what was there before is put back."""
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# What gloo says when the rank at the other end of a connection is gone.
_GLOO_PEER_GONE = ("Connection closed by peer", "Connection reset by peer")


def _peer_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is this rank's side of a peer that went away under a collective. Under
    gloo the gradient all-reduce of a step completes in DDP's communication hook, and a peer
    that left (one that ran out of memory and exited, say) reaches the backward pass as a plain
    ``RuntimeError`` naming the callback and gloo's closed connection, not as a
    ``DistBackendError``: recorded as this rank's own ``workload_error``, it hid the peer's
    real reason."""
    return isinstance(exc, RuntimeError) and "gloo" in str(exc) and any(s in str(exc) for s in _GLOO_PEER_GONE)


def _announced(sink: Callable[[dict[str, Any]], None],
               on_report: Callable[[], None] | None) -> Callable[[dict[str, Any]], None]:
    """``sink``, then ``on_report``: the pool learns of a report as soon as it is on disk."""
    if on_report is None:
        return sink

    def write(metrics: dict[str, Any]) -> None:
        sink(metrics)
        on_report()

    return write


@dataclass
class _FreshState:
    """What a task may change in the process and the next task must not see changed: the RNGs,
    the default dtype, autograd's modes, determinism and TF32 flags, the float32 matmul
    precision, torch.compile's caches, the import path and modules. The workload data the
    process keeps (``hpsearch.trials.rank.data_cache``) are not state a result depends on: the model
    is built fresh and seeded every trial, and the data are what the factory would build."""

    torch_rng: Any
    python_rng: Any
    numpy_rng: Any
    dtype: Any
    threads: int
    flags: dict[str, Any]
    sys_path: list[str]
    modules: frozenset[str]

    @classmethod
    def capture(cls) -> _FreshState:
        return cls(torch.get_rng_state(), random.getstate(), numpy.random.get_state(), torch.get_default_dtype(),
                   torch.get_num_threads(), _flags(), list(sys.path), frozenset(sys.modules))

    def restore(self) -> None:
        torch.set_rng_state(self.torch_rng)
        random.setstate(self.python_rng)
        numpy.random.set_state(self.numpy_rng)
        torch.set_default_dtype(self.dtype)
        torch.set_num_threads(self.threads)
        torch.set_grad_enabled(self.flags["grad"])
        torch.autograd.set_detect_anomaly(self.flags["anomaly"])
        torch.use_deterministic_algorithms(self.flags["deterministic"],
                                           warn_only=self.flags["deterministic_warn_only"])
        torch.backends.cudnn.benchmark = self.flags["cudnn_benchmark"]
        torch.backends.cudnn.deterministic = self.flags["cudnn_deterministic"]
        # workload.precision sets both (tf32 on, fp32 off): the next trial starts from torch's own.
        torch.backends.cudnn.allow_tf32 = self.flags["cudnn_allow_tf32"]
        torch.set_float32_matmul_precision(self.flags["matmul_precision"])
        if "torch._dynamo" in sys.modules:
            torch._dynamo.reset()  # compiled graphs and their guards
        if torch.cuda.is_initialized():
            torch.cuda.manual_seed_all(torch.initial_seed())


def _flags() -> dict[str, Any]:
    return dict(grad=torch.is_grad_enabled(), anomaly=torch.is_anomaly_enabled(),
                deterministic=torch.are_deterministic_algorithms_enabled(),
                deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
                cudnn_benchmark=torch.backends.cudnn.benchmark,
                cudnn_deterministic=torch.backends.cudnn.deterministic,
                cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
                matmul_precision=torch.get_float32_matmul_precision())


def _extend_path(paths: tuple[str, ...]) -> list[str]:
    """Put the trial's import path entries this process lacks in front (its workload module may
    live there); returns them."""
    added = [p for p in paths if p not in sys.path]
    sys.path[:0] = added
    return added


def _forget(added: list[str], fresh: _FreshState) -> None:
    """Release the finished rank's memory, and forget the modules it imported from the trial's
    own import path: the next trial may come with another module of the same name."""
    roots = [os.path.abspath(p) + os.sep for p in added if p]
    forgotten = []
    for name in set(sys.modules) - fresh.modules:
        origin = getattr(sys.modules[name], "__file__", None) or ""
        if origin and any(os.path.abspath(origin).startswith(root) for root in roots):
            del sys.modules[name]
            forgotten.append(name)
    if forgotten:
        # Data their functions built go with them: another module of the same name may come.
        data_cache.kept_data().forget(forgotten)
    sys.path[:] = fresh.sys_path
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _fail(run: Path, ctx: RankContext, reason: str, detail: str, measured: dict[str, Any] | None = None) -> NoReturn:
    """Report this rank's failure and leave at once, without tearing anything down.

    A rank that fails (a non-finite loss, most often) may have a gradient all-reduce in flight:
    the last micro-step's backward launched it, and its completion runs a Python callback (the
    timing comm hook). Tearing the process group down then deadlocks: the main thread holds
    the GIL while the gloo group's destructor joins its worker thread, which waits for the GIL
    to finish that callback (seen: a diverged two-rank trial's ranks hung at exit, both in
    futex waits, and the trial with them). The failure is on disk; the peers see the
    connection drop and stop too, and the pool replaces this process.
    """
    _write_failure(run, ctx.rank, reason, detail, measured or {}, ctx.training_started)
    leave(1)


def _write_failure(run: Path, rank: int, reason: str, detail: str, measured: dict[str, Any],
                   training_started: float | None = None) -> None:
    # Written aside and renamed into place: the pool may SIGTERM this rank while it writes, and
    # the launcher must never read half a report.
    final = run / f"failure-rank{rank}.json"
    partial = final.with_suffix(".json.partial")
    # When training began (wall clock, None before it did): the trial's phases keep it, also for a
    # rank that failed before its first report.
    partial.write_text(json.dumps({"reason": reason, "detail": detail, "rank": rank, "measured": measured,
                                   record.TRAINING_STARTED: training_started}))
    os.replace(partial, final)


if __name__ == "__main__":
    main(sys.argv[1:])
