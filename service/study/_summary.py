"""What a study says at a glance: counts by state, finished trials, the best trial, the
searched params its trial table shows, the listing line of ``hpsearch ls``. Each is computed
here once, from the trials table (``hpsearch.study.read_trials``), for the CLI, the study API
and the dashboard alike.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hpsearch import record
from hpsearch.search_spaces import CORE_PARAMETERS
from hpsearch.study._fused import FusedSummary, fused_summary

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["BestTrial", "StudyListing", "StudySummary", "best_trial_number", "cut_short_counts", "duplicate_counts",
           "duplicates_line", "finished_count", "is_finished", "reason_counts", "searched_params", "state_counts",
           "study_listing", "summarize"]


def is_finished(state: str, reason: object) -> bool:
    """Whether a trial counts as finished for ``n_trials``: it ran to an end of its own
    (COMPLETE, stopped early by ASHA, or failed), not skipped by a constraint nor cut short by
    a stopped search.

    Example:
        >>> is_finished("FAIL", "diverged"), is_finished("FAIL", "interrupted"), is_finished("RUNNING", None)
        (True, False, False)
    """
    return state in record.FINISHED_STATES and reason not in record.NOT_RUN_REASONS


def finished_count(frame: pd.DataFrame) -> int:
    """How many trials of the table count as finished (``is_finished``)."""
    if not len(frame):
        return 0
    reasons = frame[record.STATUS_REASON] if record.STATUS_REASON in frame.columns else [None] * len(frame)
    searched = ~confirmation_rows(frame)
    return sum(is_finished(state, _missing_as_none(reason)) and own
               for state, reason, own in zip(frame["state"], reasons, searched))


def confirmation_rows(frame: pd.DataFrame) -> pd.Series:
    """Which rows of the trials table are confirmation runs (``record.ROLE``): they count apart
    from ``n_trials``."""
    import pandas as pd

    if record.ROLE not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame[record.ROLE] == record.ROLE_CONFIRMATION


def state_counts(frame: pd.DataFrame) -> dict[str, int]:
    """Trials per state, by state name (PENDING for trials waiting for their resources)."""
    if not len(frame):
        return {}
    return {str(k): int(v) for k, v in sorted(frame["state"].value_counts().items())}


def reason_counts(frame: pd.DataFrame) -> dict[str, int]:
    """Trials per ``status_reason`` (the pruned, failed and skipped ones), most common first.

    Example:
        >>> import pandas as pd
        >>> reason_counts(pd.DataFrame({"number": [0, 1, 2], "state": ["FAIL", "PRUNED", "PRUNED"],
        ...                             "status_reason": ["out_of_memory", "exceeds_memory", "exceeds_memory"]}))
        {'exceeds_memory': 2, 'out_of_memory': 1}
    """
    if not len(frame) or record.STATUS_REASON not in frame.columns:
        return {}
    counts = Counter(str(v) for v in frame[record.STATUS_REASON].tolist() if isinstance(v, str))
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def cut_short_counts(frame: pd.DataFrame) -> dict[str, int]:
    """The trials the search itself cut short (``interrupted``, ``budget``) whose configuration
    no finished rerun (``rerun_of``) has run yet, counted by reason: ``hpsearch resume`` runs
    them first.

    Example:
        >>> import pandas as pd
        >>> frame = pd.DataFrame({"number": [0, 1, 2, 3], "state": ["FAIL", "FAIL", "COMPLETE", "FAIL"],
        ...                       "status_reason": ["budget", "budget", None, "interrupted"],
        ...                       "rerun_of": [None, None, 0, None]})
        >>> cut_short_counts(frame)
        {'budget': 1, 'interrupted': 1}
    """
    if not len(frame) or record.STATUS_REASON not in frame.columns:
        return {}
    rerun: set[int] = set()
    if record.RERUN_OF in frame.columns:
        for state, original in zip(frame["state"], frame[record.RERUN_OF]):
            if state in record.FINISHED_STATES and (number := _number(original)) is not None:
                rerun.add(int(number))
    counts: Counter[str] = Counter()
    for number, state, reason in zip(frame["number"], frame["state"], frame[record.STATUS_REASON]):
        if state == "FAIL" and reason in record.RERUN_REASONS and int(number) not in rerun:
            counts[str(reason)] += 1
    return dict(sorted(counts.items()))


def duplicate_counts(frame: pd.DataFrame) -> dict[int, int]:
    """The study's exact duplicates (``duplicate_of``, ``constraints.skip_duplicates``): per
    duplicate's number, the number of the trial that trained it, in number order.

    Example:
        >>> import pandas as pd
        >>> duplicate_counts(pd.DataFrame({"number": [0, 1, 2], "duplicate_of": [None, 0, 0]}))
        {1: 0, 2: 0}
    """
    if not len(frame) or record.DUPLICATE_OF not in frame.columns:
        return {}
    return {int(number): int(run) for number, original in zip(frame["number"], frame[record.DUPLICATE_OF])
            if (run := _number(original)) is not None}


def duplicates_line(duplicates: Mapping[int, int]) -> str | None:
    """The line the end-of-search report and ``hpsearch status`` say of the exact duplicates
    (``duplicate_counts``); ``None`` for a study with none.

    Example:
        >>> print(duplicates_line({13: 5, 17: 5, 23: 9}))
        3 exact duplicates not run, each recorded as the trial that trained the very same thing (duplicate_of): #13 and #17 as #5, #23 as #9
    """
    if not duplicates:
        return None
    by_run: dict[int, list[int]] = {}
    for number, run in sorted(duplicates.items()):
        by_run.setdefault(run, []).append(number)
    parts = [f"{' and '.join(', '.join(f'#{n}' for n in numbers).rsplit(', ', 1))} as #{run}"
             for run, numbers in sorted(by_run.items())]
    count = len(duplicates)
    return (f"{count} exact duplicate{'' if count == 1 else 's'} not run, each recorded as the trial that trained "
            f"the very same thing (duplicate_of): {', '.join(parts)}")


def searched_params(frame: pd.DataFrame, params: Sequence[str]) -> list[str]:
    """The params a trial table shows besides the core ones (per-device batch, world size,
    accumulation, LR rule and base LR, which have columns of their own): every other param of
    the study that takes more than one value among its trials (a trial without it counts as one
    more value), in the order of ``params``. The CLI's end-of-search table and the dashboard's
    trial table both show these.

    Two trials of the same batch and LR at accuracies 0.11 and 0.93 said nothing of why while
    the optimizer they searched was not a column; a param the space fixes (``momentum: 0.9``)
    says nothing about a row, and is left out.

    Args:
        frame: The trials table.
        params: The study's param names, in the order it first saw them
            (``hpsearch.study.param_names``).

    Example:
        >>> import pandas as pd
        >>> frame = pd.DataFrame({"number": [0, 1], "per_device_batch_size": [16, 64],
        ...                       "optimizer": ["sgd", "adamw"], "momentum": [0.9, 0.9], "hidden": [32, 64]})
        >>> searched_params(frame, ["per_device_batch_size", "optimizer", "momentum", "hidden"])
        ['optimizer', 'hidden']
    """
    if not len(frame):
        return []
    return [p for p in dict.fromkeys(params)
            if p not in CORE_PARAMETERS and p in frame.columns and frame[p].nunique(dropna=False) > 1]


def best_trial_number(frame: pd.DataFrame, objectives: Sequence[str], directions: Sequence[str]) -> int | None:
    """The best COMPLETE trial: best on the first objective, a tie broken by the next objective,
    and so on, then by the lowest number. Never a dominated trial: a trial that loses on a later
    objective at an equal first one is not the best. ``None`` before any trial completes.

    Args:
        frame: The trials table.
        objectives: The study's objective names, in order.
        directions: ``"maximize"`` or ``"minimize"`` for each objective.

    Example:
        >>> import pandas as pd
        >>> frame = pd.DataFrame({"number": [0, 1], "state": ["COMPLETE"] * 2,
        ...                       "val_accuracy": [0.974, 0.974], "runtime_s": [0.372, 0.046]})
        >>> best_trial_number(frame, ["val_accuracy", "runtime_s"], ["maximize", "minimize"])
        1
    """
    if not len(frame) or any(o not in frame.columns for o in objectives):
        return None
    done = frame[frame["state"] == "COMPLETE"]
    keys: list[tuple[float, ...]] = []
    numbers = done["number"].tolist()
    columns = [done[o].tolist() for o in objectives]
    for i in range(len(done)):
        values = [_number(column[i]) for column in columns]
        finite = [v for v in values if v is not None]
        if len(finite) < len(values):
            continue
        # Lexicographic order on sign-adjusted values: its minimum is on the Pareto front.
        keys.append((*(-v if d == "maximize" else v for v, d in zip(finite, directions)), float(numbers[i])))
    if not keys:
        return None
    return int(min(keys)[-1])


@dataclass(frozen=True)
class BestTrial:
    """The best trial of a study: its number, objective values and params."""

    number: int
    values: Mapping[str, float]
    params: Mapping[str, Any]


@dataclass(frozen=True)
class StudySummary:
    """A study at a glance.

    Attributes:
        study: The study's name.
        objectives: Its objective metrics, in order.
        directions: ``maximize`` or ``minimize`` per objective.
        n_trials: Trials of any state.
        finished: Trials that count toward ``target`` (``is_finished``).
        target: The number of finished trials the search aims for, when the study records one.
        states: Trials per state (PENDING: waiting for its devices; RUNNING: training).
        best_trial: The best COMPLETE trial (``best_trial_number``), or ``None``.
        cut_short: Trials the search cut short (``interrupted``, ``budget``) that ``resume``
            runs again first, by reason (``cut_short_counts``).
        reasons: Trials per ``status_reason`` (``reason_counts``): why the pruned, failed and
            skipped ones ended as they did.
        fused: Its fused groups and the trials that ran on their own with a reason
            (``hpsearch.study.fused_summary``; empty for a study that never fused).
        confirmation_runs: Its confirmation runs (``record.ROLE``), which ``finished`` and
            ``target`` leave out; ``confirmations`` its rounds, each as
            ``ConfirmationRound.to_dict`` gives it.
        duplicates: Its exact duplicates, which did not train (``duplicate_counts``): per
            duplicate's number, the trial that trained it.
    """

    study: str
    objectives: tuple[str, ...]
    directions: tuple[str, ...]
    n_trials: int
    finished: int
    target: int | None
    states: Mapping[str, int]
    best_trial: BestTrial | None
    cut_short: Mapping[str, int] = field(default_factory=dict)
    reasons: Mapping[str, int] = field(default_factory=dict)
    fused: FusedSummary = field(default_factory=FusedSummary)
    confirmation_runs: int = 0
    confirmations: tuple[Mapping[str, Any], ...] = ()
    duplicates: Mapping[int, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (``hpsearch status --json``, the dashboard)."""
        best = self.best_trial
        return {
            "study": self.study,
            "objectives": list(self.objectives),
            "directions": list(self.directions),
            "n_trials": self.n_trials,
            "finished": self.finished,
            "target": self.target,
            "states": dict(self.states),
            "best_trial": None if best is None else {"number": best.number, "values": dict(best.values),
                                                     "params": dict(best.params)},
            "cut_short": dict(self.cut_short),
            "reasons": dict(self.reasons),
            "fused": self.fused.to_dict(),
            "confirmation_runs": self.confirmation_runs,
            "confirmations": [dict(r) for r in self.confirmations],
            "duplicates": [{"number": n, record.DUPLICATE_OF: run} for n, run in self.duplicates.items()],
        }


