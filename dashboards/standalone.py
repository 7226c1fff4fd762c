"""A figure as a standalone HTML page that opens offline: :func:`write_figure_html`.

The end of every ``hpsearch start`` writes the study's frontier as such a page, and
``hpsearch frontier`` writes one on request. plotly.js is never loaded from a CDN, because these
pages are opened on cluster machines and laptops without internet access; and it is not
inlined in each page by default either: a page holding the 4.8 MB bundle cost 4.8 MB per study
and per run. The page refers to one copy of the bundle, written beside it
(:func:`plotly_bundle_name`, named after the plotly.js version) the first time and reused by
every later page of the folder. A page copied away without its bundle says so instead of
staying blank; ``self_contained=True`` writes a page that holds the bundle, for sending one file.

Example:
    >>> plotly_bundle_name()  # doctest: +ELLIPSIS
    'plotly-....min.js'
"""

from __future__ import annotations

import html
import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["plotly_bundle_name", "write_figure_html"]

# Shown by a page whose plotly bundle is not beside it (a page copied or mailed alone): a blank
# page would look like an empty study.
_MISSING_BUNDLE = """<script>
if (!window.Plotly) {{
  const note = document.createElement("p");
  note.style.cssText = "font: 16px sans-serif; margin: 2em;";
  note.textContent = "This page draws its figure with {bundle}, which must sit in the same folder as the page. "
    + "Copy it from the folder the page was written in, or write a page that holds it: "
    + "hpsearch frontier STUDY --self-contained -o FILE.html";
  document.body.prepend(note);
}}
</script>
</body>"""


def plotly_bundle_name() -> str:
    """The file name of the plotly.js bundle a page refers to: ``plotly-VERSION.min.js``, so
    pages written by another plotly keep the bundle they were drawn with."""
    from plotly.offline import get_plotlyjs_version  # heavy: plotly

    return f"plotly-{get_plotlyjs_version()}.min.js"


def write_figure_html(fig: go.Figure, path: str | os.PathLike[str], *, self_contained: bool = False) -> Path:
    """Write a figure as a standalone HTML page that also opens offline.

    By default the page is a few kilobytes and refers to the plotly.js bundle beside it
    (:func:`plotly_bundle_name`), which is copied from the installed plotly package when the
    folder lacks it: the first page of a folder writes it, later ones reuse it. With
    ``self_contained`` the bundle is inside the page (4.8 MB), which opens wherever it is copied.

    Parent folders are created. Each file is written next to its target and renamed into
    place, so a browser refreshing a frontier while a study runs never reads half a file.

    Args:
        fig: The figure, e.g. from :func:`hpsearch.dashboards.frontier.frontier_figure`.
        path: Where to write the ``.html`` file.
        self_contained: Put plotly.js inside the page instead of beside it.

    Returns:
        The path written, as a ``pathlib.Path``.

    Raises:
        OSError: When the folder cannot be created or a file cannot be written.

    Example:
        >>> write_figure_html(plot_frontier(search), "out/frontier.html")  # doctest: +SKIP
        PosixPath('out/frontier.html')
    """
    import plotly.io as pio  # heavy: plotly

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if self_contained:
        page = pio.to_html(fig, include_plotlyjs=True, full_html=True, include_mathjax=False)
    else:
        bundle = plotly_bundle_name()
        _write_bundle(target.parent / bundle)
        page = pio.to_html(fig, include_plotlyjs=bundle, full_html=True, include_mathjax=False)
        head, _, tail = page.rpartition("</body>")
        page = head + _MISSING_BUNDLE.format(bundle=html.escape(bundle)) + tail
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
