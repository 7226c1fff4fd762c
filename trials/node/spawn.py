"""Starting a node's rank processes: ``start_process`` (a new interpreter) and ``Zygote``, the
pool's handle on the template they are forked from (``hpsearch.trials.rank.zygote``).

Neither imports torch: they start the rank's modules by name (``python -m``), so the process
that owns a pool (the search's, or a pool actor) stays light.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from multiprocessing.reduction import send_handle
from pathlib import Path

from hpsearch.trials.rank.messages import Exited, Fork, Forked, Ready

__all__ = ["RANK_PROCESS", "ZYGOTE", "Zygote", "start_process"]

#: The modules a rank process and the zygote run as (``python -m``).
RANK_PROCESS = "hpsearch.trials.rank.process"
ZYGOTE = "hpsearch.trials.rank.zygote"

# How long the zygote's handle waits between looks at its messages.
_TICK_S = 0.05


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
        requests: Where its request numbers come from: the pool's one counter, shared by every
            zygote the pool starts (default: a counter of its own, from 1).
    """

    def __init__(self, preload: list[str], env: dict[str, str], output: Path | None,
                 requests: Iterator[int] | None = None) -> None:
        env = {"OPENBLAS_NUM_THREADS": "1", **env}
        self.proc, self.conn = start_process(ZYGOTE, preload, env, "HPSEARCH_ZYGOTE_FD", output)
        self.alive = True
        #: Whether its imports are done (it then forks within milliseconds).
        self.ready = False
        #: The pid of each forked request, once the zygote said it.
        self.pids: dict[int, int] = {}
        #: The exit code of each child that ended (``subprocess``'s convention).
        self.exited: dict[int, int] = {}
        # Numbers unique to the pool, not to this zygote: a pool whose zygote died starts another,
        # and a worker of the dead one still waiting for its pid (by its request number) would be
        # given the pid of the new zygote's child of the same number.
        self._requests = requests if requests is not None else itertools.count(1)

    def fork(self, gpu: str | None) -> tuple[int, Connection, int]:
        """Ask for a rank process (of ``gpu``); returns the request's number, the pool's end of
        the new process's socket, and the reading end of the pipe it prints into (non-blocking).
        The process's pid comes later (``pids``)."""
        request = next(self._requests)
        parent, child = socket.socketpair()
        output, printed = os.pipe()
        os.set_blocking(output, False)
        try:
            self.conn.send(Fork(request, gpu))
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
                if isinstance(message, Ready):
                    self.ready = True
                elif isinstance(message, Forked):
                    self.pids[message.request] = message.pid
                elif isinstance(message, Exited):
                    self.exited[message.pid] = message.code
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
        """Stop the zygote; its children follow it (``hpsearch.trials.rank.lifetime.die_with_parent``)."""
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self.conn.close()
        self.alive = False
