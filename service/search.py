"""The Python study API: ``start`` a search, ``load`` a study, read it as tables and figures."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch.errors import ColumnError
from hpsearch.progress import SearchEvent
from hpsearch.search_spaces import SearchSpace, load_space, space_from_mapping
from hpsearch.settings import resolve_settings
from hpsearch.store import (
    ATTR_N_TRIALS,
    ATTR_SPACE_TEXT,
    load_study,
    open_storage,
    redact_url,
    sqlite_file,
)

if TYPE_CHECKING:
    import optuna
    import pandas as pd
    import plotly.graph_objects as go
    from hpsearch.orchestrator import SearchPlan

__all__ = ["Search", "frontier_axes", "load", "metric_direction", "resume", "start"]

#: Metrics where lower is better; every other column is taken as higher-is-better on a frontier.
_LOWER_IS_BETTER = {"runtime_s", "device_seconds", "val_loss", "train_loss", "comm_fraction"}

#: User attrs that are not columns of the trials table (series, long text).
_NOT_COLUMNS = {"curves", "status_detail"}


def metric_direction(metric: str) -> str:
    """``"minimize"`` for costs and losses, ``"maximize"`` otherwise.

    Example:
        >>> metric_direction("runtime_s"), metric_direction("val_accuracy")
        ('minimize', 'maximize')
    """
    return "minimize" if metric in _LOWER_IS_BETTER else "maximize"


class Search:
    """One study in a store: what a search wrote, readable while it runs and after.

    Example:
        >>> import hpsearch, optuna
        >>> from hpsearch.dashboards.synthetic import synthetic_study
        >>> storage = optuna.storages.InMemoryStorage()  # or "sqlite:///hpsearch.db"
        >>> _ = synthetic_study(storage, "demo", n_trials=40)
        >>> search = hpsearch.load("demo", storage=storage)
        >>> search.objectives
        ['val_accuracy', 'runtime_s']
        >>> list(search.frontier(x="runtime_s", y="val_accuracy")["number"])
        [39, 22, 9, 12, 26]
    """

    def __init__(self, study_name: str, storage: str | optuna.storages.BaseStorage) -> None:
        self.study_name = study_name
        self.storage = storage

    def __repr__(self) -> str:
        where = redact_url(self.storage) if isinstance(self.storage, str) else type(self.storage).__name__
        return f"Search(study_name={self.study_name!r}, storage={where!r})"

    @cached_property
    def study(self) -> optuna.Study:
        """The Optuna study (raises ``StudyNotFoundError`` if the store has none of that name)."""
        return load_study(self.study_name, open_storage(self.storage))

    @property
    def objectives(self) -> list[str]:
        """The objective metric names, in the study's order."""
        return list(self.study.metric_names or [f"value{i}" for i in range(len(self.study.directions))])

    @property
    def space_text(self) -> str:
        """The space file text the search was started with."""
        return str(self.study.user_attrs.get(ATTR_SPACE_TEXT, ""))

    def trials_dataframe(self, *, all_attrs: bool = False) -> pd.DataFrame:
        """One row per trial: ``number``, ``state``, every param and user attr as a column, the
        objective values under their metric names, and timing columns.

        The per-epoch ``curves`` and the long ``status_detail`` are left out unless
        ``all_attrs`` is true (``hpsearch export`` sets it).

        Example:
            >>> import optuna
            >>> from hpsearch.dashboards.synthetic import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
            >>> df = search.trials_dataframe()
            >>> df.state.value_counts().to_dict()
            {'COMPLETE': 36, 'FAIL': 3, 'PRUNED': 1}
            >>> best = df[df.state == "COMPLETE"].sort_values("val_accuracy").tail(2)
            >>> best[["number", "lr_rule", "effective_batch_size"]].to_dict("records")
            [{'number': 21, 'lr_rule': 'constant', 'effective_batch_size': 128}, {'number': 26, 'lr_rule': 'linear', 'effective_batch_size': 1024}]
        """
        import optuna
        import pandas as pd

        hidden = frozenset() if all_attrs else frozenset(_NOT_COLUMNS)
        backend = open_storage(self.storage)
        if isinstance(backend, optuna.storages.RDBStorage):
            # An SQL store: read the tables in bulk (hpsearch.table), 10x faster at 10,000 trials.
            from hpsearch.table import trial_rows

            return pd.DataFrame(trial_rows(backend, self.study_name, self.objectives, hidden=hidden))
        rows = []
        for t in self.study.get_trials(deepcopy=False):
            row: dict[str, Any] = {"number": t.number, "state": t.state.name}
            row.update(t.params)
            row.update({k: v for k, v in t.user_attrs.items() if k not in hidden})
            if t.values is not None:
                row.update(dict(zip(self.objectives, t.values)))
            row["datetime_start"] = t.datetime_start
            row["datetime_complete"] = t.datetime_complete
            row["duration_s"] = (
                (t.datetime_complete - t.datetime_start).total_seconds()
                if t.datetime_start and t.datetime_complete else None
            )
            rows.append(row)
        return pd.DataFrame(rows)

    def frontier(self, x: str = "runtime_s", y: str = "val_accuracy") -> pd.DataFrame:
        """The non-dominated COMPLETE trials on two columns, ordered by ``x``.

        Directions follow the metric (``runtime_s`` minimised, ``val_accuracy`` maximised...).

        Example:
            >>> import optuna
            >>> from hpsearch.dashboards.synthetic import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
            >>> front = search.frontier(x="device_seconds", y="val_accuracy")
            >>> bool(front["device_seconds"].is_monotonic_increasing), bool(front["val_accuracy"].is_monotonic_increasing)
            (True, True)
        """
        from hpsearch.dashboards import frontier_info

        df = self.trials_dataframe()
        info = _checked(frontier_info, df, x, y)
        if not info.front:
            return df.iloc[0:0]
        return df.set_index("number").loc[list(info.front)].reset_index()

    def frontier_figure(self, x: str = "runtime_s", y: str = "val_accuracy") -> go.Figure:
        """The frontier as a plotly figure: trials colored by rule, sized by effective batch."""
        from hpsearch.dashboards.figures import frontier_figure

        return _checked(frontier_figure, self.trials_dataframe(), x, y)

    def device_seconds_frontier_figure(self, y: str = "val_accuracy") -> go.Figure:
        """The device-seconds-vs-accuracy frontier: what each trial cost in devices x time
        (``runtime_s`` x processes), so a fast 8-device trial is weighed against a slower
        1-device one. The same as ``frontier_figure(x="device_seconds", y=y)``.

        Raises:
            ColumnError: ``y`` is not a column of this study's completed trials.

        Example:
            >>> import optuna
            >>> from hpsearch.dashboards.synthetic import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
            >>> search.device_seconds_frontier_figure().layout.xaxis.title.text
            'device-seconds'
        """
        return self.frontier_figure(x="device_seconds", y=y)

    def accuracy_vs_batch_figure(self, metric: str = "val_accuracy") -> go.Figure:
        """``metric`` against effective batch size, one line per LR rule; each point is the best
        COMPLETE trial of its rule and batch (``hpsearch.dashboards.plots.accuracy_vs_batch_info``).

        Raises:
            ColumnError: ``metric`` is not a column of this study's completed trials.

        Example:
            >>> import optuna
            >>> from hpsearch.dashboards.synthetic import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=60)
            >>> fig = search.accuracy_vs_batch_figure()
            >>> [trace.name for trace in fig.data], fig.layout.xaxis.type
            (['constant', 'linear', 'sqrt'], 'log')
        """
        from hpsearch.dashboards.figures import accuracy_vs_batch_figure

        df = self.trials_dataframe()
        _require_columns(df, metric)
        return accuracy_vs_batch_figure(df, metric=metric, direction=metric_direction(metric))

    def learning_curves_figure(
        self, trials: Sequence[int] | None = None, metric: str = "val_accuracy", limit: int = 20
    ) -> go.Figure:
        """Per-epoch ``metric`` against samples seen, one line per trial: the trials numbered in
        ``trials`` (any state), or by default the ``limit`` best COMPLETE trials.

        Raises:
            ColumnError: no trial recorded a ``metric`` curve (while some recorded curves).
            ValueError: ``trials`` names a trial number the study does not have.

        Example:
            >>> import optuna
            >>> from hpsearch.dashboards.synthetic import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=60)
            >>> len(search.learning_curves_figure(limit=5).data)
            5
            >>> [trace.name for trace in search.learning_curves_figure(trials=[3, 7], metric="val_loss").data]
            ['trial 3', 'trial 7']
        """
        from hpsearch.dashboards.figures import learning_curves_figure
        from hpsearch.dashboards.plots import curve_metrics

        df = self.trials_dataframe(all_attrs=True)
        recorded = curve_metrics(df)
        if recorded and metric not in recorded:
            raise ColumnError(f"no curve {metric!r} in this study's trials; curves: {', '.join(recorded)}")
        return learning_curves_figure(
            df, trials=trials, metric=metric, direction=metric_direction(metric), limit=limit
        )

    def throughput_figure(self) -> go.Figure:
        """Training samples per second per device, and the share of step time in all-reduce,
        against world size: COMPLETE trials as points, the median and quartiles per world size.

        Example:
            >>> import optuna
            >>> from hpsearch.dashboards.synthetic import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
            >>> search.throughput_figure().layout.yaxis.title.text
            'throughput per device (samples/s)'
        """
        from hpsearch.dashboards.figures import throughput_figure

        return throughput_figure(self.trials_dataframe())

    def noise_scale_figure(self) -> go.Figure:
        """The gradient noise scale of COMPLETE trials against their effective batch, by LR rule.

        Example:
            >>> import optuna
            >>> from hpsearch.dashboards.synthetic import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
            >>> search.noise_scale_figure().layout.yaxis.title.text
            'gradient noise scale'
        """
        from hpsearch.dashboards.figures import noise_scale_figure

        return noise_scale_figure(self.trials_dataframe())

    def pareto_front(self) -> pd.DataFrame:
        """The study's Pareto-optimal COMPLETE trials on its own objectives, as Optuna computes
        them (``study.best_trials``), in the layout of ``trials_dataframe``; for a
        single-objective study, the best trial(s).

        Example:
            >>> import optuna
            >>> from hpsearch.dashboards.synthetic import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
            >>> list(search.pareto_front()["number"])
            [9, 12, 22, 26, 39]
        """
        df = self.trials_dataframe()
        numbers = sorted(t.number for t in self.study.best_trials) if len(df) else []
        if not numbers:
            return df.iloc[0:0]
        return df.set_index("number").loc[numbers].reset_index()

    @property
    def best_trial(self) -> optuna.trial.FrozenTrial | None:
        """The COMPLETE trial best on the first objective, or ``None`` before any completes.

        Example:
            >>> import optuna
            >>> from hpsearch.dashboards.synthetic import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
            >>> search.best_trial.number, search.best_trial.params["lr_rule"]
            (26, 'linear')
        """
        import optuna

        done = [t for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))]
        if not done:
            return None
        maximize = self.study.directions[0] == optuna.study.StudyDirection.MAXIMIZE
        return (max if maximize else min)(done, key=lambda t: t.values[0])

    def summary(self) -> dict[str, Any]:
        """Counts by state, finished trials against the target, objectives and the best trial,
        as plain data.

        Example:
            >>> import optuna
            >>> from hpsearch.dashboards.synthetic import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
            >>> summary = search.summary()
            >>> summary["states"], summary["finished"], summary["best_trial"]["number"]
            ({'COMPLETE': 36, 'PRUNED': 1, 'FAIL': 3}, 40, 26)
        """
        states: dict[str, int] = {}
        for t in self.study.get_trials(deepcopy=False):
            states[t.state.name] = states.get(t.state.name, 0) + 1
        from hpsearch.reasons import counts_toward_n_trials

        best = self.best_trial
        target = self.study.user_attrs.get(ATTR_N_TRIALS)
        return {
            "study": self.study_name,
            "objectives": self.objectives,
            "directions": [d.name.lower() for d in self.study.directions],
            "n_trials": sum(states.values()),
            "finished": sum(counts_toward_n_trials(t) for t in self.study.get_trials(deepcopy=False)),
            "target": None if target is None else int(target),
            "states": states,
            "best_trial": None if best is None else {
                "number": best.number, "values": dict(zip(self.objectives, best.values)), "params": best.params,
            },
        }


