"""The template of a node's rank processes: ``python -m hpsearch.trials.rank.zygote [MODULE ...]``.

A rank process (``hpsearch.trials.rank.process``) must import torch, the training loop and the
workload's module before it serves a trial: 1-3 CPU-seconds each. The zygote pays it once: it
imports everything, then forks a new rank process on each request, in milliseconds, already
warm, as Python's ``forkserver`` start method does (docs/design.md, "Warm rank processes").

Forking is safe here because the zygote runs nothing: it starts no thread of its own (OpenBLAS's
thread server is kept off with ``OPENBLAS_NUM_THREADS=1``), initialises no CUDA (each child sets
its ``CUDA_VISIBLE_DEVICES`` before CUDA is touched, so one template serves every GPU) and
holds no lock across the fork.

The protocol, on the socket in ``HPSEARCH_ZYGOTE_FD`` (``hpsearch.trials.rank.messages``): the
zygote says ``Ready`` once its imports are done; the pool sends ``Fork`` followed by the socket
of the new rank process and the writing end of a pipe for what it prints
(``multiprocessing.reduction.send_handle``); the zygote forks, the child becomes a rank process
on that socket with its stdout and stderr on that pipe, and the zygote answers ``Forked``; it
reaps its children and says ``Exited`` for each. The pool's side is
``hpsearch.trials.node.spawn.Zygote``.

The zygote asks Linux to kill it when the pool's thread that started it ends, and each child
asks the same of the zygote, so a killed search leaves no process behind.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle

from hpsearch.trials.rank import process
from hpsearch.trials.rank.lifetime import die_with_parent
from hpsearch.trials.rank.messages import Exited, Fork, Forked, Ready

__all__ = ["main"]

# How long the zygote waits for a request before it looks for children that exited.
_TICK_S = 0.05


def main(argv: list[str]) -> None:
    conn = Connection(int(os.environ.pop("HPSEARCH_ZYGOTE_FD")))
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    process.import_modules(argv)
    gc.freeze()
    conn.send(Ready(os.getpid()))
    while True:
        try:
            if conn.poll(_TICK_S):
                message = conn.recv()
                if isinstance(message, Fork):
                    fd, out = recv_handle(conn), recv_handle(conn)
                    pid = os.fork()
                    if pid == 0:
                        _child(conn, fd, out, message.gpu, argv)  # never returns
                    os.close(fd)
                    os.close(out)
                    conn.send(Forked(message.request, pid))
            _reap(conn)
        except (EOFError, OSError):
            # The pool is gone: so are we (and, with us, every child: see ``die_with_parent``).
            os._exit(0)


def _child(conn: Connection, fd: int, out: int, gpu: str | None, argv: list[str]) -> None:
    """In the forked child: forget the zygote's socket, write into the pool's pipe (``out``, for
    stdout and stderr alike: the pool marks each line with the trial and rank), and become a rank
    process."""
    try:
        conn.close()
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        if gpu is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu
        os.environ["HPSEARCH_WORKER_FD"] = str(fd)
        process.main(argv)
    finally:
        os._exit(1)  # process.main leaves with os._exit; anything else is a failure to start


def _reap(conn: Connection) -> None:
    """Tell the pool of every child that exited since the last look."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no children at all
            return
        if pid == 0:
            return
        conn.send(Exited(pid, os.waitstatus_to_exitcode(status)))


if __name__ == "__main__":
    main(sys.argv[1:])
