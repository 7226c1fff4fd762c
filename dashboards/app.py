"""The web dashboard: a small WSGI app over one store, served by the standard library.

Pages (HTML shells that draw themselves from the JSON API, so they refresh in place while a
study runs):

- ``/`` the studies of the store;
- ``/studies/{name}`` a study: its figures, a sortable, filterable, paginated trial table and a
  CSV download;
- ``/studies/{name}/trials/{number}`` a trial: params, values, attrs, curves, failure reason.

JSON API (documented in docs/dashboard.md): ``/api/studies``, ``/api/studies/{name}``,
``/api/studies/{name}/trials``, ``/api/studies/{name}/trials.csv``,
``/api/studies/{name}/trials/{number}``, ``/api/studies/{name}/figures/{kind}``.

Everything is read-only and works offline: plotly.js is served from the installed plotly
package. It binds 127.0.0.1 unless told otherwise; any other address needs a token, which every
request must then carry (a ``Authorization: Bearer`` header, or a ``?token=`` on the first page,
which becomes a cookie). Study names travel percent-encoded, one path segment each, so a name
may hold ``/``, ``?`` or ``#``.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import ipaddress
import json
import re
import socket
import socketserver
import traceback
from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from hpsearch.dashboards import api
from hpsearch.errors import HPSearchError

__all__ = ["DashboardApp", "DashboardTokenError", "TOKEN_ENV", "is_loopback", "login_url",
           "require_token_off_loopback", "serve"]

StartResponse = Callable[[str, list[tuple[str, str]]], Any]

#: The environment variable ``hpsearch dashboard`` reads its token from when ``--token`` is absent.
TOKEN_ENV = "HPSEARCH_DASHBOARD_TOKEN"

_STATUS = {200: "200 OK", 400: "400 Bad Request", 401: "401 Unauthorized", 404: "404 Not Found",
           405: "405 Method Not Allowed", 409: "409 Conflict", 500: "500 Internal Server Error",
           503: "503 Service Unavailable"}
_STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")  # visible ASCII: it must travel in a header, a URL and a cookie
# Pages run only the dashboard's own scripts: even a name that slipped past escaping could not
# run code (inline scripts and on* attributes are refused). Plotly sets inline styles.
_PAGE_HEADERS = [
    ("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                "img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; "
                                "form-action 'none'; frame-ancestors 'none'"),
    ("Referrer-Policy", "no-referrer"),  # a ?token= URL never leaves in a Referer header
    ("X-Frame-Options", "DENY"),
]


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


class DashboardApp:
    """The WSGI application for one store URL.

    Args:
        storage: The store's URL.
        token: When set, every request must carry it (``Authorization: Bearer TOKEN``, the
            cookie a ``?token=TOKEN`` request gets, or ``?token=TOKEN`` itself); others get 401.
    """

    def __init__(self, storage: str, token: str | None = None) -> None:
        _check_token(token)
        self.cache = api.StudyCache(storage)
        self._token = token.encode() if token else None
        # The cookie holds a digest of the token, not the token: a leaked cookie does not
        # reveal a token that may open other things too.
        self._cookie_value = hmac.new(self._token, b"hpsearch dashboard cookie", hashlib.sha256).hexdigest() \
            if self._token else ""

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        parts = _path_segments(environ)
        path = "/" + "/".join(parts)
        query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        extra: list[tuple[str, str]] = []
        if self._token is not None:
            # Before anything else: a request without the token learns nothing, not even
            # whether a study or a page exists.
            how = self._credential(environ, query)
            if how is None:
                return self._unauthorized(path, start_response)
            if how == "query":
                extra.append(("Set-Cookie", self._cookie(environ)))
        query.pop("token", None)
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            return _respond(start_response, 405, _error_body("the dashboard is read-only: GET only"),
                            headers=[("Allow", "GET, HEAD"), *extra])
        try:
            return self._route(parts, query, _Reply(start_response, extra))
        except HPSearchError as exc:
            status = exc.http_status if exc.http_status in _STATUS else 500
            return self._error(path, status, str(exc), _Reply(start_response, extra))
        except Exception:  # the server's boundary: a broken request must not stop the dashboard
            traceback.print_exc()
            return self._error(path, 500, "internal error; see the dashboard's log", _Reply(start_response, extra))

    # ---- the token ----------------------------------------------------------------------------

    def _credential(self, environ: dict[str, Any], query: dict[str, str]) -> str | None:
        """How the request shows the token ("header", "cookie", "query"), or None."""
        assert self._token is not None
        scheme, _, value = environ.get("HTTP_AUTHORIZATION", "").strip().partition(" ")
        if scheme.lower() == "bearer" and _same(value.strip(), self._token):
            return "header"
        cookie = _cookies(environ).get(_cookie_name(environ))
        if cookie is not None and _same(cookie, self._cookie_value.encode()):
            return "cookie"
        if "token" in query and _same(query["token"], self._token):
            return "query"
        return None

    def _cookie(self, environ: dict[str, Any]) -> str:
        # HttpOnly: page scripts never see it; SameSite=Strict: other sites cannot make a
        # browser send it. A session cookie: closing the browser forgets it.
        secure = "; Secure" if environ.get("wsgi.url_scheme") == "https" else ""
        return f"{_cookie_name(environ)}={self._cookie_value}; Path=/; HttpOnly; SameSite=Strict{secure}"

    @staticmethod
    def _unauthorized(path: str, start_response: StartResponse) -> list[bytes]:
        message = ("this dashboard needs its token: open the URL it printed when it started (ending in ?token=...), "
                   "or send the header 'Authorization: Bearer TOKEN'")
        headers = [("WWW-Authenticate", 'Bearer realm="hpsearch dashboard"'), ("Cache-Control", "no-store")]
        if path.startswith(("/api/", "/static/")):
            return _respond(start_response, 401, _error_body(message), headers=headers)
        # Self-contained: the stylesheet would need the token too. "try again" is a same-site
        # navigation, which carries the cookie a link from another site does not.
        body = ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>hpsearch: 401</title></head>"
                f"<body><h1>{_STATUS[401]}</h1><p>{html.escape(message)}.</p><p><a href=''>try again</a></p>"
                "</body></html>")
        return _respond(start_response, 401, body.encode(), "text/html; charset=utf-8", [*headers, *_PAGE_HEADERS])

    # ---- routes -------------------------------------------------------------------------------

    @staticmethod
    def _error(path: str, status: int, message: str, start_response: StartResponse) -> list[bytes]:
        """JSON for the API, a readable page for a person's browser."""
        if path.startswith(("/api/", "/static/")):
            return _respond(start_response, status, _error_body(message))
        body = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>hpsearch: {status}</title>"
                f"<link rel='stylesheet' href='/static/app.css'></head><body><header><a class='home' href='/'>"
                f"hpsearch</a></header><main><h1>{_STATUS[status]}</h1><p class='error'>{html.escape(message)}</p>"
                "</main></body></html>")
        return _respond(start_response, status, body.encode(), "text/html; charset=utf-8", _PAGE_HEADERS)

    def _route(self, parts: list[str], query: dict[str, str], start_response: StartResponse) -> Iterable[bytes]:
        cache = self.cache
        match parts:
            case ["api", "studies"]:
                return _json(start_response, api.list_studies(cache))
            case ["api", "studies", name]:
                return _json(start_response, api.study_detail(cache, name))
            case ["api", "studies", name, "trials"]:
                return _json(start_response, api.trials_page(cache, name, query))
            case ["api", "studies", name, "trials.csv"]:
                body = api.trials_csv(cache, name).encode()
                return _respond(start_response, 200, body, "text/csv; charset=utf-8",
                                [("Content-Disposition", _attachment(f"{name}-trials.csv"))])
            case ["api", "studies", name, "trials", number]:
                return _json(start_response, api.trial_detail(cache, name, number))
            case ["api", "studies", name, "figures", kind]:
                return _respond(start_response, 200, api.figure_json(cache, name, kind, query).encode())
            case ["favicon.ico"]:  # every browser asks; a 404 would be a console error on each page
                start_response("204 No Content", _CACHE_FOREVER)
                return []
            case ["static", "plotly.min.js"]:
                return _respond(start_response, 200, _plotly_js(), _STATIC_TYPES[".js"], _CACHE_FOREVER)
            case ["static", file] if re.fullmatch(r"[a-z_]+\.(?:js|css)", file) and (body := _static(file)):
                return _respond(start_response, 200, body, _STATIC_TYPES[file[file.rfind("."):]])
            case []:
                return self._page("studies", {}, start_response)
            case ["studies", name]:
                return self._page("study", {"name": name}, start_response)
            case ["studies", name, "trials", number] if number.isascii() and number.isdigit():
                return self._page("trial", {"name": name, "number": number}, start_response)
        path = "/" + "/".join(parts)
        return self._error(path, 404, f"no page or endpoint at {path}", start_response)

    def _page(self, page: str, args: dict[str, str], start_response: StartResponse) -> Iterable[bytes]:
        if "name" in args:
            self.cache.search(args["name"])  # an unknown study is a 404, not an empty page
        template = _static("page.html")  # one shell; app.js draws the page it names
        assert template is not None
        # The page's parameters, JSON inside an HTML attribute: escaped both ways. One pass,
        # so a name that holds "{{TITLE}}" stays a name.
        values = {"PAGE": page, "PAGE_ARGS": html.escape(json.dumps(args), quote=True),
                  "TITLE": html.escape(" / ".join(["hpsearch", *args.values()]))}
        body = re.sub(r"\{\{(PAGE|PAGE_ARGS|TITLE)\}\}", lambda m: values[m[1]], template.decode())
        return _respond(start_response, 200, body.encode(), "text/html; charset=utf-8", _PAGE_HEADERS)


