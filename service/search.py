"""The Python study API: ``start`` a search, ``load`` a study, read it as tables, list and
delete studies.

``Search`` is a thin caller of the read model (``hpsearch.study``): what a study says is
computed there once, for the CLI, this API and the dashboard alike. The ``hpsearch`` command
calls only what this module offers. Figures of a ``Search`` live with the dashboard
(``hpsearch.dashboards.plot_frontier(search)``...), as Optuna's plots live in
``optuna.visualization``.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from hpsearch import study as read_model
from hpsearch.budget import BudgetStatus, budget_status
from hpsearch.errors import AnalysisError, ColumnError, SearchInterrupted, TrialNotFoundError
from hpsearch.locks import SearchProcess, search_process, study_lock
from hpsearch.ownership import FileVerdict, Owner, judge_files, release_runs_dir, store_identity, study_uid
from hpsearch.planner.plan import GridProgress, grid_progress  # the space against its grid: no Ray
from hpsearch.progress import SearchEvent
from hpsearch.record import (
    ATTR_N_TRIALS,
    ATTR_SPACE_TEXT,
    ATTR_STUDY_UID,
    CURVES,
    FUSED_GROUP,
    MODEL_PATH,
    STATUS_DETAIL,
    WORLD_SIZE,
    Direction,
)
from hpsearch.search_spaces import (
    MAX_N_TRIALS,
    Budget,
    SearchSpace,
    SpaceError,
    load_space,
    parse_budget_text,
    space_from_mapping,
)
from hpsearch.settings import Settings, resolve_settings, study_runs_dir
from hpsearch.store import (
    load_study,
    missing_store,
    open_storage,
    parse_storage_url,
    space_of_study,
    sqlite_file,
    store_name,
)
from hpsearch.torchrun import ExportedTrial, export_trial
from hpsearch.tracking import LiveTracker, StudyEnd, TrackingReport, export_study, study_pages, tracking_target

# ``import hpsearch`` stays light (docs/design.md, "Imports"): optuna and pandas load inside the
# methods that use them, the analysis (numpy, scipy) and the search engine (Ray) through
# ``_analysis`` and ``_orchestrator``.
if TYPE_CHECKING:
    import optuna
    import pandas as pd

    from hpsearch.analysis import Recommendation, StudyAnalysis
    from hpsearch.planner.plan import SearchPlan

__all__ = ["DeletedStudy", "Search", "confirm", "delete_study", "list_studies", "load", "resume", "start"]

log = logging.getLogger("hpsearch")

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
        self.storage = parse_storage_url(storage) if isinstance(storage, str) else storage
        #: What the search that returned this object logged to MLflow (``tracking:``), else ``None``.
        self.tracking: TrackingReport | None = None

    def __repr__(self) -> str:
        return f"Search(study_name={self.study_name!r}, storage={store_name(self.storage)!r})"

    @cached_property
    def study(self) -> optuna.Study:
        """The Optuna study (raises ``StudyNotFoundError`` if the store has none of that name)."""
        return load_study(self.study_name, self.storage)

    @property
    def backend(self) -> optuna.storages.BaseStorage:
        """The Optuna storage the study lives in (an SQLite file that does not exist is not
        created: ``StoreError``)."""
        return open_storage(self.storage, create=False)

    @cached_property
    def space(self) -> SearchSpace:
        """The space the study was started with, parsed again from the text the study keeps
        (``space_text``).

        Raises:
            SpaceError: the study was not started by hpsearch, or its text no longer validates
                (a space written for another release).

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=4)
            >>> search.space.objectives[0].metric, search.space.search.sampler
            ('val_accuracy', 'random')
        """
        return space_of_study(self.study)

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

    def trials_dataframe(self, *, all_attrs: bool = False, curves: bool = False) -> pd.DataFrame:
        """One row per trial: ``number``, ``state``, every param and user attr as a column (its
        ``peak_memory_bytes`` in bytes, its ``ran_as`` where the search halved its batch; for a
        fused member its ``fused_group``, ``fused_members``, ``runtime_basis`` (``solo_estimate``:
        its ``runtime_s`` is an estimate of it alone), ``fused_runtime_s``, ``fused_step_s`` and
        ``solo_step_s``; ``fuse``: ``off: <why>`` for a trial that ran on its own), the objective
        values under their metric names, and timing columns.

        ``state`` is Optuna's, except ``PENDING`` for a trial that was proposed and waits for its
        resources (Optuna holds it as RUNNING). The per-evaluation ``curves`` and the long
        ``status_detail`` are left out unless ``all_attrs`` is true (``hpsearch export`` sets it).

        With ``curves=True`` a ``curves`` column holds each trial's evaluations in order, one
        dict per evaluation (``samples_seen``, ``val_accuracy``, ``val_loss``...; ``[]`` for a
        trial that reported none), read for this call only: they are most of a study's bytes.

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
            >>> df = search.trials_dataframe()
            >>> sorted(df.state.unique())
            ['COMPLETE', 'FAIL', 'PRUNED']
            >>> first = search.trials_dataframe(curves=True)["curves"][0][0]
            >>> "samples_seen" in first and "val_accuracy" in first
            True
        """
        hidden = frozenset() if all_attrs else _NOT_COLUMNS
        df = read_model.read_trials(self.backend, self.study_name, self.objectives, hidden=hidden)
        if curves and len(df):
            stored = read_model.read_attr(self.backend, self.study_name, CURVES)
            df[CURVES] = [read_model.evaluations(stored.get(int(n))) for n in df["number"]]
        return df

    def frontier(self, x: str | None = None, y: str | None = None) -> pd.DataFrame:
        """The non-dominated COMPLETE trials on two columns, ordered by ``x``, in the layout of
        ``trials_dataframe``. Directions follow ``direction`` (``runtime_s`` minimised,
        ``val_accuracy`` maximised...).

        Args:
            x: The cost axis; default ``runtime_s`` (``frontier_axes``).
            y: The quality axis; default the study's first objective that is not a cost
                (``val_loss`` for a study that minimises it, ``frontier_axes``).

        Raises:
            ColumnError: ``x`` or ``y`` is not a column of the study's completed trials.

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
            >>> front = search.frontier()  # runtime_s against val_accuracy, this study's objective
            >>> bool(front["val_accuracy"].is_monotonic_increasing)
            True
        """
        default_x, default_y = self.frontier_axes
        x, y = x or default_x, y or default_y
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
        return self._trial(number)

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
        df = self.trials_dataframe()
        rows = df[df["number"] == number] if len(df) else df
        if not len(rows):
            raise TrialNotFoundError(f"study {self.study_name!r} has no trial #{number} (it has {len(df)} trials)")
        value = rows.iloc[0].get(MODEL_PATH)
        return value if isinstance(value, str) else None

    def trial_phases(self, number: int) -> read_model.TrialPhases:
        """Where trial ``number``'s time went: its configuration, state and reason, and the
        phases it recorded (asked, launched, devices free, devices reserved, ranks handed to
        workers, every rank ready, training started and ended, last report, told;
        ``hpsearch.study.TrialPhases``). Its ``timeline`` says how long it took to start
        (``startup_s``), how long it waited for devices other trials held (``waited_s``) and,
        after they were reserved, how long it trained and how long the rest took: the
        orchestrator's share (``hpsearch status STUDY --trial N`` prints it). Its ``fused`` says, for a trial that trained fused
        (``search.fuse``), its group and the group's members, that its ``runtime_s`` is an
        estimate of it alone, and the step times; for one that ran on its own, why.

        Raises:
            TrialNotFoundError: the study has no trial ``number``.

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=4)
            >>> trial = search.trial_phases(0)
            >>> trial.number, trial.params["lr_rule"] in ("constant", "linear", "sqrt")
            (0, True)
        """
        trial = self._trial(number)
        group = trial.user_attrs.get(FUSED_GROUP)
        members: tuple[int, ...] = ()
        if group is not None:  # one attr of every trial, not the table
            groups = read_model.read_attr(self.backend, self.study_name, FUSED_GROUP)
            members = read_model.group_members(groups.items(), group)
        return read_model.trial_phases(trial, members=members)

    def _trial(self, number: int) -> optuna.trial.FrozenTrial:
        """Trial ``number`` of the study (``TrialNotFoundError`` when it has none)."""
        backend = self.backend
        study_id = backend.get_study_id_from_name(self.study_name)
        try:
            if isinstance(number, bool) or number < 0:
                raise KeyError(number)
            trial_id = backend.get_trial_id_from_study_id_trial_number(study_id, number)
        except KeyError:
            n_trials = len(self.study.get_trials(deepcopy=False))
            has = f"its trials are #0 to #{n_trials - 1}" if n_trials else "it has no trials"
            raise TrialNotFoundError(f"study {self.study_name!r} has no trial #{number} ({has})") from None
        return backend.get_trial(trial_id)

    def export_trial(self, number: int, folder: str | os.PathLike[str], *, world_size: int | None = None,
                     epochs: int | None = None, nodes: int | None = None) -> ExportedTrial:
        """Write trial ``number`` as a torchrun job into ``folder``: ``trial.json`` (its full
        configuration) and ``launch.sh``; ``bash launch.sh`` trains it with torchrun, without
        Ray or the store, and writes the final weights and metrics beside them
        (``hpsearch.torchrun``).

        Args:
            world_size: Train at this many ranks (the LR follows the trial's rule at the new
                effective batch); default: the trial's.
            epochs: Train this many epochs; default: the trial's.
            nodes: Run the ranks on this many nodes (``launch.sh`` then runs once on each,
                with torchrun's c10d rendezvous); default: the trial's own node count at its
                own world size, one node at another.

        Raises:
            TrialNotFoundError: no such trial, or one without a full configuration.
            ResourceError: ``nodes`` is above the world size.

        Example:
            >>> job = hpsearch.load("digits-quickstart").export_trial(7, "run7", world_size=4)  # doctest: +SKIP
            >>> job.launch, job.spec.lr, job.warnings  # doctest: +SKIP
        """
        return export_trial(self.study, number, folder, world_size=world_size, epochs=epochs, nodes=nodes)

    def summary(self) -> dict[str, Any]:
        """Counts by state, finished trials against the target, objectives, the best trial,
        the trials ``resume`` runs again (``cut_short``) and the trials per status reason
        (``reasons``: ``out_of_memory``, ``exceeds_memory``...), as plain data
        (``hpsearch.study.StudySummary.to_dict``), and a grid study's ``grid``
        (``grid_progress``; ``None`` for other samplers). A grid study's target is at most its
        grid's configurations.

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=40)
            >>> summary = search.summary()
            >>> summary["n_trials"], summary["finished"], sorted(summary["states"]), summary["cut_short"]
            (40, 40, ['COMPLETE', 'FAIL', 'PRUNED'], {})
        """
        attrs = self.study.user_attrs
        target = attrs.get(ATTR_N_TRIALS)
        grid = self.grid_progress()
        if grid is not None and target is not None:
            # A grid runs each configuration once: a study recorded before its total was the
            # grid's size read "finished 4 of 8" for ever.
            target = min(int(target), grid.configurations)
        summary = read_model.summarize(
            self.study_name, self.trials_dataframe(), self.objectives, self.directions,
            params=read_model.param_names(self.backend, self.study_name),
            target=None if target is None else int(target),
            confirmations=[r.to_dict() for r in read_model.confirmation_rounds(attrs)])
        return {**summary.to_dict(), "grid": None if grid is None else grid.to_dict()}

    def grid_progress(self) -> GridProgress | None:
        """How far a grid study went through its grid (``hpsearch.planner.plan.GridProgress``):
        its configurations, those left, whether it is exhausted; ``None`` for a study whose
        sampler is not a grid, or without a space hpsearch can read.

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=4).grid_progress() is None
            True
        """
        if not self.study.user_attrs.get(ATTR_SPACE_TEXT):
            return None
        try:
            space = self.space
        except SpaceError:  # a space another release wrote: nothing to count its grid by
            return None
        return grid_progress(space, self.study.get_trials(deepcopy=False))

    @property
    def confirmations(self) -> tuple[read_model.ConfirmationRound, ...]:
        """The study's confirmation rounds, in order (``hpsearch.study.ConfirmationRound``): the
        answer each ran, what it predicted before it ran, what its runs measured, and whether it
        held (docs/analysis.md, "Confirmation")."""
        return read_model.confirmation_rounds(self.study.user_attrs)

    def search_process(self) -> SearchProcess:
        """Whether a search writes the study now (``hpsearch.locks.search_process``): trials
        left RUNNING while none does were cut short by a search that died (``kill -9``, a
        crash), and ``resume`` runs them again.

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=4).search_process().running is None
            True
        """
        if not isinstance(self.storage, str):
            return SearchProcess(running=None)
        return search_process(self.storage, self.study_name)

    def budget_status(self) -> BudgetStatus:
        """The study's budget (``search.budget``, or the one last given to ``start`` or
        ``resume``), what its searches spent over every run, and what is left
        (``hpsearch.budget.BudgetStatus``; ``budget.limited`` is false for a study without one).

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> status = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=4).budget_status()
            >>> status.budget.limited, status.spent_out
            (False, False)
        """
        return budget_status(self.study)

    @property
    def frontier_axes(self) -> tuple[str, str]:
        """The study's default frontier axes: runtime against its first quality objective
        (``hpsearch.study.frontier_axes``)."""
        return read_model.frontier_axes(self.objectives)

    @property
    def frontier_path(self) -> Path:
        """Where ``hpsearch start`` writes the study's frontier page: beside the SQLite file, else
        the working folder."""
        db = sqlite_file(self.storage) if isinstance(self.storage, str) else None
        base = db.parent if db is not None else Path.cwd()
        return base / f"{self.study_name}-frontier.html"

    @property
    def runs_dir(self) -> Path:
        """The folder the study's searches write into on this machine: Tune's state and each
        trial's run folder (its logs, ``metrics.jsonl``, saved weights). ``hpsearch_runs/STUDY``
        beside the SQLite file, or under ``HPSEARCH_RUNS_DIR`` when it is set; it may not exist.
        """
        return study_runs_dir(self._settings(), self.study_name)

    def files(self) -> list[Path]:
        """The files this machine holds for the study besides the store: its runs folder
        (``runs_dir``) and the frontier page ``hpsearch start`` writes, those that exist."""
        return [p for p in (self.runs_dir, self.frontier_path) if p.exists()]

    def file_verdict(self) -> FileVerdict:
        """Which of ``files()`` ``delete(files=True)`` would delete, and which it would keep and
        why: only a runs folder whose owner marker names this study in this store, and no
        other, is deleted, with the frontier page (``hpsearch.ownership``). A copy of the store
        finds the same paths; a folder an older release wrote has no marker, and is kept."""
        owner = self._owner()
        if owner is None:
            why = f"{store_name(self.storage)} is no store URL, so which study wrote it cannot be told"
            return FileVerdict((), tuple((p, why) for p in self.files()))
        return judge_files(self.runs_dir, self.frontier_path, owner)

    def _owner(self) -> Owner | None:
        """This study as a runs folder's owner marker names it (``None``: a storage object)."""
        if not isinstance(self.storage, str):
            return None
        uid = self.study.user_attrs.get(ATTR_STUDY_UID)
        return Owner(store_identity(self.storage, self.runs_dir), self.study_name, uid if isinstance(uid, str) else "")

    def delete(self, *, files: bool = False) -> DeletedStudy:
        """Delete the study and its trials from the store, so that its name can be used again;
        with ``files``, also its runs folder and frontier page (``files()``), which are kept
        otherwise, and kept too where they are not this study's alone (``file_verdict``: a copy
        of the store finds the same paths). Not while a search writes the study: the search's
        lock is taken first.

        Raises:
            StudyNotFoundError: the store has no study of that name.
            StudyBusyError: a search is writing the study (or, for SQLite, the file); nothing
                is deleted.

        Example:
            >>> import hpsearch, optuna
            >>> from hpsearch.testing import synthetic_study
            >>> storage = optuna.storages.InMemoryStorage()
            >>> deleted = synthetic_study(storage, "demo", n_trials=4).delete()
            >>> deleted.n_trials, [s.name for s in hpsearch.list_studies(storage)]
            (4, [])
        """
        import optuna  # heavy: see the imports at the top of this module

        lock: AbstractContextManager[None] = (study_lock(self.storage, self.study_name)
                                              if isinstance(self.storage, str) else nullcontext())
        with lock:
            study = self.study  # StudyNotFoundError before anything is deleted
            n_trials = len(study.get_trials(deepcopy=False))
            found = tuple(self.files())
            verdict = self.file_verdict()
            owner = self._owner()
            optuna.delete_study(study_name=self.study_name, storage=self.backend)
            self.__dict__.pop("study", None)
            deleted: tuple[Path, ...] = ()
            if files:
                deleted = verdict.delete
                for path in deleted:
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
            if owner is not None:  # a folder that stays is no longer this (deleted) study's
                release_runs_dir(self.runs_dir, owner)
        kept = tuple((p, why) for p, why in verdict.kept) if files else tuple((p, "") for p in found)
        return DeletedStudy(self.study_name, store_name(self.storage), n_trials, found,
                            files_deleted=bool(found) and len(deleted) == len(found), kept=kept)

    def _settings(self) -> Settings:
        return resolve_settings(storage=self.storage if isinstance(self.storage, str) else None)

    def export_to_mlflow(self, uri: str | None = None, *, experiment: str | None = None,
                         devices: int | None = None) -> TrackingReport:
        """Log the study to MLflow (``hpsearch export STUDY --to mlflow URI``): a parent run for the
        study and a nested run per trial, as a tracked search logs them (docs/tracking.md). Runs
        logged before, by the search or an earlier export, are found by their tags and brought
        up to date: exporting again adds no runs.

        Args:
            uri: The MLflow tracking URI; default ``MLFLOW_TRACKING_URI``, then the space's
                ``tracking.mlflow``.
            experiment: The experiment's name; default the space's ``tracking.experiment``, then
                the study's name.
            devices: The devices the parent run's recommendation is for; default the most any
                trial used.

        Raises:
            SpaceError: no URI anywhere, or MLflow is not installed.
            TrackingError: MLflow did not answer or refused what was logged.
        """
        space = self.space
        found = uri or resolve_settings({"mlflow": space.tracking.mlflow}).mlflow
        if not found:
            raise SpaceError("no MLflow tracking URI: pass one (--to mlflow URI) or set MLFLOW_TRACKING_URI",
                             source="command line")
        target = tracking_target(space, found, self.study_name, asked=True)
        assert target is not None
        if experiment:
            target = replace(target, experiment=experiment)
        if devices is None:
            sizes = [t.params.get(WORLD_SIZE) for t in self.study.get_trials(deepcopy=False)]
            devices = max((int(w) for w in sizes if isinstance(w, int)), default=0) or None

        def end(folder: Path) -> StudyEnd:
            return _study_end(self, devices, None, "FINISHED", folder)

        return export_study(self.study, space, target, study_uid(self.study), end)

    def analyze(self, target: str | tuple[str, float] | None = None) -> StudyAnalysis:
        """What the trials say: time to the target per trial, the critical batch, the LR law,
        each rule's regret and breaking batch, the step-time model (``hpsearch.analysis``).

        Args:
            target: ``"val_accuracy=0.95"`` or ``("val_accuracy", 0.95)``; default: the space's
                ``analysis.target``, else one derived from the study (docs/analysis.md).

        Raises:
            AnalysisError: a malformed target (exit status 2).
            NoAnswerError: the study's trials cannot be analysed yet (none has what the
                analysis reads, no target can be derived) (exit status 5).

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=300)
            >>> analysis = search.analyze("val_accuracy=0.9")
            >>> str(analysis.target), analysis.critical_batch.n_batch_sizes >= 3
            ('val_accuracy >= 0.9', True)
        """
        analysis = _analysis()
        goal = analysis.parse_target(target) if isinstance(target, str) else target
        found: StudyAnalysis = analysis.analyze_study(self.backend, self.info, goal)
        return found

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
        import pandas as pd  # heavy: see the imports at the top of this module

        return pd.DataFrame(list(self.analyze(target).trials))

    def recommend(self, devices: int, *, target: str | tuple[str, float] | None = None,
                  minimize: str = "time", allow_larger_batch: bool = False,
                  analysis: StudyAnalysis | None = None, devices_per_node: int | None = None) -> Recommendation:
        """What to run on ``devices`` devices: the per-device batch, world size (at most
        ``devices``), accumulation, rule and LR with the least predicted time (or
        device-hours, ``minimize="device-hours"``) to the target, with intervals and what was
        extrapolated (``hpsearch.analysis.recommend``). Its per-device batch is never above the
        largest that fit in memory on the device kind, and its explanation says where memory
        capped it. Its ``layout`` names the nodes it assumes ("16 devices on 2 nodes of 8"): W
        ranks take ceil(W / G) nodes, and across nodes their all-reduce costs what the trials
        that spanned nodes measured (or, where none did, the intra-node cost, said as an
        extrapolation).

        Args:
            devices: The devices the run may use.
            target: What "reached" means (as ``analyze``).
            minimize: ``"time"`` or ``"device-hours"``.
            allow_larger_batch: Let the per-device batch go up to 4x the largest that ran,
                though below the smallest that ran out of memory and, where a rank's memory
                is known, at most the one the memory fit predicts to fit.
            analysis: An analysis of this study made before (``analyze``), to ask it for
                several device counts without reading and fitting the study again; it carries
                its own target, so ``target`` is not given with it.
            devices_per_node: The devices one node holds, G; default: the most devices a
                trial of the study ran on one node, said as assumed in ``layout``.

        Raises:
            AnalysisError: bad input: ``devices`` or ``devices_per_node`` below 1, an unknown
                ``minimize``, a malformed target, or both ``target`` and ``analysis`` (exit
                status 2).
            NoAnswerError: the study cannot answer: no trial reached the target, no law could
                be fitted...; its ``analysis`` holds what the analysis found (exit status 5).

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=300)
            >>> answer = search.recommend(8, target="val_accuracy=0.9")
            >>> answer.world_size <= 8, answer.basis
            (True, 'fitted laws')
            >>> str(search.recommend(16, target="val_accuracy=0.9", devices_per_node=8).layout)
            '16 devices on 2 nodes of 8'
        """
        # Bad input is refused before the analysis reads and fits the study (a second or more).
        if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
            raise AnalysisError(f"devices must be a whole number of 1 or more, got {devices!r}")
        if minimize not in ("time", "device-hours"):
            raise AnalysisError(f"minimize must be 'time' or 'device-hours', got {minimize!r}")
        if devices_per_node is not None and (isinstance(devices_per_node, bool) or not isinstance(devices_per_node, int)
                                             or devices_per_node < 1):
            raise AnalysisError(f"devices per node must be a whole number of 1 or more, got {devices_per_node!r}")
        if analysis is not None and target is not None:
            raise AnalysisError("give a target or an analysis, not both: an analysis carries its own target")
        if analysis is None:
            analysis = self.analyze(target)
        answer: Recommendation = _analysis().recommend(analysis, devices, minimize=minimize,
                                                       allow_larger_batch=allow_larger_batch,
                                                       devices_per_node=devices_per_node)
        return answer

    def follow_up_space(self, answer: Recommendation) -> str:
        """A space file (its text) for a follow-up search on ``answer``'s devices, centred on it
        (``hpsearch.analysis.follow_up_space``): what ``hpsearch recommend --space FILE`` writes.

        Raises:
            AnalysisError: the study has no space text to start from.
        """
        text: str = _analysis().follow_up_space(answer, self.space_text, self.study_name)
        return text


