"""Figures and the web dashboard of hpsearch.

This package's top level is pure data and imports no plotly, so ``import hpsearch`` stays
light: :func:`pareto_front` and :func:`frontier_info` compute a study's runtime-vs-accuracy
frontier as plain values. The plotly figures that draw them live in
``hpsearch.dashboards.figures`` (``frontier_figure``, ``write_figure_html``), imported only
where a figure is drawn.

Example:
    >>> from hpsearch.dashboards import pareto_front
    >>> pareto_front([10.0, 20.0, 30.0], [0.8, 0.9, 0.85])
    [0, 1]
"""

from hpsearch.dashboards.frontier import FrontierInfo, frontier_info, pareto_front

__all__ = ["FrontierInfo", "frontier_info", "pareto_front"]
