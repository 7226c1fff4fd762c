"""A study in MLflow: its trials as runs, logged as the search runs and exported after it.

What lands where (docs/tracking.md):

- one MLflow experiment per study (``tracking.experiment``, default the study's name);
- a parent run for the study: the space file, the objectives, and at the end the frontier page,
  the recommendation and the best trial's metrics;
- a nested child run per trial: its batch and LR params and every searched parameter, each
  evaluation as a metric step (step = samples seen), its final metrics, tags for its state,
  reason, device and fused group, and its saved model where the space keeps models.

The study's store stays the record; MLflow gets a copy. Runs carry the study's id and the
trial's number as tags, so a search resumed, or a second export, finds its runs and updates them
rather than adding runs. A search logs from a thread of its own (``LiveTracker``) and never
waits for MLflow: a tracking server that does not answer is reported once, and what it missed is
logged when it answers again, at the end of the search, or by ``hpsearch export STUDY --to mlflow
URI`` (``export_study``).

MLflow is an optional dependency (``pip install 'hpsearch[mlflow]'``), imported only when a
study is tracked.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import math
import os
import queue
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch import record
from hpsearch.errors import StudyNotFoundError, TrackingError
from hpsearch.progress import SearchEvent
from hpsearch.search_spaces import SearchSpace, SpaceError
from hpsearch.search_spaces.space import WARMUP_FROM_BASE_LR
from hpsearch.store import load_study, redact_url
from hpsearch.store.ownership import study_uid
from hpsearch.study import trial_params

if TYPE_CHECKING:
    import optuna
    from mlflow.tracking import MlflowClient
    from optuna.trial import FrozenTrial

__all__ = [
    "ARTIFACTS_GROUP",
    "LiveTracker",
    "StudyEnd",
    "TrackingReport",
    "TrackingTarget",
    "export_study",
    "tracking_target",
]

log = logging.getLogger("hpsearch")

#: Entry-point group of the pages other packages add to a study's parent run at the end of a
#: search and on export (the dashboard's: the frontier, as one self-contained page). Each is
#: called with the ``hpsearch.Search`` and a folder, and returns the files it wrote there.
ARTIFACTS_GROUP = "hpsearch.artifacts"

#: The tags that tie a run to its study and trial; ``hpsearch.*`` keeps them apart from a team's own.
TAG_STUDY = "hpsearch.study"
TAG_STUDY_UID = "hpsearch.study_uid"
TAG_TRIAL = "hpsearch.trial"
TAG_STATE = "hpsearch.state"
#: The samples seen at the last evaluation logged: a run found again logs only later ones.
TAG_LOGGED_THROUGH = "hpsearch.logged_through"
#: Set once a finished trial's end (final metrics, model, state) is logged: nothing is left to add.
TAG_FINAL = "hpsearch.final"
TAG_BEST_TRIAL = "hpsearch.best_trial"
_PARENT_RUN = "mlflow.parentRunId"
#: MLflow 3's UI opens an experiment as model training (its runs table) rather than GenAI traces.
_EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}

#: What a trial's run records beside its params, as tags ``hpsearch.<name>``.
TAGGED = (record.STATUS_REASON, record.STATUS_DETAIL, record.DEVICE, record.NODE, record.FUSED_GROUP,
          record.FUSE, record.RUNTIME_BASIS, record.PRECISION, record.RERUN_OF, record.RAN_AS, record.ROLE,
          record.CONFIRMATION)
#: The trial's parameters the engine derives when it is proposed, logged as params with the searched ones.
DERIVED_PARAMS = (record.EFFECTIVE_BATCH_SIZE, record.LR, record.BASE_BATCH_SIZE, record.LR_SCHEDULE,
                  record.WARMUP_EPOCHS, record.WARMUP_FROM, record.SEED)
#: The series logged at each evaluation (``samples_seen`` is their step).
STEPPED = tuple(m for m in record.CURVE_METRICS if m != record.SAMPLES_SEEN)

#: Numbers of the record that are ids, not measurements: tags only.
_NOT_METRICS = frozenset({record.FUSED_GROUP, record.NODE_ID, record.GPU_IDS, record.NODE_IDS})

#: Optuna state -> MLflow run status.
_STATUS = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED", "RUNNING": "RUNNING", "WAITING": "SCHEDULED"}
#: The MLflow run statuses of a run that ended.
_ENDED = frozenset({"FINISHED", "KILLED", "FAILED"})

#: MLflow's limits on one ``log_batch`` call, and on a tag's or param's value.
_BATCH_METRICS = 1000
_BATCH_PARAMS = 100
_BATCH_TAGS = 100
_TAG_CHARS = 5000
_PARAM_CHARS = 500

#: How the search's thread talks to a tracking server: a short timeout and few retries (MLflow's
#: defaults retry for minutes), so that a server that went away is noticed and retried later. The
#: environment's own settings win.
HTTP_SETTINGS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
    # MLflow prints a link to stdout as each run ends: a search's output (and `--json`) is ours.
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
}
#: Seconds between tries of a tracking server that did not answer, while the search runs.
RETRY_S = 30.0
#: Seconds a running trial's evaluations are held and sent together: one call a trial rather than
#: one an evaluation (the server's CPU is the trials' on a small machine).
FLUSH_S = 5.0
#: At the end of a search, how long the tracking thread may take to finish the call it is making,
#: and how long a server that was away has to answer again before the end is logged.
JOIN_S = 30.0
PROBE_S = 5.0


@dataclass(frozen=True)
class TrackingTarget:
    """Where a study is tracked: an MLflow tracking URI and the experiment's name."""

    uri: str
    experiment: str

    def describe(self) -> str:
        return f"MLflow at {redact_url(self.uri)}, experiment {self.experiment!r}"


