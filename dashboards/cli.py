"""The dashboard package's part of the ``hpsearch`` command, plugged in through entry points
(``pyproject.toml``: ``hpsearch.commands`` and ``hpsearch.reports``), so that the service never
imports the dashboard:

- ``hpsearch dashboard``: serve the web dashboard of a store;
- ``hpsearch frontier STUDY -o FILE.html``: write a study's frontier as a standalone page;
- ``frontier_report``: at the end of ``hpsearch start`` and ``resume``, the frontier page beside
  the store.

The pages these write refer to one plotly.js bundle kept in the runs folder (``hpsearch_runs/``,
``Search.runs_dir``'s parent), so that a search leaves in the working folder its store, its runs
folder and its frontier page, nothing else.

Light to import (``hpsearch --help`` lists these commands): the web app and the figures come
through the package's lazy names (``hpsearch.dashboards.serve``, ``plot_frontier``...), so
starlette, pandas and plotly load only when a command runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

import hpsearch
from hpsearch import dashboards
from hpsearch.store import missing_store, open_storage, parse_storage_url, redact_url
from hpsearch.store.settings import resolve_settings

if TYPE_CHECKING:
    from hpsearch.search import Search

__all__ = ["dashboard", "frontier", "frontier_report"]

_STORAGE_HELP = "Study store URL (default: $HPSEARCH_STORAGE, then sqlite:///hpsearch.db)."


@click.command()
@click.option("--storage", help=_STORAGE_HELP)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind. Any but a loopback address (127.0.0.1, ::1, localhost) needs a token.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free one).")
# The variable is hpsearch.dashboards.app.TOKEN_ENV, spelt out: importing the app here would
# make `hpsearch --help` import the web stack.
@click.option("--token", envvar="HPSEARCH_DASHBOARD_TOKEN", show_envvar=True,
              help="Ask every request for this token (required off loopback). Prefer the environment variable: "
                   "other users of the machine can read a command line.")
def dashboard(storage: str | None, host: str, port: int, token: str | None) -> None:
    """Serve the web dashboard of a store: studies, frontiers, trial tables, trial pages.

    It prints the URL to open on stderr; with a token, that URL carries it (?token=...), as
    Jupyter's does, and the browser keeps it in a cookie.
    """
    token = token or None
    dashboards.require_token_off_loopback(host, token)  # before the store: a refusal costs no connection
    url = parse_storage_url(resolve_settings(storage=storage).storage)  # a bad URL is an error now
    # Read-only, as every reading command: an SQLite file that does not exist yet is not created
    # (the dashboard lists no study until a search writes one); a server that does not answer is
    # an error now, not on the first page.
    if missing_store(url) is None:
        open_storage(url, create=False)
    try:
        dashboards.serve(url, host, port, token=token, on_ready=lambda address: click.echo(
            f"hpsearch dashboard of {redact_url(url)} at {address} (Ctrl-C stops it)", err=True))
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


@click.command()
@click.argument("study")
@click.option("--storage", help=_STORAGE_HELP)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="HTML file to write (default: STUDY-frontier.html beside the SQLite store, or here).")
@click.option("-x", "x", help="Column on the x axis (default: runtime_s).")
@click.option("-y", "y", help="Column on the y axis (default: the study's first quality objective).")
@click.option("--self-contained", is_flag=True,
              help="Put plotly.js inside the page (4.8 MB), for sending one file; by default a page in a folder "
                   "that holds the runs folder refers to the copy there, and any other page holds it.")
def frontier(study: str, storage: str | None, output: Path | None, x: str | None, y: str | None,
             self_contained: bool) -> None:
    """Write the runtime-vs-quality frontier of STUDY as a standalone HTML page (works offline).

    A page in a folder that holds the runs folder (the default: beside the store, as the runs
    folder is) is small and draws with plotly.js from the runs folder (hpsearch_runs/plotly-VERSION.min.js,
    written once and shared by every page), which it refers to by a relative path: the two move
    together. A page written anywhere else holds plotly.js (4.8 MB), as --self-contained makes
    any page: referring to the runs folder from elsewhere, it drew nothing once either moved.
    """
    search = hpsearch.load(study, storage=storage)
    default_x, default_y = search.frontier_axes
    path = output or search.frontier_path
    figure = dashboards.plot_frontier(search, x=x or default_x, y=y or default_y)
    bundle_dir = _bundle_dir(search)
    inline = self_contained or not Path(os.path.abspath(bundle_dir)).is_relative_to(os.path.abspath(path.parent))
    dashboards.write_figure_html(figure, path, self_contained=inline, bundle_dir=bundle_dir)
    why = "" if self_contained or not inline else (
        f" (plotly.js inside it: its folder does not hold {bundle_dir}, the copy of plotly.js a page may share, "
        "so the two would not move together)")
    click.echo(f"wrote {path}{why}", err=True)


def frontier_report(search: Search) -> dict[str, str]:
    """The end of ``hpsearch start`` and ``resume``: the study's frontier as a standalone page
    beside the SQLite store (or in the working folder), a few kilobytes that draw with the
    plotly.js copy in the runs folder; returns where it went, or, for a study with no completed
    trial, why none was written."""
    x, y = search.frontier_axes
    path = search.frontier_path
    if not any(t.state.name == "COMPLETE" for t in search.study.get_trials(deepcopy=False)):
        # A page of no point is no report: it read as a frontier that failed to draw.
        return {"frontier_html": f"none written: no trial completed, so there is no point to draw "
                                 f"(hpsearch frontier {search.study_name} writes one when some trial has)"}
    dashboards.write_figure_html(dashboards.plot_frontier(search, x=x, y=y), path, bundle_dir=_bundle_dir(search))
    return {"frontier_html": str(path)}


def frontier_artifact(search: Search, folder: Path) -> list[Path]:
    """The study's frontier for its parent run in MLflow (``hpsearch.integrations.tracking``): one page with
    plotly.js inside it, since MLflow's viewer shows a page without the files beside it."""
    x, y = search.frontier_axes
    path = Path(folder) / "frontier.html"
    dashboards.write_figure_html(dashboards.plot_frontier(search, x=x, y=y), path, self_contained=True)
    return [path]


def _bundle_dir(search: Search) -> Path:
    """Where the pages of a study's store keep their plotly.js bundle: the root of the runs
    folder (``hpsearch_runs/``), shared by every study of the store."""
    return search.runs_dir.parent