def summarize(name: str, frame: pd.DataFrame, objectives: Sequence[str], directions: Sequence[str], *,
              params: Sequence[str], target: int | None = None,
              confirmations: Sequence[Mapping[str, Any]] = ()) -> StudySummary:
    """The ``StudySummary`` of a study's trials table.

    Args:
        params: The names of the study's params (the best trial's ``params`` are these columns).
        confirmations: The study's confirmation rounds, as it keeps them.
    """
    number = best_trial_number(frame, objectives, directions)
    best = None
    if number is not None:
        row = frame.loc[frame["number"] == number].iloc[0]
        best = BestTrial(number, {o: float(row[o]) for o in objectives},
                         {p: _plain(row[p]) for p in params if p in frame.columns and _plain(row[p]) is not None})
    return StudySummary(name, tuple(objectives), tuple(directions), len(frame), finished_count(frame), target,
                        state_counts(frame), best, cut_short_counts(frame), reason_counts(frame), fused_summary(frame),
                        int(confirmation_rows(frame).sum()) if len(frame) else 0, tuple(confirmations),
                        duplicate_counts(frame))


@dataclass(frozen=True)
class StudyListing:
    """One line of ``hpsearch ls`` and of the dashboard's study list."""

    name: str
    n_trials: int
    states: Mapping[str, int]
    objectives: tuple[str, ...]
    best_values: tuple[float, ...] | None
    started: datetime | None
    last_activity: datetime | None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return {"name": self.name, "n_trials": self.n_trials, "states": dict(self.states),
                "objectives": list(self.objectives),
                "best_values": None if self.best_values is None else list(self.best_values),
                "started": _iso(self.started), "last_activity": _iso(self.last_activity)}


