"""Request paths: study names as percent-encoded path segments.

A study name may hold ``/``, ``?``, ``#``, ``%`` or spaces, so the pages send it percent-encoded,
one path segment. :class:`SegmentPaths` (the app's outermost middleware) makes every request
path canonical, and routes of :mod:`hpsearch.dashboards.app` written with ``{name:segment}``
match one whole segment and hand the handler the decoded name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, unquote_to_bytes, urlsplit

from starlette.convertors import Convertor, register_url_convertor

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["SegmentPaths", "shown_path"]

# A study name may hold "/", "?", "#", "%" or spaces; the pages send it percent-encoded
# (encodeURIComponent), one path segment. ASGI servers hand the app a *decoded* ``path``, where
# "a%2Fb" has become two segments "a" and "b", and Starlette routes on it. So the outermost
# middleware (``SegmentPaths``) rewrites ``scope["path"]`` from ``raw_path``, the path as sent:
# each segment decoded once, then encoded again with nothing left unescaped but letters, digits
# and "_.-~". Routes then match whole segments, and the ``segment`` convertor decodes a path
# parameter back into the name. A middleware plus a convertor rather than a router of our own:
# Starlette keeps doing the matching, mounting and 404s, and a route reads like any other.


class _SegmentConvertor(Convertor[str]):
    """One percent-encoded path segment (of a path ``SegmentPaths`` made canonical), decoded."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return quote(value, safe="")


# Registered on import: hpsearch.dashboards.app imports this module before it builds its routes.
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


def shown_path(scope: Scope) -> str:
    """The canonical request path decoded, for messages and for telling the API from pages."""
    return "/" + "/".join(unquote(p) for p in str(scope["path"]).split("/")[1:])


class SegmentPaths:
    """ASGI middleware: routes see the canonical path (see the comment above ``_SegmentConvertor``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = {**scope, "path": _canonical_path(scope)}
        await self.app(scope, receive, send)
