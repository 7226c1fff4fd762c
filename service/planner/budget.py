"""The search's budget: what it may spend, what it spent, what is left, whether a trial fits.

A budget (``search.budget``, ``--budget``) limits a whole search, over ``start`` and every
``resume`` of its study, in wall-clock time and/or device-hours. The study keeps the budget
(``hpsearch.budget``) and what was spent (``hpsearch.budget_spent``), so a study killed with
``kill -9`` resumes with what it had spent, less at most ``PERSIST_EVERY_S`` of wall-clock time.

- **Wall-clock time** counts each run of the search from its beginning (before Ray starts, so
  Ray's start-up counts) to the end of its trials, added up over the runs.
- **Device time** is the sum of the trials' ``device_seconds`` (training time x devices): the
  study's own measure of cost, so the budget and the trials' records always agree. A trial that
  ends before its final report (stopped early, failed, stopped by the budget) records the
  device-seconds it used up to its end.

The ``BudgetLedger`` lives in the Tune driver, the study's one writer: the searcher tells it
when trials start, report and end; the stopper asks it, about ten times a second, whether the
budget ran out.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hpsearch import record
from hpsearch.record import (
    ATTR_BUDGET,
    ATTR_BUDGET_SPENT,
    COMPILE_S,
    CURVES,
    DEVICE_SECONDS,
    DUPLICATE_OF,
    EMULATED_RANKS,
    RUNTIME_S,
)
from hpsearch.search_spaces import Budget, format_duration
from hpsearch.trials.spec import trial_spec

if TYPE_CHECKING:
    import optuna

    from hpsearch.search_spaces import SearchSpace

__all__ = [
    "PERSIST_EVERY_S",
    "BudgetLedger",
    "BudgetSpent",
    "BudgetStatus",
    "Prediction",
    "budget_of",
    "budget_status",
    "predict_trial",
    "settle_orphans",
    "spent_device_seconds",
    "spent_of",
    "trial_devices",
    "write_budget",
]

#: How often a running search writes what it spent to the study (seconds of wall-clock time).
PERSIST_EVERY_S = 5.0
#: How often a running search tells its progress display what it spent.
_EMIT_EVERY_S = 1.0
#: The shape of a trial, for predicting its cost from trials that ran: what its speed depends on.
_SHAPE = (record.PER_DEVICE_BATCH_SIZE, record.WORLD_SIZE, record.GRAD_ACCUM_STEPS)


@dataclass(frozen=True)
class BudgetSpent:
    """What a study's searches spent: wall-clock seconds and device-seconds."""

    wall_s: float = 0.0
    device_s: float = 0.0

    @property
    def device_hours(self) -> float:
        """``device_s`` in hours."""
        return self.device_s / 3600.0

    def to_dict(self) -> dict[str, float]:
        """As the study keeps it."""
        return {"wall_s": round(self.wall_s, 3), "device_s": round(self.device_s, 3)}


