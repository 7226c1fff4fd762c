"""Figures and the web dashboard of hpsearch: a client of the service, as
``optuna.visualization`` is of Optuna's core (the service never imports this package).

- ``plot_frontier(search)``, ``plot_device_seconds_frontier``, ``plot_accuracy_vs_batch``,
  ``plot_learning_curves``, ``plot_throughput``, ``plot_noise_scale``: a study's figures
  (:mod:`hpsearch.dashboards.visualization`), loaded on first use so that this package's top
  level imports no plotly;
- ``hpsearch.dashboards.app``: the web dashboard (``create_app(storage)``);
- ``hpsearch.dashboards.cli``: the ``hpsearch dashboard`` and ``hpsearch frontier`` commands.

Each figure is computed, then rendered:

- compute: :func:`pareto_front` and :func:`frontier_info` (the runtime- or
  device-seconds-vs-accuracy frontier), :func:`accuracy_vs_batch_info`,
  :func:`learning_curves_info`, :func:`throughput_info` and :func:`noise_scale_info` turn a
  trials DataFrame into plain values; :func:`log_axis` is the one rule for log axes;
- render: ``hpsearch.dashboards.figures`` draws them with plotly (``frontier_figure``,
  ``accuracy_vs_batch_figure``, ``learning_curves_figure``, ``throughput_figure``,
  ``noise_scale_figure``, ``write_figure_html``), imported only where a figure is drawn.

Example:
    >>> from hpsearch.dashboards import pareto_front
    >>> pareto_front([10.0, 20.0, 30.0], [0.8, 0.9, 0.85])
    [0, 1]
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from hpsearch.dashboards.visualization import (
        plot_accuracy_vs_batch,
        plot_device_seconds_frontier,
        plot_frontier,
        plot_learning_curves,
        plot_noise_scale,
        plot_throughput,
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
    "plot_accuracy_vs_batch",
    "plot_device_seconds_frontier",
    "plot_frontier",
    "plot_learning_curves",
    "plot_noise_scale",
    "plot_throughput",
    "throughput_info",
]

#: Where each public name lives. The package itself imports nothing heavy: the CLI loads
#: ``hpsearch.dashboards.cli`` (and so this package) for ``hpsearch --help``, which must stay
#: light, so numpy, pandas and plotly load with the first name that needs them (PEP 562).
_HOMES = {
    **dict.fromkeys(("FrontierInfo", "frontier_info", "pareto_front"), "frontier"),
    **dict.fromkeys((n for n in __all__ if n.startswith("plot_")), "visualization"),
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module = importlib.import_module(f"hpsearch.dashboards.{_HOMES.get(name, 'plots')}")
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted(__all__)
