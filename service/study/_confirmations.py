"""Confirmation rounds as a study keeps them: the search ran its own answer, and whether it held.

A round (``hpsearch.planner.confirmation`` runs them) is the answer for N devices run as new trials,
each with a seed no earlier run of that configuration used, judged against the interval the
answer stated before the round ran (docs/analysis.md, "Confirmation"). The study keeps its rounds
in one user attr (``ATTR_CONFIRMATIONS``) and each run's record on its trial (``CONFIRMATION``);
this module reads them back, for the CLI, the API, the dashboard and the analysis alike.

Example:
    >>> rounds = confirmation_rounds({})
    >>> confirmation_status(rounds, {"per_device_batch_size": 32}).text
    'unconfirmed: no confirmation round has run (hpsearch confirm STUDY runs one)'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from hpsearch import record

if TYPE_CHECKING:
    import optuna

__all__ = ["HELD", "INCOMPLETE", "MISSED", "RUNNING", "ConfirmationRound", "ConfirmationRun", "ConfirmationStatus", "confirmation_rounds", "confirmation_status",
           "is_confirmation", "same_answer", "trial_params"]

#: Round verdicts: its runs still to end, the answer held (every run reached the target and the
#: median of their samples lies in the interval stated before), it did not, or its runs were cut
#: short (the search was stopped under them, or they failed) before they could say.
RUNNING, HELD, MISSED, INCOMPLETE = "running", "held", "missed", "incomplete"

#: Two answers are the same configuration when their LRs differ by at most this factor (a refit
#: that folds a confirmation in moves the law's LR by a percent or two; a search tells LRs apart
#: by factors of 2).
SAME_LR = 1.1


@dataclass(frozen=True)
class ConfirmationRun:
    """One trial of a round, as judged once it ended.

    Attributes:
        trial: Its number.
        seed: The seed it ran with.
        state: Its state (``COMPLETE``; ``FAIL`` where it failed or was cut short).
        reached: Whether it reached the target.
        samples: Its samples to the target (``None``: not reached).
        samples_trained: The samples it trained in all.
        train_s: Its training seconds to the target (``None``: not reached).
        hit: Whether ``samples`` lie in the interval the round stated (``None``: it did not end
            by itself, so it says nothing).
        time_measured: Its ranks were real (not emulated on fewer devices), so its time is the
            answer's on its devices.
        time_hit: Whether ``train_s`` lies in the stated time interval (``None`` where not
            measured or not reached).
    """

    trial: int
    seed: int | None
    state: str
    reached: bool
    samples: float | None
    samples_trained: float | None
    train_s: float | None
    hit: bool | None
    time_measured: bool = True
    time_hit: bool | None = None


@dataclass(frozen=True)
class ConfirmationRound:
    """One confirmation round: the answer it ran, what that answer predicted before it ran, and
    what its runs measured.

    Attributes:
        round: Its number in the study (1, 2, ...).
        devices: The devices the answer was for.
        target: What "reached" means (``val_accuracy >= 0.95``).
        params: The answer's exact configuration (``Recommendation.params()``).
        configuration: It in a phrase (``b 32 x W 1 x A 1 = B 32, lr 0.0348``).
        lr: The answer's LR.
        predicted_samples: ``(low, estimate, high)`` samples to the target, stated before it ran.
        predicted_time_s: ``(low, estimate, high)`` training seconds, where fitted.
        trials: The round's trials.
        verdict: ``running``, ``held``, ``missed`` or ``incomplete``.
        runs: Each trial as judged.
        note: Why the verdict is what it is, in a sentence.
        goal: The target as ``(metric, value, direction)``, to judge the runs by.
    """

    round: int
    devices: int
    target: str
    params: Mapping[str, Any]
    configuration: str
    lr: float
    predicted_samples: tuple[float, float, float]
    predicted_time_s: tuple[float, float, float] | None
    trials: tuple[int, ...] = ()
    verdict: str = RUNNING
    runs: tuple[ConfirmationRun, ...] = field(default=())
    note: str = ""
    goal: tuple[str, float, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data: what the study keeps, and ``--json`` prints."""
        out = asdict(self)
        out["params"] = dict(self.params)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConfirmationRound:
        """A round as ``to_dict`` wrote it."""
        runs = tuple(ConfirmationRun(**run) for run in data.get("runs") or ())
        time = data.get("predicted_time_s")
        return cls(int(data["round"]), int(data["devices"]), str(data["target"]), dict(data.get("params") or {}),
                   str(data.get("configuration") or ""), float(data.get("lr") or 0.0),
                   tuple(float(v) for v in data["predicted_samples"]),  # type: ignore[arg-type]
                   None if time is None else tuple(float(v) for v in time),  # type: ignore[arg-type]
                   tuple(int(n) for n in data.get("trials") or ()), str(data.get("verdict") or RUNNING), runs,
                   str(data.get("note") or ""), _goal(data.get("goal")))

    @property
    def measured_samples(self) -> float | None:
        """The median samples to the target of its runs that reached it (``None``: none did)."""
        values = sorted(r.samples for r in self.runs if r.samples is not None)
        if not values:
            return None
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2

    def describe(self) -> str:
        """The round in a line: its answer, what it predicted, what it measured, and the verdict."""
        low, estimate, high = self.predicted_samples
        trials = ", ".join(f"#{n}" for n in self.trials) or "no trial yet"
        measured = self.measured_samples
        seen = (f"measured {_count(measured)} samples" if measured is not None else "no run reached the target")
        return (f"round {self.round} ({trials}): {self.configuration} on {self.devices} device"
                f"{'' if self.devices == 1 else 's'}, predicted {_count(estimate)} [{_count(low)}, {_count(high)}] "
                f"samples to reach {self.target}; {seen if self.verdict != RUNNING else 'running'}: {self.verdict}"
                + (f" ({self.note})" if self.note else ""))


