"""Where a trial's time went: its recorded phases as a timeline, for ``hpsearch status STUDY
--trial N``, ``Search.trial_phases`` and the dashboard's trial page alike, with the trial's
memory beside it (its peak per rank, and the batch it ran at where the search halved it).

Every trial records the ``phases`` user attr (``hpsearch.record.PHASES``): the
wall-clock time it was asked (``asked_at``) and each phase's seconds since then, in the order of
``PHASE_NAMES`` (asked, launched, devices_free, reserved, handed, ready, training_started,
training_ended, last_report, told). The spans between them have one set of names, here
(``PHASE_SPANS``): start-up, waiting for devices, training and the rest; the CLI, the dashboard
and the docs all read them from this module. Waiting for devices is only the time every device
the trial could use was held by other running trials: Ray and Tune starting a trial's process and
its node's rank processes warming up are start-up (counted as waiting, a first trial of a search
with free slots would show seconds "waiting for devices" that are all start-up).

A trial that never trained (skipped by a constraint, stopped by the budget before its devices,
failed before reserving) lacks the later phases; one whose ranks failed while training
(out of memory) ended training when they stopped. A trial retried on the devices it held
(``search.on_oom: accumulate``) records its last attempt's phases, and its failed attempts as a
count and their seconds (``failed_attempts``, ``failed_attempts_s``): two attempts' times mixed
would run backwards. The one number a user looks for is
how long the orchestrator itself held the trial: after its devices were reserved, the time that
was not training (``rest_s``), which nothing else shows (docs/benchmarks.md, sections 10 and 12,
measure it for many short trials at once).

Example:
    >>> timeline = phase_timeline({"phases": {"asked_at": 1.7e9, "asked": 0.0, "launched": 0.3,
    ...     "devices_free": 0.3, "reserved": 0.5, "handed": 0.52, "ready": 0.6, "training_started": 0.61,
    ...     "training_ended": 2.61, "last_report": 2.62, "told": 2.7}})
    >>> [(p.name, p.gap_s, p.span) for p in timeline.phases][:4]
    [('asked', None, None), ('launched', 0.3, 'startup'), ('devices_free', 0.0, 'wait'), ('reserved', 0.2, 'startup')]
    >>> timeline.describe()
    'start-up 0.500 s, waiting for devices 0.000 s; after its devices were reserved: training 2.000 s, the rest 0.200 s'
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

__all__ = ["PHASE_SPANS", "Phase", "PhaseSpan", "PhaseTimeline", "TrialPhases", "format_seconds", "phase_timeline",
           "span_of", "trial_phases"]

#: The key of the phases attr that holds the wall-clock time the trial was asked.
ASKED_AT = "asked_at"


@dataclass(frozen=True)
class PhaseSpan:
    """What the time between two phases was, as every reader names it.

    Attributes:
        kind: Its short name in data (``startup``, ``wait``, ``train``, ``rest``): the JSON of
            a timeline and the dashboard's bar use it.
        label: Its name in words, as ``status --trial N``, the dashboard and the docs print it.
        meaning: What it holds, in a sentence (the dashboard's legend, the docs).
        ends: The phases whose span from the phase before is of this kind.
    """

    kind: str
    label: str
    meaning: str
    ends: tuple[str, ...]


#: The kinds of span between a trial's phases, in the order a trial's time goes through them.
#: Every phase but ``asked`` ends a span of exactly one kind.
PHASE_SPANS: tuple[PhaseSpan, ...] = (
    PhaseSpan("startup", "start-up",
              "Ray and Tune starting the trial's process; then, once its devices were free, placing them "
              "and warming its node's rank processes", ("launched", "reserved")),
    PhaseSpan("wait", "waiting for devices",
              "every device it could use was held by other running trials", ("devices_free",)),
    PhaseSpan("train", "training", "rank 0's training loop", ("training_ended",)),
    PhaseSpan("rest", "the rest",
              "after its devices were reserved, the time it did not train: starting its ranks, reporting, "
              "telling the study (the orchestrator's own)",
              ("handed", "ready", record.TRAINING_STARTED, "last_report", "told")),
)


def span_of(phase: str) -> PhaseSpan | None:
    """The kind of the span that ends at ``phase`` (``None`` for ``asked``, where none ends).

    Example:
        >>> span_of("devices_free").label, span_of("reserved").label, span_of("asked")
        ('waiting for devices', 'start-up', None)
    """
    return next((span for span in PHASE_SPANS if phase in span.ends), None)


def _label(kind: str) -> str:
    return next(span.label for span in PHASE_SPANS if span.kind == kind)


@dataclass(frozen=True)
class Phase:
    """One recorded phase of a trial.

    Attributes:
        name: The phase (one of ``PHASE_NAMES``).
        at_s: Seconds since the trial was asked.
        gap_s: Seconds since the previous recorded phase (``None`` for the first).
        span: The ``PhaseSpan.kind`` of that gap (``None`` for the first).
    """

    name: str
    at_s: float
    gap_s: float | None
    span: str | None = None


@dataclass(frozen=True)
class PhaseTimeline:
    """A trial's phases, in ``PHASE_NAMES`` order, and where its time went (``PHASE_SPANS``).

    Attributes:
        asked_at: When the trial was asked (seconds since the epoch), if recorded.
        phases: The phases it recorded, in ``PHASE_NAMES`` order.
        missing: The phases it did not record (it never reached them).
        waited_s: Waiting for devices: from launched to devices free, the time every device it
            could use was held by other running trials (``None`` where not recorded: a trial
            that never reserved devices, or one recorded by a release that did not tell start-up
            from waiting).
        training_s: From training started to training ended (rank 0's loop).
        rest_s: After its devices were reserved, the time that was neither training nor a
            failed attempt: starting its ranks, reporting and telling the study
            (``told - reserved - training_s - failed_attempts_s``), the orchestrator's overhead.
        failed_attempts: How many attempts failed before the last (run out of memory, then
            retried halved on the same devices); the phases are the last attempt's.
        failed_attempts_s: Their seconds, from the first one's ranks handed to the last
            attempt's start (``None`` without any).
        startup_s: Start-up: from asked to launched, and from devices free to reserved
            (``None`` where ``waited_s`` is).
    """

    asked_at: float | None
    phases: tuple[Phase, ...]
    missing: tuple[str, ...]
    waited_s: float | None
    training_s: float | None
    rest_s: float | None
    failed_attempts: int = 0
    failed_attempts_s: float | None = None
    startup_s: float | None = None

    def at(self, name: str) -> float | None:
        """Seconds since asked of phase ``name``, ``None`` when it was not recorded."""
        return next((p.at_s for p in self.phases if p.name == name), None)

    def describe(self) -> str:
        """One line: its start-up and how long it waited for devices, then its training and the rest.

        Example:
            >>> phase_timeline({"phases": {"asked_at": 1.7e9, "asked": 0.0, "told": 0.01}}).describe()
            'never reserved devices; told 0.010 s after it was asked'
        """
        reserved = self.at("reserved")
        if reserved is None:
            told = self.at("told")
            return "never reserved devices" + (f"; told {format_seconds(told)} after it was asked"
                                               if told is not None else "")
        if self.waited_s is not None and self.startup_s is not None:
            before = (f"{_label('startup')} {format_seconds(self.startup_s)}, "
                      f"{_label('wait')} {format_seconds(self.waited_s)}")
        else:  # recorded before the trial's process said when it asked for its devices
            before = (f"devices reserved {format_seconds(reserved)} after it was asked ({_label('startup')} and "
                      f"{_label('wait')} not told apart by the release that recorded it)")
        training = (f"{_label('train')} {format_seconds(self.training_s)}" if self.training_s is not None
                    else f"no {_label('train')}")
        if self.failed_attempts:
            attempts = "1 failed attempt" if self.failed_attempts == 1 else f"{self.failed_attempts} failed attempts"
            training = f"{attempts} {format_seconds(self.failed_attempts_s)}, then {training}"
        rest = f", {_label('rest')} {format_seconds(self.rest_s)}" if self.rest_s is not None else ""
        return f"{before}; after its devices were reserved: {training}{rest}"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (``hpsearch status --trial N --json``, the dashboard's trial page):
        the phases with the kind of the span that ends at each, and ``spans``, every kind's label
        and meaning (``PHASE_SPANS``), which the dashboard's bar and legend show."""
        return {
            "asked_at": self.asked_at,
            "asked_at_iso": None if self.asked_at is None else _iso(self.asked_at),
            record.PHASES: [{"phase": p.name, "at_s": p.at_s, "gap_s": p.gap_s, "span": p.span} for p in self.phases],
            "missing": list(self.missing),
            "startup_s": self.startup_s,
            "waited_s": self.waited_s,
            "training_s": self.training_s,
            "rest_s": self.rest_s,
            record.FAILED_ATTEMPTS: self.failed_attempts,
            record.FAILED_ATTEMPTS_S: self.failed_attempts_s,
            "spans": [{"kind": s.kind, "label": s.label, "meaning": s.meaning} for s in PHASE_SPANS],
            "summary": self.describe(),
        }


def phase_timeline(attrs: Mapping[str, Any]) -> PhaseTimeline | None:
    """The timeline of a trial's user attrs, ``None`` when it recorded no phases (a trial still
    running, or one written by a release before phases were recorded). Values that are not
    finite numbers count as not recorded.

    Example:
        >>> phase_timeline({}) is None, phase_timeline({"phases": {"asked": 0.0}}).missing[:2]
        (True, ('launched', 'devices_free'))
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
        # attempts were kept apart mixes a retry's times with its failed attempt's (``ready``
        # earlier than ``handed``): left out of the timeline rather than a negative gap.
        if name in times and (not phases or times[name] >= phases[-1].at_s):
            gap = round(times[name] - phases[-1].at_s, 4) if phases else None
            span = span_of(name) if phases else None
            phases.append(Phase(name, times[name], gap, None if span is None else span.kind))
    kept = {p.name: p.at_s for p in phases}
    missing = tuple(name for name in record.PHASE_NAMES if name not in times)
    asked, reserved, told = kept.get("asked", 0.0), kept.get("reserved"), kept.get("told")
    launched, free = kept.get("launched"), kept.get("devices_free")
    started, ended = kept.get(record.TRAINING_STARTED), kept.get("training_ended")
    training = round(ended - started, 4) if started is not None and ended is not None else None
    waited = startup = None
    if reserved is not None and launched is not None and free is not None:
        waited = round(free - launched, 4)
        startup = round((launched - asked) + (reserved - free), 4)
    rest = (round(told - reserved - (training or 0.0) - (failed_s or 0.0), 4)
            if reserved is not None and told is not None else None)
    asked_at = float(raw[ASKED_AT]) if _finite(raw.get(ASKED_AT)) else None
    return PhaseTimeline(asked_at, tuple(phases), missing, waited, training, rest, failed, failed_s, startup)


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
