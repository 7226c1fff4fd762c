"""A ``RankPool`` served to other processes of its node over a local socket.

The search's own process starts the warm rank processes of its node before Ray starts, so they
import torch and the workload while ``ray.init`` runs, instead of after a Ray actor that would
own them has started. Trials (Ray worker processes of the same node) then reach that pool
through a ``PoolClient``: the same ``start``/``wait``/``cancel`` calls as a ``RankPool`` (the
``Ranks`` of ``hpsearch.trials.ranks``), one connection per trial, served by one thread each.

Errors cross as values: ``TrialFailed`` keeps its ``reason`` and ``detail``; anything else
comes back as a ``RuntimeError`` naming what the pool raised.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
import threading
import uuid
from collections.abc import Sequence
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from hpsearch.search_spaces import record
from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.pool import RankPool
from hpsearch.trials.ranks import Status
from hpsearch.trials.spec import TrialSpec

__all__ = ["PoolClient", "PoolServer"]

_CALLS = frozenset({"start", "wait", "cancel"})


class PoolServer:
    """Serves ``pool`` on a Unix socket in the temp directory until ``close``.

    Attributes:
        address: The socket's path.
        authkey: The key a client must present (``multiprocessing.connection``'s handshake).
    """

    def __init__(self, pool: RankPool) -> None:
        self.pool = pool
        self.address = os.path.join(tempfile.gettempdir(), f"hpsearch-pool-{uuid.uuid4().hex[:16]}.sock")
        self.authkey = secrets.token_bytes(32)
        self._listener = Listener(self.address, family="AF_UNIX", backlog=64, authkey=self.authkey)
        self._closed = False
        self._accepting = threading.Thread(target=self._accept, name="hpsearch-pool-server", daemon=True)
        self._accepting.start()

    def close(self) -> None:
        """Stop accepting (connections being served end with their client)."""
        self._closed = True
        with contextlib.suppress(OSError):
            # Wakes the accepting thread, which then sees ``_closed``.
            Client(self.address, family="AF_UNIX", authkey=self.authkey).close()
        self._accepting.join(timeout=5)
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except (OSError, EOFError, AuthenticationError):  # a client that failed the handshake, or closed
                if self._closed:
                    return
                continue
            if self._closed:
                conn.close()
                return
            threading.Thread(target=self._serve, args=(conn,), name="hpsearch-pool-client", daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        with conn:
            while True:
                try:
                    name, args, kwargs = conn.recv()
                except (EOFError, OSError):
                    return
                try:
                    if name not in _CALLS:
                        raise ValueError(f"no such call: {name!r}")
                    answer: tuple[Any, ...] = ("ok", getattr(self.pool, name)(*args, **kwargs))
                except TrialFailed as exc:
                    answer = ("failed", exc.reason, exc.detail)
                except Exception as exc:  # the pool's own fault: the trial reports it
                    answer = ("error", f"{type(exc).__name__}: {exc}")
                try:
                    conn.send(answer)
                except (EOFError, OSError):
                    return


class PoolClient:
    """A trial's handle on its node's ``PoolServer`` (a ``hpsearch.trials.ranks.Ranks``)."""

    def __init__(self, address: str, authkey: bytes) -> None:
        self._conn = Client(address, family="AF_UNIX", authkey=authkey)

    def start(self, spec: TrialSpec, run_dir: str, *, gpu_ids: Sequence[str] | None = None,
              collective_timeout_s: float = 300.0, watch_pid: int | None = None,
              sys_path: Sequence[str] | None = None) -> int:
        return int(self._call("start", spec, run_dir, gpu_ids=None if gpu_ids is None else list(gpu_ids),
                              collective_timeout_s=collective_timeout_s, watch_pid=watch_pid,
                              sys_path=None if sys_path is None else list(sys_path)))

    def wait(self, ticket: int, timeout: float) -> Status:
        status: Status = self._call("wait", ticket, timeout)
        return status

    def cancel(self, ticket: int) -> None:
        self._call("cancel", ticket)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> PoolClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            self._conn.send((name, args, kwargs))
            answer = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise TrialFailed(record.REASON_RANK_EXITED, f"lost the node's rank pool ({exc or type(exc).__name__})") from None
        if answer[0] == "failed":
            raise TrialFailed(answer[1], answer[2])
        if answer[0] == "error":
            raise RuntimeError(f"the node's rank pool raised {answer[1]}")
        return answer[1]
