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

This module builds the app: its routes, its error handlers and :func:`create_app`. The rest
lives in modules of their own, and the public names are re-exported here:

- :mod:`hpsearch.dashboards.security`: the token and the exposure rule (``TOKEN_ENV``,
  ``DashboardTokenError``, ``is_loopback``, ``require_token_off_loopback``) and the middleware
  that holds every request to them;
- :mod:`hpsearch.dashboards.paths`: study names as percent-encoded path segments;
- :mod:`hpsearch.dashboards.answers`: what answers look like (pages, errors, JSON);
- :mod:`hpsearch.dashboards.shared_reads`: concurrent identical requests share one read;
- :mod:`hpsearch.dashboards.server`: running the app on uvicorn (``serve`` calls it) and ``login_url``.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import threading
from collections.abc import AsyncIterator, Callable
from functools import cache
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from hpsearch.dashboards import api
from hpsearch.dashboards.answers import JSON_MEDIA_TYPE, attachment, error_response, html_response, json_bytes
from hpsearch.dashboards.paths import SegmentPaths, shown_path
from hpsearch.dashboards.security import (
    TOKEN_ENV,
    DashboardTokenError,
    Guard,
    check_token,
    is_loopback,
    require_token_off_loopback,
)
from hpsearch.dashboards.server import login_url, run
from hpsearch.dashboards.shared_reads import SharedReads
from hpsearch.errors import HPSearchError
from hpsearch.store.settings import resolve_settings

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

_CACHE_FOREVER = {"Cache-Control": "public, max-age=86400"}


# ---- reading the store, once for concurrent identical requests -----------------------------------

def _cache(request: Request) -> api.StudyCache:
    cache: api.StudyCache = request.app.state.cache
    return cache


async def _read(request: Request, read: Callable[[api.StudyCache, dict[str, str]], bytes]) -> bytes:
    """``read(cache, query)`` shared by the concurrent requests for the same URL (``SharedReads``)."""
    cache, query = _cache(request), dict(request.query_params)
    shared: SharedReads = request.app.state.shared_reads
    return await shared.read((request.scope["path"], tuple(sorted(query.items()))), lambda: read(cache, query))


async def _answer_json(request: Request, read: Callable[[api.StudyCache, dict[str, str]], Any]) -> Response:
    body = await _read(request, lambda cache, query: json_bytes(read(cache, query)))
    return Response(body, media_type=JSON_MEDIA_TYPE)


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
                    headers={"Content-Disposition": attachment(f"{name}-trials.csv")})


async def trial_detail(request: Request) -> Response:
    """``GET /api/studies/{name}/trials/{number}``."""
    name, number = request.path_params["name"], request.path_params["number"]
    return await _answer_json(request, lambda cache, _: api.trial_detail(cache, name, number))


async def figure(request: Request) -> Response:
    """``GET /api/studies/{name}/figures/{kind}``: plotly JSON, already text."""
    name, kind = request.path_params["name"], request.path_params["kind"]
    body = await _read(request, lambda cache, query: api.figure_json(cache, name, kind, query).encode())
    return Response(body, media_type=JSON_MEDIA_TYPE)


async def analysis(request: Request) -> Response:
    """``GET /api/studies/{name}/analysis``: ``api.analysis_json``, looked up when asked, so the
    route answers 404 until the API has it."""
    analysis_json: Callable[[api.StudyCache, str, dict[str, str]], Any] | None = getattr(api, "analysis_json", None)
    if analysis_json is None:
        return error_response(shown_path(request.scope), 404, "analysis is not available in this version of the dashboard")
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
    return html_response(re.sub(r"\{\{(PAGE|PAGE_ARGS|TITLE)\}\}", lambda m: values[m[1]], template))


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
    return error_response(shown_path(request.scope), status, str(exc))


async def _on_http_error(request: Request, exc: Exception) -> Response:
    """The framework's own (no route, no such file) in the dashboard's words and formats."""
    assert isinstance(exc, HTTPException)
    path = shown_path(request.scope)
    message = f"no page or endpoint at {path}" if exc.status_code == 404 else exc.detail
    return error_response(path, exc.status_code, message, headers=dict(exc.headers or {}))


async def _on_unexpected_error(request: Request, exc: Exception) -> Response:
    # The server's boundary: a broken request must not stop the dashboard. The framework
    # re-raises after this answer is sent, so the server logs the traceback.
    return error_response(shown_path(request.scope), 500, "internal error; see the dashboard's log")


@contextlib.asynccontextmanager
async def _warm_up(app: Starlette) -> AsyncIterator[None]:
    """At server start-up, before the first request: imports now, not on the first page; then,
    in the background while the server answers, the studies' tables and first figures
    (``api.prefetch``)."""
    await run_in_threadpool(api.warm_up)
    if app.state.prefetch:
        threading.Thread(target=api.prefetch, args=(app.state.cache,), name="hpsearch-dashboard-prefetch",
                         daemon=True).start()
    yield


def create_app(storage: str, *, token: str | None = None, prefetch: bool = True) -> Starlette:
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
        prefetch: Read the studies ahead once the server starts (``api.prefetch``), so the
            first page a person opens is answered from memory.

    Returns:
        A Starlette application.

    Raises:
        DashboardTokenError: the token holds characters other than visible ASCII.

    Example:
        >>> from starlette.testclient import TestClient
        >>> TestClient(create_app("sqlite:///:memory:")).get("/api/studies").json()
        []
    """
    check_token(token)
    app = Starlette(
        routes=ROUTES,
        # Outermost first: the canonical path, then the token and the method, then routing.
        middleware=[Middleware(SegmentPaths), Middleware(Guard, token=token)],
        exception_handlers={HPSearchError: _on_hpsearch_error, HTTPException: _on_http_error,
                            Exception: _on_unexpected_error},
        lifespan=_warm_up,
    )
    app.state.cache = api.StudyCache(storage)
    app.state.prefetch = prefetch
    app.state.shared_reads = SharedReads()
    app.state.page_template = (resources.files("hpsearch.dashboards") / "static" / "page.html").read_text("utf-8")
    return app


def create_app_from_environment() -> Starlette:
    """``create_app`` for the store and token the environment names (``HPSEARCH_STORAGE``,
    ``HPSEARCH_DASHBOARD_TOKEN``), as ``hpsearch dashboard`` reads them: the factory an ASGI
    server calls.

    Example:
        ``uvicorn --factory hpsearch.dashboards.app:create_app_from_environment``
    """
    # The token is not a search setting (hpsearch.store.settings): like the CLI's --token, it is read
    # from its own variable, here and nowhere else in the package.
    return create_app(resolve_settings().storage, token=os.environ.get(TOKEN_ENV) or None)


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
    require_token_off_loopback(host, token)
    app = create_app(storage, token=token)
    api.warm_up()  # imports now, not on the first page
    run(app, host, port, on_ready=on_ready, token=token)