def mlflow_installed() -> bool:
    return importlib.util.find_spec("mlflow") is not None


def tracking_target(space: SearchSpace, uri: str | None, study_name: str, *,
                    asked: bool = False) -> TrackingTarget | None:
    """Where the search of ``space`` logs, given the URI the settings resolved (``--mlflow``, then
    ``MLFLOW_TRACKING_URI``, then the space's ``tracking.mlflow``); ``None``: not tracked.

    ``asked``: the URI came from ``--mlflow`` or the space (not only from the environment).

    Raises:
        SpaceError: MLflow is asked for and not installed; the message names ``tracking.mlflow``
            and its line when the space asked.
    """
    if not uri:
        return None
    if not mlflow_installed():
        reason = "MLflow is not installed; install it with: pip install 'hpsearch[mlflow]'"
        if space.tracking.mlflow:
            raise SpaceError(reason, key_path="tracking.mlflow", line=space.tracking.line,
                             source=space.source_path or "<string>")
        if asked:
            raise SpaceError(f"--mlflow: {reason}", source="command line")
        log.warning("warning: MLFLOW_TRACKING_URI is set but MLflow is not installed: this search is not logged "
                    "to MLflow (pip install 'hpsearch[mlflow]')")
        return None
    return TrackingTarget(uri, space.tracking.experiment or study_name)


@dataclass
class TrackingReport:
    """What one pass over a study logged: runs created, updated (new evaluations or a trial's end)
    and left as they were; ``error``: why MLflow could not be reached, when it could not."""

    target: TrackingTarget
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    runs: int = 0
    not_logged: int = 0
    error: str | None = None
    parent_run_id: str | None = None
    experiment_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"uri": redact_url(self.target.uri), "experiment": self.target.experiment,
                "experiment_id": self.experiment_id, "parent_run_id": self.parent_run_id, "runs": self.runs,
                "created": self.created, "updated": self.updated, "unchanged": self.unchanged,
                "not_logged": self.not_logged, "error": self.error}

    def describe(self, study_name: str) -> str:
        if self.error is not None:
            return (f"could not log to {self.target.describe()} ({self.error}): {self.not_logged} trial(s) not "
                    f"logged; 'hpsearch export {study_name} --to mlflow {redact_url(self.target.uri)}' logs them")
        link = ""
        if self.target.uri.startswith(("http://", "https://")) and self.parent_run_id:
            link = f"; {self.target.uri.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.parent_run_id}"
        return (f"logged to {self.target.describe()}: {self.runs} trial run(s) ({self.created} new, {self.updated} "
                f"updated, {self.unchanged} unchanged){link}")


