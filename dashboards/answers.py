"""The dashboard's answers: pages under the page policy, errors as JSON or as a page, JSON bytes.

One place for what every answer of :mod:`hpsearch.dashboards.app` looks like, whoever writes it:
the routes, the token check of :mod:`hpsearch.dashboards.security`, or the framework's error
handlers. A machine (the ``/api/`` and ``/static/`` paths) gets ``{"error": message}``; a
person's browser gets a readable page.
"""

from __future__ import annotations

import html
import json
import re
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from starlette.responses import Response

__all__ = [
    "JSON_MEDIA_TYPE",
    "MACHINE_PREFIXES",
    "PAGE_HEADERS",
    "attachment",
    "error_response",
    "html_response",
    "json_bytes",
    "status_line",
]

# Pages run only the dashboard's own scripts: even a name that slipped past escaping could not
# run code (inline scripts and on* attributes are refused). Plotly sets inline styles.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",  # a ?token= URL never leaves in a Referer header
    "X-Frame-Options": "DENY",
}
#: The media type of every JSON answer.
JSON_MEDIA_TYPE = "application/json"
#: Answers outside these prefixes are for a person's browser: errors there are HTML pages.
MACHINE_PREFIXES = ("/api/", "/static/")


def status_line(status: int) -> str:
    """``404 Not Found``: a status with its phrase, as a page's heading."""
    return f"{status} {HTTPStatus(status).phrase}"


def html_response(body: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A page: with the page policy (set here too, not only by ``Guard``: a 500 page is written
    outside it, by the framework's outermost error middleware)."""
    return Response(body, status, {**PAGE_HEADERS, "X-Content-Type-Options": "nosniff", **(headers or {})},
                    media_type="text/html")


def error_response(path: str, status: int, message: str, *, headers: dict[str, str] | None = None,
           json_: bool = False) -> Response:
    """JSON ``{"error": message}`` for the API and files, a readable page for a person's browser."""
    if json_ or path.startswith(MACHINE_PREFIXES):
        return Response(json_bytes({"error": message}), status, {"X-Content-Type-Options": "nosniff", **(headers or {})},
                        media_type=JSON_MEDIA_TYPE)
    body = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>hpsearch: {status}</title>"
            f"<link rel='stylesheet' href='/static/app.css'></head><body><header><a class='home' href='/'>"
            f"hpsearch</a></header><main><h1>{status_line(status)}</h1><p class='error'>{html.escape(message)}</p>"
            "</main></body></html>")
    return html_response(body, status, headers)


def json_bytes(data: Any) -> bytes:
    """What ``JSONResponse`` writes: compact UTF-8, and no ``NaN`` (which is not JSON)."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def attachment(filename: str) -> str:
    """A Content-Disposition for any study name: an ASCII fallback and the exact name encoded
    (RFC 6266); a quote or a line break in a name cannot end the header."""
    fallback = re.sub(r"[^A-Za-z0-9._-]", "_", filename)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"
