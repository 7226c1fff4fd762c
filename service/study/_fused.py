"""Fused trials as readers show them: which trials trained together as one model, what their
runtimes mean, and why the others ran on their own.

With ``search.fuse``, configurations that share a shape train as one model vectorized over its
members; each member stays a trial of its own, with ``fused_group`` (the study number of the
group's first member), ``fused_members`` (the group's size at its start), ``fuse`` (``on``, or
``off: <why>`` for a trial that ran on its own) and ``runtime_basis: solo_estimate``: its
``runtime_s`` is what the configuration would take alone on its devices, not the group's wall
time (``fused_runtime_s``). A member's runtime read as its own wall time made fused trials look
twelve times slower than they were; a trial table without the group said nothing of why twelve
trials ended within a second of each other. ``hpsearch status``, the trial table, ``status
--trial N`` and the dashboard's trial page all read them through here.

Example:
    >>> import pandas as pd
    >>> frame = pd.DataFrame({"number": [0, 1, 2, 3], "fused_group": [0, 0, None, None],
    ...                       "fused_members": [2, 2, None, None], "runtime_basis": ["solo_estimate"] * 2 + [None] * 2,
    ...                       "fuse": ["on", "on", "off: fusing did not pay on cpu: 9 ms fused", None]})
    >>> summary = fused_summary(frame)
    >>> summary.to_dict()
    {'groups': 1, 'members': 2, 'off': {'fusing did not pay': 1}, 'group_sizes': {'0': 2}}
    >>> group_label(0, 2), number_ranges([0, 1, 2, 5])
    ('g0/2', '#0-#2, #5')
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hpsearch import record
from hpsearch.study._table import PENDING
from hpsearch.study._units import format_seconds

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SOLO_ESTIMATE", "FusedSummary", "FusedTrial", "fused_summary", "fused_trial", "group_label",
           "group_members", "is_solo_estimate", "number_ranges", "off_reason", "reason_kind"]

#: The ``runtime_basis`` of a fused member: its ``runtime_s`` is an estimate of it alone.
SOLO_ESTIMATE = "solo_estimate"
#: The ``fuse`` of a trial that trained fused, and how that of one that did not begins.
_ON, _OFF = "on", "off: "
#: Groups the status line lists by size before it says how many more there are.
_SIZES_SHOWN = 6


def group_label(group: object, members: object = None) -> str:
    """A fused member's group as a table shows it: ``g<group>/<members at its start>``, ``-``
    for a trial of its own.

    Example:
        >>> group_label(12, 4.0), group_label(3), group_label(None), group_label(float("nan"), 4)
        ('g12/4', 'g3', '-', '-')
    """
    number = _whole(group)
    if number is None:
        return "-"
    size = _whole(members)
    return f"g{number}" + (f"/{size}" if size is not None else "")


def is_solo_estimate(basis: object) -> bool:
    """Whether a ``runtime_basis`` says ``runtime_s`` is an estimate of the trial alone."""
    return basis == SOLO_ESTIMATE


def off_reason(fuse: object) -> str | None:
    """Why a trial ran on its own, from its ``fuse`` (``off: <why>``); ``None`` for one that
    trained fused or says nothing.

    Example:
        >>> off_reason("off: search.fuse is false"), off_reason("on"), off_reason(None)
        ('search.fuse is false', None, None)
    """
    return fuse[len(_OFF):] if isinstance(fuse, str) and fuse.startswith(_OFF) else None


#: The kinds of reason a trial trains on its own, as the planner and the fused engine begin
#: their ``fuse: off: <why>`` (``hpsearch.planner.planner``, ``hpsearch.trials.rank.fused``), and
#: what a summary calls each. A reason carries its own numbers (``among the 3 other
#: configurations``, ``took 12 ms``), so counted whole, 16 trials without a partner read as
#: "1 because no partner of its shape (the most common of 16 reasons)".
REASON_KINDS: tuple[tuple[str, str], ...] = (
    ("no partner of its shape", "no partner of its shape"),
    ("fusing did not pay", "fusing did not pay"),
    ("fusing stopped paying", "fusing did not pay"),
    ("the model cannot be vectorized", "the model cannot be vectorized over members"),
    ("the workload trains itself", "the workload trains itself"),
    ("one member's peak memory", "one member's peak memory fits the memory cap once"),
    ("search.fuse is false", "fuse off in the space"),
    ("ASHA", "ASHA judges each trial on its own"),
    ("a torch.compile'd model", "a torch.compile'd model is not fused"),
)


def reason_kind(reason: str) -> str:
    """The kind of a ``fuse: off`` reason (``REASON_KINDS``): what trials that ran on their own
    for the same cause share; for a reason of no known kind, its text before its numbers (before
    the first ``: `` or `` (``).

    Example:
        >>> reason_kind("no partner of its shape among the 3 other configurations waiting to start")
        'no partner of its shape'
        >>> reason_kind("fusing did not pay at per-device batch 32 of this shape, so not at 64 (on cpu: 9 ms)")
        'fusing did not pay'
    """
    for prefix, kind in REASON_KINDS:
        if reason.startswith(prefix):
            return kind
    return reason.split(": ", 1)[0].split(" (", 1)[0]


def number_ranges(numbers: Iterable[int]) -> str:
    """Trial numbers as people read a list of them: runs as ranges.

    Example:
        >>> number_ranges([7, 3, 4, 5, 9]), number_ranges([])
        ('#3-#5, #7, #9', '-')
    """
    ordered = sorted(set(numbers))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(f"#{ordered[i]}" if i == j else f"#{ordered[i]}-#{ordered[j]}")
        i = j + 1
    return ", ".join(parts) or "-"


@dataclass(frozen=True)
class FusedSummary:
    """A study's fused trials at a glance (``hpsearch status``).

    Attributes:
        group_sizes: Each fused group's id (the study number of its first member) and how many
            of the study's trials are its members, in id order.
        off: Trials that ran on their own with a reason (``fuse: off: <why>``), counted by the
            kind of reason (``reason_kind``), most common first.
        estimates: How many members record their ``runtime_s`` as a solo estimate.
    """

    group_sizes: Mapping[int, int] = field(default_factory=dict)
    off: Mapping[str, int] = field(default_factory=dict)
    estimates: int = 0

    @property
    def groups(self) -> int:
        """How many fused groups the study has."""
        return len(self.group_sizes)

    @property
    def members(self) -> int:
        """How many of its trials trained fused."""
        return sum(self.group_sizes.values())

    def lines(self) -> list[str]:
        """What ``hpsearch status`` prints: a line for the fused trials, one for those that ran on
        their own with a reason; none for a study without either.

        Example:
            >>> FusedSummary({0: 12, 12: 12}, {"fusing did not pay": 3, "no partner of its shape": 1}, 24).lines()
            ['fused: 24 trials in 2 groups (12 + 12); their runtimes are solo estimates (runtime_basis: solo_estimate)',
             'not fused: 4 trials on their own, 3 because fusing did not pay, 1 because no partner of its shape']
        """
        out = []
        if self.group_sizes:
            sizes = list(self.group_sizes.values())
            listed = " + ".join(str(n) for n in sizes[:_SIZES_SHOWN])
            if len(sizes) > _SIZES_SHOWN:
                listed += f" + {len(sizes) - _SIZES_SHOWN} more groups"
            line = f"fused: {_count(self.members, 'trial')} in {_count(self.groups, 'group')} ({listed})"
            if self.estimates:
                which = "their" if self.estimates == self.members else f"{self.estimates} of their"
                line += f"; {which} runtimes are solo estimates (runtime_basis: solo_estimate)"
            out.append(line)
        if self.off:
            total = sum(self.off.values())
            kinds = ", ".join(f"{n} because {kind}" for kind, n in self.off.items())
            out.append(f"not fused: {_count(total, 'trial')} on their own, {kinds}")
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (``hpsearch status --json``, the dashboard)."""
        return {"groups": self.groups, "members": self.members, "off": dict(self.off),
                "group_sizes": {str(k): v for k, v in self.group_sizes.items()}}


def fused_summary(frame: pd.DataFrame) -> FusedSummary:
    """The ``FusedSummary`` of a study's trials table (empty for a study that never fused).

    Only trials that ran count: a trial still waiting for its devices (``PENDING``, also the
    orphans of a search killed before it started them) or back in the queue (``WAITING``) has
    trained neither fused nor on its own yet. After ``kill -9`` before any trial ran, ``status``
    had said "fused: 12 trials in 2 groups" of groups that never trained."""
    if len(frame) and "state" in frame.columns:
        frame = frame[~frame["state"].isin((PENDING, "WAITING"))]
    sizes: Counter[int] = Counter()
    estimates = 0
    if len(frame) and record.FUSED_GROUP in frame.columns:
        bases = frame[record.RUNTIME_BASIS].tolist() if record.RUNTIME_BASIS in frame.columns else [None] * len(frame)
        for group, basis in zip(frame[record.FUSED_GROUP].tolist(), bases):
            number = _whole(group)
            if number is not None:
                sizes[number] += 1
                estimates += is_solo_estimate(basis)
    off: Counter[str] = Counter()
    if len(frame) and record.FUSE in frame.columns:
        off.update(reason_kind(reason) for reason in map(off_reason, frame[record.FUSE].tolist()) if reason)
    return FusedSummary(dict(sorted(sizes.items())), dict(sorted(off.items(), key=lambda kv: (-kv[1], kv[0]))),
                        estimates)


@dataclass(frozen=True)
class FusedTrial:
    """One trial's part in fusing (``hpsearch status STUDY --trial N``, the dashboard's trial page).

    Attributes:
        fuse: ``on``, ``off: <why>``, or ``None`` where the trial says nothing.
        group: Its fused group's id (the study number of the group's first member), ``None``
            for a trial of its own.
        members_at_start: How many members the group started with.
        members: The numbers of the study's trials of its group, itself included.
        runtime_basis: ``solo_estimate`` where ``runtime_s`` is an estimate of it alone.
        runtime_s: Its ``runtime_s``.
        fused_runtime_s: The group's own wall time.
        fused_step_s: The median seconds of one optimizer step of the whole group, fused.
        solo_step_s: The same of one member alone, timed beside it on the same batches.
    """

    fuse: str | None = None
    group: int | None = None
    members_at_start: int | None = None
    members: tuple[int, ...] = ()
    runtime_basis: str | None = None
    runtime_s: float | None = None
    fused_runtime_s: float | None = None
    fused_step_s: float | None = None
    solo_step_s: float | None = None

    @property
    def label(self) -> str:
        """``g<group>/<members at start>``, ``-`` for a trial of its own."""
        return group_label(self.group, self.members_at_start)

    def lines(self) -> list[str]:
        """What ``status --trial N`` prints about it: its group and the group's members, what
        its runtime means and the step times that decided it.

        Example:
            >>> FusedTrial("on", 0, 3, (0, 1, 2), "solo_estimate", 2.5, 4.0, 0.012, 0.005).lines()
            ['fused: group g0/3, trained as one model with trials #0-#2', 'runtime_s 2.500 s is a solo estimate (runtime_basis: solo_estimate): what it would take alone on its devices; the group took 4.000 s (fused_runtime_s)', 'one optimizer step: 12 ms for the group fused, 5 ms for one member alone (fused_step_s, solo_step_s)']
        """
        out = []
        if self.group is not None:
            out.append(f"fused: group {self.label}, trained as one model with trials {number_ranges(self.members)}")
        elif self.fuse is not None:
            out.append(f"fuse: {self.fuse}")
        if is_solo_estimate(self.runtime_basis):
            took = (f"; the group took {format_seconds(self.fused_runtime_s)} (fused_runtime_s)"
                    if self.fused_runtime_s is not None else "")
            runtime = f"runtime_s {format_seconds(self.runtime_s)} " if self.runtime_s is not None else "runtime_s "
            out.append(f"{runtime}is a solo estimate (runtime_basis: solo_estimate): what it would take alone on "
                       f"its devices{took}")
        if self.fused_step_s is not None or self.solo_step_s is not None:
            out.append(f"one optimizer step: {_step(self.fused_step_s)} for the group fused, "
                       f"{_step(self.solo_step_s)} for one member alone (fused_step_s, solo_step_s)")
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data; ``group_label`` is how the trial table writes the group."""
        return {record.FUSE: self.fuse, record.FUSED_GROUP: self.group, record.FUSED_MEMBERS: self.members_at_start,
                "group_label": self.label if self.group is not None else None, "members": list(self.members),
                record.RUNTIME_BASIS: self.runtime_basis, record.RUNTIME_S: self.runtime_s,
                record.FUSED_RUNTIME_S: self.fused_runtime_s, record.FUSED_STEP_S: self.fused_step_s,
                record.SOLO_STEP_S: self.solo_step_s}


def fused_trial(attrs: Mapping[str, Any], members: Iterable[int] = ()) -> FusedTrial | None:
    """A trial's ``FusedTrial`` from its user attrs and the numbers of its group's trials
    (``group_members``); ``None`` for a trial that says nothing of fusing.

    Example:
        >>> fused_trial({"runtime_s": 3.0}) is None, fused_trial({"fuse": "off: search.fuse is false"}).lines()
        (True, ['fuse: off: search.fuse is false'])
    """
    keys = (record.FUSE, record.FUSED_GROUP, record.RUNTIME_BASIS, record.FUSED_STEP_S, record.SOLO_STEP_S)
    if all(attrs.get(k) is None for k in keys):
        return None
    fuse, basis = attrs.get(record.FUSE), attrs.get(record.RUNTIME_BASIS)
    group = _whole(attrs.get(record.FUSED_GROUP))
    return FusedTrial(
        fuse if isinstance(fuse, str) else None, group, _whole(attrs.get(record.FUSED_MEMBERS)),
        tuple(sorted({int(n) for n in members})) if group is not None else (),
        basis if isinstance(basis, str) else None,
        *(_finite(attrs.get(k)) for k in (record.RUNTIME_S, record.FUSED_RUNTIME_S, record.FUSED_STEP_S,
                                         record.SOLO_STEP_S)))


def group_members(groups: Iterable[tuple[Any, Any]], group: object) -> tuple[int, ...]:
    """The numbers of the trials of fused group ``group`` among ``(number, fused_group)`` pairs
    (a study's ``fused_group`` attr by trial number, ``hpsearch.study.read_attr``, or the two
    columns of its trials table); ``()`` for a trial of its own.

    Example:
        >>> group_members([(0, 0), (1, 0.0), (2, None), (3, 3)], 0), group_members([(0, 0)], None)
        ((0, 1), ())
    """
    number = _whole(group)
    if number is None:
        return ()
    return tuple(sorted(int(n) for n, g in groups if _whole(g) == number))


def _whole(value: object) -> int | None:
    """A whole number (a table holds a group id as a float beside missing ones), or ``None``."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]  # numpy scalars, text is refused below
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) and number == int(number) else None


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _step(seconds: float | None) -> str:
    """A step's seconds in milliseconds under a second (``12 ms``), else as seconds."""
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
