"""Figures and the web dashboard of hpsearch: a client of the service, as
``optuna.visualization`` is of Optuna's core (the service never imports this package).

- ``plot_frontier(search)``, ``plot_device_seconds_frontier``, ``plot_accuracy_vs_batch``,
  ``plot_learning_curves``, ``plot_throughput``, ``plot_memory``, ``plot_noise_scale``: a study's figures, on its
  own quality objective unless asked for another metric (``val_loss`` for a study of
  ``val_loss``); ``write_figure_html`` writes one as a page that opens offline;
- ``create_app(storage)`` and ``serve(storage)``: the web dashboard (``hpsearch.dashboards.app``);
- ``hpsearch.dashboards.cli``: the ``hpsearch dashboard`` and ``hpsearch frontier`` commands.

One module per figure holds all of it, as ``optuna.visualization``'s ``_*.py`` modules do: the
figure's data as plain values (compute: a ``*_info`` function returning a frozen dataclass,
tested for values, no plotly), its plotly rendering (render: ``*_figure``), ``plot_*(search)``
and the function that answers the dashboard's endpoint for it (``*_from_query``):

- :mod:`hpsearch.dashboards.frontier`: :func:`frontier_info` (and :func:`pareto_front`), the
  runtime- or device-seconds-vs-quality frontier;
- :mod:`hpsearch.dashboards.accuracy_vs_batch`: :func:`accuracy_vs_batch_info`, the best trial
  per LR rule and effective batch;
- :mod:`hpsearch.dashboards.learning_curves`: :func:`learning_curves_info` and
  :func:`curve_metrics`, per-epoch curves against samples seen;
- :mod:`hpsearch.dashboards.throughput`: :func:`throughput_info`, throughput per device and
  communication share per world size;
- :mod:`hpsearch.dashboards.peak_memory`: :func:`memory_info`, peak memory per rank against the
  per-device batch per device kind, with where the trials ran out of memory;
- :mod:`hpsearch.dashboards.noise_scale`: :func:`noise_scale_info`, the gradient noise scale
  against the effective batch;
- :mod:`hpsearch.dashboards.analysis_figures`: the analysis section's two figures.

What they share: :mod:`hpsearch.dashboards.points` (reading the trials table; :func:`log_axis`,
the one rule for log axes), :mod:`hpsearch.dashboards.style` (colors, axis titles, hover text,
notes), :mod:`hpsearch.dashboards.queries` (what a figure endpoint was asked) and
:mod:`hpsearch.dashboards.standalone` (a figure as a page).

Example:
    >>> from hpsearch.dashboards import pareto_front
    >>> pareto_front([10.0, 20.0, 30.0], [0.8, 0.9, 0.85])
    [0, 1]
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpsearch.dashboards.accuracy_vs_batch import (
        AccuracyVsBatchInfo,
        accuracy_vs_batch_info,
        plot_accuracy_vs_batch,
    )
    from hpsearch.dashboards.app import create_app, require_token_off_loopback, serve
    from hpsearch.dashboards.frontier import (
        FrontierInfo,
        frontier_info,
        pareto_front,
        plot_device_seconds_frontier,
        plot_frontier,
    )
    from hpsearch.dashboards.learning_curves import (
        LearningCurvesInfo,
        curve_metrics,
        learning_curves_info,
        plot_learning_curves,
    )
    from hpsearch.dashboards.noise_scale import NoiseScaleInfo, noise_scale_info, plot_noise_scale
    from hpsearch.dashboards.peak_memory import MemoryInfo, memory_info, plot_memory
    from hpsearch.dashboards.points import log_axis
    from hpsearch.dashboards.standalone import write_figure_html
    from hpsearch.dashboards.throughput import ThroughputInfo, plot_throughput, throughput_info

__all__ = [
    "AccuracyVsBatchInfo",
    "FrontierInfo",
    "LearningCurvesInfo",
    "MemoryInfo",
    "NoiseScaleInfo",
    "ThroughputInfo",
    "accuracy_vs_batch_info",
    "create_app",
    "curve_metrics",
    "frontier_info",
    "learning_curves_info",
    "log_axis",
    "memory_info",
    "noise_scale_info",
    "pareto_front",
    "plot_accuracy_vs_batch",
    "plot_device_seconds_frontier",
    "plot_frontier",
    "plot_learning_curves",
    "plot_memory",
    "plot_noise_scale",
    "plot_throughput",
    "require_token_off_loopback",
    "serve",
    "throughput_info",
    "write_figure_html",
]

#: Where each public name lives. The package itself imports nothing heavy: the CLI loads
#: ``hpsearch.dashboards.cli`` (and so this package) for ``hpsearch --help``, which must stay
#: light, so a figure's module (numpy, pandas, plotly) loads with the first of its names asked
#: for, and the web app's (starlette, uvicorn) with ``create_app`` or ``serve`` (PEP 562; one of
#: the lazy entry points of docs/design.md, "Imports").
_HOMES = {
    **dict.fromkeys(("FrontierInfo", "frontier_info", "pareto_front", "plot_frontier",
                     "plot_device_seconds_frontier"), "frontier"),
    **dict.fromkeys(("AccuracyVsBatchInfo", "accuracy_vs_batch_info", "plot_accuracy_vs_batch"), "accuracy_vs_batch"),
    **dict.fromkeys(("LearningCurvesInfo", "curve_metrics", "learning_curves_info", "plot_learning_curves"),
                    "learning_curves"),
    **dict.fromkeys(("ThroughputInfo", "throughput_info", "plot_throughput"), "throughput"),
    **dict.fromkeys(("NoiseScaleInfo", "noise_scale_info", "plot_noise_scale"), "noise_scale"),  # not a record name: the module
    **dict.fromkeys(("MemoryInfo", "memory_info", "plot_memory"), "peak_memory"),
    "log_axis": "points",
    "write_figure_html": "standalone",
    **dict.fromkeys(("create_app", "serve", "require_token_off_loopback"), "app"),
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"hpsearch.dashboards.{_HOMES[name]}")
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted(__all__)