def frontier_axes(objectives: list[str]) -> tuple[str, str]:
    """The default frontier axes for a study: runtime against its first quality objective
    (``val_accuracy`` when no objective measures quality)."""
    costs = {"runtime_s", "device_seconds"}
    quality = [m for m in objectives if m not in costs]
    return "runtime_s", quality[0] if quality else "val_accuracy"


def _checked(fn: Callable[..., Any], df: Any, x: str, y: str) -> Any:
    """Call a frontier function, turning its missing-column ValueError into ``ColumnError``."""
    _require_columns(df, x, y)
    return fn(df, x=x, y=y, x_direction=metric_direction(x), y_direction=metric_direction(y))


def _require_columns(df: Any, *columns: str) -> None:
    """Raise ``ColumnError`` for a column the study's completed trials lack."""
    # Only completed trials carry metrics; a study with none yet gets an empty figure.
    completed = len(df) and bool((df["state"] == "COMPLETE").any())
    for column in columns:
        if completed and column not in df.columns:
            raise ColumnError(f"no column {column!r} in this study's trials; columns: {', '.join(map(str, df.columns))}")


def start(
    space: SearchSpace | Mapping[str, Any] | str | os.PathLike[str],
    *,
    storage: str | None = None,
    study: str | None = None,
    address: str | None = None,
    on_event: Callable[[SearchEvent], None] | None = None,
    on_plan: Callable[[SearchPlan], None] | None = None,
) -> Search:
    """Run a search to the end and return it.

    Args:
        space: A ``SearchSpace``, a path to a space file, or a mapping in the file's schema.
        storage: Store URL; default: ``HPSEARCH_STORAGE``, then the file's ``storage``, then
            ``sqlite:///hpsearch.db``.
        study: Study name; default: the file's ``study`` (or its file name).
        address: Ray cluster to join; default ``RAY_ADDRESS``, else a local Ray.
        on_event: Called for each trial event (progress displays).
        on_plan: Called once with the ``SearchPlan`` before the first trial.

    Raises:
        SpaceError, StudyExistsError, ResourceError, WorkloadError, StoreError.

    Example:
        >>> search = hpsearch.start("space.yaml")  # doctest: +SKIP
        >>> search.best_trial.params  # doctest: +SKIP
    """
    from hpsearch.orchestrator import run_search

    if isinstance(space, Mapping):
        space = space_from_mapping(space)
    elif not isinstance(space, SearchSpace):
        space = load_space(space)
    settings = resolve_settings({"storage": space.storage}, storage=storage, ray_address=address)
    name = study or space.study
    run_search(space, name, settings, on_event=on_event, on_plan=on_plan)
    return Search(name, settings.storage)