@dataclass(frozen=True)
class StudyEnd:
    """What the parent run gets at the end: the best trial, the recommendation (its JSON form, or
    ``{"error": why}``), and the files to attach (the frontier page...)."""

    best: FrozenTrial | None = None
    recommendation: Mapping[str, Any] | None = None
    files: Sequence[Path] = ()
    status: str = "FINISHED"


@dataclass
class _Run:
    run_id: str
    logged_through: float = -1.0
    final: bool = False  # the trial's end is logged (``TAG_FINAL``)
    ended: bool = False  # and the run's status says so (not RUNNING)
    unsent: dict[str, Any] | None = None  # params not logged yet
    end_metrics_in: bool = False  # the end's metrics are in, though its final tag is not


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _ms(moment: Any) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


def _text(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str) if isinstance(value, (dict, list)) \
        else str(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


class StudyLog:
    """One study's runs in one MLflow experiment, found or made; every method is idempotent
    against what the runs' tags say was logged."""

    def __init__(self, target: TrackingTarget, study: optuna.Study, uid: str) -> None:
        from mlflow.tracking import MlflowClient  # about 1 s: only for a tracked study

        self.target = target
        self.study = study
        self.uid = uid
        self.client: MlflowClient = MlflowClient(tracking_uri=target.uri)
        self.experiment_id = ""
        self.parent_id = ""
        self.runs: dict[int, _Run] = {}
        self.made: set[int] = set()  # the trials whose runs this object created
        self.touched: set[int] = set()  # the trials whose runs it logged to

    # ---- the experiment and the parent run ----

    def open(self, space: SearchSpace, *, running: bool) -> bool:
        """Find or make the experiment, the study's parent run and its trials' runs; returns
        whether the parent run was made now. ``running``: a search is running (the parent is
        marked RUNNING again when it exists)."""
        client = self.client
        experiment = client.get_experiment_by_name(self.target.experiment)
        if experiment is None:
            self.experiment_id = client.create_experiment(self.target.experiment, tags=_EXPERIMENT_TAGS)
        else:
            self.experiment_id = experiment.experiment_id
            if experiment.lifecycle_stage == "deleted":
                client.restore_experiment(self.experiment_id)
            for key, value in _EXPERIMENT_TAGS.items():
                if key not in experiment.tags:
                    client.set_experiment_tag(self.experiment_id, key, value)
        self.runs.clear()
        self.parent_id = ""
        token = None
        while True:
            page = client.search_runs([self.experiment_id], f"tags.`{TAG_STUDY_UID}` = '{self.uid}'",
                                      max_results=1000, page_token=token)
            for run in page:
                tags = run.data.tags
                if TAG_TRIAL in tags:
                    found = _Run(run.info.run_id, float(tags.get(TAG_LOGGED_THROUGH, -1)),
                                 tags.get(TAG_FINAL) == "1", run.info.status in _ENDED)
                    if not found.final:
                        self._reconcile(found, run.data.metrics)
                    self.runs[int(tags[TAG_TRIAL])] = found
                else:
                    self.parent_id = run.info.run_id
            token = page.token
            if not token:
                break
        if self.parent_id:
            if running:
                client.update_run(self.parent_id, status="RUNNING")
            return False
        from mlflow.entities import Param

        study = self.study
        objectives = ", ".join(f"{o.metric} ({o.direction})" for o in space.objectives)
        params = {"objectives": objectives, "workload": space.workload.name, "epochs": space.workload.epochs,
                  "sampler": space.search.sampler, **{f"space.{k}": v for k, v in space.fixed.items()}}
        tags = {TAG_STUDY: study.study_name, TAG_STUDY_UID: self.uid, "mlflow.runName": study.study_name,
                "mlflow.note.content": f"hpsearch study {study.study_name!r}: {objectives}"}
        run = client.create_run(self.experiment_id, start_time=_ms(_study_started(study)), tags=tags,
                                run_name=study.study_name)
        self.parent_id = run.info.run_id
        client.log_batch(self.parent_id, params=[Param(k, _text(v, _PARAM_CHARS)) for k, v in params.items()][:_BATCH_PARAMS])
        client.log_text(self.parent_id, space.source_text, "space.yaml")
        client.log_dict(self.parent_id, {"objectives": [{"metric": o.metric, "direction": o.direction}
                                                        for o in space.objectives]}, "objectives.json")
        return True

    def _reconcile(self, found: _Run, metrics: Mapping[str, float]) -> None:
        """What an unfinished run found holds, from its metrics rather than its tags.

        MLflow writes a batch's params, metrics and tags one after another, each committed on its
        own: a server that went away between them kept the metrics without the tag that says they
        are in, and logging them again would show each evaluation twice. So the step a run is
        logged through is the last step of its evaluations' history, and a run that holds any of
        its end's metrics (only the end logs them) is not sent them again.
        """
        for name in STEPPED:
            if name in metrics:
                steps = [float(m.step) for m in self.client.get_metric_history(found.run_id, name)]
                found.logged_through = max([found.logged_through, *steps])
        found.end_metrics_in = any(name not in STEPPED for name in metrics)

    def end(self, end: StudyEnd) -> None:
        """The parent run's end: the best trial's metrics, the recommendation, the pages."""
        from mlflow.entities import Metric, RunTag

        client = self.client
        now = int(time.time() * 1000)
        metrics, tags = [], []
        if end.best is not None:
            tags.append(RunTag(TAG_BEST_TRIAL, str(end.best.number)))
            for name, value in _final_metrics(end.best).items():
                metrics.append(Metric(name, value, now, 0))
        if metrics or tags:
            client.log_batch(self.parent_id, metrics=metrics[:_BATCH_METRICS], tags=tags)
        if end.recommendation is not None:
            client.log_dict(self.parent_id, dict(end.recommendation), "recommendation.json")
        for path in end.files:
            client.log_artifact(self.parent_id, str(path))
        client.set_terminated(self.parent_id, status=end.status, end_time=now)

    # ---- trials ----

    def open_run(self, trial: FrozenTrial, start: int | None = None) -> tuple[_Run, bool]:
        """The trial's run, made now when it has none (``start``: when it started training, in
        milliseconds; default what the store says)."""
        run = self.runs.get(trial.number)
        if run is not None:
            return run, False
        tags = {TAG_STUDY: self.study.study_name, TAG_STUDY_UID: self.uid, TAG_TRIAL: str(trial.number),
                _PARENT_RUN: self.parent_id, TAG_STATE: trial.state.name}
        created = self.client.create_run(self.experiment_id, start_time=start or _training_started(trial),
                                         tags=tags, run_name=f"trial-{trial.number}")
        # Its params go with its next batch (its first evaluations, or its end): one call fewer a trial.
        run = self.runs[trial.number] = _Run(created.info.run_id, unsent=_params(trial))
        self.made.add(trial.number)
        return run, True

    def log_evaluations(self, number: int, reports: Sequence[Mapping[str, Any]]) -> None:
        """Evaluations of a running trial whose run is open, each at step = its samples seen, in
        one call."""
        run = self.runs[number]
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics, through = [], run.logged_through
        for report in reports:
            samples = _number(report.get(record.SAMPLES_SEEN))
            if samples is None or samples <= through:
                continue
            metrics += [Metric(k, v, now, int(samples)) for k in STEPPED if (v := _number(report.get(k))) is not None]
            through = samples
        if metrics:
            self._log(run, metrics=metrics, params=run.unsent, logged_through=through)
            self.touched.add(number)

    def log_trial(self, trial: FrozenTrial) -> str:
        """Bring a trial's run up to what the store says; returns ``created``, ``updated`` or
        ``unchanged``."""
        run, created = self.open_run(trial)
        finished = trial.state.is_finished()
        if run.final and finished:
            if run.ended:
                return "unchanged"
            # Its end was logged but the server went before the run was ended: end it now.
            self._terminate(run, trial)
            self.touched.add(trial.number)
            return "updated"
        from mlflow.entities import Metric

        points = _curve_points(trial, after=run.logged_through)
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for step, k, v in points]
        through = max([run.logged_through, *(float(step) for step, _, _ in points)])
        if not finished:
            if not metrics and not created:
                return "unchanged"
            self._log(run, metrics=metrics, params=run.unsent, logged_through=through)
            self.touched.add(trial.number)
            return "created" if created else "updated"
        step = int(_number(trial.user_attrs.get(record.SAMPLES_SEEN)) or max(through, 0))
        # The series end at the last evaluation: logged again at the same step, they would show twice.
        stepped = set(STEPPED) if through >= step else set()
        if not run.end_metrics_in:
            metrics += [Metric(k, v, now, step) for k, v in _final_metrics(trial).items() if k not in stepped]
        model = trial.user_attrs.get(record.MODEL_PATH)
        saved = isinstance(model, str) and Path(model).is_file()
        # The final tag says the run holds everything: with the batch, or after the model's upload.
        tags = _tags(trial) if saved else {**_tags(trial), TAG_FINAL: "1"}
        # A run found again may lack its params: logged again, the same values are accepted.
        self._log(run, metrics=metrics, params=_params(trial), tags=tags, logged_through=through)
        if saved:
            self.client.log_artifact(run.run_id, str(model), "model")
            self._log(run, tags={TAG_FINAL: "1"})
        run.final = True
        self._terminate(run, trial)
        self.touched.add(trial.number)
        return "created" if created else "updated"

    def _terminate(self, run: _Run, trial: FrozenTrial) -> None:
        self.client.set_terminated(run.run_id, status=_STATUS.get(trial.state.name, "FINISHED"),
                                   end_time=_ms(trial.datetime_complete))
        run.ended = True

    def _log(self, run: _Run, *, metrics: Sequence[Any] = (), params: Mapping[str, Any] | None = None,
             tags: Mapping[str, str] | None = None, logged_through: float | None = None) -> None:
        from mlflow.entities import Param, RunTag

        tag_list = [RunTag(k, _text(v, _TAG_CHARS)) for k, v in (tags or {}).items()]
        if logged_through is not None and logged_through > run.logged_through:
            tag_list.append(RunTag(TAG_LOGGED_THROUGH, repr(float(logged_through))))
        param_list = [Param(k, _text(v, _PARAM_CHARS)) for k, v in (params or {}).items()]
        if params:
            run.unsent = None
        if len(param_list) <= _BATCH_PARAMS and len(tag_list) <= _BATCH_TAGS \
                and len(metrics) + len(param_list) + len(tag_list) <= _BATCH_METRICS:
            if metrics or param_list or tag_list:
                self.client.log_batch(run.run_id, metrics=list(metrics), params=param_list, tags=tag_list)
            if logged_through is not None:
                run.logged_through = max(run.logged_through, logged_through)
            return
        # MLflow's batch holds at most 1000 metrics, 100 params and 100 tags: the tags go last, so
        # that a run says it logged through a step only once that step's metrics are in.
        for chunk in _chunks(param_list, _BATCH_PARAMS):
            self.client.log_batch(run.run_id, params=chunk)
        chunks = list(_chunks(list(metrics), _BATCH_METRICS)) or [[]]
        tag_chunks = list(_chunks(tag_list, _BATCH_TAGS)) or [[]]
        for i, chunk in enumerate(chunks):
            last = i == len(chunks) - 1
            if chunk or (last and tag_chunks[0]):
                self.client.log_batch(run.run_id, metrics=chunk, tags=tag_chunks[0] if last else [])
        for chunk in tag_chunks[1:]:
            self.client.log_batch(run.run_id, tags=chunk)
        if logged_through is not None:
            run.logged_through = max(run.logged_through, logged_through)

    def sync(self, trials: Iterable[FrozenTrial]) -> dict[str, int]:
        """Bring every trial that trained up to date; returns the counts by outcome."""
        counts = {"created": 0, "updated": 0, "unchanged": 0}
        for trial in trials:
            if not _trained(trial):
                continue
            counts[self.log_trial(trial)] += 1
        return counts


