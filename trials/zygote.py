"""The template of a node's rank processes: ``python -m hpsearch.trials.zygote [MODULE ...]``.

A rank process (``hpsearch.trials.worker``) must import torch, the training loop and the
workload's module before it serves a trial: 1-3 CPU-seconds each. A pool that grew to 16
processes on a loaded machine paid that 16 times over, while trials waited for their ranks
(measured: 32 sleeping trials on a Ray head told 16 CPUs, 2 cores: a median 2.1 s and up to
14 s between a trial's devices being reserved and its ranks being handed to workers). The
zygote pays it once: it imports everything, then forks a new rank process on each request, in
milliseconds, already warm, as Python's ``forkserver`` start method does.

Forking is safe here because the zygote runs nothing: it starts no thread of its own (OpenBLAS's
thread server is kept off with ``OPENBLAS_NUM_THREADS=1``), initialises no CUDA (each child sets
its ``CUDA_VISIBLE_DEVICES`` before CUDA is touched, so one template serves every GPU) and
holds no lock across the fork.

The protocol, on the socket in ``HPSEARCH_ZYGOTE_FD`` (a ``multiprocessing`` connection):

- the zygote says ``("ready", pid)`` once its imports are done;
- the pool sends ``("fork", request, gpu)`` followed by the socket of the new rank process and
  the writing end of a pipe for what it prints (``multiprocessing.reduction.send_handle``); the
  zygote forks, and the child runs ``hpsearch.trials.worker.main`` on that socket, its stdout and
  stderr on that pipe; the zygote answers ``("forked", request, pid)``;
- the zygote reaps its children and says ``("exited", pid, code)`` for each (``code`` as
  ``subprocess`` gives it: negative for a signal).

The zygote asks Linux to kill it when the pool's thread that started it ends, and each child
asks the same of the zygote, so a killed search leaves no process behind.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle, send_handle
from pathlib import Path

__all__ = ["Zygote", "main", "start_process"]

# How long the zygote waits for a request before it looks for children that exited.
_TICK_S = 0.05


def main(argv: list[str]) -> None:
    from hpsearch.trials import worker

    conn = Connection(int(os.environ.pop("HPSEARCH_ZYGOTE_FD")))
    worker.die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker.import_modules(argv)
    gc.freeze()
    conn.send(("ready", os.getpid()))
    while True:
        try:
            if conn.poll(_TICK_S):
                message = conn.recv()
                if message[0] == "fork":
                    _, request, gpu = message
                    fd, out = recv_handle(conn), recv_handle(conn)
                    pid = os.fork()
                    if pid == 0:
                        _child(conn, fd, out, gpu, argv)  # never returns
                    os.close(fd)
                    os.close(out)
                    conn.send(("forked", request, pid))
            _reap(conn)
        except (EOFError, OSError):
            # The pool is gone: so are we (and, with us, every child: see ``worker.die_with_parent``).
            os._exit(0)


def _child(conn: Connection, fd: int, out: int, gpu: str | None, argv: list[str]) -> None:
    """In the forked child: forget the zygote's socket, write into the pool's pipe (``out``, for
    stdout and stderr alike: the pool marks each line with the trial and rank), and become a rank
    process."""
    from hpsearch.trials import worker

    try:
        conn.close()
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        if gpu is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu
        os.environ["HPSEARCH_WORKER_FD"] = str(fd)
        worker.main(argv)
    finally:
        os._exit(1)  # worker.main leaves with os._exit; anything else is a failure to start


def _reap(conn: Connection) -> None:
    """Tell the pool of every child that exited since the last look."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no children at all
            return
        if pid == 0:
            return
        conn.send(("exited", pid, os.waitstatus_to_exitcode(status)))


if __name__ == "__main__":
    main(sys.argv[1:])


