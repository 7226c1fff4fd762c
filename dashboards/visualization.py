"""Figures of a study: ``plot_*(search)``, as ``optuna.visualization.plot_*(study)``.

Each function reads the study through its ``Search`` (the service's read model), checks the
columns it was asked for, and hands the table to a renderer in
:mod:`hpsearch.dashboards.figures`. They return plotly figures: ``.show()`` them, or write one
with :func:`hpsearch.dashboards.figures.write_figure_html`.

Example:
    >>> import optuna
    >>> from hpsearch.testing import synthetic_study
    >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
    >>> plot_frontier(search).layout.xaxis.title.text
    'runtime (s)'
    >>> [trace.name for trace in plot_accuracy_vs_batch(search).data]
    ['constant', 'linear', 'sqrt']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hpsearch.errors import ColumnError
from hpsearch.search_spaces import record

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from hpsearch.search import Search

__all__ = [
    "plot_accuracy_vs_batch",
    "plot_device_seconds_frontier",
    "plot_frontier",
    "plot_learning_curves",
    "plot_noise_scale",
    "plot_throughput",
]


def plot_frontier(search: Search, x: str = record.RUNTIME_S, y: str = record.VAL_ACCURACY, *,
                  max_points: int | None = None) -> go.Figure:
    """The frontier of ``y`` against ``x``: COMPLETE trials colored by LR rule, sized by
    effective batch, the non-dominated ones joined. Directions follow ``search.direction``.

    Args:
        max_points: Draw at most about this many trials (every front trial stays), or all.

    Raises:
        ColumnError: ``x`` or ``y`` is not a column of the study's completed trials.
    """
    from hpsearch.dashboards.figures import frontier_figure

    df = search.trials_dataframe()
    _require_columns(df, x, y)
    return frontier_figure(df, x=x, y=y, x_direction=search.direction(x), y_direction=search.direction(y),
                           max_points=max_points)


def plot_device_seconds_frontier(search: Search, y: str = record.VAL_ACCURACY) -> go.Figure:
    """The device-seconds-vs-``y`` frontier: what each trial cost in devices x time, so a fast
    8-device trial is weighed against a slower 1-device one.

    Raises:
        ColumnError: ``y`` is not a column of the study's completed trials.
    """
    return plot_frontier(search, x=record.DEVICE_SECONDS, y=y)


def plot_accuracy_vs_batch(search: Search, metric: str = record.VAL_ACCURACY) -> go.Figure:
    """``metric`` against effective batch size, one line per LR rule; each point is the best
    COMPLETE trial of its rule and batch.

    Raises:
        ColumnError: ``metric`` is not a column of the study's completed trials.
    """
    from hpsearch.dashboards.figures import accuracy_vs_batch_figure

    df = search.trials_dataframe()
    _require_columns(df, metric)
    return accuracy_vs_batch_figure(df, metric=metric, direction=search.direction(metric))


def plot_learning_curves(search: Search, trials: Sequence[int] | None = None, metric: str = record.VAL_ACCURACY,
                         limit: int = 20) -> go.Figure:
    """``metric`` at each evaluation against samples seen, one line per trial: the trials
    numbered in ``trials`` (any state), or by default the ``limit`` best COMPLETE trials.

    Raises:
        ColumnError: no trial recorded a ``metric`` curve (while some recorded curves).
        ValueError: ``trials`` names a trial number the study does not have.

    Example:
        >>> import optuna
        >>> from hpsearch.testing import synthetic_study
        >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=60)
        >>> len(plot_learning_curves(search, limit=5).data)
        5
        >>> [trace.name for trace in plot_learning_curves(search, trials=[3, 7], metric="val_loss").data]
        ['trial 3', 'trial 7']
    """
    from hpsearch.dashboards.figures import learning_curves_figure
    from hpsearch.dashboards.plots import curve_metrics

    df = search.trials_dataframe(all_attrs=True)
    recorded = curve_metrics(df)
    if recorded and metric not in recorded:
        raise ColumnError(f"no curve {metric!r} in this study's trials; curves: {', '.join(recorded)}")
    return learning_curves_figure(df, trials=trials, metric=metric, direction=search.direction(metric), limit=limit)


def plot_throughput(search: Search) -> go.Figure:
    """Training samples per second per device, and the share of step time in all-reduce,
    against world size: COMPLETE trials as points, the median and quartiles per world size."""
    from hpsearch.dashboards.figures import throughput_figure

    return throughput_figure(search.trials_dataframe())


def plot_noise_scale(search: Search) -> go.Figure:
    """The gradient noise scale of COMPLETE trials against their effective batch, by LR rule."""
    from hpsearch.dashboards.figures import noise_scale_figure

    return noise_scale_figure(search.trials_dataframe())


def _require_columns(df: pd.DataFrame, *columns: str) -> None:
    """Raise ``ColumnError`` for a column the study's completed trials lack."""
    # Only completed trials carry metrics; a study with none yet gets an empty figure.
    completed = len(df) and bool((df["state"] == "COMPLETE").any())
    for column in columns:
        if completed and column not in df.columns:
            raise ColumnError(f"no column {column!r} in this study's trials; columns: {', '.join(map(str, df.columns))}")