def _study_started(study: optuna.Study) -> Any:
    trials = study.get_trials(deepcopy=False)
    starts = [t.datetime_start for t in trials if t.datetime_start is not None]
    return min(starts) if starts else None


def _training_started(trial: FrozenTrial) -> int | None:
    """When the trial's ranks started, in milliseconds since the epoch: its run's start (a trial is
    asked before its devices are free, and its run's duration is its training)."""
    started = _number(trial.user_attrs.get(record.TRAINING_STARTED))
    return int(started * 1000) if started is not None else _ms(trial.datetime_start)


def _trained(trial: FrozenTrial) -> bool:
    """Whether a trial has a run: it ran or ended (a proposal still waiting for its devices, or a
    configuration queued to run, has none yet)."""
    if trial.state.is_finished():
        return True
    return trial.state.name == "RUNNING" and record.TRAINING_STARTED in trial.user_attrs


def _params(trial: FrozenTrial) -> dict[str, Any]:
    params: dict[str, Any] = trial_params(trial)  # a confirmation run's exact configuration
    for name in DERIVED_PARAMS:
        if trial.user_attrs.get(name) is not None:
            params[name] = trial.user_attrs[name]
    if record.WARMUP_EPOCHS in params and record.WARMUP_FROM not in params:
        # Recorded before scaling.warmup_from existed: its warmup started at base_lr.
        params[record.WARMUP_FROM] = WARMUP_FROM_BASE_LR
    return params


