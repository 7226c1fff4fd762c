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
package. It binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import html
import json
import re
import socketserver
import traceback
from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, unquote
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from hpsearch.dashboards import api
from hpsearch.errors import HPSearchError

__all__ = ["DashboardApp", "serve"]

StartResponse = Callable[[str, list[tuple[str, str]]], Any]

_STATUS = {200: "200 OK", 400: "400 Bad Request", 404: "404 Not Found", 405: "405 Method Not Allowed",
           409: "409 Conflict", 500: "500 Internal Server Error", 503: "503 Service Unavailable"}
_STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
_NAME = r"(?P<name>[^/]+)"


class DashboardApp:
    """The WSGI application for one store URL."""

    def __init__(self, storage: str) -> None:
        self.cache = api.StudyCache(storage)
        json_routes: list[tuple[str, Callable[..., Any]]] = [
            (r"/api/studies", lambda q: api.list_studies(self.cache)),
            (rf"/api/studies/{_NAME}", lambda q, name: api.study_detail(self.cache, name)),
            (rf"/api/studies/{_NAME}/trials", lambda q, name: api.trials_page(self.cache, name, q)),
            (rf"/api/studies/{_NAME}/trials/(?P<number>[^/]+)",
             lambda q, name, number: api.trial_detail(self.cache, name, number)),
        ]
        self._json = [(re.compile(p + r"/?\Z"), f) for p, f in json_routes]
        self._csv = re.compile(rf"/api/studies/{_NAME}/trials\.csv\Z")
        self._figure = re.compile(rf"/api/studies/{_NAME}/figures/(?P<kind>[^/]+)\Z")
        self._pages = [
            (re.compile(r"/\Z"), "studies.html"),
            (re.compile(rf"/studies/{_NAME}/?\Z"), "study.html"),
            (re.compile(rf"/studies/{_NAME}/trials/(?P<number>\d+)/?\Z"), "trial.html"),
        ]

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = unquote(environ.get("PATH_INFO", "/") or "/")
        query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            return _respond(start_response, 405, _error_body("the dashboard is read-only: GET only"))
        try:
            return self._route(path, query, start_response)
        except HPSearchError as exc:
            status = exc.http_status if exc.http_status in _STATUS else 500
            return self._error(path, status, str(exc), start_response)
        except Exception:  # the server's boundary: a broken request must not stop the dashboard
            traceback.print_exc()
            return self._error(path, 500, "internal error; see the dashboard's log", start_response)

    @staticmethod
    def _error(path: str, status: int, message: str, start_response: StartResponse) -> list[bytes]:
        """JSON for the API, a readable page for a person's browser."""
        if path.startswith("/api/") or path.startswith("/static/"):
            return _respond(start_response, status, _error_body(message))
        body = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>hpsearch: {status}</title>"
                f"<link rel='stylesheet' href='/static/app.css'></head><body><header><a class='home' href='/'>"
                f"hpsearch</a></header><main><h1>{_STATUS[status]}</h1><p class='error'>{html.escape(message)}</p>"
                "</main></body></html>")
        return _respond(start_response, status, body.encode(), "text/html; charset=utf-8")

    def _route(self, path: str, query: dict[str, str], start_response: StartResponse) -> Iterable[bytes]:
        for pattern, handler in self._json:
            if m := pattern.match(path):
                return _respond(start_response, 200, json.dumps(handler(query, **m.groupdict())).encode())
        if m := self._csv.match(path):
            body = api.trials_csv(self.cache, m["name"]).encode()
            headers = [("Content-Disposition", f'attachment; filename="{m["name"]}-trials.csv"')]
            return _respond(start_response, 200, body, "text/csv; charset=utf-8", headers)
        if m := self._figure.match(path):
            return _respond(start_response, 200, api.figure_json(self.cache, m["name"], m["kind"], query).encode())
        if path == "/favicon.ico":  # every browser asks; a 404 would be a console error on each page
            start_response("204 No Content", _CACHE_FOREVER)
            return []
        if path == "/static/plotly.min.js":
            return _respond(start_response, 200, _plotly_js(), _STATIC_TYPES[".js"], _CACHE_FOREVER)
        if m := re.fullmatch(r"/static/(?P<file>[a-z_]+\.(?:js|css))", path):
            body = _static(m["file"])
            if body is not None:
                return _respond(start_response, 200, body, _STATIC_TYPES[m["file"][m["file"].rfind("."):]])
        for pattern, page in self._pages:
            if m := pattern.match(path):
                return self._page(page, m.groupdict(), start_response)
        return self._error(path, 404, f"no page or endpoint at {path}", start_response)

    def _page(self, page: str, args: dict[str, str], start_response: StartResponse) -> Iterable[bytes]:
        if "name" in args:
            self.cache.search(args["name"])  # an unknown study is a 404, not an empty page
        template = _static(page)
        assert template is not None
        # The page's parameters, JSON inside an HTML attribute: escaped both ways.
        data = html.escape(json.dumps(args), quote=True)
        body = template.decode().replace("{{PAGE_ARGS}}", data).replace("{{TITLE}}", html.escape(
            " / ".join(["hpsearch", *args.values()])))
        return _respond(start_response, 200, body.encode(), "text/html; charset=utf-8")


_CACHE_FOREVER = [("Cache-Control", "public, max-age=86400")]


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


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return None


def serve(storage: str, host: str = "127.0.0.1", port: int = 8080,
          on_ready: Callable[[str], None] | None = None) -> None:
    """Serve the dashboard of ``storage`` until interrupted.

    Args:
        on_ready: Called with the dashboard's URL once it listens (``port=0`` picks a free one).
    """
    with make_server(host, port, DashboardApp(storage), server_class=_ThreadingServer,
                     handler_class=_QuietHandler) as server:
        url = f"http://{host}:{server.server_port}/"
        if on_ready is not None:
            on_ready(url)
        server.serve_forever()
