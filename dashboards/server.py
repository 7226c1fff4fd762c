"""Serving the dashboard on uvicorn, as ``hpsearch dashboard`` does: :func:`serve`.

It refuses an address other machines reach without a token, binds the socket itself (a busy
port is an ``OSError`` for the caller), keeps no access log (a ``?token=`` URL must never reach
a log) and hands the URL to open (:func:`login_url`) to ``on_ready``. Any other ASGI server can
run the app instead (:func:`hpsearch.dashboards.app.create_app`). The public names are
re-exported by :mod:`hpsearch.dashboards.app`.
"""

from __future__ import annotations

import gc
import socket
from collections.abc import Callable
from urllib.parse import quote

from hpsearch.dashboards import api
from hpsearch.dashboards.security import require_token_off_loopback

__all__ = [
    "login_url",
    "serve",
]


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
    # it is TCP, and without it every answer written in two parts (head, body) waited 40 ms for
    # the client's delayed ACK.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait out TIME_WAIT
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def serve(storage: str, host: str = "127.0.0.1", port: int = 8080,
          on_ready: Callable[[str], None] | None = None, token: str | None = None) -> None:
    """Serve the dashboard of ``storage`` on uvicorn until interrupted.

    Args:
        host: The address to bind; any but a loopback one needs ``token``.
        on_ready: Called with the URL to open once it listens (``port=0`` picks a free one); the
            URL carries ``?token=`` when a token is set.
        token: Ask every request for this token (see ``create_app``).

    Raises:
        DashboardTokenError: ``host`` is not a loopback address and there is no token.
        OSError: the address cannot be bound (a port in use).
    """
    import uvicorn

    # Here, not at the top: hpsearch.dashboards.app re-exports serve, so it imports this module.
    from hpsearch.dashboards.app import create_app

    require_token_off_loopback(host, token)
    app = create_app(storage, token=token)
    api.warm_up()  # imports now, not on the first page
    # What start-up made (pandas, plotly, Optuna, SQLAlchemy: most of the heap) lives as long as
    # the process: out of the collector's sight. Each full collection scanned it all: up to
    # 190 ms pauses, 1.7 s of every 10 s, under 64 polling clients (p99 160 ms; 60-85 ms frozen).
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
        lifespan="off",  # warmed up above
        # No access log: a ?token= URL must never reach a log. Warnings and errors (a
        # traceback) still reach stderr.
        access_log=False, log_config=None, log_level="warning",
        timeout_graceful_shutdown=5,  # Ctrl-C waits this long at most for requests in flight
    )
    try:
        Server(config).run(sockets=[sock])
    finally:
        sock.close()