@dataclass(frozen=True)
class DeletedStudy:
    """What ``delete_study`` (``Search.delete``) did.

    Attributes:
        study: The study's name.
        storage: The store it was deleted from (its password masked).
        n_trials: The trials it had.
        files: Its files on this machine (``Search.files``: runs folder, frontier page).
        files_deleted: Whether every one of ``files`` was deleted too.
        kept: ``(path, why)`` for each of ``files`` that was kept: ``why`` is empty when files
            were not asked to be deleted, else it says whose the file is and how to remove it
            (``Search.file_verdict``).
    """

    study: str
    storage: str
    n_trials: int
    files: tuple[Path, ...]
    files_deleted: bool
    kept: tuple[tuple[Path, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (``hpsearch delete --json``)."""
        return {"study": self.study, "storage": self.storage, "n_trials": self.n_trials,
                "files": [str(p) for p in self.files], "files_deleted": self.files_deleted,
                "kept": [{"path": str(p), "why": why} for p, why in self.kept]}


def start(
    space: SearchSpace | Mapping[str, Any] | str | os.PathLike[str],
    *,
    storage: str | None = None,
    study: str | None = None,
    address: str | None = None,
    on_event: Callable[[SearchEvent], None] | None = None,
    on_plan: Callable[[SearchPlan], None] | None = None,
    budget: Budget | str | None = None,
    mlflow: str | None = None,
    confirm: bool | None = None,
    n_trials: int | None = None,
) -> Search:
    """Run a search to the end (its ``n_trials``, or its budget, whichever comes first), then
    confirm its answer (``analysis.confirm``: its answer run as new trials until it holds or the
    confirmation budget is spent), and return it.

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
        mlflow: An MLflow tracking URI to log the search to as it runs (docs/tracking.md);
            default ``MLFLOW_TRACKING_URI``, then the space's ``tracking.mlflow``. What was
            logged is the returned search's ``tracking``.
        confirm: ``False`` skips the confirmation of the answer for this search (``start
            --no-confirm``); default: the space's ``analysis.confirm``.
        n_trials: The trials to finish, instead of the space's ``search.n_trials`` (``start
            --n-trials``); the study keeps it as its total, for ``status`` and ``resume``. A
            grid runs at most its configurations.

    Raises:
        SpaceError, StudyExistsError, ResourceError, WorkloadError, StoreError.

    Example:
        >>> search = hpsearch.start("space.yaml")  # doctest: +SKIP
        >>> search.best_trial.params  # doctest: +SKIP
        >>> hpsearch.start("space.yaml", study="smoke", n_trials=2).summary()["finished"]  # doctest: +SKIP
        2
    """
    if isinstance(space, Mapping):
        space = space_from_mapping(space)
    elif not isinstance(space, SearchSpace):
        space = load_space(space)
    if n_trials is not None:
        space = _with_n_trials(space, n_trials)
    settings = _settings({"storage": space.storage, "mlflow": space.tracking.mlflow}, storage=storage,
                         ray_address=address, mlflow=mlflow)
    name = study or space.study
    target = tracking_target(space, settings.mlflow, name, asked=bool(mlflow))  # MLflow missing: said now
    limits = _budget(budget)

    def run(events: Callable[[SearchEvent], None] | None, plans: Callable[[SearchPlan], None] | None) -> None:
        _orchestrator().run_search(space, name, settings, on_event=events, on_plan=plans, budget=limits,
                                   next_round=_confirmer(space, events, enabled=confirm))

    return _tracked(run, Search(name, settings.storage), space, target, on_event, on_plan)


def _with_n_trials(space: SearchSpace, n_trials: int) -> SearchSpace:
    """``space`` with ``search.n_trials`` replaced, as the space file's rule checks it."""
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or not 1 <= n_trials <= MAX_N_TRIALS:
        raise SpaceError(f"n_trials must be an integer >= 1 and <= {MAX_N_TRIALS:,}, got {n_trials!r}",
                         key_path="search.n_trials", source="n_trials")
    return replace(space, search=replace(space.search, n_trials=n_trials))


def resume(
    study: str,
    *,
    storage: str | None = None,
    address: str | None = None,
    n_trials: int | None = None,
    on_event: Callable[[SearchEvent], None] | None = None,
    on_plan: Callable[[SearchPlan], None] | None = None,
    budget: Budget | str | None = None,
    mlflow: str | None = None,
    confirm: bool | None = None,
) -> Search:
    """Finish a study whose search was stopped (killed, interrupted) or extend it, then confirm
    its answer as ``start`` does.

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
        mlflow: An MLflow tracking URI to log to (as for ``start``); the study's runs there,
            from its first search or an export, are found and carried on.
        confirm: ``False`` skips the confirmation of the answer; default: the space's
            ``analysis.confirm``.

    Raises:
        StudyNotFoundError, StudyBusyError, SpaceError, ResourceError, StoreError.

    Example:
        >>> hpsearch.resume("digits-quickstart").summary()["states"]  # doctest: +SKIP
    """
    settings = _settings(storage=storage, ray_address=address, mlflow=mlflow)
    loaded = load(study, settings.storage)  # no such study (or store): said now, with nothing created
    space = loaded.space
    if settings.mlflow is None and space.tracking.mlflow:
        settings = replace(settings, mlflow=space.tracking.mlflow)  # the flag, then the environment, then the space
    target = tracking_target(space, settings.mlflow, study, asked=bool(mlflow))
    limits = _budget(budget)

    def run(events: Callable[[SearchEvent], None] | None, plans: Callable[[SearchPlan], None] | None) -> None:
        _orchestrator().resume_search(study, settings, n_trials=n_trials, on_event=events, on_plan=plans,
                                      budget=limits, study=loaded.study,
                                      next_round=_confirmer(space, events, enabled=confirm))

    return _tracked(run, Search(study, settings.storage), space, target, on_event, on_plan)


def confirm(
    study: str,
    *,
    devices: int | None = None,
    runs: int | None = None,
    storage: str | None = None,
    address: str | None = None,
    on_event: Callable[[SearchEvent], None] | None = None,
    on_plan: Callable[[SearchPlan], None] | None = None,
) -> Search:
    """Confirm a study's answer (``hpsearch confirm``): run the answer for ``devices`` devices as
    new trials, each with a seed no earlier run of it used, judge it against the interval it
    stated before it ran, fold the runs into the fits and answer again, in rounds, until it holds
    or the space's confirmation budget is spent (``analysis.confirm_budget``). None of the
    search's own trials runs. A study started before confirmation existed is confirmable.

    Args:
        study: The study's name.
        devices: The devices the answer is for; default: what the cluster offers one trial.
        runs: Runs a round has; default: the space's ``analysis.confirm`` (``auto``: 2 where
            the budget fits them).
        storage: Store URL; default: ``HPSEARCH_STORAGE``, then ``sqlite:///hpsearch.db``.
        address: Ray cluster to join; default ``RAY_ADDRESS``, else a local Ray.

    Raises:
        StudyNotFoundError, StudyBusyError, SpaceError, ResourceError, StoreError, SearchInterrupted.

    Example:
        >>> hpsearch.confirm("digits-quickstart", devices=2).confirmations[-1].verdict  # doctest: +SKIP
        'held'
    """
    if devices is not None and (isinstance(devices, bool) or not isinstance(devices, int) or devices < 1):
        raise AnalysisError(f"devices must be a whole number of 1 or more, got {devices!r}")
    if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int) or runs < 1):
        raise AnalysisError(f"runs must be a whole number of 1 or more, got {runs!r}")
    settings = _settings(storage=storage, ray_address=address)
    loaded = load(study, settings.storage)
    confirmation = _confirmation()
    policy = confirmation.ConfirmationPolicy.of_space(loaded.space, runs=runs, enabled=True)
    confirmer = confirmation.Confirmer(policy, devices=devices, on_event=on_event)
    _orchestrator().confirm_study(study, settings, confirmer, on_event=on_event, on_plan=on_plan)
    return Search(study, settings.storage)


