"""``StudySearcher``: the Ray Tune searcher of a search, a thin adapter over the planner.

Tune asks it for a trial's configuration and tells it each trial's results; it passes the first
to the planner (``hpsearch.planner.planner.Planner``: what runs next) and the others, each
decoded into a ``TrialReport``, to the recorder (``hpsearch.planner.recorder.Recorder``: what the
study records). It lives in the Tune driver process, so the study has one writer (one writer per
SQLite study, docs/design.md), and it turns a lost store into the end of the search, since Tune's
callbacks must not raise.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna
from ray.tune import Callback, Stopper
from ray.tune.search import Searcher

from hpsearch.errors import StoreLostError
from hpsearch.planner.budget import BudgetLedger
from hpsearch.planner.decisions import Finished
from hpsearch.planner.plan import ConfirmationRun
from hpsearch.planner.planner import Planner
from hpsearch.planner.recorder import Recorder
from hpsearch.planner.report import ReportKind, decode
from hpsearch.planner.state import SearchState
from hpsearch.progress import SearchEvent
from hpsearch.search_spaces import SearchSpace

__all__ = ["InterruptStopper", "StudySearcher", "TrainingStarted"]


def _store_guard(method: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a lost store (``StoreLostError``, after the storage's own retries) into a stop of
    the search: Tune's callbacks must not raise, and nothing more can be recorded anyway."""

    @functools.wraps(method)
    def guarded(self: StudySearcher, *args: Any, **kwargs: Any) -> Any:
        finished = Searcher.FINISHED if method.__name__ == "suggest" else None
        if self.store_lost is not None:
            return finished
        try:
            return method(self, *args, **kwargs)
        except StoreLostError as exc:
            self.store_lost = exc
            return finished

    return guarded


class StudySearcher(Searcher):
    """Proposes configurations from the study's sampler and records results in the study.

    Args:
        study: The Optuna study (its storage is written from this process only).
        space: The validated space.
        n_trials: How many trials to launch in this run (skipped configurations not counted).
        device: ``cpu`` or ``cuda``: where the trials train.
        runs_dir: Parent of each trial's run folder.
        on_event: Called with each ``SearchEvent`` (progress display).
        ledger: The search's budget account (``hpsearch.budget``); ``None``: no budget kept.
        max_processes: The most processes one trial can have (``SearchPlan.devices``): a larger
            world size plays its ranks on fewer (``resources.emulate_ranks: auto``).
        slots: How many trials run at once (``SearchPlan.max_concurrent``): fused groups of one
            shape are sized to keep them busy.
        confirmations: A confirmation round's runs (``hpsearch.planner.confirmation``): proposed first,
            each as a new trial of the study's answer with its own seed, whatever the sampler
            would ask; ``n_trials`` counts them.
    """

    def __init__(self, study: optuna.Study, space: SearchSpace, n_trials: int, device: str, runs_dir: Path,
                 on_event: Callable[[SearchEvent], None] | None = None, ledger: BudgetLedger | None = None,
                 max_processes: int | None = None, slots: int = 1,
                 confirmations: Sequence[ConfirmationRun] = ()) -> None:
        super().__init__()
        #: What the running search knows, shared by the planner and the recorder.
        self.state = SearchState(study, space, n_trials, device, runs_dir, on_event, ledger, max_processes, slots,
                                 confirmations)
        self.recorder = Recorder(self.state)
        self.planner = Planner(self.state, self.recorder)
        #: Set when the store stopped answering for good; the search then stops.
        self.store_lost: StoreLostError | None = None

    @property
    def space(self) -> SearchSpace:
        return self.state.space

    @property
    def interrupted(self) -> bool:
        """Set by the orchestrator on Ctrl-C/SIGTERM: trials stopped from then on are
        ``interrupted``, not early-stopped."""
        return self.state.interrupted

    @interrupted.setter
    def interrupted(self, value: bool) -> None:
        self.state.interrupted = value

    @property
    def budget_ran_out(self) -> bool:
        """Set when the budget ran out: the running trials are stopped as ``budget``."""
        return self.state.budget_ran_out

    @budget_ran_out.setter
    def budget_ran_out(self, value: bool) -> None:
        self.state.budget_ran_out = value

    @property
    def budget_stop(self) -> str | None:
        """Why the budget stopped the search (``None``: it did not)."""
        return self.state.budget_stop

    @budget_stop.setter
    def budget_stop(self, value: str | None) -> None:
        self.state.budget_stop = value

    # Tune calls this before the run; we optimise our own objectives, not Tune's metric/mode.
    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any) -> bool:
        return True

    @_store_guard
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        decision = self.planner.next_trial(trial_id)
        return Searcher.FINISHED if isinstance(decision, Finished) else {"trial": decision.task}

    @_store_guard
    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.recorder.on_result(trial_id, decode(result))

    @_store_guard
    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        self.recorder.on_complete(trial_id, decode(result), error)

    @_store_guard
    def training_started(self, trial_id: str) -> None:
        """The trial got its resources and its ranks start (``TrainingStarted``)."""
        self.recorder.training_started(trial_id)

    @_store_guard
    def check_budget(self) -> bool:
        """Whether the budget ran out, so the running trials must stop (``Planner.check_budget``)."""
        return self.planner.check_budget()

    def fail_open_trials(self, reason: str, detail: str) -> None:
        """Record every trial still open that ran as FAIL with ``reason``; those that never
        started go back to the study's queue (``Recorder.fail_open_trials``)."""
        self.recorder.fail_open_trials(reason, detail)

    def end_run(self) -> None:
        """The end of this run of the search: the trials still open are cut short, by the budget
        or by a stop, and what the run spent is written (``Recorder.end_run``)."""
        self.recorder.end_run()


class TrainingStarted(Callback):
    """Marks a trial ``training_started`` when its devices are reserved and its ranks start.

    Tune asks the searcher for a trial as soon as ``max_concurrent_trials`` allows; the trial
    may then wait for its devices (a two-rank trial behind a one-rank one on a small machine).
    Optuna holds it RUNNING all along, so readers tell waiting from training by this attr
    (``hpsearch.study.display_state``: PENDING until it is set). The trial driver says when
    with a first report of kind ``ReportKind.STARTED`` (``hpsearch.tune.trainable``).
    """

    def __init__(self, searcher: StudySearcher) -> None:
        self.searcher = searcher

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        if decode(result).kind is ReportKind.STARTED:
            self.searcher.training_started(trial.trial_id)


class InterruptStopper(Stopper):
    """Ends the whole Tune experiment once the searcher was told the search is interrupted,
    lost its store, or ran out of budget."""

    def __init__(self, searcher: StudySearcher, on_stop: Callable[[], None] | None = None) -> None:
        self.searcher = searcher
        self._on_stop = on_stop  # called once, when the search is first found stopping

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        # The budget is checked first: it also writes what the search spent, every few seconds.
        budget_ran_out = bool(self.searcher.check_budget())
        stop = self.searcher.interrupted or self.searcher.store_lost is not None or budget_ran_out
        if stop and self._on_stop is not None:
            on_stop, self._on_stop = self._on_stop, None
            on_stop()
        return stop