def _tags(trial: FrozenTrial) -> dict[str, str]:
    tags = {TAG_STATE: trial.state.name}
    for name in TAGGED:
        value = trial.user_attrs.get(name)
        if value is not None and value != "":
            tags[f"hpsearch.{name}"] = _text(value, _TAG_CHARS)
    return tags


def _final_metrics(trial: FrozenTrial) -> dict[str, float]:
    """A trial's final measurements: the numbers of its record, and its objective values."""
    return {name: v for name in record.RECORDED_METRICS
            if name not in _NOT_METRICS and (v := _number(trial.user_attrs.get(name))) is not None}


def _curve_points(trial: FrozenTrial, *, after: float) -> list[tuple[int, str, float]]:
    """The evaluations a trial's ``curves`` record after ``after`` samples: (step, metric, value)."""
    curves = trial.user_attrs.get(record.CURVES)
    if not isinstance(curves, Mapping):
        return []
    xs = curves.get(record.SAMPLES_SEEN) or []
    points = []
    for i, x in enumerate(xs):
        samples = _number(x)
        if samples is None or samples <= after:
            continue
        for name in STEPPED:
            series = curves.get(name) or []
            if i < len(series) and (v := _number(series[i])) is not None:
                points.append((int(samples), name, v))
    return points


def _error(exc: BaseException) -> str:
    """Why MLflow failed, in a few words: a connection's fate, else the first line of the error."""
    text = str(exc).strip()
    for words, said in (("Connection refused", "connection refused"), ("NewConnectionError", "no connection"),
                        ("timed out", "timed out"), ("Name or service not known", "unknown host")):
        if words in text:
            return said
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first[:200]}" if first else type(exc).__name__


