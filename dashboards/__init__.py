"""Figures and the web dashboard of hpsearch.

This package's top level is pure data and imports no plotly, so ``import hpsearch`` stays
light. Each figure is computed, then rendered:

- compute: :func:`pareto_front` and :func:`frontier_info` (the runtime- or
  device-seconds-vs-accuracy frontier), :func:`accuracy_vs_batch_info`,
  :func:`learning_curves_info`, :func:`throughput_info` and :func:`noise_scale_info` turn a
  trials DataFrame into plain values; :func:`log_axis` is the one rule for log axes;
- render: ``hpsearch.dashboards.figures`` draws them with plotly (``frontier_figure``,
  ``accuracy_vs_batch_figure``, ``learning_curves_figure``, ``throughput_figure``,
  ``noise_scale_figure``, ``write_figure_html``), imported only where a figure is drawn.

``hpsearch.dashboards.synthetic.synthetic_study`` writes a realistic study without training
anything, for examples, tests and benchmarks.

Example:
    >>> from hpsearch.dashboards import pareto_front
    >>> pareto_front([10.0, 20.0, 30.0], [0.8, 0.9, 0.85])
    [0, 1]
"""

from hpsearch.dashboards.frontier import FrontierInfo, frontier_info, pareto_front
from hpsearch.dashboards.plots import (
    AccuracyVsBatchInfo,
    LearningCurvesInfo,
    NoiseScaleInfo,
    ThroughputInfo,
    accuracy_vs_batch_info,
    curve_metrics,
    learning_curves_info,
    log_axis,
    noise_scale_info,
    throughput_info,
)

__all__ = [
    "AccuracyVsBatchInfo",
    "FrontierInfo",
    "LearningCurvesInfo",
    "NoiseScaleInfo",
    "ThroughputInfo",
    "accuracy_vs_batch_info",
    "curve_metrics",
    "frontier_info",
    "learning_curves_info",
    "log_axis",
    "noise_scale_info",
    "pareto_front",
    "throughput_info",
]
