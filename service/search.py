"""The Python study API: ``start`` a search, ``load`` a study, read it as tables.

``Search`` is a thin caller of the read model (``hpsearch.study``): what a study says is
computed there once, for the CLI, this API and the dashboard alike. Figures of a ``Search``
live with the dashboard (``hpsearch.dashboards.plot_frontier(search)``...), as Optuna's
plots live in ``optuna.visualization``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch import study as read_model
from hpsearch.errors import ColumnError
from hpsearch.progress import SearchEvent
from hpsearch.search_spaces import Budget, SearchSpace, load_space, parse_budget_text, space_from_mapping
from hpsearch.search_spaces.record import CURVES, STATUS_DETAIL, Direction
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

    from hpsearch.analysis import Recommendation, StudyAnalysis
    from hpsearch.orchestrator import SearchPlan
    from hpsearch.torchrun import ExportedTrial

__all__ = ["Search", "frontier_axes", "load", "resume", "start"]

#: User attrs that are not columns of the trials table (series, long text).
_NOT_COLUMNS = frozenset({CURVES, STATUS_DETAIL})


class Search:
    """One study in a store: what a search wrote, readable while it runs and after.

    Example:
        >>> import hpsearch, optuna
        >>> from hpsearch.testing import synthetic_study
        >>> storage = optuna.storages.InMemoryStorage()  # or "sqlite:///hpsearch.db"
        >>> _ = synthetic_study(storage, "demo", n_trials=40)
        >>> search = hpsearch.load("demo", storage=storage)
        >>> search.objectives
        ['val_accuracy', 'runtime_s']
        >>> front = search.frontier(x="runtime_s", y="val_accuracy")
        >>> bool(front["runtime_s"].is_monotonic_increasing), bool(front["val_accuracy"].is_monotonic_increasing)
        (True, True)
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
    def backend(self) -> optuna.storages.BaseStorage:
        """The Optuna storage the study lives in."""
        return open_storage(self.storage)

    @cached_property
    def info(self) -> read_model.StudyInfo:
        """What the study declares: objectives, their directions, its own attrs (as first read)."""
        _ = self.study  # a missing study is StudyNotFoundError, naming the studies the store has
        return read_model.study_info(self.backend, self.study_name)

    @property
    def objectives(self) -> list[str]:
        """The objective metric names, in the study's order."""
        return list(self.info.objectives)

    @property
    def directions(self) -> list[str]:
        """``maximize`` or ``minimize`` for each objective, as the study stores them."""
        return list(self.info.directions)

    def direction(self, metric: str) -> Direction:
        """Which values of ``metric`` are better: the study's direction for an objective, the
        trial record's for any other measurement (``hpsearch.study.direction``).

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=4)
            >>> search.direction("runtime_s"), search.direction("val_loss")
            ('minimize', 'minimize')
        """
        return read_model.direction(metric, self.info.objective_directions)

    @property
    def space_text(self) -> str:
        """The space file text the search was started with."""
        return str(self.study.user_attrs.get(ATTR_SPACE_TEXT, ""))

    def trials_dataframe(self, *, all_attrs: bool = False) -> pd.DataFrame:
        """One row per trial: ``number``, ``state``, every param and user attr as a column, the
        objective values under their metric names, and timing columns.

        ``state`` is Optuna's, except ``PENDING`` for a trial that was proposed and waits for its
        resources (Optuna holds it as RUNNING). The per-evaluation ``curves`` and the long
        ``status_detail`` are left out unless ``all_attrs`` is true (``hpsearch export`` sets it).

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
            >>> df = search.trials_dataframe()
            >>> sorted(df.state.unique())
            ['COMPLETE', 'FAIL', 'PRUNED']
        """
        hidden = frozenset() if all_attrs else _NOT_COLUMNS
        return read_model.read_trials(self.backend, self.study_name, self.objectives, hidden=hidden)

    def frontier(self, x: str = "runtime_s", y: str = "val_accuracy") -> pd.DataFrame:
        """The non-dominated COMPLETE trials on two columns, ordered by ``x``, in the layout of
        ``trials_dataframe``. Directions follow ``direction`` (``runtime_s`` minimised,
        ``val_accuracy`` maximised...).

        Raises:
            ColumnError: ``x`` or ``y`` is not a column of the study's completed trials.
        """
        df = self.trials_dataframe()
        try:
            numbers = read_model.frontier_numbers(df, x, y, x_direction=self.direction(x),
                                                  y_direction=self.direction(y))
        except KeyError as exc:
            raise ColumnError(f"no column {exc.args[0]!r} in this study's trials; columns: "
                              f"{', '.join(map(str, df.columns))}") from None
        if not numbers:
            return df.iloc[0:0]
        return df.set_index("number").loc[numbers].reset_index()

    def pareto_front(self) -> pd.DataFrame:
        """The study's Pareto-optimal COMPLETE trials on its own objectives, as Optuna computes
        them (``study.best_trials``), in the layout of ``trials_dataframe``; for a
        single-objective study, the best trial(s).

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
            >>> search.summary()["best_trial"]["number"] in set(search.pareto_front()["number"])
            True
        """
        df = self.trials_dataframe()
        numbers = sorted(t.number for t in self.study.best_trials) if len(df) else []
        if not numbers:
            return df.iloc[0:0]
        return df.set_index("number").loc[numbers].reset_index()

    @property
    def best_trial(self) -> optuna.trial.FrozenTrial | None:
        """The best COMPLETE trial (``hpsearch.study.best_trial_number``): best on the first
        objective, a tie broken by the next one, so never a dominated trial; ``None`` before
        any trial completes."""
        number = read_model.best_trial_number(self.trials_dataframe(), self.objectives, self.directions)
        if number is None:
            return None
        backend = self.backend
        study_id = backend.get_study_id_from_name(self.study_name)
        return backend.get_trial(backend.get_trial_id_from_study_id_trial_number(study_id, number))

    def model_path(self, number: int) -> str | None:
        """Where trial ``number``'s final weights are (a torch state dict for the workload's
        model), or ``None`` when it kept none: the space did not set ``workload.save_model``,
        the trial did not complete, or, with ``save_model: best``, a better trial made the
        search delete them. The path is on the node that ran the trial's rank 0.

        Raises:
            TrialNotFoundError: the study has no trial ``number``.

        Example:
            >>> import torch  # doctest: +SKIP
            >>> search = hpsearch.load("my-study")  # doctest: +SKIP
            >>> state = torch.load(search.model_path(search.best_trial.number))  # doctest: +SKIP
        """
        from hpsearch.errors import TrialNotFoundError
        from hpsearch.search_spaces.record import MODEL_PATH

        df = self.trials_dataframe()
        rows = df[df["number"] == number] if len(df) else df
        if not len(rows):
            raise TrialNotFoundError(f"study {self.study_name!r} has no trial #{number} (it has {len(df)} trials)")
        value = rows.iloc[0].get(MODEL_PATH)
        return value if isinstance(value, str) else None

    def export_trial(self, number: int, folder: str | os.PathLike[str], *, world_size: int | None = None,
                     epochs: int | None = None) -> ExportedTrial:
        """Write trial ``number`` as a torchrun job into ``folder``: ``trial.json`` (its full
        configuration) and ``launch.sh``; ``bash launch.sh`` trains it with torchrun, without
        Ray or the store, and writes the final weights and metrics beside them
        (``hpsearch.torchrun``).

        Args:
            world_size: Train at this many ranks (the LR follows the trial's rule at the new
                effective batch); default: the trial's.
            epochs: Train this many epochs; default: the trial's.

        Raises:
            TrialNotFoundError: no such trial, or one without a full configuration.

        Example:
            >>> job = hpsearch.load("digits-quickstart").export_trial(7, "run7", world_size=4)  # doctest: +SKIP
            >>> job.launch, job.spec.lr  # doctest: +SKIP
        """
        from hpsearch.torchrun import export_trial

        return export_trial(self.study, number, folder, world_size=world_size, epochs=epochs)

    def summary(self) -> dict[str, Any]:
        """Counts by state, finished trials against the target, objectives and the best trial,
        as plain data (``hpsearch.study.StudySummary.to_dict``).

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
            >>> summary = search.summary()
            >>> summary["n_trials"], summary["finished"], sorted(summary["states"])
            (40, 40, ['COMPLETE', 'FAIL', 'PRUNED'])
        """
        target = self.study.user_attrs.get(ATTR_N_TRIALS)
        summary = read_model.summarize(
            self.study_name, self.trials_dataframe(), self.objectives, self.directions,
            params=read_model.param_names(self.backend, self.study_name),
            target=None if target is None else int(target))
        return summary.to_dict()

    def analyze(self, target: str | tuple[str, float] | None = None) -> StudyAnalysis:
        """What the trials say: time to the target per trial, the critical batch, the LR law,
        each rule's regret and breaking batch, the step-time model (``hpsearch.analysis``).

        Args:
            target: ``"val_accuracy=0.95"`` or ``("val_accuracy", 0.95)``; default: the space's
                ``analysis.target``, else one derived from the study (docs/analysis.md).

        Raises:
            AnalysisError: no trial to analyse, or a malformed target.

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=300)
            >>> analysis = search.analyze("val_accuracy=0.9")
            >>> str(analysis.target), analysis.critical_batch.n_batch_sizes >= 3
            ('val_accuracy >= 0.9', True)
        """
        from hpsearch.analysis import analyze, parse_target

        return analyze(self, parse_target(target) if isinstance(target, str) else target)

    def time_to_target(self, target: str | tuple[str, float] | None = None) -> pd.DataFrame:
        """One row per trial: its configuration and the samples, steps, training seconds, wall
        seconds and device-seconds it took to reach the target (NaN where it did not).

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
            >>> df = search.time_to_target("val_accuracy=0.9")
            >>> bool((df["samples_to_target"].dropna() > 0).all()), "seconds_to_target" in df.columns
            (True, True)
        """
        import pandas as pd

        return pd.DataFrame(list(self.analyze(target).trials))

    def recommend(self, devices: int, *, target: str | tuple[str, float] | None = None,
                  minimize: str = "time", allow_larger_batch: bool = False) -> Recommendation:
        """What to run on ``devices`` devices: the per-device batch, world size (at most
        ``devices``), accumulation, rule and LR with the least predicted time (or
        device-hours, ``minimize="device-hours"``) to the target, with intervals and what was
        extrapolated (``hpsearch.analysis.recommend``).

        Raises:
            AnalysisError: no trial reached the target and no law could be fitted, or bad input.

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=300)
            >>> answer = search.recommend(8, target="val_accuracy=0.9")
            >>> answer.world_size <= 8, answer.basis
            (True, 'fitted laws')
        """
        from hpsearch.analysis import recommend

        return recommend(self.analyze(target), devices, minimize=minimize,  # type: ignore[arg-type]
                         allow_larger_batch=allow_larger_batch)


