"""What ``search.fuse: auto`` decided for each shape of a study, kept in the study.

A fused group times its first steps (``hpsearch.trials.rank.fused``) and declines where fusing
does not pay; a model ``vmap`` refuses, or one that cannot train fused exactly, declines before
any step. Each decision holds for the rest of the study, not only for the search that took it:
a timing probe on a shared CPU is noisy, and re-timed at every resume one space can get different
answers on different runs (a shape fused in one run and not in the next, its trials' numbers
changing with it). The study keeps them in its user attr ``hpsearch.fuse_decisions``; a resume,
or a search of the same space into the same study, reads them back and follows them.

Three kinds of decision:

- **A workload that cannot fuse** (``vmap`` refuses its model, it trains itself, Adam with
  BatchNorm): no shape of it, under that optimizer, is fused again.
- **A shape where fusing did not pay**, at a per-device batch: not that shape at that batch or
  above (vectorizing pays less as the batch grows). A group whose steady steps, timed again a
  quarter into its run, stop paying decides this too.
- **A shape where fusing paid**: its later groups fuse without timing a decision again
  (``fuse: true`` for them; their steps are still timed, for the solo estimate).

Example:
    >>> from hpsearch.trials.spec import TrialSpec
    >>> decisions = FuseDecisions()
    >>> spec = TrialSpec(per_device_batch_size=32, base_lr=0.1, workload="digits_cnn")
    >>> decisions.decline_at(spec, "fusing did not pay on cpu: 9 ms fused")
    True
    >>> decisions.why_not(TrialSpec(per_device_batch_size=64, base_lr=0.3, workload="digits_cnn"))
    'fusing did not pay at per-device batch 32 of this shape, so not at 64 (on cpu: 9 ms fused)'
    >>> decisions.why_not(TrialSpec(per_device_batch_size=16, base_lr=0.3, workload="digits_cnn")) is None
    True
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from hpsearch.record import ATTR_FUSE_DECISIONS
from hpsearch.trials.spec import TrialSpec, fusion_key

if TYPE_CHECKING:
    import optuna

__all__ = ["FuseDecisions"]


@dataclass
class FuseDecisions:
    """A study's ``fuse: auto`` decisions (see the module's docstring).

    Attributes:
        workloads: Per workload key (``workload_key``), why none of its shapes fuses.
        batches: Per shape without its batch (``batchless_key``) and per-device batch, why it
            does not fuse at that batch or above.
        fused: Per shape (``fusion_key``), the trial whose group's timing decided that it fuses.
    """

    workloads: dict[str, str] = field(default_factory=dict)
    batches: dict[tuple[str, int], str] = field(default_factory=dict)
    fused: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of_study(cls, study: optuna.Study) -> FuseDecisions:
        """The decisions the study keeps (none for a study that never decided)."""
        return cls.from_dict(study.user_attrs.get(ATTR_FUSE_DECISIONS) or {})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FuseDecisions:
        return cls(dict(data.get("workloads", {})),
                   {(str(shape), int(batch)): str(why) for shape, batch, why in data.get("batches", [])},
                   {str(k): int(v) for k, v in data.get("fused", {}).items()})

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (a study user attr)."""
        return {"workloads": dict(self.workloads),
                "batches": [[shape, batch, why] for (shape, batch), why in self.batches.items()],
                "fused": dict(self.fused)}

    def persist(self, study: optuna.Study) -> None:
        study.set_user_attr(ATTR_FUSE_DECISIONS, self.to_dict())

    def why_not(self, spec: TrialSpec, *, timed: bool = True) -> str | None:
        """Why a trial of ``spec`` does not fuse by an earlier decision (``None``: it may);
        ``timed``: with the decisions timing took (``fuse: true`` fuses whatever they said)."""
        workload = self.workloads.get(workload_key(spec))
        if workload is not None or not timed:
            return workload
        shape, b = batchless_key(spec), spec.per_device_batch_size
        for (declined, batch), why in self.batches.items():
            if declined == shape and b >= batch:
                return why if b == batch else (
                    f"fusing did not pay at per-device batch {batch} of this shape, so not at {b} "
                    f"({why.removeprefix('fusing did not pay ')})")
        return None

    def paid(self, spec: TrialSpec) -> bool:
        """Whether a group of ``spec``'s shape already found that fusing pays."""
        return _text(fusion_key(spec)) in self.fused and self.why_not(spec) is None

    def decline_workload(self, spec: TrialSpec, why: str) -> bool:
        """No shape of ``spec``'s workload fuses again; whether this is news."""
        key = workload_key(spec)
        new = key not in self.workloads
        self.workloads.setdefault(key, why)
        return new

    def decline_at(self, spec: TrialSpec, why: str) -> bool:
        """``spec``'s shape does not fuse at its batch or above; whether this is news."""
        new = self.why_not(spec) is None
        self.batches.setdefault((batchless_key(spec), spec.per_device_batch_size), why)
        self.fused.pop(_text(fusion_key(spec)), None)
        return new

    def fuse(self, spec: TrialSpec, trial: int) -> bool:
        """``spec``'s shape fuses (the group of trial ``trial`` found it pays); whether this is news."""
        key = _text(fusion_key(spec))
        if key in self.fused or self.why_not(spec) is not None:
            return False
        self.fused[key] = trial
        return True


def batchless_key(spec: TrialSpec) -> str:
    """A shape's ``fusion_key`` but for its per-device batch."""
    return _text(fusion_key(replace(spec, per_device_batch_size=1)))


def workload_key(spec: TrialSpec) -> str:
    """A shape's ``fusion_key`` but for its batch, world size and accumulation: the model's and
    its optimizer's."""
    return _text(fusion_key(replace(spec, per_device_batch_size=1, world_size=1, grad_accum_steps=1, emulated_ranks=1)))


def _text(key: Hashable) -> str:
    return key if isinstance(key, str) else repr(key)
