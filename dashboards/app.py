"""The web dashboard: a Starlette app over one store, served by uvicorn.

Pages (HTML shells that draw themselves from the JSON API, so they refresh in place while a
study runs):

- ``/`` the studies of the store;
- ``/studies/{name}`` a study: its figures, a sortable, filterable, paginated trial table and a
  CSV download;
- ``/studies/{name}/trials/{number}`` a trial: params, values, attrs, curves, failure reason.

JSON API (documented in docs/dashboard.md): ``/api/studies``, ``/api/studies/{name}``,
``/api/studies/{name}/trials``, ``/api/studies/{name}/trials.csv``,
``/api/studies/{name}/trials/{number}``, ``/api/studies/{name}/figures/{kind}`` and
``/api/studies/{name}/analysis``, each a thin mapping onto a function of
``hpsearch.dashboards.api``.

``create_app(storage)`` builds the ASGI application, which any ASGI server runs; ``serve`` runs it
on uvicorn, as ``hpsearch dashboard`` does. Everything is read-only and works offline: plotly.js
is served from the installed plotly package. ``serve`` binds 127.0.0.1 unless told otherwise; any
other address needs a token, which every request must then carry (a ``Authorization: Bearer``
header, or a ``?token=`` on the first page, which becomes a cookie). Study names travel
percent-encoded, one path segment each, so a name may hold ``/``, ``?`` or ``#``.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import hmac
import html
import ipaddress
import json
import re
import socket
import threading
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass
from functools import cache
from http import HTTPStatus
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, unquote, unquote_to_bytes, urlencode, urlsplit

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from hpsearch.dashboards import api
from hpsearch.errors import HPSearchError

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "TOKEN_ENV",
    "DashboardTokenError",
    "create_app",
    "create_app_from_environment",
    "is_loopback",
    "login_url",
    "require_token_off_loopback",
    "serve",
]

#: The environment variable ``hpsearch dashboard`` reads its token from when ``--token`` is absent.
TOKEN_ENV = "HPSEARCH_DASHBOARD_TOKEN"

_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")  # visible ASCII: it must travel in a header, a URL and a cookie
# Pages run only the dashboard's own scripts: even a name that slipped past escaping could not
# run code (inline scripts and on* attributes are refused). Plotly sets inline styles.
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",  # a ?token= URL never leaves in a Referer header
    "X-Frame-Options": "DENY",
}
_CACHE_FOREVER = {"Cache-Control": "public, max-age=86400"}
_JSON = "application/json"
#: Answers outside these prefixes are for a person's browser: errors there are HTML pages.
_MACHINE_PREFIXES = ("/api/", "/static/")


class DashboardTokenError(HPSearchError):
    """The dashboard would be reachable from other machines without a token, or its token is unusable."""

    exit_code = 2
    http_status = 400


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``127.0.0.0/8``, ``::1``) or ``localhost``.

    Any other name counts as exposed: it may resolve to an address other machines reach.

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("0.0.0.0")
        (True, True, False)
    """
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        address = ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def require_token_off_loopback(host: str, token: str | None) -> None:
    """Refuse to expose the dashboard without a token, and refuse unusable tokens.

    Raises:
        DashboardTokenError: ``host`` is not a loopback address and ``token`` is empty, or the
            token holds characters other than visible ASCII.
    """
    _check_token(token)
    if not token and not is_loopback(host):
        raise DashboardTokenError(
            f"--host {host or repr(host)} is not a loopback address, so the dashboard would show every study to anyone who "
            f"reaches it: set a token with --token TOKEN or {TOKEN_ENV}=TOKEN (make one with: "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'), or bind 127.0.0.1")


def _check_token(token: str | None) -> None:
    if token and not _TOKEN_CHARS.fullmatch(token):
        raise DashboardTokenError("a dashboard token may hold only visible ASCII characters (no spaces); "
                                  "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'")


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


# ---- study names as path segments -----------------------------------------------------------------
#
# A study name may hold "/", "?", "#", "%" or spaces; the pages send it percent-encoded
# (encodeURIComponent), one path segment. ASGI servers hand the app a *decoded* ``path``, where
# "a%2Fb" has become two segments "a" and "b", and Starlette routes on it. So the outermost
# middleware (``_SegmentPaths``) rewrites ``scope["path"]`` from ``raw_path``, the path as sent:
# each segment decoded once, then encoded again with nothing left unescaped but letters, digits
# and "_.-~". Routes then match whole segments, and the ``segment`` convertor decodes a path
# parameter back into the name. A middleware plus a convertor rather than a router of our own:
# Starlette keeps doing the matching, mounting and 404s, and a route reads like any other.


class _SegmentConvertor(Convertor[str]):
    """One percent-encoded path segment (of a path ``_SegmentPaths`` made canonical), decoded."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return quote(value, safe="")


register_url_convertor("segment", _SegmentConvertor())


def _canonical_path(scope: Scope) -> str:
    """The request path, each segment decoded on its own and encoded again, without a trailing
    empty segment (``/studies/x/`` is ``/studies/x``).

    Example: ``/studies/a%2Fb%20c`` is ``/studies/a%2Fb%20c`` and ``/%61pi/studies`` is
    ``/api/studies``. Without ``raw_path`` (optional in ASGI) the decoded path is all there is.
    """
    raw: bytes | None = scope.get("raw_path")
    if raw:
        if not raw.startswith(b"/"):  # the absolute form, http://host/path
            raw = urlsplit(raw.decode("latin-1")).path.encode("latin-1") or b"/"
        parts = [unquote_to_bytes(p).decode("utf-8", "replace") for p in raw.split(b"/")[1:]]
    else:
        parts = str(scope["path"]).split("/")[1:]
    if parts and parts[-1] == "":
        parts.pop()
    return "/" + "/".join(quote(p, safe="") for p in parts)


def _shown_path(scope: Scope) -> str:
    """The canonical request path decoded, for messages and for telling the API from pages."""
    return "/" + "/".join(unquote(p) for p in str(scope["path"]).split("/")[1:])


class _SegmentPaths:
    """ASGI middleware: routes see the canonical path (see the comment above ``_SegmentConvertor``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = {**scope, "path": _canonical_path(scope)}
        await self.app(scope, receive, send)


# ---- who may read, and how ------------------------------------------------------------------------

class _Guard:
    """ASGI middleware run on every request before routing: the token (when there is one), then
    read-only; and the headers every answer carries (``nosniff``, the page policy on HTML, the
    login cookie).

    Args:
        token: When set, every request must carry it (``Authorization: Bearer TOKEN``, the
            cookie a ``?token=TOKEN`` request gets, or ``?token=TOKEN`` itself); others get 401.
            When not set, a request that reached the server on an address other machines can
            reach gets 403: the promise "a token off loopback" holds under any server.
    """

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self._token = token.encode() if token else None
        # The cookie holds a digest of the token, not the token: a leaked cookie does not
        # reveal a token that may open other things too.
        self._cookie_value = hmac.new(self._token, b"hpsearch dashboard cookie", hashlib.sha256).hexdigest() \
            if self._token else ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # the dashboard has none; refused before anything is looked at
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        path = _shown_path(scope)
        query = dict(parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True))
        cookie = None
        refused: Response | None = None
        if self._token is not None:
            # Before anything else: a request without the token learns nothing, not even
            # whether a study or a page exists.
            how = self._credential(scope, query)
            if how is None:
                refused = _unauthorized(path)
            elif how == "query":
                cookie = self._cookie(scope)
        elif (address := _exposed_address(scope)) is not None:
            refused = _error(path, 403, f"this dashboard has no token and was reached on {address}, an address "
                                        f"other machines can reach: give it a token (create_app(storage, token=...) "
                                        f"or {TOKEN_ENV}), or serve it on 127.0.0.1")
        if refused is None and scope["method"] not in ("GET", "HEAD"):
            refused = _error(path, 405, "the dashboard is read-only: GET only", headers={"Allow": "GET, HEAD"}, json_=True)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(raw=list(message["headers"]))
                headers.setdefault("X-Content-Type-Options", "nosniff")
                if headers.get("content-type", "").startswith("text/html"):
                    for key, value in _PAGE_HEADERS.items():
                        headers.setdefault(key, value)
                if cookie is not None:
                    headers.append("Set-Cookie", cookie)
                message = {**message, "headers": headers.raw}
            await send(message)

        if refused is not None:
            await refused(scope, receive, send_with_headers)
            return
        if "token" in query:  # the token never reaches a handler, a memo key or a log
            pairs = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
            scope = {**scope, "query_string": urlencode([(k, v) for k, v in pairs if k != "token"]).encode("latin-1")}
        await self.app(scope, receive, send_with_headers)

    def _credential(self, scope: Scope, query: dict[str, str]) -> str | None:
        """How the request shows the token ("header", "cookie", "query"), or None."""
        assert self._token is not None
        headers = Headers(scope=scope)
        scheme, _, value = headers.get("authorization", "").strip().partition(" ")
        if scheme.lower() == "bearer" and _same(value.strip(), self._token):
            return "header"
        cookie = _cookies(headers).get(_cookie_name(scope))
        if cookie is not None and _same(cookie, self._cookie_value.encode()):
            return "cookie"
        if "token" in query and _same(query["token"], self._token):
            return "query"
        return None

    def _cookie(self, scope: Scope) -> str:
        # HttpOnly: page scripts never see it; SameSite=Strict: other sites cannot make a
        # browser send it. A session cookie: closing the browser forgets it.
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        return f"{_cookie_name(scope)}={self._cookie_value}; Path=/; HttpOnly; SameSite=Strict{secure}"


def _unauthorized(path: str) -> Response:
    message = ("this dashboard needs its token: open the URL it printed when it started (ending in ?token=...), "
               "or send the header 'Authorization: Bearer TOKEN'")
    headers = {"WWW-Authenticate": 'Bearer realm="hpsearch dashboard"', "Cache-Control": "no-store"}
    if path.startswith(_MACHINE_PREFIXES):
        return _error(path, 401, message, headers=headers)
    # Self-contained: the stylesheet would need the token too. "try again" is a same-site
    # navigation, which carries the cookie a link from another site does not.
    body = ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>hpsearch: 401</title></head>"
            f"<body><h1>{_status_line(401)}</h1><p>{html.escape(message)}.</p><p><a href=''>try again</a></p>"
            "</body></html>")
    return _html(body, 401, headers)