def resume(
    study: str,
    *,
    storage: str | None = None,
    address: str | None = None,
    n_trials: int | None = None,
    on_event: Callable[[SearchEvent], None] | None = None,
    on_plan: Callable[[SearchPlan], None] | None = None,
) -> Search:
    """Finish a study whose search was stopped (killed, interrupted) or extend it.

    Finished trials stay as they are; trials left RUNNING become FAIL with ``status_reason``
    ``interrupted`` and their configurations run again; trials run until the study has
    ``n_trials`` finished ones (skipped and interrupted trials do not count).

    Args:
        study: The study's name.
        storage: Store URL; default: ``HPSEARCH_STORAGE``, then ``sqlite:///hpsearch.db``.
        address: Ray cluster to join; default ``RAY_ADDRESS``, else a local Ray.
        n_trials: A new total of finished trials (kept by the study for later resumes).

    Raises:
        StudyNotFoundError, StudyBusyError, SpaceError, ResourceError, StoreError.

    Example:
        >>> hpsearch.resume("digits-quickstart").summary()["states"]  # doctest: +SKIP
    """
    from hpsearch.orchestrator import resume_search

    settings = resolve_settings(storage=storage, ray_address=address)
    resume_search(study, settings, n_trials=n_trials, on_event=on_event, on_plan=on_plan)
    return Search(study, settings.storage)


def load(study: str, storage: str | optuna.storages.BaseStorage | None = None) -> Search:
    """Open an existing study.

    Raises:
        StudyNotFoundError: the store has no study of that name.

    Example:
        >>> hpsearch.load("digits-quickstart").summary()["states"]  # doctest: +SKIP
        {'COMPLETE': 12}
    """
    store = storage if storage is not None else resolve_settings().storage
    search = Search(study, store)
    search.study  # fail now, not on first use
    return search


def frontier_path(search: Search) -> Path:
    """Where ``hpsearch start`` writes the frontier: beside the SQLite file, else the working folder."""
    db = sqlite_file(search.storage) if isinstance(search.storage, str) else None
    base = db.parent if db is not None else Path.cwd()
    return base / f"{search.study_name}-frontier.html"


