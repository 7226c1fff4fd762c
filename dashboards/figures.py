"""Plotly figures of a study: the "render" half, thin on purpose.

Every figure here takes the trials DataFrame, asks a pure function in
:mod:`hpsearch.dashboards.frontier` or :mod:`hpsearch.dashboards.plots` for the data, and only
draws. They share one look: a fixed color per LR rule (:data:`RULE_COLORS`), axis titles with
units (:func:`axis_label`), log axes by one rule (:func:`hpsearch.dashboards.plots.log_axis`),
hover text that names the trial and its configuration, and an empty figure with a note, rather
than an error, while a study has nothing to show. This module imports plotly at the top, so
import it only where a figure is drawn (``import hpsearch`` stays light).

This module is where the figures are imported from; they are drawn in modules of their own:

- :mod:`hpsearch.dashboards.style`: the shared look (:data:`RULE_COLORS`, :func:`rule_color`,
  :func:`axis_label`, hover text, empty figures, log axes);
- :mod:`hpsearch.dashboards.scatters`: one marker per trial, :func:`frontier_figure` and
  :func:`noise_scale_figure`;
- :mod:`hpsearch.dashboards.lines`: :func:`accuracy_vs_batch_figure`,
  :func:`learning_curves_figure` and :func:`throughput_figure`;
- here: :func:`write_figure_html`, a figure as one standalone HTML file.

Example:
    >>> import pandas as pd
    >>> [note.text for note in frontier_figure(pd.DataFrame()).layout.annotations]
    ['no completed trials yet']
"""

from __future__ import annotations

import os
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

from hpsearch.dashboards.lines import accuracy_vs_batch_figure, learning_curves_figure, throughput_figure
from hpsearch.dashboards.scatters import frontier_figure, noise_scale_figure
from hpsearch.dashboards.style import METRIC_LABELS, RULE_COLORS, axis_label, rule_color

__all__ = [
    "METRIC_LABELS",
    "RULE_COLORS",
    "accuracy_vs_batch_figure",
    "axis_label",
    "frontier_figure",
    "learning_curves_figure",
    "noise_scale_figure",
    "rule_color",
    "throughput_figure",
    "write_figure_html",
]


def write_figure_html(fig: go.Figure, path: str | os.PathLike[str]) -> Path:
    """Write a figure as one standalone HTML file that also opens offline.

    plotly.js is embedded in the file (a few MiB) instead of loaded from a CDN, because
    frontiers are often opened on cluster machines or laptops without internet access.
    Parent folders are created. The file is written next to its target and renamed into
    place, so a browser refreshing a frontier while a study runs never reads half a file.

    Args:
        fig: The figure, e.g. from :func:`frontier_figure`.
        path: Where to write the ``.html`` file.

    Returns:
        The path written, as a ``pathlib.Path``.

    Raises:
        OSError: When the folder cannot be created or the file cannot be written.

    Example:
        >>> write_figure_html(frontier_figure(df), "out/frontier.html")  # doctest: +SKIP
        PosixPath('out/frontier.html')
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    html = pio.to_html(fig, include_plotlyjs=True, full_html=True, include_mathjax=False)
    # A per-process name opened normally (not mkstemp) so the file gets the usual
    # umask-based permissions rather than owner-only ones.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(html, encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