def study_listing(name: str, frame: pd.DataFrame, objectives: Sequence[str], directions: Sequence[str]) -> StudyListing:
    """The ``StudyListing`` of a study's trials table."""
    number = best_trial_number(frame, objectives, directions)
    best_values = None
    if number is not None:
        row = frame.loc[frame["number"] == number].iloc[0]
        best_values = tuple(float(row[o]) for o in objectives)
    starts = [s for s in frame["datetime_start"].tolist() if _stamp(s)] if len(frame) else []
    stamps = starts + ([s for s in frame["datetime_complete"].tolist() if _stamp(s)] if len(frame) else [])
    return StudyListing(name, len(frame), state_counts(frame), tuple(objectives), best_values,
                        min(starts) if starts else None, max(stamps) if stamps else None)


def _number(value: object) -> float | None:
    """A finite number, or ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)  # type: ignore[arg-type]  # numpy scalars
        except (TypeError, ValueError):
            return None
    number = float(value)
    return number if math.isfinite(number) else None


def _missing_as_none(value: object) -> object:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _plain(value: object) -> Any:
    """A table cell as plain Python data (NaN becomes None, numpy scalars Python ones)."""
    value = _missing_as_none(value)
    return value.item() if hasattr(value, "item") else value


def _stamp(value: object) -> bool:
    """Whether a cell holds a time (pandas' NaT is a datetime that equals nothing, itself included)."""
    return isinstance(value, datetime) and value == value


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()
