"""Each LR rule against the best trial at each effective batch: its regret, and the batch from
which on it breaks (diverged or fell behind)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpsearch import record as r
from hpsearch.analysis._batches import COUNTED
from hpsearch.analysis._target import Target

__all__ = ["FALLS_BEHIND", "RulePoint", "RuleReport", "rule_reports"]

#: A rule whose best trial at a batch needs this much more (relative) samples to reach the
#: target than the best trial there has fallen behind.
FALLS_BEHIND = 0.25


@dataclass(frozen=True)
class RulePoint:
    """One LR rule at one effective batch, against the best trial there.

    Attributes:
        effective_batch_size: B.
        status: ``best``, ``within`` (at most ``FALLS_BEHIND`` slower), ``behind``, ``not
            reached`` (another rule reached the target here), ``diverged`` (every trial of the
            rule here diverged) or ``none reached`` (no rule reached the target here).
        regret: Samples to the target of the rule's best trial over the best trial's, minus 1
            (0 for the best); ``None`` where the rule did not reach the target.
        best_value: The best value of the target's metric any trial of the rule reached here.
        trial: The rule's best trial here.
    """

    effective_batch_size: float
    status: str
    regret: float | None
    best_value: float | None
    trial: int | None


@dataclass(frozen=True)
class RuleReport:
    """How one LR rule fares across effective batches.

    Attributes:
        rule: ``constant``, ``linear``, ``sqrt``.
        points: One per effective batch the rule was tried at, ascending.
        breaks_at: The smallest batch from which on the rule diverged or fell behind at every
            batch tried; ``None`` where it never did.
        summary: One sentence for the user.
    """

    rule: str
    points: tuple[RulePoint, ...]
    breaks_at: float | None
    summary: str


def rule_reports(trials: Sequence[Mapping[str, Any]], target: Target) -> tuple[RuleReport, ...]:
    """Each rule's regret at each batch and the batch where it breaks."""
    by_cell: dict[tuple[str, float], list[Mapping[str, Any]]] = {}
    for t in trials:
        if t[r.LR_RULE] is None or t[r.EFFECTIVE_BATCH_SIZE] is None:
            continue
        by_cell.setdefault((str(t[r.LR_RULE]), float(t[r.EFFECTIVE_BATCH_SIZE])), []).append(t)
    best_at: dict[float, float] = {}
    for (_, batch), runs in by_cell.items():
        for t in runs:
            if t["state"] in COUNTED and t["samples_to_target"] is not None:
                best_at[batch] = min(best_at.get(batch, math.inf), t["samples_to_target"])
    reports = []
    for rule in sorted({rule for rule, _ in by_cell}):
        points = []
        for batch in sorted(b for rr, b in by_cell if rr == rule):
            points.append(_rule_point(by_cell[rule, batch], batch, best_at.get(batch), target))
        breaks_at = _breaking_batch(points)
        reports.append(RuleReport(rule, tuple(points), breaks_at, _rule_summary(rule, points, breaks_at)))
    return tuple(reports)


def _rule_point(runs: Sequence[Mapping[str, Any]], batch: float, best: float | None, target: Target) -> RulePoint:
    counted = [t for t in runs if t["state"] in COUNTED]
    values = [t["best_value"] for t in runs if t["best_value"] is not None]
    best_value = (max(values) if target.direction == "maximize" else min(values)) if values else None
    reached = [t for t in counted if t["samples_to_target"] is not None]
    if reached:
        mine = min(reached, key=lambda t: (t["samples_to_target"], t["number"]))
        regret = mine["samples_to_target"] / best - 1 if best else 0.0
        status = "best" if regret <= 1e-12 else "within" if regret <= FALLS_BEHIND else "behind"
        return RulePoint(batch, status, regret, best_value, int(mine["number"]))
    if runs and all(t["state"] == "FAIL" and t[r.STATUS_REASON] == r.REASON_DIVERGED for t in runs):
        return RulePoint(batch, r.REASON_DIVERGED, None, best_value, None)
    if best is None:
        return RulePoint(batch, "none reached", None, best_value, None)
    return RulePoint(batch, "not reached", None, best_value, None)


def _breaking_batch(points: Sequence[RulePoint]) -> float | None:
    """The smallest batch from which on every batch tried (where some rule reached the target
    or this one diverged) is a failure of the rule."""
    judged = [p for p in points if p.status != "none reached"]
    broken = {"behind", "not reached", r.REASON_DIVERGED}
    breaks_at = None
    for p in reversed(judged):
        if p.status not in broken:
            break
        breaks_at = p.effective_batch_size
    return breaks_at


def _rule_summary(rule: str, points: Sequence[RulePoint], breaks_at: float | None) -> str:
    good = [p.effective_batch_size for p in points if p.status in ("best", "within")]
    if not good and breaks_at is None:
        return f"{rule}: no trial of this rule reached the target"
    parts = []
    if good:
        parts.append(f"best or within {FALLS_BEHIND:.0%} of the best from B {_b(min(good))} to {_b(max(good))}")
    if breaks_at is not None:
        why = sorted({p.status for p in points if p.effective_batch_size >= breaks_at and p.status != "none reached"})
        parts.append(f"breaks from B {_b(breaks_at)} ({', '.join(why)})")
    return f"{rule}: " + "; ".join(parts)


def _b(batch: float) -> str:
    return f"{batch:,.0f}"
