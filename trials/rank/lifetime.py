"""How the processes of a rank end: never after their parent, and without the interpreter's
teardown.

A rank process, the zygote it was forked from and the loader workers of its ``DataLoader`` ask
Linux to kill them when their parent ends (``die_with_parent``), so a killed search never leaves
processes behind. A rank leaves with ``leave``: its results are on disk, and tearing a process
group down can deadlock (``hpsearch.trials.rank.process``) or abort (a thread of torch's still
running at exit; ``hpsearch.trials.run``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import NoReturn

__all__ = ["die_with_parent", "leave"]

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask Linux to kill this process when the thread that started it ends (the pool's thread,
    the zygote that forked it, or the rank whose loader it serves; even by SIGKILL of its
    process). Elsewhere a no-op: the closed socket ends an idle rank process instead."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the parent was gone before the request took effect
            os._exit(1)


def leave(code: int) -> NoReturn:
    """Flush stdout and stderr and leave at once with ``code``, without the interpreter's
    teardown."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