def study_pages(search: Any, folder: Path) -> list[Path]:
    """The pages the installed packages add to a study's parent run (``ARTIFACTS_GROUP``); a page
    that fails is said and left out."""
    files: list[Path] = []
    for ep in sorted(entry_points(group=ARTIFACTS_GROUP), key=lambda ep: ep.name):
        try:
            files.extend(ep.load()(search, folder))
        except Exception as exc:  # a page is a courtesy: the runs matter more
            log.warning("warning: the %s page for MLflow failed: %s", ep.name, _error(exc))
    return files


def export_study(study: optuna.Study, space: SearchSpace, target: TrackingTarget, uid: str,
                 end: Callable[[Path], StudyEnd] | None = None) -> TrackingReport:
    """Log a study to MLflow: its parent run and a run per trial, created or brought up to date
    (``hpsearch export STUDY --to mlflow URI``). ``end`` gives the parent run's end, with a
    folder for its files.

    Raises:
        TrackingError: MLflow did not answer, or refused what was logged.
    """
    _http_defaults()
    report = TrackingReport(target)
    try:
        book = StudyLog(target, study, uid)
        created = book.open(space, running=False)
        counts = book.sync(study.get_trials(deepcopy=False))
        if end is not None:
            with tempfile.TemporaryDirectory(prefix="hpsearch-mlflow-") as folder:
                book.end(end(Path(folder)))
        elif created:
            book.client.set_terminated(book.parent_id, status="FINISHED")
    except Exception as exc:
        raise TrackingError(f"could not log study {study.study_name!r} to {target.describe()}: {_error(exc)}") from exc
    report.created, report.updated, report.unchanged = counts["created"], counts["updated"], counts["unchanged"]
    report.runs = len(book.runs)
    report.parent_run_id, report.experiment_id = book.parent_id, book.experiment_id
    return report