def start_process(module: str, argv: list[str], env: dict[str, str], fd_variable: str,
                  output: Path | None) -> tuple[subprocess.Popen[bytes], Connection]:
    """``python -m module *argv``, with one end of a new socket pair (its descriptor in the
    variable ``fd_variable``) and its stdout and stderr appended to ``output`` (``None``: this
    process's); returns the process and this side's connection."""
    parent, child = socket.socketpair()
    out = None
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        out = output.open("ab")
    try:
        proc = subprocess.Popen([sys.executable, "-m", module, *argv], pass_fds=(child.fileno(),),
                                env={**env, fd_variable: str(child.fileno())}, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=out)
    finally:
        child.close()
        if out is not None:
            out.close()
    return proc, Connection(parent.detach())


class Zygote:
    """The pool's side of a zygote: starts it, asks it for rank processes, hears of their ends.

    Not thread-safe: the pool's monitor thread is its one user (it must also be the thread that
    starts it, for ``die_with_parent``).

    Args:
        preload: The modules a rank process imports beside torch and the loop.
        env: The zygote's environment (its children's, but for ``CUDA_VISIBLE_DEVICES``).
        output: Where the zygote and its children write (``None``: this process's stdout/stderr).
    """

    def __init__(self, preload: list[str], env: dict[str, str], output: Path | None) -> None:
        env = {"OPENBLAS_NUM_THREADS": "1", **env}
        self.proc, self.conn = start_process("hpsearch.trials.zygote", preload, env, "HPSEARCH_ZYGOTE_FD", output)
        self.alive = True
        #: Whether its imports are done (it then forks within milliseconds).
        self.ready = False
        #: The pid of each forked request, once the zygote said it.
        self.pids: dict[int, int] = {}
        #: The exit code of each child that ended (``subprocess``'s convention).
        self.exited: dict[int, int] = {}
        self._requests = itertools.count(1)

    def fork(self, gpu: str | None) -> tuple[int, Connection, int]:
        """Ask for a rank process (of ``gpu``); returns the request's number, the pool's end of
        the new process's socket, and the reading end of the pipe it prints into (non-blocking).
        The process's pid comes later (``pids``)."""
        request = next(self._requests)
        parent, child = socket.socketpair()
        output, printed = os.pipe()
        os.set_blocking(output, False)
        try:
            self.conn.send(("fork", request, gpu))
            send_handle(self.conn, child.fileno(), self.proc.pid)
            send_handle(self.conn, printed, self.proc.pid)
        except OSError:
            self.alive = False  # it died: the pool sees the new process's socket close
        finally:
            child.close()
            os.close(printed)
        return request, Connection(parent.detach()), output

    def receive(self) -> None:
        """Take the zygote's waiting messages (``pids``, ``exited``), without blocking; marks it
        dead at its end."""
        try:
            while self.alive and self.conn.poll(0):
                message = self.conn.recv()
                if message[0] == "ready":
                    self.ready = True
                elif message[0] == "forked":
                    self.pids[message[1]] = message[2]
                elif message[0] == "exited":
                    self.exited[message[1]] = message[2]
        except (EOFError, OSError):
            self.alive = False

    def pid(self, request: int, timeout: float) -> int | None:
        """The pid of a forked request, waiting up to ``timeout`` seconds for the zygote to say it."""
        deadline = time.monotonic() + timeout
        while request not in self.pids and self.alive:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                if self.conn.poll(min(left, _TICK_S)):
                    self.receive()
            except (EOFError, OSError):
                self.alive = False
        return self.pids.pop(request, None)

    def exit_code(self, pid: int | None, request: int, timeout: float) -> int | None:
        """The exit code of a child (by pid, or by its request while its pid is unknown), waiting
        up to ``timeout`` seconds for the zygote to say it; ``None`` if it did not."""
        deadline = time.monotonic() + timeout
        while True:
            pid = pid if pid is not None else self.pids.get(request)
            if pid is not None and pid in self.exited:
                return self.exited.pop(pid)
            left = deadline - time.monotonic()
            if not self.alive or left <= 0:
                return None
            try:
                if self.conn.poll(min(left, _TICK_S)):
                    self.receive()
            except (EOFError, OSError):
                self.alive = False

    def kill(self) -> None:
        """Stop the zygote; its children follow it (``die_with_parent``)."""
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self.conn.close()
        self.alive = False
