"""Where a trial's time went: its recorded phases as a timeline, for ``hpsearch status STUDY
--trial N``, ``Search.trial_phases`` and the dashboard's trial page alike, with the trial's
memory beside it (its peak per rank, and the batch it ran at where the search halved it).

Every trial records the ``phases`` user attr (``hpsearch.record.PHASES``): the
wall-clock time it was asked (``asked_at``) and each phase's seconds since then, in the order of
``PHASE_NAMES`` (asked, reserved, handed, ready, training_started, training_ended, last_report,
told). A trial that never trained (skipped by a constraint, stopped by the budget before its
devices, failed before reserving) lacks the later phases; one whose ranks failed while training
(out of memory) ended training when they stopped. A trial retried on the devices it held
(``search.on_oom: accumulate``) records its last attempt's phases, and its failed attempts as a
count and their seconds (``failed_attempts``, ``failed_attempts_s``): two attempts' times mixed
would run backwards. The one number a user looks for is
how long the orchestrator itself held the trial: after its devices were reserved, the time that
was not training (``rest_s``). On 16 cores that was a median 4.3 s for trials of about a second,
which nothing else showed.

Example:
    >>> timeline = phase_timeline({"phases": {"asked_at": 1.7e9, "asked": 0.0, "reserved": 0.5,
    ...     "handed": 0.52, "ready": 0.6, "training_started": 0.61, "training_ended": 2.61,
    ...     "last_report": 2.62, "told": 2.7}})
    >>> [(p.name, p.gap_s) for p in timeline.phases][:3]
    [('asked', None), ('reserved', 0.5), ('handed', 0.02)]
    >>> timeline.describe()
    'waited for devices 0.500 s; after its devices were reserved: training 2.000 s, the rest 0.200 s'
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from hpsearch import record
from hpsearch.study._fused import FusedTrial, fused_trial
from hpsearch.study._table import display_state
from hpsearch.study._units import format_bytes, format_seconds

if TYPE_CHECKING:
    import optuna

__all__ = ["Phase", "PhaseTimeline", "TrialPhases", "format_seconds", "phase_timeline", "trial_phases"]

#: The key of the phases attr that holds the wall-clock time the trial was asked.
ASKED_AT = "asked_at"


@dataclass(frozen=True)
class Phase:
    """One recorded phase of a trial.

    Attributes:
        name: The phase (one of ``PHASE_NAMES``).
        at_s: Seconds since the trial was asked.
        gap_s: Seconds since the previous recorded phase (``None`` for the first).
    """

    name: str
    at_s: float
    gap_s: float | None


@dataclass(frozen=True)
class PhaseTimeline:
    """A trial's phases, in ``PHASE_NAMES`` order, and where its time went.

    Attributes:
        asked_at: When the trial was asked (seconds since the epoch), if recorded.
        phases: The phases it recorded, in ``PHASE_NAMES`` order.
        missing: The phases it did not record (it never reached them).
        waited_s: From asked to its devices reserved: waiting for devices.
        training_s: From training started to training ended (rank 0's loop).
        rest_s: After its devices were reserved, the time that was neither training nor a
            failed attempt: starting its ranks, reporting and telling the study
            (``told - reserved - training_s - failed_attempts_s``), the orchestrator's overhead.
        failed_attempts: How many attempts failed before the last (run out of memory, then
            retried halved on the same devices); the phases are the last attempt's.
        failed_attempts_s: Their seconds, from the first one's ranks handed to the last
            attempt's start (``None`` without any).
    """

    asked_at: float | None
    phases: tuple[Phase, ...]
    missing: tuple[str, ...]
    waited_s: float | None
    training_s: float | None
    rest_s: float | None
    failed_attempts: int = 0
    failed_attempts_s: float | None = None

    def at(self, name: str) -> float | None:
        """Seconds since asked of phase ``name``, ``None`` when it was not recorded."""
        return next((p.at_s for p in self.phases if p.name == name), None)

    def describe(self) -> str:
        """One line: how long it waited for devices, then its training and the rest.

        Example:
            >>> phase_timeline({"phases": {"asked_at": 1.7e9, "asked": 0.0, "told": 0.01}}).describe()
            'never reserved devices; told 0.010 s after it was asked'
        """
        if self.waited_s is None:
            told = self.at("told")
            return "never reserved devices" + (f"; told {format_seconds(told)} after it was asked"
                                               if told is not None else "")
        training = f"training {format_seconds(self.training_s)}" if self.training_s is not None else "no training"
        if self.failed_attempts:
            attempts = "1 failed attempt" if self.failed_attempts == 1 else f"{self.failed_attempts} failed attempts"
            training = f"{attempts} {format_seconds(self.failed_attempts_s)}, then {training}"
        rest = f", the rest {format_seconds(self.rest_s)}" if self.rest_s is not None else ""
        return f"waited for devices {format_seconds(self.waited_s)}; after its devices were reserved: {training}{rest}"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (``hpsearch status --trial N --json``, the dashboard's trial page)."""
        return {
            "asked_at": self.asked_at,
            "asked_at_iso": None if self.asked_at is None else _iso(self.asked_at),
            record.PHASES: [{"phase": p.name, "at_s": p.at_s, "gap_s": p.gap_s} for p in self.phases],
            "missing": list(self.missing),
            "waited_s": self.waited_s,
            "training_s": self.training_s,
            "rest_s": self.rest_s,
            record.FAILED_ATTEMPTS: self.failed_attempts,
            record.FAILED_ATTEMPTS_S: self.failed_attempts_s,
            "summary": self.describe(),
        }


def phase_timeline(attrs: Mapping[str, Any]) -> PhaseTimeline | None:
    """The timeline of a trial's user attrs, ``None`` when it recorded no phases (a trial still
    running, or one written by a release before phases were recorded). Values that are not
    finite numbers count as not recorded.

    Example:
        >>> phase_timeline({}) is None, phase_timeline({"phases": {"asked": 0.0}}).missing[:2]
        (True, ('reserved', 'handed'))
    """
    raw = attrs.get(record.PHASES)
    if not isinstance(raw, Mapping):
        return None
    times = {name: float(raw[name]) for name in record.PHASE_NAMES if _finite(raw.get(name))}
    failed = int(raw[record.FAILED_ATTEMPTS]) if _finite(raw.get(record.FAILED_ATTEMPTS)) else 0
    failed_s = float(raw[record.FAILED_ATTEMPTS_S]) if failed and _finite(raw.get(record.FAILED_ATTEMPTS_S)) else None
    phases: list[Phase] = []
    for name in record.PHASE_NAMES:
        # A phase recorded before the one before it is not this run's: a study written before
        # attempts were kept apart mixed a retry's times with its failed attempt's (``handed``
        # 0.813 s, then ``ready`` 0.095 s): left out of the timeline rather than a negative gap.
        if name in times and (not phases or times[name] >= phases[-1].at_s):
            gap = round(times[name] - phases[-1].at_s, 4) if phases else None
            phases.append(Phase(name, times[name], gap))
    kept = {p.name: p.at_s for p in phases}
    missing = tuple(name for name in record.PHASE_NAMES if name not in times)
    asked, reserved, told = kept.get("asked", 0.0), kept.get("reserved"), kept.get("told")
    started, ended = kept.get(record.TRAINING_STARTED), kept.get("training_ended")
    training = round(ended - started, 4) if started is not None and ended is not None else None
    waited = round(reserved - asked, 4) if reserved is not None else None
    rest = (round(told - reserved - (training or 0.0) - (failed_s or 0.0), 4)
            if reserved is not None and told is not None else None)
    asked_at = float(raw[ASKED_AT]) if _finite(raw.get(ASKED_AT)) else None
    return PhaseTimeline(asked_at, tuple(phases), missing, waited, training, rest, failed, failed_s)


@dataclass(frozen=True)
class TrialPhases:
    """One trial and where its time went (``Search.trial_phases``).

    Attributes:
        number: The trial's number.
        state: Its state as readers show it (``PENDING`` while it waits for its devices).
        params: Its configuration.
        status_reason: Why it was pruned or failed (``None`` otherwise).
        status_detail: The reason in words.
        timeline: Its phases, ``None`` when it recorded none (still running, or an older study).
        device: The device kind it ran on, where recorded.
        peak_memory_bytes: The most memory one of its ranks held at once, where recorded.
        ran_as: The per-device batch and accumulation it ran at, where the search halved its
            batch because a larger one ran out of memory (``{"per_device_batch_size": b,
            "grad_accum_steps": A, "out_of_memory_at": b0}``).
        fused: Its part in fusing (``search.fuse``): its group and the group's members, what its
            runtime means, the step times; ``None`` for a trial that says nothing of fusing.
        duplicate_of: The trial that trained it, where it is an exact duplicate that did not
            train (``constraints.skip_duplicates``).
    """

    number: int
    state: str
    params: Mapping[str, Any] = field(default_factory=dict)
    status_reason: str | None = None
    status_detail: str | None = None
    timeline: PhaseTimeline | None = None
    device: str | None = None
    peak_memory_bytes: float | None = None
    ran_as: Mapping[str, Any] | None = None
    fused: FusedTrial | None = None
    duplicate_of: int | None = None

    def memory_line(self) -> str | None:
        """Its memory in one line, ``None`` where it recorded none.

        Example:
            >>> TrialPhases(3, "COMPLETE", device="cpu", peak_memory_bytes=1.5 * 2**30,
            ...             ran_as={"per_device_batch_size": 256, "grad_accum_steps": 2, "out_of_memory_at": 512}
            ...             ).memory_line()
            'peak 1.5 GiB per rank on cpu; ran as b 256 x A 2: 512 ran out of memory'
        """
        parts = []
        if self.peak_memory_bytes is not None:
            parts.append(f"peak {format_bytes(self.peak_memory_bytes)} per rank"
                         + (f" on {self.device}" if self.device else ""))
        if self.ran_as is not None:
            ran = self.ran_as
            at = ran.get("out_of_memory_at")
            parts.append(f"ran as b {ran.get(record.PER_DEVICE_BATCH_SIZE)} x A {ran.get(record.GRAD_ACCUM_STEPS)}"
                         + (f": {at} ran out of memory" if at is not None else ""))
        return "; ".join(parts) or None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (``hpsearch status STUDY --trial N --json``)."""
        return {"number": self.number, "state": self.state, "params": dict(self.params),
                record.STATUS_REASON: self.status_reason, record.STATUS_DETAIL: self.status_detail,
                "device": self.device, record.PEAK_MEMORY_BYTES: self.peak_memory_bytes,
                record.RAN_AS: None if self.ran_as is None else dict(self.ran_as),
                record.PHASES: None if self.timeline is None else self.timeline.to_dict(),
                "fused": None if self.fused is None else self.fused.to_dict(), record.DUPLICATE_OF: self.duplicate_of}


def trial_phases(trial: optuna.trial.FrozenTrial, *, members: Iterable[int] = ()) -> TrialPhases:
    """The ``TrialPhases`` of an Optuna trial; ``members``: the numbers of the trials of its fused
    group, where it has one (``hpsearch.study.group_members``)."""
    attrs = trial.user_attrs
    reason, detail = attrs.get(record.STATUS_REASON), attrs.get(record.STATUS_DETAIL)
    device, peak, ran_as = attrs.get(record.DEVICE), attrs.get(record.PEAK_MEMORY_BYTES), attrs.get(record.RAN_AS)
    duplicate = attrs.get(record.DUPLICATE_OF)
    return TrialPhases(trial.number, display_state(trial.state.name, attrs), dict(trial.params),
                       None if reason is None else str(reason), None if detail is None else str(detail),
                       phase_timeline(attrs), device if isinstance(device, str) else None,
                       float(peak) if isinstance(peak, (int, float)) and _finite(peak) else None,
                       dict(ran_as) if isinstance(ran_as, Mapping) else None, fused_trial(attrs, members),
                       int(duplicate) if isinstance(duplicate, (int, float)) and _finite(duplicate) else None)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, tz=timezone.utc).isoformat(timespec="milliseconds")