def _confirmer(space: SearchSpace, on_event: Callable[[SearchEvent], None] | None, *,
               enabled: bool | None) -> Callable[..., Any] | None:
    """The confirmation rounds a search runs after its trials (``hpsearch.confirmation``), or
    ``None`` where ``analysis.confirm`` (or ``enabled``) turns them off."""
    confirmation = _confirmation()
    policy = confirmation.ConfirmationPolicy.of_space(space, enabled=enabled)
    return None if policy is None else confirmation.Confirmer(policy, on_event=on_event)


def _tracked(run: Callable[[Callable[[SearchEvent], None] | None, Callable[[SearchPlan], None] | None], None],
             search: Search, space: SearchSpace, target: Any, on_event: Callable[[SearchEvent], None] | None,
             on_plan: Callable[[SearchPlan], None] | None) -> Search:
    """Run a search (``run``, given the event and plan callbacks), logging it to MLflow as it runs
    when ``target`` says where (``hpsearch.tracking.LiveTracker``); the tracker's report goes
    on ``search.tracking``. MLflow never stops the search: what it says goes to ``on_event`` as a
    ``tracking`` event (or the ``hpsearch`` logger)."""
    if target is None:
        run(on_event, on_plan)
        return search

    def say(message: str) -> None:
        if on_event is not None:
            on_event(SearchEvent("tracking", -1, {"detail": message}))  # not a record name: the event kind
        else:
            log.warning(message)

    tracker = LiveTracker(target, search.study_name, search.storage, space, say=say)
    plans: list[SearchPlan] = []

    def events(event: SearchEvent) -> None:
        if on_event is not None:
            on_event(event)
        tracker.on_event(event)

    def planned(plan: SearchPlan) -> None:
        plans.append(plan)
        if on_plan is not None:
            on_plan(plan)

    status = "FAILED"
    try:
        run(events, planned)
        status = "FINISHED"
    except SearchInterrupted:
        status = "KILLED"
        raise
    finally:
        plan = plans[-1] if plans else None

        def end(folder: Path) -> StudyEnd:
            return _study_end(search, plan.devices if plan else None, plan.node_devices if plan else None,
                              status, folder)

        search.tracking = tracker.close(end if plan is not None else None)
        if search.tracking.error is not None:
            say(search.tracking.describe(search.study_name))
    return search