@dataclass(frozen=True)
class ConfirmationStatus:
    """Whether an answer was confirmed, in a line for ``recommend`` and the dashboard.

    Attributes:
        confirmed: A round ran this answer's configuration and held.
        text: ``confirmed by trial #N: reached ... in ... samples (predicted ...)`` or
            ``unconfirmed: <why>``.
        round: The round that says so, where one does.
        trials: Its trials.
    """

    confirmed: bool
    text: str
    round: int | None = None
    trials: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return {"confirmed": self.confirmed, "text": self.text, "round": self.round, "trials": list(self.trials)}


def confirmation_rounds(study_user_attrs: Mapping[str, Any]) -> tuple[ConfirmationRound, ...]:
    """The study's confirmation rounds, in order (none for a study that never confirmed)."""
    raw = study_user_attrs.get(record.ATTR_CONFIRMATIONS) or ()
    return tuple(ConfirmationRound.from_dict(r) for r in raw if isinstance(r, Mapping))


def is_confirmation(attrs: Mapping[str, Any]) -> bool:
    """Whether a trial (its user attrs, or its row of the trials table) is a confirmation run."""
    return attrs.get(record.ROLE) == record.ROLE_CONFIRMATION


def trial_params(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """The configuration a trial ran: its params, and for a confirmation run the values its
    params could not hold (``record.CONFIRMATION``)."""
    ran = trial.user_attrs.get(record.CONFIRMATION)
    extra = ran.get("params") if isinstance(ran, Mapping) else None
    return {**trial.params, **(extra if isinstance(extra, Mapping) else {})}


def same_answer(params: Mapping[str, Any], other: Mapping[str, Any], base_batch: float | None = None) -> bool:
    """Whether two answers are the same configuration: every parameter equal, but for the base
    LR, which may differ by ``SAME_LR`` (a refit moves it a little)."""
    keys = set(params) | set(other)
    for key in keys:
        a, b = params.get(key), other.get(key)
        if key == record.BASE_LR and isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b > 0:
            if abs(math.log(a / b)) > math.log(SAME_LR):
                return False
        elif record.param_value_key(a) != record.param_value_key(b):
            return False
    return True


def confirmation_status(rounds: Sequence[ConfirmationRound], params: Mapping[str, Any]) -> ConfirmationStatus:
    """What the study's rounds say of an answer of ``params``: confirmed by the round that ran it
    and held, else why not."""
    mine = [r for r in rounds if same_answer(r.params, params)]
    held = [r for r in mine if r.verdict == HELD]
    if held:
        last = held[-1]
        low, estimate, high = last.predicted_samples
        measured = last.measured_samples
        numbers = ", ".join(f"#{n}" for n in last.trials)
        return ConfirmationStatus(True, f"confirmed by trial {numbers}: reached {last.target} in "
                                        f"{_count(measured or 0.0)} samples (predicted {_count(estimate)} "
                                        f"[{_count(low)}, {_count(high)}] before it ran)", last.round, last.trials)
    if mine:
        last = mine[-1]
        return ConfirmationStatus(False, f"unconfirmed: {last.describe()}", last.round, last.trials)
    if rounds:
        last = rounds[-1]
        return ConfirmationStatus(False, f"unconfirmed: this configuration has not run as a confirmation; the last "
                                         f"round ran another answer ({last.describe()})", last.round, last.trials)
    return ConfirmationStatus(False, "unconfirmed: no confirmation round has run (hpsearch confirm STUDY runs one)")


def _goal(raw: Any) -> tuple[str, float, str] | None:
    if not isinstance(raw, (list, tuple)) or len(raw) != 3:
        return None
    return str(raw[0]), float(raw[1]), str(raw[2])


def _count(value: float) -> str:
    return f"{value:,.0f}"
