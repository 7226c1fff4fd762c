"""Warm rank processes, reused by the ranks of trials of any shape.

Starting a rank from scratch costs seconds (a Python interpreter importing torch, the training
loop and the workload's module), which a search of short trials would pay on every trial. A
``RankPool`` keeps processes that have paid it once (``hpsearch.trials.rank.process``) and hands them
to each trial's ranks: a trial of W ranks takes W idle workers, each joins a fresh process group
for that trial only, trains, tears the group down and goes back to the pool. One pool per node
serves every trial on it, whatever their world sizes.

Workers are plain OS processes, not Ray tasks: the trial that uses them has already reserved
their CPUs and GPUs, so Ray's accounting stays what the trials reserved. On CUDA each worker
belongs to one device (its ``CUDA_VISIBLE_DEVICES`` is that device's id, the id Ray assigns to
the trial), so a trial's rank ``i`` runs in the worker of its ``i``-th assigned GPU and keeps
that worker's CUDA context warm. On CPU any idle worker serves any rank.

Reuse never changes a result (``hpsearch.trials.rank.process`` resets a worker to its fresh state
before every task), and a worker is reused only after a clean finish: a rank that failed,
diverged, was killed, was cancelled or ran out of time takes its process with it, and the pool
starts a fresh one in its place.

The pool is thread-safe. One thread (the pool's monitor) starts every worker and reads every
message, so a worker's parent thread lives as long as the pool (workers ask Linux to kill them
when it ends).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_any
from pathlib import Path
from typing import Any, TypeVar

from hpsearch import record
from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.node.ranks import Status
from hpsearch.trials.node.spawn import RANK_PROCESS, Zygote, start_process
from hpsearch.trials.rank.messages import (
    RANKS_LOG_ENV,
    Began,
    Call,
    Done,
    Raised,
    RankTask,
    Ready,
    Reported,
    Returned,
    ToPool,
)
from hpsearch.trials.spec import TrialSpec

__all__ = ["RankPool", "local_pool"]

# A worker that cannot even start (a broken environment) fails the trial after this many tries
# in a row, instead of being restarted forever.
_MAX_START_FAILURES = 3
_TICK_S = 0.05
# Workers are forked from a warm template (hpsearch.trials.rank.zygote) where the OS can fork.
_FORK = hasattr(os, "fork") and sys.platform.startswith("linux")

_T = TypeVar("_T")


@dataclass
class _Worker:
    conn: Connection
    gpu: str | None
    proc: subprocess.Popen[bytes] | None = None  # started on its own (no zygote)
    request: int = 0  # the zygote's fork request, for a forked worker
    pid: int | None = None  # a forked worker's, once the zygote said it
    printed: int | None = None  # the pipe a forked worker prints into (its reading end)
    partial: bytes = b""  # the start of a line it has not finished
    state: str = "starting"  # starting -> idle <-> busy; any -> gone
    ticket: int | None = None
    rank: int = -1
    tasks: int = 0
    call: _Call | None = None  # the function it runs for ``RankPool.call``, if any


@dataclass
class _Call:
    """A function a worker runs for ``RankPool.call``, and how it ended once it did."""

    outcome: Returned | Raised | None = None


@dataclass
class _Ticket:
    workers: list[_Worker]
    run: Path
    rendezvous: str
    ranks: list[int]  # the trial's ranks this ticket runs, in order (all of them on one node)
    codes: list[int | None] = field(default_factory=list)
    offset: int = 0  # of metrics.jsonl read so far
    reported: int = 0  # reports rank 0 said it wrote
    taken: int = 0  # of those, how many a ``wait`` has returned
    began: list[float | None] = field(default_factory=list)  # when each rank's worker began it
    report_at: list[float] = field(default_factory=list)  # when rank 0 said it wrote each report
    read: int = 0  # reports returned so far
    handed: float | None = None  # when its ranks were sent to their workers

    def status(self, codes: list[int] | None = None, failures: list[dict[str, Any]] | None = None) -> Status:
        """What rank 0 appended since the last call (the complete JSON lines of
        ``metrics.jsonl``), with when each came, and whether every rank has begun."""
        reports: list[dict[str, Any]] = []
        path = self.run / "metrics.jsonl"
        if 0 in self.ranks and path.exists():  # rank 0 writes it; another node's part reads none
            with path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
            complete = data[: data.rfind(b"\n") + 1]
            self.offset += len(complete)
            reports = [json.loads(line) for line in complete.splitlines() if line.strip()]
        # A line read before its message came (the rank writes, then says so) is stamped now.
        now = time.time()
        times = [self.report_at[i] if i < len(self.report_at) else now
                 for i in range(self.read, self.read + len(reports))]
        self.read += len(reports)
        began = [b for b in self.began if b is not None]
        ready = max(began) if began and len(began) == len(self.began) else None
        return Status(reports, codes, failures or [], report_times=times, handed_at=self.handed, ready_at=ready)


class RankPool:
    """Warm rank processes on this node.

    Args:
        preload: Modules every worker imports before it is idle (the workload's module: its
            data and model code), beside torch and the training loop.
        prestart: Workers to start at once, per device: ``{None: n}`` for CPU ranks,
            ``{"0": 1, "1": 1}`` for the workers of GPUs 0 and 1.
        reuse: ``False`` retires a worker after one rank: every rank then runs in a fresh
            process, through the same code (the reference a warm pool is compared with).
        sys_path: The import path the workers start with (default: this process's), so the
            modules in ``preload`` are found.
        output: A file the workers' stdout and stderr are appended to (default: this
            process's own).
        env: Variables the workers get beside this process's environment (the search's CUDA
            MPS daemon's, ``hpsearch.trials.node.mps``).
    """

    def __init__(self, preload: Sequence[str] = (), *, prestart: dict[str | None, int] | None = None,
                 reuse: bool = True, sys_path: Sequence[str] | None = None,
                 output: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> None:
        self.preload = list(preload)
        self._env = dict(env or {})
        self.reuse = reuse
        self.output = None if output is None else Path(output)
        self._sys_path = list(sys.path if sys_path is None else sys_path)
        self._workers: list[_Worker] = []
        self._tickets: dict[int, _Ticket] = {}
        self._ids = itertools.count(1)
        self._requests = itertools.count(1)  # the fork requests of every zygote the pool starts
        # How many live workers each device should have: the most it ever needed at once.
        self._wanted: dict[str | None, int] = dict(prestart or {})
        self._start_failures = 0
        self._broken: str | None = None
        # The template the workers are forked from (hpsearch.trials.rank.zygote), started with the
        # first worker; ``None`` where fork is not available (workers are then started anew).
        self._zygote: Zygote | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._monitor = threading.Thread(target=self._monitor_loop, name="hpsearch-rank-pool", daemon=True)
        self._monitor.start()

    # -- the trial's side -------------------------------------------------------------------

    def start(self, spec: TrialSpec, run_dir: str, *, gpu_ids: Sequence[str] | None = None,
              collective_timeout_s: float = 300.0, sys_path: Sequence[str] | None = None,
              wait_s: float = 600.0, ranks: Sequence[int] | None = None, rendezvous: str | None = None,
              env: Mapping[str, str] | None = None) -> int:
        """Hand idle workers one rank each of this trial (all ``spec.processes`` of them, or
        ``ranks``); returns its ticket.

        Waits for workers to become idle or to start (the pool grows to what trials need).

        Args:
            gpu_ids: On CUDA, the GPUs of the ranks run here as Ray assigned them, in rank order
                (the ``k``-th rank run here gets the ``k``-th ``len(gpu_ids) / len(ranks)``).
            sys_path: The trial's import path; the ranks see it, and forget what they imported
                from it when they finish.
            ranks: This node's ranks of a trial that spans nodes (``hpsearch.trials.node.span``);
                the others run in other nodes' pools. Default: every rank, here.
            rendezvous: Where the trial's ranks meet (``tcp://HOST:PORT``, rank 0's node
                address); default: a file of this node's, for a trial all of whose ranks run here.
            env: Variables the ranks run with (``RankTask.env``).

        Raises:
            TrialFailed: ``rank_exited`` when workers cannot be started at all.
        """
        mine = list(range(spec.processes) if ranks is None else ranks)
        n = len(mine)
        if spec.device.startswith("cuda"):
            ids = [str(g) for g in gpu_ids or []]
            if not ids or len(ids) % n:
                raise TrialFailed(record.REASON_RANK_EXITED, f"a CUDA trial of {n} processes needs GPUs for each, "
                                                 f"got {ids}")
            per = len(ids) // n  # resources.gpus_per_worker
            slots: list[str | None] = [",".join(ids[r * per:(r + 1) * per]) for r in range(n)]
        else:
            slots = [None] * n
        run = Path(run_dir)
        run.mkdir(parents=True, exist_ok=True)
        if 0 in mine:
            (run / "metrics.jsonl").unlink(missing_ok=True)
        for r in mine:  # another node's ranks may share the folder (a shared volume)
            for stale in run.glob(f"failure-rank{r}.json*"):
                stale.unlink()
        deadline = time.monotonic() + wait_s
        with self._cond:
            self._raise_if_closed()
            for slot in set(slots):
                busy = sum(w.gpu == slot and w.state == "busy" for w in self._workers)
                self._wanted[slot] = max(self._wanted.get(slot, 0), busy + slots.count(slot))
            self._cond.notify_all()
            chosen = self._wait_for(lambda: self._pick(slots), deadline, wait_s)
            ticket = next(self._ids)
            if rendezvous is None:
                rendezvous = os.path.join(tempfile.gettempdir(), f"hpsearch-rendezvous-{uuid.uuid4().hex}")
            self._tickets[ticket] = _Ticket(chosen, run, rendezvous, mine, [None] * n, began=[None] * n)
            path = tuple(sys.path if sys_path is None else sys_path)
            told = tuple(sorted((env or {}).items()))
            self._tickets[ticket].handed = time.time()
            for rank, worker in zip(mine, chosen):
                worker.state, worker.ticket, worker.rank = "busy", ticket, rank
                task = RankTask(spec, str(run_dir), rank, spec.processes, rendezvous, collective_timeout_s, path, told)
                # A worker that died while idle raises here; the monitor sees it go and fails the rank.
                with contextlib.suppress(OSError):
                    worker.conn.send(task)
            return ticket

    def wait(self, ticket: int, timeout: float) -> Status:
        """Wait up to ``timeout`` seconds for rank 0 to report or for the ticket's ranks to
        end, whichever comes first; return what rank 0 reported since the last call, and, once
        every rank has ended, their exit codes and failure reports (the ticket is then
        closed). A failed rank's peers are stopped (SIGTERM) so the trial ends promptly.

        A trial's process looks at its ranks with this: it returns the moment there is
        something to pass on, so the caller neither polls an idle trial nor sits on a fresh
        report (rank 0 says when it appended one)."""
        return self._wait(ticket, timeout, until_ended=False)

    def _wait(self, ticket: int, timeout: float, *, until_ended: bool) -> Status:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                t = self._tickets[ticket]
                if all(c is not None for c in t.codes):
                    del self._tickets[ticket]
                    if not t.rendezvous.startswith("tcp://"):
                        _remove(t.rendezvous)
                    failures = [json.loads(p.read_text()) for r in t.ranks
                                if (p := t.run / f"failure-rank{r}.json").exists()]
                    return t.status([int(c) for c in t.codes if c is not None], failures)
                left = deadline - time.monotonic()
                if left <= 0:
                    return t.status()
                if t.reported > t.taken and not until_ended:
                    t.taken = t.reported
                    return t.status()
                self._cond.wait(left)

    def cancel(self, ticket: int) -> None:
        """Stop the ticket's ranks that still run (SIGKILL); their processes are replaced.
        Idempotent; returns once every rank has ended."""
        with self._cond:
            t = self._tickets.get(ticket)
            if t is None:
                return
            for worker, code in zip(t.workers, t.codes):
                if code is None:
                    self._signal(worker, signal.SIGKILL)
        self._wait(ticket, 60.0, until_ended=True)
        with self._cond:
            self._tickets.pop(ticket, None)

    def call(self, target: str, *args: Any, wait_s: float = 600.0) -> Any:
        """Run ``target`` (``"module:function"``) with ``args`` in an idle worker, where torch and
        the preloaded modules are imported already, and return what it returns; raise what it
        raises. The search's process checks a workload this way without importing torch itself.
        The worker is reset before and after, as around a rank.

        Raises:
            TrialFailed: ``rank_exited`` when no worker could be started, or the worker died.
        """
        deadline = time.monotonic() + wait_s
        with self._cond:
            self._raise_if_closed()
            if not any(w.state in ("starting", "idle") for w in self._workers):
                slot = next(iter(self._wanted), None)
                self._wanted[slot] = max(self._wanted.get(slot, 0), 1 + sum(w.gpu == slot for w in self._workers))
                self._cond.notify_all()
            worker = self._wait_for(lambda: next((w for w in self._workers if w.state == "idle"), None),
                                    deadline, wait_s)
            pending = _Call()
            worker.state, worker.call = "busy", pending
            with contextlib.suppress(OSError):  # a worker that died meanwhile: the monitor sees it go
                worker.conn.send(Call(target, args, tuple(sys.path)))
            while pending.outcome is None:
                self._raise_if_closed()
                self._cond.wait(1.0)
        if isinstance(pending.outcome, Raised):
            raise pending.outcome.error
        return pending.outcome.value

    def wait_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until the workers started ahead are idle (warm and
        waiting for a rank); whether they are. Returns at once when they cannot start at all
        (a trial then fails and says why)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while any(w.state == "starting" for w in self._workers) or self._spawns_pending():
                left = deadline - time.monotonic()
                if left <= 0 or self._broken is not None or self._closed:
                    return False
                self._cond.wait(min(left, 1.0))
            return True

    def _spawns_pending(self) -> bool:
        """Whether some device still has fewer live workers than it wants (the monitor starts
        them at its next turn)."""
        return any(sum(w.gpu == slot and w.state in ("starting", "idle", "busy") for w in self._workers) < wanted
                   for slot, wanted in self._wanted.items())

    def workers(self) -> list[dict[str, Any]]:
        """Every live worker: ``pid``, ``gpu`` (its ``CUDA_VISIBLE_DEVICES``, ``None`` on CPU),
        ``state`` (starting, idle, busy) and ``tasks`` (ranks it finished)."""
        with self._cond:
            return [dict(pid=self._pid(w), gpu=w.gpu, state=w.state, tasks=w.tasks) for w in self._workers
                    if w.state in ("starting", "idle", "busy")]

    def idle_pids(self) -> set[int]:
        """The processes that run no rank: idle and starting workers, and the zygote they are
        forked from (``hpsearch.trials.rank.zygote``)."""
        with self._cond:
            pids = {pid for w in self._workers if w.state in ("idle", "starting") and (pid := self._pid(w)) is not None}
            if self._zygote is not None and self._zygote.alive:
                pids.add(self._zygote.proc.pid)
            return pids

    def close(self) -> None:
        """Stop every worker and the monitor."""
        with self._cond:
            self._closed = True
            for worker in self._workers:
                self._signal(worker, signal.SIGKILL)
            self._cond.notify_all()
        self._monitor.join(timeout=10)

    # -- the monitor ------------------------------------------------------------------------

    def _wait_for(self, pick: Callable[[], _T | None], deadline: float, wait_s: float) -> _T:
        """With the pool's lock held: wait until ``pick`` finds the idle workers it wants.

        Raises:
            TrialFailed: ``rank_exited`` when workers cannot be started at all, the pool was
                closed, or none became idle by ``deadline``.
        """
        while (found := pick()) is None:
            self._raise_if_closed()
            if self._broken is not None:
                raise TrialFailed(record.REASON_RANK_EXITED, self._broken)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TrialFailed(record.REASON_RANK_EXITED, f"no rank process became available within {wait_s:g} s")
            self._cond.wait(min(left, 1.0))
        return found

    def _pick(self, slots: list[str | None]) -> list[_Worker] | None:
        chosen: list[_Worker] = []
        for slot in slots:
            worker = next((w for w in self._workers
                           if w.gpu == slot and w.state == "idle" and w not in chosen), None)
            if worker is None:
                return None
            chosen.append(worker)
        return chosen

    def _monitor_loop(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    if self._zygote is not None:
                        self._zygote.kill()  # and every worker it forked with it
                    for worker in self._workers:
                        self._reap(worker, patience=0.0)
                    return
                self._spawn_missing()
                by_conn = {w.conn: w for w in self._workers}
                by_pipe = {w.printed: w for w in self._workers if w.printed is not None}
                zygote = self._zygote.conn if self._zygote is not None and self._zygote.alive else None
            waiting: list[Any] = [*by_conn, *by_pipe, *([zygote] if zygote is not None else [])]
            if waiting:
                ready = wait_any(waiting, timeout=_TICK_S)
            else:
                time.sleep(_TICK_S)
                ready = []
            with self._cond:
                # What the workers printed first: it belongs to the trial they ran until now.
                for conn in sorted(ready, key=lambda c: not isinstance(c, int)):
                    if conn is zygote:
                        self._zygote_said()
                    elif isinstance(conn, int):
                        self._printed(by_pipe[conn])
                    else:
                        self._receive(by_conn[conn])  # type: ignore[index]
                if ready:  # a message changed some worker's or ticket's state
                    self._cond.notify_all()

    def _receive(self, worker: _Worker) -> None:
        try:
            message: ToPool = worker.conn.recv()
        except (EOFError, OSError):
            self._gone(worker)
            return
        t = self._tickets.get(worker.ticket) if worker.ticket is not None else None
        if isinstance(message, (Returned, Raised)) and worker.call is not None:
            worker.call.outcome = message
            worker.state, worker.call = "idle", None
        elif isinstance(message, Reported):
            if t is not None:
                t.reported += 1
                t.report_at.append(message.at)
        elif isinstance(message, Began):
            if t is not None:
                t.began[t.ranks.index(worker.rank)] = message.at
        elif isinstance(message, Ready):
            worker.state = "idle"
            self._start_failures = 0
        elif isinstance(message, Done):
            self._printed(worker, drain=True)  # under the trial that printed it
            worker.tasks += 1
            self._rank_ended(worker, 0)
            if self.reuse:
                worker.state, worker.ticket, worker.rank = "idle", None, -1
            else:
                worker.state = "retiring"
                self._signal(worker, signal.SIGKILL)

    def _printed(self, worker: _Worker, *, drain: bool = False, flush: bool = False) -> None:
        """Pass on what a forked worker printed, each line marked with the trial and rank it was
        running (``[trial-00012 rank 1] ...``), so the ranks of concurrent trials can be told
        apart in one log. ``drain``: all it printed so far (its rank ends: the rest is not that
        trial's); ``flush``: the worker is gone, take all it left, its unfinished last line too."""
        if worker.printed is None:
            return
        chunks, ended = [], False
        while True:
            try:
                data = os.read(worker.printed, 1 << 16)
            except BlockingIOError:  # nothing more for now
                break
            except OSError:
                ended = True
                break
            if not data:  # the worker closed its end: it is gone
                ended = True
                break
            chunks.append(data)
            if not (drain or flush):
                break
        lines = (worker.partial + b"".join(chunks)).split(b"\n")
        worker.partial = lines.pop()
        if (ended or flush) and worker.partial:
            lines.append(worker.partial)
            worker.partial = b""
        if ended or flush:
            with contextlib.suppress(OSError):
                os.close(worker.printed)
            worker.printed = None
        if lines:
            t = self._tickets.get(worker.ticket) if worker.ticket is not None else None
            label = f"[{t.run.name} rank {worker.rank}] " if t is not None else f"[rank process {self._pid(worker)}] "
            self._log(b"".join(label.encode() + line + b"\n" for line in lines))

    def _log(self, text: bytes) -> None:
        """Append to the pool's output (``output``, else this process's stderr)."""
        if self.output is None:
            sys.stderr.buffer.write(text)
            sys.stderr.flush()
            return
        self.output.parent.mkdir(parents=True, exist_ok=True)
        with self.output.open("ab") as log:
            log.write(text)

    def _zygote_said(self) -> None:
        """A message from the zygote: a forked worker's pid, or a worker's exit code."""
        zygote = self._zygote
        if zygote is None:
            return
        zygote.receive()
        for worker in self._workers:
            if worker.proc is None and worker.pid is None:
                worker.pid = zygote.pids.pop(worker.request, None)

    def _gone(self, worker: _Worker) -> None:
        self._printed(worker, flush=True)  # its last words, under the trial it ran
        code = self._reap(worker)
        if worker.state == "starting":
            self._start_failures += 1
            if self._start_failures >= _MAX_START_FAILURES:
                self._broken = (f"rank processes exit while starting (exit code {code}, {self._start_failures} "
                                "times in a row): see the trial's log for the import error")
        if worker.call is not None:
            worker.call.outcome = Raised(TrialFailed(record.REASON_RANK_EXITED, f"the rank process exited with code {code}"))
        elif worker.state == "busy":
            self._rank_ended(worker, code)
        worker.state = "gone"
        self._workers.remove(worker)

    def _rank_ended(self, worker: _Worker, code: int) -> None:
        t = self._tickets.get(worker.ticket) if worker.ticket is not None else None
        if t is None:
            return
        t.codes[t.ranks.index(worker.rank)] = code
        if code != 0:
            # As PyTorch's own launcher does: one rank gone, the others are stopped rather than
            # left waiting in a collective for its timeout.
            for peer, peer_code in zip(t.workers, t.codes):
                if peer_code is None:
                    self._signal(peer, signal.SIGTERM)

    def _spawn_missing(self) -> None:
        if self._broken is not None:
            return
        for slot, wanted in self._wanted.items():
            alive = sum(w.gpu == slot and w.state in ("starting", "idle", "busy") for w in self._workers)
            for _ in range(wanted - alive):
                self._workers.append(self._spawn(slot))

    def _spawn(self, gpu: str | None) -> _Worker:
        """A new worker (of ``gpu``): forked from the pool's zygote, started with the first one,
        or, where fork is not available, a new interpreter that imports everything itself."""
        env = dict(os.environ)
        env.update(self._env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in self._sys_path if p)
        if self.output is not None:
            env[RANKS_LOG_ENV] = str(self.output.resolve())
        if _FORK:
            if self._zygote is None or not self._zygote.alive:
                if self._zygote is not None:
                    self._zygote.kill()
                self._zygote = Zygote(self.preload, env, self.output, self._requests)
            request, conn, printed = self._zygote.fork(gpu)
            # A warm zygote answers within milliseconds: know the pid at once, as for a process
            # started anew; one still importing answers later (``_zygote_said``).
            pid = self._zygote.pid(request, 1.0) if self._zygote.ready else None
            return _Worker(conn, gpu, request=request, pid=pid, printed=printed)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        proc, conn = start_process(RANK_PROCESS, self.preload, env, "HPSEARCH_WORKER_FD", self.output)
        return _Worker(conn, gpu, proc=proc)

    def _pid(self, worker: _Worker) -> int | None:
        if worker.proc is not None:
            return worker.proc.pid
        if worker.pid is None and self._zygote is not None:
            worker.pid = self._zygote.pids.pop(worker.request, None)
        return worker.pid

    def _signal(self, worker: _Worker, sig: int) -> None:
        pid = self._pid(worker)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, OSError):
                os.kill(pid, sig)

    def _reap(self, worker: _Worker, patience: float = 5.0) -> int:
        """Wait for a worker whose connection closed; kill it if it lingers. Its exit code, as
        ``subprocess`` gives it (-9 for one whose end nobody saw: its zygote died with it)."""
        worker.conn.close()
        if worker.proc is not None:
            try:
                return int(worker.proc.wait(timeout=max(patience, 0.01)))
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                return int(worker.proc.wait())
        zygote = self._zygote
        if zygote is None:
            return -signal.SIGKILL
        code = zygote.exit_code(self._pid(worker), worker.request, patience)
        if code is None and patience > 0:
            self._signal(worker, signal.SIGKILL)
            code = zygote.exit_code(self._pid(worker), worker.request, patience)
        return -signal.SIGKILL if code is None else code

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise TrialFailed(record.REASON_RANK_EXITED, "the rank pool was closed")


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


_local: RankPool | None = None
_local_lock = threading.Lock()


def local_pool(preload: Sequence[str] = ()) -> RankPool:
    """This process's own pool (created on first use, with ``preload``): what ``run_trial``
    uses when no pool is given, e.g. in a script or a test calling it directly."""
    global _local
    with _local_lock:
        if _local is None or _local._closed:
            _local = RankPool(preload)
        return _local