@dataclass(frozen=True)
class BudgetStatus:
    """A study's budget, what it spent and what is left (``None``: no limit of that kind)."""

    budget: Budget
    spent: BudgetSpent
    wall_left_s: float | None
    device_hours_left: float | None

    @classmethod
    def of(cls, budget: Budget, spent: BudgetSpent) -> BudgetStatus:
        """What is left of ``budget`` once ``spent`` is spent."""
        wall_left = None if budget.wall_s is None else max(0.0, budget.wall_s - spent.wall_s)
        device_left = None if budget.device_hours is None else max(0.0, budget.device_hours - spent.device_hours)
        return cls(budget, spent, wall_left, device_left)

    @property
    def spent_out(self) -> bool:
        """Whether some limit is reached."""
        return self.wall_left_s == 0 or self.device_hours_left == 0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (``--json`` output)."""
        return {"wall_s": self.budget.wall_s, "device_hours": self.budget.device_hours,
                "spent_wall_s": round(self.spent.wall_s, 3), "spent_device_hours": self.spent.device_hours,
                "wall_left_s": self.wall_left_s, "device_hours_left": self.device_hours_left}

    def describe(self) -> str:
        """One line: ``budget: 1m30s of 2m wall-clock spent (30s left), 0.01 device-hours``."""
        parts = []
        if self.budget.wall_s is not None:
            parts.append(f"{format_duration(self.spent.wall_s)} of {format_duration(self.budget.wall_s)} "
                         f"wall-clock spent ({format_duration(self.wall_left_s or 0.0)} left)")
        else:
            parts.append(f"{format_duration(self.spent.wall_s)} wall-clock spent")
        if self.budget.device_hours is not None:
            parts.append(f"{self.spent.device_hours:.3g} of {self.budget.device_hours:g} device-hours "
                         f"({self.device_hours_left or 0.0:.3g} left)")
        else:
            parts.append(f"{self.spent.device_hours:.3g} device-hours")
        return "budget: " + ", ".join(parts)


def budget_of(study: optuna.Study, default: Budget) -> Budget:
    """The budget the study keeps, or ``default`` (the space's) for a study that keeps none."""
    raw = study.user_attrs.get(ATTR_BUDGET)
    if not isinstance(raw, Mapping):
        return default
    return Budget(wall_s=_number(raw.get("wall_s")), device_hours=_number(raw.get("device_hours")))


def write_budget(study: optuna.Study, budget: Budget) -> None:
    """Keep ``budget`` as the study's budget (``resume`` without ``--budget`` reads it back)."""
    study.set_user_attr(ATTR_BUDGET, {"wall_s": budget.wall_s, "device_hours": budget.device_hours})


def spent_of(study: optuna.Study) -> BudgetSpent:
    """What the study's searches spent: the wall-clock time its runs wrote, and the sum of its
    trials' device-seconds (``spent_device_seconds``)."""
    raw = study.user_attrs.get(ATTR_BUDGET_SPENT)
    wall = _number(raw.get("wall_s")) if isinstance(raw, Mapping) else None
    device = sum(spent_device_seconds(t.user_attrs) or 0.0 for t in study.get_trials(deepcopy=False))
    return BudgetSpent(wall_s=wall or 0.0, device_s=device)


def spent_device_seconds(attrs: Mapping[str, Any]) -> float | None:
    """A trial's device-seconds as its budget counts them: its ``device_seconds`` (its runtime
    on its devices) and the compiling its runtime leaves out (``compile_s``), on the same
    devices; ``None`` where it recorded none. An exact duplicate (``duplicate_of``) carries the
    device-seconds of the trial that trained it, as what its configuration costs, and spent none.

    Example:
        >>> spent_device_seconds({"device_seconds": 4.0, "runtime_s": 2.0, "compile_s": 10.0})
        24.0
        >>> spent_device_seconds({"device_seconds": 4.0, "duplicate_of": 3})
        0.0
    """
    if attrs.get(DUPLICATE_OF) is not None:
        return 0.0
    device = _number(attrs.get(DEVICE_SECONDS))
    runtime, compiling = _number(attrs.get(RUNTIME_S)), _number(attrs.get(COMPILE_S))
    if device is not None and runtime and compiling:
        device += device / runtime * compiling
    return device


def budget_status(study: optuna.Study, default: Budget | None = None) -> BudgetStatus:
    """The study's budget (``default`` for a study that keeps none), what it spent and what
    is left."""
    return BudgetStatus.of(budget_of(study, default or Budget()), spent_of(study))


def trial_devices(params: Mapping[str, Any], space: SearchSpace, max_processes: int | None = None) -> int:
    """The devices a trial's ``device_seconds`` counts: its processes (``TrialSpec.processes``:
    its world size, or fewer when its ranks are emulated; ``max_processes``: the most one trial
    can have on the cluster, ``SearchPlan.devices``)."""
    return trial_spec(space, params, max_processes=max_processes).processes


def _trials(n: int) -> str:
    return f"{n} completed trial{'' if n == 1 else 's'}"


def settle_orphans(study: optuna.Study, space: SearchSpace) -> None:
    """Give each trial a dead search left RUNNING the device-seconds it used, as far as its
    last evaluation measured (``runtime_s`` x devices), so the budget counts it on resume."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        runtime = _last_runtime(t.user_attrs.get(CURVES))
        if runtime is not None and DEVICE_SECONDS not in t.user_attrs:
            # Its processes: as many as its ranks, less those it played in one (recorded when it
            # was proposed).
            emulated = t.user_attrs.get(EMULATED_RANKS)
            devices = (int(t.params.get(record.WORLD_SIZE, 1)) // int(emulated) if isinstance(emulated, int) and emulated > 0
                       else trial_devices(t.params, space))
            study._storage.set_trial_user_attr(t._trial_id, DEVICE_SECONDS, runtime * devices)


def _last_runtime(curves: Any) -> float | None:
    if not isinstance(curves, Mapping):
        return None
    values = [v for v in curves.get(RUNTIME_S) or [] if _number(v) is not None]
    return float(values[-1]) if values else None


@dataclass(frozen=True)
class Prediction:
    """What a trial is expected to cost, from the COMPLETE trials of the study.

    Attributes:
        wall_s: Seconds from its proposal to its end (the median of those trials').
        device_s: Its device-seconds (the median of their ``runtime_s``, times its devices).
        basis: Which trials it comes from, for messages.
    """

    wall_s: float
    device_s: float
    basis: str


def predict_trial(trials: Iterable[optuna.trial.FrozenTrial], params: Mapping[str, Any], devices: int) -> Prediction | None:
    """The cost of a trial of ``params`` from the COMPLETE ``trials``: those of its shape (per-device
    batch, world size, accumulation) when any ran, else all of them; ``None`` when none did.

    Trials of one shape take about the same time whatever their learning rate; across shapes the
    median of all is a rough guess, and the budget's hard stop is what holds.
    """
    # An exact duplicate's start to complete is its wait for the trial that trained it.
    done = [t for t in trials if t.state.name == "COMPLETE" and t.datetime_start and t.datetime_complete
            and DUPLICATE_OF not in t.user_attrs]
    shape = tuple(params.get(k) for k in _SHAPE)
    same = [t for t in done if tuple(t.params.get(k) for k in _SHAPE) == shape]
    pool, basis = (same, f"{_trials(len(same))} of the same shape") if same else (done, f"{_trials(len(done))} of other shapes")
    if not pool:
        return None
    wall = statistics.median((t.datetime_complete - t.datetime_start).total_seconds() for t in pool)  # type: ignore[operator]
    runtimes = [r for t in pool if (r := _number(t.user_attrs.get(RUNTIME_S))) is not None]
    device = statistics.median(runtimes) * devices if runtimes else wall * devices
    return Prediction(wall_s=wall, device_s=device, basis=basis)


@dataclass
class _Running:
    devices: int
    predicted_device_s: float | None
    training_since: float | None = None


@dataclass
class BudgetLedger:
    """The live account of one run of a search.

    Args:
        budget: The study's budget.
        before: What earlier runs spent (``spent_of`` the study when this run began).
        started: ``time.monotonic()`` when this run of the search began.
        clock: The clock (``time.monotonic``).
    """

    budget: Budget
    before: BudgetSpent
    started: float
    clock: Callable[[], float] = time.monotonic
    ended_device_s: float = 0.0
    running: dict[str, _Running] = field(default_factory=dict)
    _persisted_at: float = -math.inf
    _emitted_at: float = -math.inf

    def wall_s(self, now: float | None = None) -> float:
        """Wall-clock seconds spent, this run included."""
        return self.before.wall_s + ((self.clock() if now is None else now) - self.started)

    def device_s(self, now: float | None = None) -> float:
        """Device-seconds spent: every ended trial's, and the running ones' time so far."""
        now = self.clock() if now is None else now
        live = sum(r.devices * (now - r.training_since) for r in self.running.values() if r.training_since is not None)
        return self.before.device_s + self.ended_device_s + live

    def spent(self, now: float | None = None) -> BudgetSpent:
        """What the study spent, this run included."""
        now = self.clock() if now is None else now
        return BudgetSpent(self.wall_s(now), self.device_s(now))

    def status(self, now: float | None = None) -> BudgetStatus:
        """The budget, what it spent and what is left."""
        return BudgetStatus.of(self.budget, self.spent(now))

    def exhausted(self, now: float | None = None) -> str | None:
        """Why the budget is spent (which limit was reached), or ``None`` while some is left."""
        now = self.clock() if now is None else now
        if self.budget.wall_s is not None and self.wall_s(now) >= self.budget.wall_s:
            return f"the wall-clock budget of {format_duration(self.budget.wall_s)} is spent"
        if self.budget.device_hours is not None and self.device_s(now) >= self.budget.device_hours * 3600:
            return f"the budget of {self.budget.device_hours:g} device-hours is spent"
        return None

    def refusal(self, prediction: Prediction | None, now: float | None = None) -> str | None:
        """Why a trial with this ``prediction`` must not start (the budget left cannot fit it),
        or ``None``. With no prediction (no trial completed yet) only a spent budget refuses."""
        now = self.clock() if now is None else now
        spent = self.exhausted(now)
        if spent is not None:
            return f"not started: {spent}"
        if prediction is None:
            return None
        if self.budget.wall_s is not None:
            left = self.budget.wall_s - self.wall_s(now)
            if prediction.wall_s > left:
                return (f"not started: predicted to take {format_duration(prediction.wall_s)} ({prediction.basis}), "
                        f"and {format_duration(left)} of the wall-clock budget is left")
        if self.budget.device_hours is not None:
            committed = sum(max(r.predicted_device_s or 0.0, r.devices * (now - r.training_since)
                                if r.training_since is not None else 0.0) for r in self.running.values())
            left = self.budget.device_hours * 3600 - self.before.device_s - self.ended_device_s - committed
            if prediction.device_s > left:
                return (f"not started: predicted to use {prediction.device_s / 3600:.3g} device-hours "
                        f"({prediction.basis}), and {max(left, 0.0) / 3600:.3g} are left once the running "
                        "trials end")
        return None

    def trial_proposed(self, trial_id: str, devices: int, prediction: Prediction | None) -> None:
        """A trial was proposed; it counts once it trains."""
        self.running[trial_id] = _Running(devices, None if prediction is None else prediction.device_s)

    def trial_training(self, trial_id: str) -> None:
        """The trial's ranks start: its device time runs from now."""
        running = self.running.get(trial_id)
        if running is not None and running.training_since is None:
            running.training_since = self.clock()

    def trial_ended(self, trial_id: str, device_seconds: float | None) -> None:
        """The trial ended having used ``device_seconds`` (what its record says)."""
        self.running.pop(trial_id, None)
        self.ended_device_s += device_seconds or 0.0

    def due(self, now: float | None = None) -> tuple[bool, bool]:
        """Whether it is time to write what was spent to the study, and to tell the display."""
        now = self.clock() if now is None else now
        persist, emit = now - self._persisted_at >= PERSIST_EVERY_S, now - self._emitted_at >= _EMIT_EVERY_S
        if persist:
            self._persisted_at = now
        if emit:
            self._emitted_at = now
        return persist, emit

    def persist(self, study: optuna.Study, now: float | None = None) -> None:
        """Write what the study spent so far (``hpsearch.budget_spent``)."""
        study.set_user_attr(ATTR_BUDGET_SPENT, self.spent(now).to_dict())


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)
