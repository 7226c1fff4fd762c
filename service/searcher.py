"""``StudySearcher``: a Ray Tune searcher that asks and tells an Optuna study, with hpsearch's
own bookkeeping.

Stock ``OptunaSearch`` was measured to corrupt studies (DESIGN.md): early-stopped trials written
as COMPLETE with a partial value, a NaN metric leaving a trial RUNNING forever, no intermediate
values for multi-objective studies. Here every trial ends in exactly one of:

- COMPLETE with the objectives' final values and the measured user attrs;
- FAIL with ``status_reason`` (``diverged``, ``workload_error``, ``rank_exited``, ``error``...).

It lives in the Tune driver process, so it is the only writer of the study (one writer per
SQLite study).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from hpsearch.progress import SearchEvent
from hpsearch.sampler import distributions
from hpsearch.search_spaces import SearchSpace
from hpsearch.trials.spec import TrialSpec
from optuna.trial import TrialState
from ray.tune.search import Searcher

__all__ = ["StudySearcher", "RECORDED_METRICS"]

#: Result keys copied to the trial's user attrs when it completes (DESIGN.md names).
RECORDED_METRICS: tuple[str, ...] = (
    "val_accuracy", "val_loss", "train_loss", "epochs_completed", "samples_seen", "runtime_s",
    "device_seconds", "samples_per_s", "comm_fraction", "allreduce_calls", "noise_scale", "noise_scale_note",
    "emulated_ranks", "device", "node",
)
#: Per-epoch series kept in the ``curves`` user attr.
CURVE_METRICS: tuple[str, ...] = ("samples_seen", "val_accuracy", "val_loss", "train_loss", "lr", "runtime_s",
                                  "comm_fraction", "noise_scale")

#: Result flags set by the trial driver: a failure report, and the final (post-training) report.
FAILED_KEY = "hpsearch_failed"
FINAL_KEY = "hpsearch_final"


class StudySearcher(Searcher):
    """Proposes configurations from the study's sampler and records results in the study.

    Args:
        study: The Optuna study (its storage is written from this process only).
        space: The validated space.
        n_trials: How many trials to propose in this run.
        trial_settings: The non-searched ``TrialSpec`` fields (workload, epochs, device...).
        runs_dir: Parent of each trial's run folder.
        on_event: Called with each ``SearchEvent`` (progress display).
    """

    def __init__(
        self,
        study: optuna.Study,
        space: SearchSpace,
        n_trials: int,
        trial_settings: dict[str, Any],
        runs_dir: Path,
        on_event: Callable[[SearchEvent], None] | None = None,
    ) -> None:
        super().__init__()
        self.study = study
        self.space = space
        self.n_trials = n_trials
        self.trial_settings = trial_settings
        self.runs_dir = runs_dir
        self.on_event = on_event
        self._distributions = distributions(space)
        self._metrics = [o.metric for o in space.objectives]
        self._trials: dict[str, optuna.Trial] = {}
        self._curves: dict[str, dict[str, list[Any]]] = {}
        self._asked = 0

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its searcher into the experiment state; the study (a live database
        # engine) and the display callback stay behind. The study itself is the durable record.
        state = self.__dict__.copy()
        state.update(study=None, on_event=None, _trials={})
        return state

    # Tune calls this before the run; we optimise our own objectives, not Tune's metric/mode.
    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any) -> bool:
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self._asked >= self.n_trials:
            return Searcher.FINISHED
        self._asked += 1
        trial = self.study.ask(self._distributions)
        params = dict(trial.params)
        settings = dict(self.trial_settings)
        if self.space.resources.emulate_ranks:
            settings["emulated_ranks"] = int(params["world_size"])
        spec = TrialSpec.from_params(params, **settings)
        trial.set_user_attr("effective_batch_size", spec.effective_batch_size)
        trial.set_user_attr("base_batch_size", spec.base_batch_size)
        trial.set_user_attr("lr", spec.lr)
        trial.set_user_attr("warmup_epochs", spec.warmup_epochs)
        self._trials[trial_id] = trial
        self._curves[trial_id] = {k: [] for k in CURVE_METRICS}
        self._emit("started", trial.number, params=params)
        return {"spec": spec.to_dict(), "number": trial.number, "run_dir": str(self.runs_dir / f"trial-{trial.number:05d}")}

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        trial = self._trials.get(trial_id)
        if trial is None or result.get(FAILED_KEY) or result.get(FINAL_KEY) or "epoch" not in result:
            return
        curves = self._curves[trial_id]
        for key in CURVE_METRICS:
            curves[key].append(_finite_or_none(result.get(key)))
        trial.set_user_attr("curves", curves)
        trial.set_user_attr("epochs_completed", result["epoch"])
        if len(self._metrics) == 1 and _is_finite(result.get(self._metrics[0])):
            # Intermediate values on a samples-seen axis, so batch sizes compare fairly.
            trial.report(float(result[self._metrics[0]]), step=int(result["samples_seen"]))
        self._emit("result", trial.number, result=result)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        trial = self._trials.pop(trial_id, None)
        self._curves.pop(trial_id, None)
        if trial is None:
            return
        result = result or {}
        for key in RECORDED_METRICS:
            if key in result and result[key] is not None:
                trial.set_user_attr(key, _finite_or_none(result[key]))
        if error or result.get(FAILED_KEY):
            reason = result.get("status_reason") or "error"
            detail = result.get("status_detail") or ("the trial process raised; see its error file in the Tune run folder" if error else "")
            self._fail(trial, reason, detail)
            return
        values = [result.get(m) for m in self._metrics]
        missing = [m for m, v in zip(self._metrics, values) if v is None]
        if missing:
            self._fail(trial, "missing_metric", f"the trial reported no {', '.join(missing)}")
            return
        if not all(_is_finite(v) for v in values):
            self._fail(trial, "diverged", f"non-finite objective values {values}")
            return
        self.study.tell(trial, [float(v) for v in values])
        self._emit("completed", trial.number, values=[float(v) for v in values])

    def fail_open_trials(self, reason: str, detail: str) -> None:
        """Record every trial still open (the search stopped under it) as FAIL with ``reason``."""
        for trial_id in list(self._trials):
            trial = self._trials.pop(trial_id)
            self._fail(trial, reason, detail)

    def _fail(self, trial: optuna.Trial, reason: str, detail: str) -> None:
        trial.set_user_attr("status_reason", reason)
        if detail:
            trial.set_user_attr("status_detail", detail[:2000])
        self.study.tell(trial, state=TrialState.FAIL)
        self._emit("failed", trial.number, reason=reason, detail=detail)

    def _emit(self, kind: str, number: int, **data: Any) -> None:
        if self.on_event is not None:
            self.on_event(SearchEvent(kind, number, data))


def _is_finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _finite_or_none(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v