_CACHE_FOREVER = [("Cache-Control", "public, max-age=86400")]


class _Reply:
    """``start_response`` with headers every answer to this request carries (the cookie)."""

    def __init__(self, start_response: StartResponse, extra: list[tuple[str, str]]) -> None:
        self._start_response, self._extra = start_response, extra

    def __call__(self, status: str, headers: list[tuple[str, str]]) -> Any:
        return self._start_response(status, [*headers, *self._extra])


def _path_segments(environ: dict[str, Any]) -> list[str]:
    """The request path as decoded segments, without a trailing empty one.

    ``/studies/a%2Fb%20c`` is ``["studies", "a/b c"]``: each segment is decoded on its own, from
    the raw request target where the server passes it (``RAW_URI``, ``REQUEST_URI``). PEP 3333's
    ``PATH_INFO`` is already decoded, so there a study name holding ``/`` cannot be told from two
    segments (wsgiref decodes it; the dashboard's own server passes ``RAW_URI``).
    """
    raw = None if environ.get("SCRIPT_NAME") else environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        target = raw.split("?", 1)[0].split("#", 1)[0]
        if not target.startswith("/"):  # the absolute form, http://host/path
            target = urlsplit(target).path or "/"
        parts = [unquote(p) for p in target.split("/")[1:]]
    else:
        path = environ.get("PATH_INFO") or "/"
        try:  # PEP 3333: bytes as latin-1; the URL's are UTF-8
            path = path.encode("latin-1").decode("utf-8")
        except UnicodeError:  # already text (a server that decoded UTF-8, a test)
            pass
        parts = path.split("/")[1:]
    if parts and parts[-1] == "":
        parts.pop()
    return parts