def _exposed_address(scope: Scope) -> str | None:
    """The address the request reached the server on, when it is an IP address other machines
    can reach; None on loopback, and for what is not an IP address (a Unix socket, a test client)."""
    server = scope.get("server")
    host = str(server[0]) if server else ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    return None if is_loopback(host) else host


def _same(given: str, expected: bytes) -> bool:
    """Constant-time comparison: the time taken says nothing about how much of a guess was right."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected)


def _cookie_name(scope: Scope) -> str:
    # Cookies are per host, not per port: two dashboards on one machine keep one cookie each.
    server = scope.get("server")
    port = re.sub(r"\D", "", str(server[1])) if server and server[1] is not None else ""
    return f"hpsearch_dashboard_{port}"


def _cookies(headers: Headers) -> dict[str, str]:
    """The request's cookies. Parsed by hand: http.cookies gives up on the whole header at the
    first cookie it dislikes, and other apps on localhost set all sorts."""
    out: dict[str, str] = {}
    for pair in "; ".join(headers.getlist("cookie")).split(";"):
        key, sep, value = pair.strip().partition("=")
        if sep:
            out.setdefault(key, value.strip().strip('"'))
    return out


# ---- answers --------------------------------------------------------------------------------------

def _status_line(status: int) -> str:
    return f"{status} {HTTPStatus(status).phrase}"


def _html(body: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A page: with the page policy (set here too, not only by ``_Guard``: a 500 page is written
    outside it, by the framework's outermost error middleware)."""
    return Response(body, status, {**_PAGE_HEADERS, "X-Content-Type-Options": "nosniff", **(headers or {})},
                    media_type="text/html")


