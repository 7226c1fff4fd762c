"""Running the dashboard's app on uvicorn, as ``hpsearch dashboard`` does (:func:`run`, called by
:func:`hpsearch.dashboards.app.serve`).

It binds the socket itself (a busy port is an ``OSError`` for the caller), keeps no access log
(a ``?token=`` URL must never reach a log) and hands the URL to open (:func:`login_url`) to
``on_ready``. Any other ASGI server can run the app instead
(:func:`hpsearch.dashboards.app.create_app`).
"""

from __future__ import annotations

import gc
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import uvicorn

__all__ = ["login_url", "run"]


def login_url(host: str, port: int, token: str | None = None) -> str:
    """The URL to open: the bound address (this machine's name for a wildcard one), with
    ``?token=`` when a token is set, as Jupyter prints it.

    Example:
        >>> login_url("127.0.0.1", 8080, "abc")
        'http://127.0.0.1:8080/?token=abc'
    """
    if host in ("", "0.0.0.0", "::"):  # listening everywhere: the name other machines know it by
        host = socket.gethostname()
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}/" + (f"?token={quote(token, safe='')}" if token else "")


def _listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (IPv6 when ``host`` is an IPv6 address): bound here, not
    by uvicorn, so a busy port is an ``OSError`` for the caller (the CLI says "cannot listen on")
    and ``port=0``'s real port is known."""
    # IPPROTO_TCP spelt out: asyncio sets TCP_NODELAY only on connections of a socket that says
    # it is TCP, and without it every answer written in two parts (head, body) waits 40 ms for
    # the client's delayed ACK.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait out TIME_WAIT
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def run(app: Any, host: str, port: int, on_ready: Callable[[str], None] | None = None,
        token: str | None = None) -> None:
    """Run the ASGI ``app`` on uvicorn at ``host:port`` until interrupted (``port=0``: any free
    one), calling ``on_ready`` with the URL to open (with ``?token=`` when ``token`` is set)
    once it listens.

    Raises:
        OSError: the address cannot be bound (a port in use).
    """
    # What start-up made (pandas, plotly, Optuna, SQLAlchemy: most of the heap) lives as long as
    # the process: out of the collector's sight, since each full collection would scan it all,
    # pausing every answer under many polling clients (docs/benchmarks.md, section 6).
    gc.collect()
    gc.freeze()
    bind = host.removeprefix("[").removesuffix("]")
    sock = _listening_socket(bind, port)
    url = login_url(bind, sock.getsockname()[1], token)

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and on_ready is not None:
                on_ready(url)

    config = uvicorn.Config(
        app,
        lifespan="off",  # the caller warmed the app up (hpsearch.dashboards.app.serve)
        # No access log: a ?token= URL must never reach a log. Warnings and errors (a
        # traceback) still reach stderr.
        access_log=False, log_config=None, log_level="warning",
        timeout_graceful_shutdown=5,  # Ctrl-C waits this long at most for requests in flight
    )
    try:
        Server(config).run(sockets=[sock])
    finally:
        sock.close()
