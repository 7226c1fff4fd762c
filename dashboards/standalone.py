"""A figure as a standalone HTML page that opens offline: :func:`write_figure_html`.

The end of every ``hpsearch start`` writes the study's frontier as such a page, and
``hpsearch frontier`` writes one on request. plotly.js is never loaded from a CDN, because these
pages are opened on cluster machines and laptops without internet access; and it is not
inlined in each page by default either: a page holding the 4.8 MB bundle costs 4.8 MB per study
and per run. The page refers to one copy of the bundle (:func:`plotly_bundle_name`, named after
the plotly.js version) by a relative path, written the first time and reused by every later
page: beside the page, or in a folder of the caller's choosing (``bundle_dir``). The ``hpsearch``
commands keep it in the runs folder (``hpsearch_runs/``), so that a search leaves in the working
folder only its store, its runs folder and its frontier page. A page copied away without its
bundle says so instead of staying blank; ``self_contained=True`` writes a page that holds the
bundle, for sending one file.

Example:
    >>> plotly_bundle_name()  # doctest: +ELLIPSIS
    'plotly-....min.js'
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["plotly_bundle_name", "write_figure_html"]

# Shown by a page whose plotly bundle is not where it refers to (a page copied or mailed alone): a
# blank page would look like an empty study.
_MISSING_BUNDLE = """<script>
if (!window.Plotly) {{
  const note = document.createElement("p");
  note.style.cssText = "font: 16px sans-serif; margin: 2em;";
  note.textContent = {text};
  document.body.prepend(note);
}}
</script>
</body>"""


def _missing_bundle_note(bundle: str, src: str) -> str:
    """The script that says where the bundle should be, the text a JavaScript string (a folder
    name may hold quotes or ``</script>``)."""
    where = ("which must sit in the same folder as the page" if src == bundle
             else f"which it expects at {src}, relative to the page")
    text = (f"This page draws its figure with {bundle}, {where}. Copy it from the folder the page was written "
            "in, or write a page that holds it: hpsearch frontier STUDY --self-contained -o FILE.html")
    return _MISSING_BUNDLE.format(text=json.dumps(text).replace("</", "<\\/"))


def plotly_bundle_name() -> str:
    """The file name of the plotly.js bundle a page refers to: ``plotly-VERSION.min.js``, so
    pages written by another plotly keep the bundle they were drawn with."""
    from plotly.offline import get_plotlyjs_version  # heavy: plotly

    return f"plotly-{get_plotlyjs_version()}.min.js"


def write_figure_html(fig: go.Figure, path: str | os.PathLike[str], *, self_contained: bool = False,
                      bundle_dir: str | os.PathLike[str] | None = None) -> Path:
    """Write a figure as a standalone HTML page that also opens offline.

    By default the page is a few kilobytes and refers to the plotly.js bundle
    (:func:`plotly_bundle_name`) by a relative path: beside the page, or in ``bundle_dir``. The
    bundle is copied there from the installed plotly package when it is missing: the first page
    writes it, later ones reuse it. With ``self_contained`` the bundle is inside the page
    (4.8 MB), which opens wherever it is copied.

    Parent folders are created. Each file is written next to its target and renamed into
    place, so a browser refreshing a frontier while a study runs never reads half a file.

    Args:
        fig: The figure, e.g. from :func:`hpsearch.dashboards.frontier.frontier_figure`.
        path: Where to write the ``.html`` file.
        self_contained: Put plotly.js inside the page instead of beside it.
        bundle_dir: The folder that keeps the bundle (default: the page's own); the
            ``hpsearch`` commands pass the runs folder (``hpsearch_runs/``).

    Returns:
        The path written, as a ``pathlib.Path``.

    Raises:
        OSError: When a folder cannot be created or a file cannot be written.

    Example:
        >>> write_figure_html(plot_frontier(search), "out/frontier.html")  # doctest: +SKIP
        PosixPath('out/frontier.html')
        >>> write_figure_html(plot_frontier(search), "frontier.html", bundle_dir="hpsearch_runs")  # doctest: +SKIP
        PosixPath('frontier.html')
    """
    import plotly.io as pio  # heavy: plotly

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if self_contained:
        page = pio.to_html(fig, include_plotlyjs=True, full_html=True, include_mathjax=False)
    else:
        bundle = plotly_bundle_name()
        folder = target.parent if bundle_dir is None else Path(bundle_dir)
        folder.mkdir(parents=True, exist_ok=True)
        _write_bundle(folder / bundle)
        # Relative, so that the page and the folder it refers to can move together (a work
        # folder copied to a laptop); by absolute paths, not resolved ones, so a symlinked
        # folder keeps the path the user sees.
        src = Path(os.path.relpath(os.path.abspath(folder / bundle), os.path.abspath(target.parent))).as_posix()
        page = pio.to_html(fig, include_plotlyjs=quote(src), full_html=True, include_mathjax=False)
        head, _, tail = page.rpartition("</body>")
        page = head + _missing_bundle_note(bundle, src) + tail
    _write_atomically(target, page.encode("utf-8"))
    return target


def _write_bundle(target: Path) -> None:
    """The installed plotly.js at ``target``, unless a whole copy is there already."""
    with resources.as_file(resources.files("plotly") / "package_data" / "plotly.min.js") as source:
        # The size tells a whole copy from one cut short (a full disk); the version is in the name.
        if target.is_file() and target.stat().st_size == source.stat().st_size:
            return
        _write_atomically(target, source.read_bytes())


def _write_atomically(target: Path, data: bytes) -> None:
    # A per-process name opened normally (not mkstemp) so the file gets the usual
    # umask-based permissions rather than owner-only ones.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
