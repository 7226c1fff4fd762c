"""A node's ``RankPool`` served to the trials of a search, and the handle a trial holds on it.

Every trial reaches its ranks the same way, whichever node they run on and whatever device:
through a ``PoolClient`` connected to the ``PoolServer`` of the node's pool (the search's own
process serves its node's pool; a pool actor serves any other node's, ``hpsearch.tune.reservations``).
A pool served over a Unix socket is reached from its own machine; one served on a host address
(TCP), from any node of the cluster. Either way a client must present the server's key
(``multiprocessing.connection``'s handshake) before anything is unpickled.

Requests and answers are typed values. ``TrialFailed`` keeps its ``reason`` and ``detail``
across; anything else the pool raises comes back as a ``RuntimeError`` naming it. A trial's
ranks live no longer than its connection: when a trial's process dies (Tune stopped it, a user
killed it), the server stops the ranks it started.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import tempfile
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener

from hpsearch import record
from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.node.network import rank_environment
from hpsearch.trials.node.pool import RankPool
from hpsearch.trials.node.ranks import Status
from hpsearch.trials.spec import TrialSpec

__all__ = ["PoolAddress", "PoolClient", "PoolServer"]


@dataclass(frozen=True)
class PoolAddress:
    """Where a node's pool is served: a Unix socket's path, or a ``(host, port)``; and the key
    a client must present."""

    address: str | tuple[str, int]
    authkey: bytes


# ---- requests and answers ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Start:
    spec: TrialSpec
    run_dir: str
    gpu_ids: tuple[str, ...] | None
    collective_timeout_s: float
    sys_path: tuple[str, ...] | None
    ranks: tuple[int, ...] | None = None
    rendezvous: str | None = None
    span_ip: str | None = None  # this node's address, for a trial that spans nodes


@dataclass(frozen=True)
class _FreePort:
    host: str


@dataclass(frozen=True)
class _Wait:
    ticket: int
    timeout: float


@dataclass(frozen=True)
class _Cancel:
    ticket: int


@dataclass(frozen=True)
class _Answer:
    value: int | Status | None


@dataclass(frozen=True)
class _Failed:
    reason: str
    detail: str


@dataclass(frozen=True)
class _Broke:
    message: str


class PoolServer:
    """Serves ``pool`` until ``close``: on a Unix socket in the temp directory, or, with ``host``,
    on a TCP port of that address.

    Attributes:
        address: Where clients connect, and with which key.
    """

    def __init__(self, pool: RankPool, host: str | None = None) -> None:
        self.pool = pool
        authkey = secrets.token_bytes(32)
        if host is None:
            path = os.path.join(tempfile.gettempdir(), f"hpsearch-pool-{uuid.uuid4().hex[:16]}.sock")
            self._listener = Listener(path, family="AF_UNIX", backlog=64, authkey=authkey)
        else:
            self._listener = Listener((host, 0), family="AF_INET", backlog=64, authkey=authkey)
        self.address = PoolAddress(self._listener.address, authkey)
        self._closed = False
        self._accepting = threading.Thread(target=self._accept, name="hpsearch-pool-server", daemon=True)
        self._accepting.start()

    def close(self) -> None:
        """Stop accepting (connections being served end with their client)."""
        self._closed = True
        # Wake the accepting thread, which then sees ``_closed``: a bare connection that closes
        # at once (a client's handshake can wait for ever, on a thread that has already seen
        # ``_closed`` after a refused client and left).
        address = self.address.address
        with contextlib.suppress(OSError):
            family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
            with socket.socket(family) as wake:
                wake.settimeout(5)
                wake.connect(address)
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
        """Answer one trial's requests; when it goes, stop the ranks it left running."""
        open_tickets: set[int] = set()
        try:
            with conn:
                while True:
                    try:
                        request = conn.recv()
                    except (EOFError, OSError):
                        return
                    answer = self._answer(request, open_tickets)
                    try:
                        conn.send(answer)
                    except (EOFError, OSError):
                        return
        finally:
            for ticket in open_tickets:
                with contextlib.suppress(TrialFailed):
                    self.pool.cancel(ticket)

    def _answer(self, request: object, open_tickets: set[int]) -> _Answer | _Failed | _Broke:
        try:
            if isinstance(request, _Start):
                ticket = self.pool.start(request.spec, request.run_dir, gpu_ids=request.gpu_ids,
                                         collective_timeout_s=request.collective_timeout_s, sys_path=request.sys_path,
                                         ranks=request.ranks, rendezvous=request.rendezvous,
                                         env=_span_environment(request.span_ip))
                open_tickets.add(ticket)
                return _Answer(ticket)
            if isinstance(request, _FreePort):
                return _Answer(_free_port(request.host))
            if isinstance(request, _Wait):
                status = self.pool.wait(request.ticket, request.timeout)
                if status.codes is not None:
                    open_tickets.discard(request.ticket)
                return _Answer(status)
            if isinstance(request, _Cancel):
                self.pool.cancel(request.ticket)
                open_tickets.discard(request.ticket)
                return _Answer(None)
            return _Broke(f"no such request: {type(request).__name__}")
        except TrialFailed as exc:
            return _Failed(exc.reason, exc.detail)
        except Exception as exc:  # the pool's own fault: the trial reports it
            return _Broke(f"{type(exc).__name__}: {exc}")