def _study_end(search: Search, devices: int | None, devices_per_node: int | None, status: str,
               folder: Path) -> StudyEnd:
    """The parent run's end: the best trial, the recommendation for ``devices`` (its refusal's
    reason when the analysis has none), and the pages the installed packages draw."""
    recommendation: dict[str, Any] | None = None
    if devices:
        try:
            recommendation = search.recommend(devices, devices_per_node=devices_per_node).to_dict()
        except AnalysisError as exc:
            recommendation = {"error": str(exc)}
    return StudyEnd(best=search.best_trial, recommendation=recommendation, files=study_pages(search, folder),
                    status=status)


def _settings(file_values: dict[str, str | None] | None = None, **explicit: str | None) -> Settings:
    """The settings of a search, its storage URL checked (``parse_storage_url``) before anything
    starts."""
    settings = resolve_settings(file_values, **explicit)
    return replace(settings, storage=parse_storage_url(settings.storage))


def _budget(budget: Budget | str | None) -> Budget | None:
    return parse_budget_text(budget, source="budget") if isinstance(budget, str) else budget


def load(study: str, storage: str | optuna.storages.BaseStorage | None = None) -> Search:
    """Open an existing study. Nothing is created: not a study, and not an SQLite file.

    Raises:
        StudyNotFoundError: the store has no study of that name, or there is no store.
        StoreError: the storage URL is malformed (the message suggests the URL meant).

    Example:
        >>> hpsearch.load("digits-quickstart").summary()["states"]  # doctest: +SKIP
        {'COMPLETE': 12}
    """
    search = Search(study, storage if storage is not None else resolve_settings().storage)
    _ = search.study  # fail now, not on first use
    return search


