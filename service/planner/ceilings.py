"""Out-of-memory as an outcome the search learns from.

In a batch-size search the large end runs out of memory first (on a GPU it is the most common
way a trial ends early). A trial that ran out of memory at per-device batch b says something
about every configuration that differs from it only in the LR, the rule or the seed: at b or
above, they run out too. ``MemoryCeilings`` keeps, per such configuration, the smallest b that
ran out, and decides what to do with a proposal at or above it (``search.on_oom``):

- ``skip`` (the default): do not start it; it is recorded as not run (``exceeds_memory``) and
  does not count toward ``n_trials``;
- ``accumulate``: run it with the per-device batch halved and the accumulation doubled, as many
  times as it takes to go below the ceiling: the same effective batch and, since the engine's
  accumulation is exact, the same optimisation (its record says so: ``ran_as``).

The trial itself that ran out of memory under ``accumulate`` is retried that way by its own
process (``hpsearch.tune.trainable``), so the search loses no configuration.

Only evidence that holds together becomes a ceiling. A trial that ran out of memory in
evaluation or setup (``out_of_memory_phase``) says nothing of its training batch; and one that
ran out at a batch at or below one the same configuration trained to its end contradicts it
(something other than its batch filled the memory, such as what an earlier trial left in a warm
process: taken as evidence, 256 fitting and then 64 "running out" would make the ceiling 63).
Such a trial sets no ceiling, and ``ignored`` says why.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hpsearch import record
from hpsearch.record import (
    BASE_LR,
    DEVICE,
    GRAD_ACCUM_STEPS,
    LR_RULE,
    OUT_OF_MEMORY_PHASE,
    PER_DEVICE_BATCH_SIZE,
    RAN_AS,
    REASON_OUT_OF_MEMORY,
    STATUS_REASON,
)

__all__ = ["ExceedsMemory", "Halved", "MemoryCeilings", "halved", "memory_key", "training_ran_out"]

# Parameters that do not change how much memory a rank needs. The accumulation does not
# either: a rank holds one micro-batch of per-device batch b at a time and one gradient buffer,
# whatever the number of micro-batches summed into it.
_NOT_MEMORY = frozenset({BASE_LR, LR_RULE, PER_DEVICE_BATCH_SIZE, GRAD_ACCUM_STEPS})


def memory_key(params: Mapping[str, Any]) -> Hashable:
    """What a configuration's memory depends on: every parameter but the per-device batch, the
    accumulation, the LR and the rule (the seed is the search's, the same for all).

    Example:
        >>> memory_key({"per_device_batch_size": 64, "base_lr": 0.1, "hidden": 8}) == \\
        ...     memory_key({"per_device_batch_size": 8, "grad_accum_steps": 4, "base_lr": 0.01, "hidden": 8})
        True
    """
    return record.params_key(params, leave_out=_NOT_MEMORY)


def training_ran_out(attrs: Mapping[str, Any]) -> bool:
    """Whether a trial's record (its user attrs, or its failure report) says its *training* ran
    out of memory: ``out_of_memory`` in the training phase, or with no phase recorded (trials
    recorded before the phase was). One that ran out in evaluation or setup did not run out for
    its per-device batch.

    Example:
        >>> training_ran_out({"status_reason": "out_of_memory", "out_of_memory_phase": "training"})
        True
        >>> training_ran_out({"status_reason": "out_of_memory", "out_of_memory_phase": "evaluation"})
        False
    """
    return attrs.get(STATUS_REASON) == REASON_OUT_OF_MEMORY and attrs.get(OUT_OF_MEMORY_PHASE) in (None, "training")


def halved(batch: int, accum: int, ceiling: int) -> tuple[int, int] | None:
    """The per-device batch and accumulation below ``ceiling`` with the same product, halving
    the batch; ``None`` when an odd batch would have to be split unevenly.

    Example:
        >>> halved(256, 1, 256), halved(256, 2, 100), halved(6, 1, 4)
        ((128, 2), (64, 8), (3, 2))
        >>> halved(3, 1, 2) is None
        True
    """
    while batch >= ceiling:
        if batch % 2:
            return None
        batch, accum = batch // 2, accum * 2
    return batch, accum


@dataclass(frozen=True)
class ExceedsMemory:
    """A proposal not to start (``search.on_oom: skip``, or a batch that cannot be halved):
    ``detail`` says which batch ran out."""

    detail: str


@dataclass(frozen=True)
class Halved:
    """A proposal to run halved (``search.on_oom: accumulate``): ``ran_as`` holds the per-device
    batch and accumulation it runs at, and the batch that ran out (``out_of_memory_at``)."""

    ran_as: dict[str, Any]


class MemoryCeilings:
    """The smallest per-device batch that ran out of memory, per configuration (``memory_key``)."""

    def __init__(self) -> None:
        self._out: dict[Hashable, int] = {}  # the smallest batch that ran out, per configuration
        self._fit: dict[Hashable, int] = {}  # the largest batch that trained to its end
        #: Why evidence of running out became no ceiling, one sentence each (``ran_out``).
        self.ignored: list[str] = []

    @classmethod
    def of_trials(cls, trials: Iterable[Any], device: str | None = None) -> MemoryCeilings:
        """Ceilings from a study's trials (``resume``): those that ran out of memory in training,
        and those that ran halved (``ran_as``) because a larger batch had, less those a completed
        trial of a batch at least as large contradicts.

        Args:
            trials: The study's trials.
            device: ``cpu`` or ``cuda``, where this search trains: a trial recorded as having run
                out on the other kind of device says nothing about this one (a study started on
                CPU and resumed on a GPU). ``None``: every trial counts.
        """
        ceilings = cls()
        trials = list(trials)
        for t in trials:
            ran_on = t.user_attrs.get(DEVICE)
            if device is not None and isinstance(ran_on, str) and ran_on.split(" ", 1)[0] != device:
                continue
            ran_as = t.user_attrs.get(RAN_AS)
            if getattr(t.state, "name", None) == "COMPLETE" and t.params:
                batch = ran_as.get(PER_DEVICE_BATCH_SIZE) if isinstance(ran_as, Mapping) else None
                ceilings.fit(t.params, int(batch or t.params.get(PER_DEVICE_BATCH_SIZE, 0)) or 1)
        for t in trials:
            ran_on = t.user_attrs.get(DEVICE)
            if device is not None and isinstance(ran_on, str) and ran_on.split(" ", 1)[0] != device:
                continue
            ran_as = t.user_attrs.get(RAN_AS)
            if isinstance(ran_as, Mapping) and isinstance(ran_as.get("out_of_memory_at"), int):
                ceilings.ran_out(t.params, int(ran_as["out_of_memory_at"]), trial=t.number)
            elif training_ran_out(t.user_attrs) and t.params:
                ceilings.ran_out(t.params, int(t.params.get(PER_DEVICE_BATCH_SIZE, 0)) or 1, trial=t.number)
        return ceilings

    def fit(self, params: Mapping[str, Any], batch: int) -> None:
        """A trial of ``params`` trained to its end at per-device batch ``batch``: no smaller
        batch of its configuration runs out of memory, and a ceiling at or below it is dropped."""
        key = memory_key(params)
        self._fit[key] = max(batch, self._fit.get(key, batch))
        out = self._out.get(key)
        if out is not None and out <= batch:
            del self._out[key]
            self.ignored.append(f"per-device batch {batch} trained to its end with {_shown(params)}, so the "
                                f"out-of-memory at {out} is not a ceiling: a ceiling needs every smaller batch to fit")

    def ran_out(self, params: Mapping[str, Any], batch: int, trial: int | None = None) -> str | None:
        """A trial of ``params`` (number ``trial``) ran out of memory in training at per-device
        batch ``batch``. Returns why that is no ceiling (a batch at least as large trained to
        its end: the evidence contradicts itself), or ``None`` where it now is one."""
        key = memory_key(params)
        fit = self._fit.get(key)
        if fit is not None and batch <= fit:
            which = "a trial" if trial is None else f"trial {trial}"
            why = (f"{which} ran out of memory at per-device batch {batch}, yet {fit} trained to its end with "
                   f"{_shown(params)}: not taken as a ceiling (something other than the batch filled the memory)")
            self.ignored.append(why)
            return why
        self._out[key] = min(batch, self._out.get(key, batch))
        return None

    def ceiling(self, params: Mapping[str, Any]) -> int | None:
        """The smallest per-device batch known to run out of memory for ``params``, if any."""
        return self._out.get(memory_key(params))

    def plan(self, params: Mapping[str, Any], on_oom: str) -> ExceedsMemory | Halved | None:
        """What to do with a proposal: ``None`` to run it as it is; ``ExceedsMemory`` not to
        start it; ``Halved`` to run it at the halved batch its ``ran_as`` gives."""
        ceiling = self.ceiling(params)
        batch = int(params.get(PER_DEVICE_BATCH_SIZE, 1))
        if ceiling is None or batch < ceiling:
            return None
        accum = int(params.get(GRAD_ACCUM_STEPS, 1))
        fits = halved(batch, accum, ceiling) if on_oom == "accumulate" else None
        if fits is None:
            why = (f"per-device batch {batch} is at or above {ceiling}, where the same configuration ran out of "
                   "memory")
            if on_oom == "accumulate":
                why += f" (and {batch} cannot be halved evenly below it)"
            return ExceedsMemory(why)
        return Halved({PER_DEVICE_BATCH_SIZE: fits[0], GRAD_ACCUM_STEPS: fits[1], "out_of_memory_at": ceiling})


def _shown(params: Mapping[str, Any]) -> str:
    shown = [f"{k} {v}" for k, v in sorted(params.items()) if k not in _NOT_MEMORY]
    return "the same configuration" + (f" ({', '.join(shown)})" if shown else "")
