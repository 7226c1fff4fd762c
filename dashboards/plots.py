"""What the study figures show, as plain data: the "compute" half of each figure.

Each ``*_info`` function takes the trials DataFrame (one row per trial, as
``Search.trials_dataframe(all_attrs=True)`` returns it) and returns a frozen dataclass of plain
numbers and strings; :mod:`hpsearch.dashboards.figures` only draws them. Nothing here imports
plotly.

A study that has only just started, has only failed or pruned trials, or lacks a column (a
study whose trials all ran on one device records no noise scale) gives an *empty* info whose
``note`` says why, never an exception: the dashboard shows these figures while a study runs.

Every numeric axis follows one rule, :func:`log_axis`: logarithmic when its values are
positive and span at least two decades.

This module is where the figures' data is imported from; each figure's lives in a module of its
own, on the shared building blocks of :mod:`hpsearch.dashboards.points`:

- :mod:`hpsearch.dashboards.batch`: :func:`accuracy_vs_batch_info`, the best trial per LR rule
  and effective batch;
- :mod:`hpsearch.dashboards.curves`: :func:`learning_curves_info` and :func:`curve_metrics`,
  per-epoch curves against samples seen;
- :mod:`hpsearch.dashboards.throughput`: :func:`throughput_info`, throughput per device and
  communication share per world size;
- :mod:`hpsearch.dashboards.noise`: :func:`noise_scale_info`, the gradient noise scale against
  the effective batch;
- :mod:`hpsearch.dashboards.frontier`: :func:`~hpsearch.dashboards.frontier.frontier_info`, the
  runtime-vs-accuracy frontier.

Example:
    >>> import pandas as pd
    >>> df = pd.DataFrame({"number": [0, 1, 2], "state": ["FAIL", "PRUNED", "FAIL"]})
    >>> accuracy_vs_batch_info(df).note
    'no completed trials yet (2 failed, 1 pruned)'
"""

from __future__ import annotations

from hpsearch.dashboards.batch import AccuracyVsBatchInfo, BatchBest, RuleLine, accuracy_vs_batch_info
from hpsearch.dashboards.curves import (
    DEFAULT_CURVES_LIMIT,
    LearningCurvesInfo,
    TrialCurve,
    curve_metrics,
    learning_curves_info,
)
from hpsearch.dashboards.noise import NoiseScaleInfo, noise_scale_info
from hpsearch.dashboards.points import LOG_AXIS_MIN_RATIO, TrialGroup, TrialPoint, log_axis
from hpsearch.dashboards.throughput import (
    THROUGHPUT_PER_DEVICE,
    ThroughputInfo,
    WorldSizeSeries,
    WorldSizeStats,
    throughput_info,
)

__all__ = [
    "DEFAULT_CURVES_LIMIT",
    "LOG_AXIS_MIN_RATIO",
    "THROUGHPUT_PER_DEVICE",
    "AccuracyVsBatchInfo",
    "BatchBest",
    "LearningCurvesInfo",
    "NoiseScaleInfo",
    "RuleLine",
    "ThroughputInfo",
    "TrialCurve",
    "TrialGroup",
    "TrialPoint",
    "WorldSizeSeries",
    "WorldSizeStats",
    "accuracy_vs_batch_info",
    "curve_metrics",
    "learning_curves_info",
    "log_axis",
    "noise_scale_info",
    "throughput_info",
]