def _error(path: str, status: int, message: str, *, headers: dict[str, str] | None = None,
           json_: bool = False) -> Response:
    """JSON ``{"error": message}`` for the API and files, a readable page for a person's browser."""
    if json_ or path.startswith(_MACHINE_PREFIXES):
        return Response(_json_bytes({"error": message}), status, {"X-Content-Type-Options": "nosniff", **(headers or {})},
                        media_type=_JSON)
    body = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>hpsearch: {status}</title>"
            f"<link rel='stylesheet' href='/static/app.css'></head><body><header><a class='home' href='/'>"
            f"hpsearch</a></header><main><h1>{_status_line(status)}</h1><p class='error'>{html.escape(message)}</p>"
            "</main></body></html>")
    return _html(body, status, headers)


def _json_bytes(data: Any) -> bytes:
    """What ``JSONResponse`` writes: compact UTF-8, and no ``NaN`` (which is not JSON)."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _attachment(filename: str) -> str:
    """A Content-Disposition for any study name: an ASCII fallback and the exact name encoded
    (RFC 6266); a quote or a line break in a name cannot end the header."""
    fallback = re.sub(r"[^A-Za-z0-9._-]", "_", filename)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


def _cache(request: Request) -> api.StudyCache:
    cache: api.StudyCache = request.app.state.cache
    return cache


class _SharedReads:
    """Concurrent identical requests share one call of the API: the reads of one key run one at
    a time, and a request that arrives while one runs takes the answer of the next one, with
    every request that arrived meanwhile.

    Why: every warm answer still asks the store whether a trial changed (and the summary reads
    the study's attrs): about 1 ms of store queries and a thread hop per request, which at 64
    clients polling one study queued answers for 200 ms and more (benchmarks/dashboard_load.py).
    Shared, one read answers them all. Never an answer older than the request: a read that had
    started before a request arrived may have missed a change the request expects to see (a
    poll right after a write), so the request waits for the next read instead.
    """

    @dataclass
    class _Queue:
        lock: anyio.Lock
        users: int = 0     # requests holding or waiting for the lock
        started: int = 0   # reads begun so far
        done: int = 0      # the number of the last read that finished
        body: bytes = b""
        error: Exception | None = None

    def __init__(self) -> None:
        self._queues: dict[Hashable, _SharedReads._Queue] = {}

    async def read(self, key: Hashable, read: Callable[[], bytes]) -> bytes:
        """``read()`` in a worker thread (the API is synchronous and asks the store), or the
        answer of a read of ``key`` that began after this call did."""
        # Per event loop thread: a lock belongs to the loop it was made in (a test client may
        # run several loops at once).
        key = (threading.get_ident(), key)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = self._Queue(anyio.Lock())
        arrived = queue.started
        queue.users += 1
        try:
            async with queue.lock:
                if queue.done <= arrived:  # no read that began after this request has finished: run one
                    queue.started += 1
                    number = queue.started
                    try:
                        queue.body, queue.error = await run_in_threadpool(read), None
                    except Exception as exc:  # the same answer for every request that waited: re-raised below
                        queue.body, queue.error = b"", exc
                    queue.done = number
                if queue.error is not None:
                    raise queue.error
                return queue.body
        finally:
            queue.users -= 1
            if queue.users == 0:
                del self._queues[key]


async def _read(request: Request, read: Callable[[api.StudyCache, dict[str, str]], bytes]) -> bytes:
    """``read(cache, query)`` shared by the concurrent requests for the same URL (``_SharedReads``)."""
    cache, query = _cache(request), dict(request.query_params)
    shared: _SharedReads = request.app.state.shared_reads
    return await shared.read((request.scope["path"], tuple(sorted(query.items()))), lambda: read(cache, query))


async def _answer_json(request: Request, read: Callable[[api.StudyCache, dict[str, str]], Any]) -> Response:
    body = await _read(request, lambda cache, query: _json_bytes(read(cache, query)))
    return Response(body, media_type=_JSON)


# ---- the JSON API ---------------------------------------------------------------------------------

async def study_list(request: Request) -> Response:
    """``GET /api/studies``."""
    return await _answer_json(request, lambda cache, _: api.list_studies(cache))


async def study_summary(request: Request) -> Response:
    """``GET /api/studies/{name}``."""
    name = request.path_params["name"]
    return await _answer_json(request, lambda cache, _: api.study_detail(cache, name))


async def trials_table(request: Request) -> Response:
    """``GET /api/studies/{name}/trials``."""
    name = request.path_params["name"]
    return await _answer_json(request, lambda cache, query: api.trials_page(cache, name, query))


async def trials_csv(request: Request) -> Response:
    """``GET /api/studies/{name}/trials.csv``: a download named after the study."""
    name = request.path_params["name"]
    body = await _read(request, lambda cache, _: api.trials_csv(cache, name).encode())
    return Response(body, media_type="text/csv",
                    headers={"Content-Disposition": _attachment(f"{name}-trials.csv")})


async def trial_detail(request: Request) -> Response:
    """``GET /api/studies/{name}/trials/{number}``."""
    name, number = request.path_params["name"], request.path_params["number"]
    return await _answer_json(request, lambda cache, _: api.trial_detail(cache, name, number))


async def figure(request: Request) -> Response:
    """``GET /api/studies/{name}/figures/{kind}``: plotly JSON, already text."""
    name, kind = request.path_params["name"], request.path_params["kind"]
    body = await _read(request, lambda cache, query: api.figure_json(cache, name, kind, query).encode())
    return Response(body, media_type=_JSON)


async def analysis(request: Request) -> Response:
    """``GET /api/studies/{name}/analysis``: ``api.analysis_json``, looked up when asked, so the
    route answers 404 until the API has it."""
    analysis_json: Callable[[api.StudyCache, str, dict[str, str]], Any] | None = getattr(api, "analysis_json", None)
    if analysis_json is None:
        return _error(_shown_path(request.scope), 404, "analysis is not available in this version of the dashboard")
    name = request.path_params["name"]
    return await _answer_json(request, lambda cache, query: analysis_json(cache, name, query))


# ---- pages and files ------------------------------------------------------------------------------

def _page(request: Request, page: str, args: dict[str, str]) -> Response:
    if "name" in args:
        _cache(request).search(args["name"])  # an unknown study is a 404, not an empty page
    template: str = request.app.state.page_template  # one shell; app.js draws the page it names
    # The page's parameters, JSON inside an HTML attribute: escaped both ways. One pass, so a
    # name that holds "{{TITLE}}" stays a name.
    values = {"PAGE": page, "PAGE_ARGS": html.escape(json.dumps(args), quote=True),
              "TITLE": html.escape(" / ".join(["hpsearch", *args.values()]))}
    return _html(re.sub(r"\{\{(PAGE|PAGE_ARGS|TITLE)\}\}", lambda m: values[m[1]], template))


# Pages are synchronous handlers (Starlette runs them in its thread pool): the first look at a
# study opens it in the store.
def studies_page(request: Request) -> Response:
    """``GET /``: the studies of the store."""
    return _page(request, "studies", {})


def study_page(request: Request) -> Response:
    """``GET /studies/{name}``."""
    return _page(request, "study", {"name": request.path_params["name"]})


def trial_page(request: Request) -> Response:
    """``GET /studies/{name}/trials/{number}``."""
    number: str = request.path_params["number"]
    if not (number.isascii() and number.isdigit()):
        raise HTTPException(404)
    return _page(request, "trial", {"name": request.path_params["name"], "number": number})


async def favicon(request: Request) -> Response:
    """``GET /favicon.ico``: every browser asks; a 404 would be a console error on each page."""
    return Response(status_code=204, headers=_CACHE_FOREVER)


@cache
def _plotly_js_path() -> str:
    return str(resources.files("plotly") / "package_data" / "plotly.min.js")


async def plotly_js(request: Request) -> Response:
    """``GET /static/plotly.min.js``: from the installed plotly package; the dashboard never
    reaches a CDN."""
    return FileResponse(_plotly_js_path(), media_type="text/javascript", headers=_CACHE_FOREVER)


ROUTES = [
    Route("/", studies_page),
    Route("/studies/{name:segment}", study_page),
    Route("/studies/{name:segment}/trials/{number:segment}", trial_page),
    Route("/api/studies", study_list),
    Route("/api/studies/{name:segment}", study_summary),
    Route("/api/studies/{name:segment}/trials", trials_table),
    Route("/api/studies/{name:segment}/trials.csv", trials_csv),
    Route("/api/studies/{name:segment}/trials/{number:segment}", trial_detail),
    Route("/api/studies/{name:segment}/figures/{kind:segment}", figure),
    Route("/api/studies/{name:segment}/analysis", analysis),
    Route("/favicon.ico", favicon),
    Route("/static/plotly.min.js", plotly_js),
    Mount("/static", StaticFiles(packages=[("hpsearch.dashboards", "static")])),
]


# ---- errors: translated here, and only here, for the web ----------------------------------------

async def _on_hpsearch_error(request: Request, exc: Exception) -> Response:
    """An ``HPSearchError`` is answered with its ``http_status`` and its message."""
    assert isinstance(exc, HPSearchError)
    status = exc.http_status if 400 <= exc.http_status < 600 else 500
    return _error(_shown_path(request.scope), status, str(exc))


async def _on_http_error(request: Request, exc: Exception) -> Response:
    """The framework's own (no route, no such file) in the dashboard's words and formats."""
    assert isinstance(exc, HTTPException)
    path = _shown_path(request.scope)
    message = f"no page or endpoint at {path}" if exc.status_code == 404 else exc.detail
    return _error(path, exc.status_code, message, headers=dict(exc.headers or {}))


async def _on_unexpected_error(request: Request, exc: Exception) -> Response:
    # The server's boundary: a broken request must not stop the dashboard. The framework
    # re-raises after this answer is sent, so the server logs the traceback.
    return _error(_shown_path(request.scope), 500, "internal error; see the dashboard's log")


@contextlib.asynccontextmanager
async def _warm_up(app: Starlette) -> AsyncIterator[None]:
    """At server start-up, before the first request: imports now, not on the first page."""
    await run_in_threadpool(api.warm_up)
    yield


def create_app(storage: str, *, token: str | None = None) -> Starlette:
    """The dashboard of ``storage`` as an ASGI application, for any ASGI server.

    ``serve`` (``hpsearch dashboard``) runs it on uvicorn; to run it yourself, see
    docs/dashboard.md ("Serving it yourself"). The app keeps each study's table in memory,
    per process, until a trial changes.

    Args:
        storage: The store's URL.
        token: When set, every request must carry it (``Authorization: Bearer TOKEN``, the
            cookie a ``?token=TOKEN`` request gets, or ``?token=TOKEN`` itself); others get 401.
            Without one, requests that reach the server on an address other than a loopback
            one get 403.

    Returns:
        A Starlette application.

    Raises:
        DashboardTokenError: the token holds characters other than visible ASCII.

    Example:
        >>> from starlette.testclient import TestClient
        >>> TestClient(create_app("sqlite:///:memory:")).get("/api/studies").json()
        []
    """
    _check_token(token)
    app = Starlette(
        routes=ROUTES,
        # Outermost first: the canonical path, then the token and the method, then routing.
        middleware=[Middleware(_SegmentPaths), Middleware(_Guard, token=token)],
        exception_handlers={HPSearchError: _on_hpsearch_error, HTTPException: _on_http_error,
                            Exception: _on_unexpected_error},
        lifespan=_warm_up,
    )
    app.state.cache = api.StudyCache(storage)
    app.state.shared_reads = _SharedReads()
    app.state.page_template = (resources.files("hpsearch.dashboards") / "static" / "page.html").read_text("utf-8")
    return app


def create_app_from_environment() -> Starlette:
    """``create_app`` for the store and token the environment names (``HPSEARCH_STORAGE``,
    ``HPSEARCH_DASHBOARD_TOKEN``), as ``hpsearch dashboard`` reads them: the factory an ASGI
    server calls.

    Example:
        ``uvicorn --factory hpsearch.dashboards.app:create_app_from_environment``
    """
    import os

    from hpsearch.settings import resolve_settings

    # The token is not a search setting (hpsearch.settings): like the CLI's --token, it is read
    # from its own variable, here and nowhere else in the package.
    return create_app(resolve_settings().storage, token=os.environ.get(TOKEN_ENV) or None)


# ---- the server -----------------------------------------------------------------------------------

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