class PoolClient:
    """A trial's handle on a node's ``PoolServer`` (a ``hpsearch.trials.node.ranks.Ranks``). It
    connects at its first call, so a pool it cannot reach fails that call, and the trial, as
    ``rank_exited`` with the address it tried."""

    def __init__(self, address: PoolAddress) -> None:
        self.address = address
        self._conn: Connection | None = None
        #: The pool could not be reached, or its connection broke: its node is likely gone.
        self.lost = False

    def start(self, spec: TrialSpec, run_dir: str, *, gpu_ids: Sequence[str] | None = None,
              collective_timeout_s: float = 300.0, sys_path: Sequence[str] | None = None,
              ranks: Sequence[int] | None = None, rendezvous: str | None = None, span_ip: str | None = None) -> int:
        """``RankPool.start`` in the node's pool; ``span_ip``: this node's address, for the ranks
        of a trial that spans nodes (they are told the interface that carries it,
        ``hpsearch.trials.node.network.rank_environment``)."""
        ticket = self._call(_Start(spec, run_dir, None if gpu_ids is None else tuple(gpu_ids), collective_timeout_s,
                                   None if sys_path is None else tuple(sys_path),
                                   None if ranks is None else tuple(ranks), rendezvous, span_ip))
        assert isinstance(ticket, int)
        return ticket

    def free_port(self, host: str) -> int:
        """A TCP port free on ``host``, an address of the pool's node, for a trial's rank 0 to
        serve its rendezvous on (chosen there, where it is bound: a port free on one node may be
        taken on another)."""
        port = self._call(_FreePort(host))
        assert isinstance(port, int)
        return port

    def wait(self, ticket: int, timeout: float) -> Status:
        status = self._call(_Wait(ticket, timeout))
        assert isinstance(status, Status)
        return status

    def cancel(self, ticket: int) -> None:
        self._call(_Cancel(ticket))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def __enter__(self) -> PoolClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, request: _Start | _Wait | _Cancel | _FreePort) -> int | Status | None:
        if self._conn is None:
            try:
                self._conn = Client(self.address.address, authkey=self.address.authkey)
            except (EOFError, OSError, AuthenticationError) as exc:
                self.lost = True
                raise TrialFailed(record.REASON_RANK_EXITED, f"cannot reach the node's rank pool at "
                                  f"{_shown(self.address.address)} ({exc or type(exc).__name__})") from None
        try:
            self._conn.send(request)
            answer = self._conn.recv()
        except (EOFError, OSError) as exc:
            self.lost = True
            raise TrialFailed(record.REASON_RANK_EXITED, f"lost the node's rank pool ({exc or type(exc).__name__})") from None
        if isinstance(answer, _Failed):
            raise TrialFailed(answer.reason, answer.detail)
        if isinstance(answer, _Broke):
            raise RuntimeError(f"the node's rank pool raised {answer.message}")
        assert isinstance(answer, _Answer)
        return answer.value


def _span_environment(span_ip: str | None) -> dict[str, str]:
    """What the ranks of a trial that spans nodes are told on this node (nothing for a trial
    that runs on one node)."""
    return {} if span_ip is None else rank_environment(span_ip)


def _free_port(host: str) -> int:
    """A port the OS gives for ``host`` now, released at once for the trial's rank 0 to bind
    (as Ray Train and Lightning choose a ``MASTER_PORT``; another process taking it in between
    fails the trial's rendezvous, which names the address)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _shown(address: str | tuple[str, int]) -> str:
    """A pool's address as a message shows it: ``host:port``, or the socket's path."""
    return address if isinstance(address, str) else f"{address[0]}:{address[1]}"