def _probe(uri: str) -> None:
    """Raise when an HTTP tracking server does not answer its health check within ``PROBE_S``."""
    if uri.startswith(("http://", "https://")):
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=PROBE_S):
            pass


def _http_defaults() -> None:
    for name, value in HTTP_SETTINGS.items():
        os.environ.setdefault(name, value)


#: What the tracking thread acts on when no event came for ``FLUSH_S``.
_TICK = SearchEvent("tick", -1)


class LiveTracker:
    """Logs a running search to MLflow from a thread of its own.

    ``on_event`` only queues the event: the search never waits for MLflow. The thread opens the
    study's runs at the first event (the study exists by then), logs each evaluation as it comes
    and each trial's end from the store. When MLflow does not answer, ``say`` is told once, the
    thread drops events (the store keeps them) and tries again every ``RETRY_S``, logging what it
    missed; ``close`` logs whatever is still missing, and the study's end.
    """

    def __init__(self, target: TrackingTarget, study_name: str, storage: Any, space: SearchSpace, *,
                 say: Callable[[str], None]) -> None:
        _http_defaults()
        self.target = target
        self.study_name = study_name
        self.storage = storage
        self.space = space
        self.say = say
        self._book: StudyLog | None = None
        self._study: optuna.Study | None = None
        self._offline_since: float | None = None
        self._error: str | None = None
        self._said = False
        self._made: set[int] = set()
        self._touched: set[int] = set()
        self.report = TrackingReport(target)
        self._events: queue.SimpleQueue[SearchEvent | None] = queue.SimpleQueue()  # None: the end
        self._thread = threading.Thread(target=self._loop, name="hpsearch-mlflow", daemon=True)
        self._thread.start()

    def on_event(self, event: SearchEvent) -> None:
        if event.kind in ("training", "result", "completed", "pruned", "failed", "skipped"):  # not record names
            self._events.put(event)

    # ---- the thread ----

    def _loop(self) -> None:
        # MLflow's import (about 1.4 s) while Ray starts, not while the first trials train; an
        # import that fails is said when the study's runs are opened.
        with contextlib.suppress(Exception):
            import mlflow.tracking  # noqa: F401
        held: dict[int, list[Mapping[str, Any]]] = {}  # evaluations not sent yet, by trial number
        sent = time.monotonic()
        while True:
            try:
                event = self._events.get(timeout=FLUSH_S)
            except queue.Empty:
                event = _TICK
            if event is None:
                self._guarded(self._send, held)
                return
            if event.kind == "result":  # not a record name: the event kind
                held.setdefault(event.number, []).append(event.data.get("result") or {})
            elif event is not _TICK:
                held.pop(event.number, None)  # a trial's end logs its curves from the store
                self._guarded(self._handle, event)
            if time.monotonic() - sent >= FLUSH_S:
                self._guarded(self._send, held)
                sent = time.monotonic()

    def _guarded(self, call: Callable[..., None], *args: Any) -> None:
        """Make a call to MLflow, or, while MLflow is away, try it again every ``RETRY_S`` by
        logging what it missed from the store."""
        if self._offline_since is not None:
            if isinstance(args[0], dict):
                args[0].clear()  # the store keeps them
            if time.monotonic() - self._offline_since < RETRY_S:
                return
            call = self._catch_up
            args = ()
        try:
            call(*args)
        except Exception as exc:
            self._went_offline(exc)

    def _send(self, held: dict[int, list[Mapping[str, Any]]]) -> None:
        """The evaluations held, one call a trial."""
        while held:
            number, reports = held.popitem()
            book = self._open()
            if number not in book.runs:
                trial = self._trial(number)
                if trial is None:
                    continue
                book.open_run(trial)
            book.log_evaluations(number, reports)

    def _handle(self, event: SearchEvent) -> None:
        book = self._open()
        trial = self._trial(event.number)
        if trial is None:
            return
        if event.kind == "training":
            book.open_run(trial, start=int(time.time() * 1000))
        else:
            book.log_trial(trial)

    def _open(self) -> StudyLog:
        if self._book is None:
            self._study = load_study(self.study_name, self.storage)
            book = StudyLog(self.target, self._study, study_uid(self._study))
            book.open(self.space, running=True)
            self._book = book
        return self._book

    def _trial(self, number: int) -> FrozenTrial | None:
        study = self._study
        if study is None or number < 0:
            return None
        storage = study._storage
        try:
            trial_id = storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
        except KeyError:
            return None
        return storage.get_trial(trial_id)

    def _catch_up(self) -> None:
        self._offline_since = None  # tried once: a failure sets it again
        book = self._open()
        assert self._study is not None
        book.sync(self._study.get_trials(deepcopy=False))
        self.say(f"{self.target.describe()} answers again: the trials it missed are logged")

    def _went_offline(self, exc: BaseException) -> None:
        self._offline_since = time.monotonic()
        self._error = _error(exc)
        if self._book is not None:
            self._made |= self._book.made
            self._touched |= self._book.touched
        self._book = None  # found again when MLflow answers: a call may have landed without its answer
        if not self._said:
            self._said = True
            self.say(f"{self.target.describe()} did not answer ({self._error}); the search goes on, and what "
                     f"is not logged now is logged when it answers again or at the end")

    # ---- the end ----

    def close(self, end: Callable[[Path], StudyEnd] | None) -> TrackingReport:
        """Stop the thread, then log what the store has that MLflow lacks, and the study's end
        (``end``: the parent run's end, with a folder for its files; ``None`` when the study was
        never made). Returns what was logged; said through ``say`` when MLflow did not answer."""
        self._events.put(None)
        self._thread.join(timeout=JOIN_S)
        report = self.report
        if end is None:
            return report
        try:
            study = self._study or load_study(self.study_name, self.storage)
        except StudyNotFoundError:
            return report  # the search stopped before it made its study
        try:
            if self._thread.is_alive():  # a call that hangs: left to its own timeout, in the background
                raise TimeoutError(f"still busy after {JOIN_S:g} s")
            if self._offline_since is not None:
                _probe(self.target.uri)  # a server still away: said in seconds, not after MLflow's retries
            book = self._book if self._book is not None and self._offline_since is None else None
            if book is None:
                self._study = study
                book = StudyLog(self.target, study, study_uid(study))
                book.open(self.space, running=True)
            book.sync(study.get_trials(deepcopy=False))
            with tempfile.TemporaryDirectory(prefix="hpsearch-mlflow-") as folder:
                book.end(end(Path(folder)))
            made, touched = self._made | book.made, self._touched | book.touched
            report.runs = len(book.runs)
            report.created = len(made)
            report.updated = len(touched - made)
            report.unchanged = report.runs - report.created - report.updated
            report.parent_run_id, report.experiment_id = book.parent_id, book.experiment_id
        except Exception as exc:
            logged = self._book.runs if self._book is not None else {}
            report.error = _error(exc)
            report.not_logged = sum(1 for t in study.get_trials(deepcopy=False)
                                    if _trained(t) and not (t.number in logged and logged[t.number].final))
        return report