def frontier_axes(objectives: list[str]) -> tuple[str, str]:
    """The default frontier axes for a study: runtime against its first quality objective
    (``val_accuracy`` when no objective measures quality)."""
    costs = {"runtime_s", "device_seconds"}
    quality = [m for m in objectives if m not in costs]
    return "runtime_s", quality[0] if quality else "val_accuracy"


def start(
    space: SearchSpace | Mapping[str, Any] | str | os.PathLike[str],
    *,
    storage: str | None = None,
    study: str | None = None,
    address: str | None = None,
    on_event: Callable[[SearchEvent], None] | None = None,
    on_plan: Callable[[SearchPlan], None] | None = None,
    budget: Budget | str | None = None,
) -> Search:
    """Run a search to the end (its ``n_trials``, or its budget, whichever comes first) and
    return it.

    Args:
        space: A ``SearchSpace``, a path to a space file, or a mapping in the file's schema.
        storage: Store URL; default: ``HPSEARCH_STORAGE``, then the file's ``storage``, then
            ``sqlite:///hpsearch.db``.
        study: Study name; default: the file's ``study`` (or its file name).
        address: Ray cluster to join; default ``RAY_ADDRESS``, else a local Ray.
        on_event: Called for each trial event (progress displays).
        on_plan: Called once with the ``SearchPlan`` before the first trial.
        budget: What the whole search may spend: ``"2h"``, ``"1.5dh"`` (device-hours),
            ``"2h, 4dh"`` or a ``Budget``; it replaces the limits of the space's
            ``search.budget`` that it names.

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
    run_search(space, name, settings, on_event=on_event, on_plan=on_plan, budget=_budget(budget))
    return Search(name, settings.storage)


def resume(
    study: str,
    *,
    storage: str | None = None,
    address: str | None = None,
    n_trials: int | None = None,
    on_event: Callable[[SearchEvent], None] | None = None,
    on_plan: Callable[[SearchPlan], None] | None = None,
    budget: Budget | str | None = None,
) -> Search:
    """Finish a study whose search was stopped (killed, interrupted) or extend it.

    Finished trials stay as they are; trials left RUNNING become FAIL with ``status_reason``
    ``interrupted`` and their configurations run again; trials run until the study has
    ``n_trials`` finished ones (skipped, interrupted and budget-stopped trials do not count), or
    its budget is spent.

    Args:
        study: The study's name.
        storage: Store URL; default: ``HPSEARCH_STORAGE``, then ``sqlite:///hpsearch.db``.
        address: Ray cluster to join; default ``RAY_ADDRESS``, else a local Ray.
        n_trials: A new total of finished trials (kept by the study for later resumes).
        budget: A new budget for the whole study, what earlier runs spent included (``"3h"``,
            ``"2dh"``, ``"none"``...; kept by the study); it replaces the limits it names.

    Raises:
        StudyNotFoundError, StudyBusyError, SpaceError, ResourceError, StoreError.

    Example:
        >>> hpsearch.resume("digits-quickstart").summary()["states"]  # doctest: +SKIP
    """
    from hpsearch.orchestrator import resume_search

    settings = resolve_settings(storage=storage, ray_address=address)
    resume_search(study, settings, n_trials=n_trials, on_event=on_event, on_plan=on_plan, budget=_budget(budget))
    return Search(study, settings.storage)


def _budget(budget: Budget | str | None) -> Budget | None:
    return parse_budget_text(budget, source="budget") if isinstance(budget, str) else budget


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
    _ = search.study  # fail now, not on first use
    return search


def frontier_path(search: Search) -> Path:
    """Where ``hpsearch start`` writes the frontier: beside the SQLite file, else the working folder."""
    db = sqlite_file(search.storage) if isinstance(search.storage, str) else None
    base = db.parent if db is not None else Path.cwd()
    return base / f"{search.study_name}-frontier.html"


