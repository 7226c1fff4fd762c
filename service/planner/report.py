"""``TrialReport``: what a trial tells the search, and its one encoding as a Tune result.

A trial's process (``hpsearch.tune.trainable``) reports to Tune, and Tune hands each result to
the searcher as a flat dict: a result's nested dicts are flattened on the way (``{"a": {"b":
1}}`` arrives as ``{"a/b": 1}``), so pairs travel as lists. The trial builds a ``TrialReport``,
``encode`` turns it into that dict, and the searcher reads it back with ``decode``: the wire's
keys are known here only, and both sides import this module without Ray.

Example:
    >>> report = TrialReport(ReportKind.FAILED, {"runtime_s": 2.0}, member=1, reason="diverged", detail="nan loss")
    >>> decode(encode(report)) == report
    True
    >>> encode(TrialReport(ReportKind.FINAL, {"val_accuracy": 0.9}))
    {'val_accuracy': 0.9, 'hpsearch_final': True}
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hpsearch import record

__all__ = [
    "EARLIER_KEY", "FAILED_KEY", "FINAL_KEY", "FUSE_DECLINED_KEY", "MEMBERS_KEY", "MEMBER_KEY", "NOT_RUN_KEY",
    "PHASES_KEY", "RESTARTED_KEY", "STARTED_KEY",
    "ReportKind", "TrialReport",
    "decode", "encode",
]

# The result keys of the wire. Two are record names (a group's member, why a group declined to
# fuse), as the fused ranks write them (hpsearch.trials.rank.fused).
STARTED_KEY = "hpsearch_started"
FAILED_KEY = "hpsearch_failed"
FINAL_KEY = "hpsearch_final"
RESTARTED_KEY = "hpsearch_restarted"
EARLIER_KEY = "hpsearch_earlier"
PHASES_KEY = "hpsearch_phases"
MEMBER_KEY = record.FUSED_MEMBER
MEMBERS_KEY = "hpsearch_members"
NOT_RUN_KEY = "hpsearch_not_run"
FUSE_DECLINED_KEY = record.FUSE_DECLINED


class ReportKind(enum.Enum):
    """What a report says of its trial (or of one member of its fused group)."""

    #: Its devices are reserved and its ranks start (``metrics``: where it runs).
    STARTED = enum.auto()
    #: An evaluation on the way (``metrics`` holds ``evaluation``), or nothing yet.
    PROGRESS = enum.auto()
    #: It ran out of memory and trains again halved (``search.on_oom: accumulate``), or a group
    #: that ran out is split: the evaluations reported so far are not those of the run it records.
    RESTARTED = enum.auto()
    #: A fused group did not train fused (``declined`` says why); its members train on their own.
    FUSE_DECLINED = enum.auto()
    #: It trained to its end: its final measurements.
    FINAL = enum.auto()
    #: It failed (``reason``, ``detail``), or, ``not_run``, a member was not run at all.
    FAILED = enum.auto()


@dataclass(frozen=True)
class TrialReport:
    """One report of a trial to the search.

    Attributes:
        kind: What it says (``ReportKind``).
        metrics: Rank 0's measurements and where the trial runs, by their record names (and,
            read back, whatever Tune adds to a result).
        member: The member of a fused group it is about (its index in the group); ``None``: the
            whole trial.
        members: The members a group-wide report is about (``RESTARTED``, ``FUSE_DECLINED``).
        reason: ``FAILED``: the ``status_reason``.
        detail: The ``status_detail`` (``FAILED``; ``RESTARTED``: why the group split).
        not_run: ``FAILED``: a member not run (``exceeds_memory``: another of its shape ran out alone).
        declined: ``FUSE_DECLINED``: why the group did not train fused.
        phases: The wall-clock times of the trial's phases its process saw, ``(phase, time)``.
        ran_as: The shape it ran at after running out of memory (``search.on_oom: accumulate``).
        earlier: The evaluations held back and passed on with this report, oldest first.
    """

    kind: ReportKind
    metrics: Mapping[str, Any] = field(default_factory=dict)
    member: int | None = None
    members: tuple[int, ...] | None = None
    reason: str | None = None
    detail: str | None = None
    not_run: bool = False
    declined: str | None = None
    phases: tuple[tuple[str, Any], ...] | None = None
    ran_as: Mapping[str, Any] | None = None
    earlier: tuple[TrialReport, ...] = ()

    @property
    def final(self) -> bool:
        """It trained to its end."""
        return self.kind is ReportKind.FINAL

    @property
    def failed(self) -> bool:
        """It failed (or was not run)."""
        return self.kind is ReportKind.FAILED

    def get(self, name: str, default: Any = None) -> Any:
        """A measurement, by its record name."""
        return self.metrics.get(name, default)


_FLAGS = {ReportKind.STARTED: STARTED_KEY, ReportKind.FINAL: FINAL_KEY, ReportKind.FAILED: FAILED_KEY,
          ReportKind.RESTARTED: RESTARTED_KEY}
_KEYS = frozenset({STARTED_KEY, FAILED_KEY, FINAL_KEY, RESTARTED_KEY, EARLIER_KEY, PHASES_KEY, MEMBER_KEY, MEMBERS_KEY,
                   NOT_RUN_KEY, FUSE_DECLINED_KEY, record.STATUS_REASON, record.STATUS_DETAIL, record.RAN_AS})


def encode(report: TrialReport) -> dict[str, Any]:
    """``report`` as a Tune result: a dict whose values Tune does not flatten (pairs as lists)."""
    out = dict(report.metrics)
    flag = _FLAGS.get(report.kind)
    if flag is not None:
        out[flag] = True
    if report.kind is ReportKind.FUSE_DECLINED:
        out[FUSE_DECLINED_KEY] = report.declined
    if report.not_run:
        out[NOT_RUN_KEY] = True
    if report.reason is not None:
        out[record.STATUS_REASON] = report.reason
    if report.detail is not None:
        out[record.STATUS_DETAIL] = report.detail
    if report.phases is not None:
        out[PHASES_KEY] = [tuple(pair) for pair in report.phases]
    if report.ran_as is not None:
        out[record.RAN_AS] = list(report.ran_as.items())
    if report.members is not None:
        out[MEMBERS_KEY] = list(report.members)
    if report.member is not None:
        out[MEMBER_KEY] = report.member
    if report.earlier:
        out[EARLIER_KEY] = [encode(earlier) for earlier in report.earlier]
    return out


def decode(result: Mapping[str, Any] | None) -> TrialReport:
    """The report a Tune result carries (``None`` or ``{}``: a report of nothing)."""
    result = result or {}
    if result.get(FUSE_DECLINED_KEY):
        kind = ReportKind.FUSE_DECLINED
    elif result.get(RESTARTED_KEY):
        kind = ReportKind.RESTARTED
    elif result.get(FAILED_KEY):
        kind = ReportKind.FAILED
    elif result.get(FINAL_KEY):
        kind = ReportKind.FINAL
    elif result.get(STARTED_KEY):
        kind = ReportKind.STARTED
    else:
        kind = ReportKind.PROGRESS
    member, members, phases, ran_as = (result.get(k) for k in (MEMBER_KEY, MEMBERS_KEY, PHASES_KEY, record.RAN_AS))
    return TrialReport(
        kind, {k: v for k, v in result.items() if k not in _KEYS},
        member=None if member is None else int(member),
        members=None if members is None else tuple(int(k) for k in members),
        reason=result.get(record.STATUS_REASON), detail=result.get(record.STATUS_DETAIL),
        not_run=bool(result.get(NOT_RUN_KEY)),
        declined=str(result[FUSE_DECLINED_KEY]) if kind is ReportKind.FUSE_DECLINED else None,
        phases=None if phases is None else tuple((str(name), at) for name, at in phases),
        ran_as=dict(ran_as) if isinstance(ran_as, list) else None,
        earlier=tuple(decode(earlier) for earlier in result.get(EARLIER_KEY, ())))