def list_studies(storage: str | optuna.storages.BaseStorage | None = None) -> list[read_model.StudyListing]:
    """Every study of a store, with its trials by state, its best values and its last
    activity (``hpsearch ls``). A store that does not exist has none (and is not created).

    Args:
        storage: Store URL or Optuna storage; default: ``HPSEARCH_STORAGE``, then
            ``sqlite:///hpsearch.db``.

    Raises:
        StoreError: the storage URL is malformed, or the server does not answer.

    Example:
        >>> import hpsearch, optuna
        >>> from hpsearch.testing import synthetic_study
        >>> storage = optuna.storages.InMemoryStorage()
        >>> _ = synthetic_study(storage, "demo", n_trials=40)
        >>> [(s.name, s.n_trials) for s in hpsearch.list_studies(storage)]
        [('demo', 40)]
    """
    store = storage if storage is not None else resolve_settings().storage
    if isinstance(store, str):
        store = parse_storage_url(store)
        if missing_store(store) is not None:
            return []
    return read_model.list_studies(open_storage(store))


def delete_study(study: str, storage: str | optuna.storages.BaseStorage | None = None, *,
                 files: bool = False) -> DeletedStudy:
    """Delete a study from its store (``Search.delete``): its name can then be used again.
    Its runs folder and frontier page are kept unless ``files`` is true, and kept then too unless
    their owner marker says they are this study's alone (``Search.file_verdict``).

    Raises:
        StudyNotFoundError: no such study (or no store).
        StudyBusyError: a search is writing the study; nothing is deleted.

    Example:
        >>> hpsearch.delete_study("my-study", files=True).files  # doctest: +SKIP
        (PosixPath('/home/me/work/hpsearch_runs/my-study'),)
    """
    return load(study, storage).delete(files=files)


def _orchestrator() -> ModuleType:
    """``hpsearch.tune.orchestrator``, loaded when a search starts or resumes: the engine imports
    optuna's samplers and, as it runs, Ray Tune (seconds that ``import hpsearch`` does not pay)."""
    from hpsearch.tune import orchestrator

    return orchestrator


def _confirmation() -> ModuleType:
    """``hpsearch.confirmation``, loaded when a search confirms its answer: it reads the
    analysis (numpy, scipy), which ``import hpsearch`` does not load."""
    from hpsearch import confirmation

    return confirmation


def _analysis() -> ModuleType:
    """``hpsearch.analysis``, loaded at a study's first analysis: numpy, scipy and pandas take
    about a second that ``import hpsearch`` and the reading commands do not pay."""
    from hpsearch import analysis

    return analysis
