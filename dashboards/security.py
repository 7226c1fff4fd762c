"""Who may read the dashboard: its token, and no exposure without one.

Off loopback the dashboard needs a token (:func:`require_token_off_loopback`, checked before
``hpsearch dashboard`` binds). :class:`Guard`, a middleware of every app
:func:`hpsearch.dashboards.app.create_app` builds, then holds every request to it: the token
when there is one (a ``Authorization: Bearer`` header, or a ``?token=`` on the first page, which
becomes a cookie), and without one a 403 for a request that reached the server on an address
other machines reach, whatever server runs the app; then read-only (GET and HEAD); and the
headers every answer carries. The public names are re-exported by
:mod:`hpsearch.dashboards.app`.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import ipaddress
import re
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import Response

from hpsearch.dashboards.answers import MACHINE_PREFIXES, PAGE_HEADERS, error_response, html_response, status_line
from hpsearch.dashboards.paths import shown_path
from hpsearch.errors import HPSearchError

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "TOKEN_ENV",
    "DashboardTokenError",
    "Guard",
    "check_token",
    "is_loopback",
    "require_token_off_loopback",
]

#: The environment variable ``hpsearch dashboard`` reads its token from when ``--token`` is absent.
TOKEN_ENV = "HPSEARCH_DASHBOARD_TOKEN"

_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")  # visible ASCII: it must travel in a header, a URL and a cookie


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
    check_token(token)
    if not token and not is_loopback(host):
        raise DashboardTokenError(
            f"--host {host or repr(host)} is not a loopback address, so the dashboard would show every study to anyone who "
            f"reaches it: set a token with --token TOKEN or {TOKEN_ENV}=TOKEN (make one with: "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'), or bind 127.0.0.1")


def check_token(token: str | None) -> None:
    """Refuse a token that cannot travel in a header, a URL and a cookie.

    Raises:
        DashboardTokenError: The token holds characters other than visible ASCII.
    """
    if token and not _TOKEN_CHARS.fullmatch(token):
        raise DashboardTokenError("a dashboard token may hold only visible ASCII characters (no spaces); "
                                  "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'")


class Guard:
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
        path = shown_path(scope)
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
            refused = error_response(path, 403, f"this dashboard has no token and was reached on {address}, an address "
                                        f"other machines can reach: give it a token (create_app(storage, token=...) "
                                        f"or {TOKEN_ENV}), or serve it on 127.0.0.1")
        if refused is None and scope["method"] not in ("GET", "HEAD"):
            refused = error_response(path, 405, "the dashboard is read-only: GET only", headers={"Allow": "GET, HEAD"}, json_=True)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(raw=list(message["headers"]))
                headers.setdefault("X-Content-Type-Options", "nosniff")
                if headers.get("content-type", "").startswith("text/html"):
                    for key, value in PAGE_HEADERS.items():
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
    if path.startswith(MACHINE_PREFIXES):
        return error_response(path, 401, message, headers=headers)
    # Self-contained: the stylesheet would need the token too. "try again" is a same-site
    # navigation, which carries the cookie a link from another site does not.
    body = ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>hpsearch: 401</title></head>"
            f"<body><h1>{status_line(401)}</h1><p>{html.escape(message)}.</p><p><a href=''>try again</a></p>"
            "</body></html>")
    return html_response(body, 401, headers)


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