def _same(given: str, expected: bytes) -> bool:
    """Constant-time comparison: the time taken says nothing about how much of a guess was right."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected)


def _cookie_name(environ: dict[str, Any]) -> str:
    # Cookies are per host, not per port: two dashboards on one machine keep one cookie each.
    port = re.sub(r"\D", "", str(environ.get("SERVER_PORT", "")))
    return f"hpsearch_dashboard_{port}"


def _cookies(environ: dict[str, Any]) -> dict[str, str]:
    """The request's cookies. Parsed by hand: http.cookies gives up on the whole header at the
    first cookie it dislikes, and other apps on localhost set all sorts."""
    out: dict[str, str] = {}
    for pair in environ.get("HTTP_COOKIE", "").split(";"):
        key, sep, value = pair.strip().partition("=")
        if sep:
            out.setdefault(key, value.strip().strip('"'))
    return out


def _attachment(filename: str) -> str:
    """A Content-Disposition for any study name: an ASCII fallback and the exact name encoded
    (RFC 6266); a quote or a line break in a name cannot end the header."""
    fallback = re.sub(r"[^A-Za-z0-9._-]", "_", filename)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


def _json(start_response: StartResponse, data: Any) -> list[bytes]:
    return _respond(start_response, 200, json.dumps(data).encode())


def _respond(start_response: StartResponse, status: int, body: bytes, content_type: str = "application/json",
             headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    start_response(_STATUS[status], [("Content-Type", content_type), ("Content-Length", str(len(body))),
                                     ("X-Content-Type-Options", "nosniff"), *(headers or [])])
    return [body]


def _error_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


def _static(name: str) -> bytes | None:
    path = resources.files("hpsearch.dashboards") / "static" / name
    return path.read_bytes() if path.is_file() else None


def _plotly_js() -> bytes:
    """plotly.js from the installed plotly package: the dashboard never reaches a CDN."""
    return (resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes()


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    """Logs nothing (a ?token= URL never reaches a log) and passes the raw request target, so
    the app can decode a study name's ``%2F`` as part of the name."""

    def get_environ(self) -> dict[str, Any]:
        environ = super().get_environ()
        environ["RAW_URI"] = self.path
        return environ

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return None


def serve(storage: str, host: str = "127.0.0.1", port: int = 8080,
          on_ready: Callable[[str], None] | None = None, token: str | None = None) -> None:
    """Serve the dashboard of ``storage`` until interrupted.

    Args:
        host: The address to bind; any but a loopback one needs ``token``.
        on_ready: Called with the URL to open once it listens (``port=0`` picks a free one); the
            URL carries ``?token=`` when a token is set.
        token: Ask every request for this token (see ``DashboardApp``).

    Raises:
        DashboardTokenError: ``host`` is not a loopback address and there is no token.
    """
    require_token_off_loopback(host, token)
    app = DashboardApp(storage, token=token)
    api.warm_up()  # imports now, not on the first page
    bind = host.removeprefix("[").removesuffix("]")
    server_class = _ThreadingServer6 if ":" in bind else _ThreadingServer
    with make_server(bind, port, app, server_class=server_class, handler_class=_QuietHandler) as server:
        if on_ready is not None:
            on_ready(login_url(bind, server.server_port, token))
        server.serve_forever()
