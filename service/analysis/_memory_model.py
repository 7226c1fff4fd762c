"""Peak memory per rank against the per-device batch: what fit, what ran out, and where the line
says a device's memory ends (docs/analysis.md, "Memory").

A rank holds the model's weights, their gradients and the optimizer's state whatever its batch,
and the activations of the samples of one micro-step, in proportion to its per-device batch b
(accumulation runs the micro-steps one after another, so it adds none)::

    peak(b) = fixed + per_sample x b

Per device kind and configuration (the study's parameters besides the batch, the world size, the
accumulation, the rule and the LR: the workload's own, such as ``hidden``, and the optimizer's),
the trials give three facts: the largest per-device batch that ran without running out of memory,
the smallest that ran out (``out_of_memory``, or the batch a trial ran halved from: ``ran_as``),
and the measured peaks (``peak_memory_bytes``), fitted with that line by non-negative least
squares on relative error. Where a rank's memory is known (``memory_limit_bytes``, which trials
record: ``resources.memory_per_worker`` on the CPU, the GPU's total memory on CUDA, a share of
it where trials share the GPU), the line predicts the largest batch that fits it, with a
margin. The recommendation stays below all of these (``MemoryModel.cap``).

Evidence that contradicts itself is flagged, not believed: a trial that ran out of memory at a
per-device batch at or below one that fit on the same kind and configuration (a warm process
can charge a trial for memory an earlier trial left: 256 fits, 64 "runs out", and an answer
that believed it would say "at most 63") is not the smallest that ran out, and the model's
note names it; nor is one that ran out in evaluation or setup (``out_of_memory_phase``), which
says nothing of its batch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from hpsearch import record as r
from hpsearch.analysis._stats import finite_number, nonnegative_line
from hpsearch.study import format_bytes

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["MEMORY_MARGIN", "MemoryLimits", "MemoryModel", "memory_models", "ran_shapes"]

#: The least share of a rank's memory a predicted peak leaves free: allocators round and
#: fragment (CUDA's caching allocator reserves more than it hands out), and a CPU rank's
#: resident memory moves with what the process imported and cached.
MEMORY_MARGIN = 0.05

#: Failed trials that trained, and so fit in memory at their batch.
_RAN_AND_FAILED = frozenset({r.REASON_DIVERGED})


@dataclass(frozen=True)
class MemoryLimits:
    """What the study's space says of a rank's memory, where its trials did not record it
    (``memory_limit_bytes``; ``hpsearch.analysis.memory_limits`` reads the space).

    Attributes:
        cpu_bytes: ``resources.memory_per_worker``: what a CPU rank may hold (``None``: no cap).
        gpu_share: ``resources.gpus_per_worker`` where below 1: trials share a GPU, so one
            trial's rank may count on that share of the GPU's memory, not all of it.
    """

    cpu_bytes: float | None = None
    gpu_share: float = 1.0


@dataclass(frozen=True)
class MemoryModel:
    """Memory per rank on one device kind for one configuration.

    Attributes:
        device: The device kind (the trials' ``device``: ``cpu``, ``cuda (NVIDIA H100 ...)``).
        configuration: The configuration's values of the study's other parameters (empty where
            the study has none).
        largest_fit: The largest per-device batch that ran without running out of memory.
        smallest_out_of_memory: The smallest per-device batch that ran out.
        out_of_memory_trials: The trials that ran out (or ran halved because their batch had).
        fit_trials: How many trials ran and fit.
        batches: The per-device batches with a measured peak, ascending.
        n_trials: Trials with a measured peak (those that ran out are left out: they stopped
            short of what they needed).
        fixed_bytes: The line's intercept: weights, gradients, optimizer state, the runtime;
            ``None`` without a line (fewer than two batches measured).
        per_sample_bytes: The line's slope: activations per sample of the per-device batch.
        relative_rmse: Root mean square of the peaks' relative residuals about the line.
        limit_bytes: What a rank may hold on this kind, where known.
        limit_source: Where that comes from (``resources.memory_per_worker``, ``the GPU's total
            memory``).
        predicted_largest: The largest per-device batch whose predicted peak leaves
            ``MEMORY_MARGIN`` (or twice the line's scatter) of ``limit_bytes`` free; ``None``
            without a line, a limit or a slope.
        note: What a reader should know, or ``None``.
        ignored: Evidence left out, one sentence each: trials that ran out of memory at a batch
            no larger than one that fit (the batch was not the cause), or outside training.
    """

    device: str
    configuration: Mapping[str, Any] = field(default_factory=dict)
    largest_fit: int | None = None
    smallest_out_of_memory: int | None = None
    out_of_memory_trials: tuple[int, ...] = ()
    fit_trials: int = 0
    batches: tuple[int, ...] = ()
    n_trials: int = 0
    fixed_bytes: float | None = None
    per_sample_bytes: float | None = None
    relative_rmse: float | None = None
    limit_bytes: float | None = None
    limit_source: str | None = None
    predicted_largest: int | None = None
    note: str | None = None
    ignored: tuple[str, ...] = ()

    @property
    def has_line(self) -> bool:
        """Whether the peaks were fitted with a line."""
        return self.fixed_bytes is not None and self.per_sample_bytes is not None

    def peak(self, per_device_batch: float) -> float | None:
        """The line's peak per rank at ``per_device_batch``, ``None`` without a line.

        Example:
            >>> MemoryModel("cpu", fixed_bytes=1e9, per_sample_bytes=1e6).peak(256)
            1256000000.0
        """
        if self.fixed_bytes is None or self.per_sample_bytes is None:
            return None
        return self.fixed_bytes + self.per_sample_bytes * float(per_device_batch)

    def cap(self, allow_larger: bool = False) -> int | None:
        """The largest per-device batch an answer may use on this kind and configuration:
        below the smallest that ran out; at most the largest that fit, or with ``allow_larger``
        at most the one the line predicts to fit where the memory is known, and never below one
        that fit (the prediction keeps a margin a measured batch may be inside); ``None`` where
        nothing bounds it.

        Example:
            >>> m = MemoryModel("cpu", largest_fit=256, smallest_out_of_memory=512, predicted_largest=400)
            >>> m.cap(), m.cap(allow_larger=True)
            (256, 400)
            >>> MemoryModel("cpu", largest_fit=256, predicted_largest=250).cap(allow_larger=True)
            256
        """
        bounds = []
        if self.smallest_out_of_memory is not None:
            bounds.append(self.smallest_out_of_memory - 1)
        if allow_larger:
            if self.predicted_largest is not None:
                bounds.append(max(self.predicted_largest, self.largest_fit or 0))
        elif self.largest_fit is not None:
            bounds.append(self.largest_fit)
        return min(bounds) if bounds else None

    def why_not(self, per_device_batch: int) -> str:
        """Why ``per_device_batch`` is above this model's cap, in a few words.

        Example:
            >>> MemoryModel("cpu", largest_fit=256, smallest_out_of_memory=512).why_not(512)
            '512 ran out of memory on cpu'
        """
        where = f" on {self.device}" + (f" with {_shown(self.configuration)}" if self.configuration else "")
        if self.smallest_out_of_memory is not None and per_device_batch >= self.smallest_out_of_memory:
            return f"{self.smallest_out_of_memory} ran out of memory{where}"
        peak = self.peak(per_device_batch)
        if self.predicted_largest is not None and per_device_batch > self.predicted_largest and peak is not None:
            return (f"the memory fit predicts {format_bytes(peak)} per rank at {per_device_batch}, more than "
                    f"{format_bytes(self._usable())} of the {format_bytes(self.limit_bytes or 0)} a rank may hold"
                    f"{where}")
        return f"{self.largest_fit} is the largest that ran{where}"

    def describe(self) -> str:
        """The model in one line (the recommendation's explanation, ``--json``'s ``summary``).

        Example:
            >>> MemoryModel("cpu", largest_fit=256, smallest_out_of_memory=512, fixed_bytes=2**30,
            ...             per_sample_bytes=2**22, n_trials=9, batches=(64, 128, 256), relative_rmse=0.02).describe()
            'memory per rank on cpu: 1 GiB + 4 MiB x b (9 trials at b 64 to 256, scatter 2%); largest per-device batch that fit 256; smallest that ran out 512'
        """
        head = f"memory per rank on {self.device}" + (f" with {_shown(self.configuration)}"
                                                      if self.configuration else "")
        facts = []
        if self.fixed_bytes is not None and self.per_sample_bytes is not None and self.batches:
            facts.append(f"{format_bytes(self.fixed_bytes)} + {format_bytes(self.per_sample_bytes)} x b "
                         f"({self.n_trials} trials at b {self.batches[0]} to {self.batches[-1]}, scatter "
                         f"{self.relative_rmse or 0:.0%})")
        elif self.note:
            facts.append(f"no line: {self.note}")
        facts.append("no trial ran to an end" if self.largest_fit is None
                     else f"largest per-device batch that fit {self.largest_fit}")
        facts.append("none ran out" if self.smallest_out_of_memory is None
                     else f"smallest that ran out {self.smallest_out_of_memory}")
        if self.predicted_largest is not None and self.limit_bytes is not None:
            facts.append(f"predicted to fit in the {format_bytes(self.limit_bytes)} a rank may hold "
                         f"({self.limit_source}): up to {self.predicted_largest}")
        facts.extend(self.ignored)
        return f"{head}: " + "; ".join(facts)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (``StudyAnalysis.to_dict``, ``Recommendation.to_dict``)."""
        return {
            "device": self.device, "configuration": dict(self.configuration), "largest_fit": self.largest_fit,
            "smallest_out_of_memory": self.smallest_out_of_memory,
            "out_of_memory_trials": list(self.out_of_memory_trials), "fit_trials": self.fit_trials,
            "batches": list(self.batches), "n_trials": self.n_trials, "fixed_bytes": self.fixed_bytes,
            "per_sample_bytes": self.per_sample_bytes, "relative_rmse": self.relative_rmse,
            "limit_bytes": self.limit_bytes, "limit_source": self.limit_source,
            "predicted_largest": self.predicted_largest, "cap": self.cap(), "cap_allowing_larger": self.cap(True),
            "note": self.note, "ignored": list(self.ignored), "summary": self.describe(),
        }

    def _usable(self) -> float:
        """What of the limit a predicted peak may use: all but the margin."""
        margin = max(MEMORY_MARGIN, 2 * (self.relative_rmse or 0.0))
        return (self.limit_bytes or 0.0) / (1 + margin)


def _shown(configuration: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in configuration.items())


def ran_shapes(frame: pd.DataFrame) -> tuple[list[float | None], list[float | None], list[int | None]]:
    """Each trial's per-device batch and accumulation as it ran, and the batch it was halved
    from: its ``ran_as`` where it has one (``search.on_oom: accumulate`` ran it at half the
    per-device batch and twice the accumulation), its params otherwise."""
    n = len(frame)
    b = _numbers(frame, r.PER_DEVICE_BATCH_SIZE)
    a = _numbers(frame, r.GRAD_ACCUM_STEPS)
    halved_from: list[int | None] = [None] * n
    if r.RAN_AS in frame.columns:
        for i, ran in enumerate(frame[r.RAN_AS].tolist()):
            if isinstance(ran, Mapping):
                b[i] = finite_number(ran.get(r.PER_DEVICE_BATCH_SIZE)) or b[i]
                a[i] = finite_number(ran.get(r.GRAD_ACCUM_STEPS)) or a[i]
                at = finite_number(ran.get("out_of_memory_at"))
                halved_from[i] = None if at is None else int(at)
    return b, a, halved_from


def memory_models(frame: pd.DataFrame, parameters: Sequence[str] = (),
                  limits: MemoryLimits | None = None) -> tuple[MemoryModel, ...]:
    """The memory facts of a study's trials, per device kind and configuration.

    Args:
        frame: The trials table (``hpsearch.study.read_trials``): ``state``, ``status_reason``,
            the params, ``device``, ``node_id``, ``peak_memory_bytes`` and ``ran_as`` where
            recorded.
        parameters: The study's other parameters (``StudyAnalysis.parameters``): a
            configuration is the values of those that vary among the trials.
        limits: What the study's space says of a rank's memory (``MemoryLimits``): the CPU's
            cap where the trials did not record one, the share of a GPU a trial counts on.

    Returns:
        One ``MemoryModel`` per device kind and configuration with any memory fact, by kind,
        then configuration. A trial that records no device (one stopped early, or one that ran
        out before its first report) counts for the kind its node's other trials ran on, or the
        study's one kind.

    Example:
        >>> import pandas as pd
        >>> frame = pd.DataFrame({"number": [0, 1, 2, 3], "state": ["COMPLETE", "COMPLETE", "COMPLETE", "FAIL"],
        ...     "status_reason": [None, None, None, "out_of_memory"], "per_device_batch_size": [64, 128, 256, 512],
        ...     "device": ["cpu", "cpu", "cpu", None], "peak_memory_bytes": [1.25e9, 1.5e9, 2.0e9, None]})
        >>> m, = memory_models(frame)
        >>> m.largest_fit, m.smallest_out_of_memory, round(m.per_sample_bytes), m.cap()
        (256, 512, 3906250, 256)
    """
    limits = limits or MemoryLimits()
    n = len(frame)
    if not n:
        return ()
    b_ran, _, halved_from = ran_shapes(frame)
    numbers = [int(v) for v in frame["number"].tolist()]
    states = frame["state"].tolist()
    reasons = _texts(frame, r.STATUS_REASON)
    kinds = _kinds(frame)
    peaks = _numbers(frame, r.PEAK_MEMORY_BYTES)
    recorded = _numbers(frame, r.MEMORY_LIMIT_BYTES)
    b_asked = _numbers(frame, r.PER_DEVICE_BATCH_SIZE)
    phases = _texts(frame, r.OUT_OF_MEMORY_PHASE)
    members = _numbers(frame, r.FUSED_MEMBERS)
    # A configuration is the values of the parameters that vary: one held fixed (momentum 0.9
    # throughout) names no configuration of its own.
    columns = {p: _param_values(frame[p]) for p in parameters if p in frame.columns}
    varying = [p for p, values in columns.items() if len({repr(v) for v in values if v is not None}) > 1]
    configs: list[tuple[Any, ...]] = list(zip(*(columns[p] for p in varying))) if varying else [()] * n

    groups: dict[tuple[str, tuple[Any, ...]], _Facts] = {}
    for i in range(n):
        kind, b = kinds[i], b_ran[i]
        if kind is None or b is None:
            continue
        facts = groups.setdefault((kind, configs[i]), _Facts())
        if recorded[i] is not None and recorded[i] > 0:  # type: ignore[operator]
            facts.limits.append(float(recorded[i]))  # type: ignore[arg-type]
        out = states[i] == "FAIL" and reasons[i] == r.REASON_OUT_OF_MEMORY
        if out and phases[i] not in (None, "training"):
            facts.elsewhere.append((numbers[i], str(phases[i])))
        elif out:
            facts.out_of_memory.append((int(b), numbers[i]))
        if halved_from[i] is not None:
            facts.out_of_memory.append((int(halved_from[i]), numbers[i]))  # type: ignore[arg-type]
        if not out and (states[i] == "COMPLETE"
                        or (states[i] == "PRUNED" and reasons[i] not in r.NOT_RUN_REASONS and b_asked[i] is not None)
                        or (states[i] == "FAIL" and reasons[i] in _RAN_AND_FAILED)):
            facts.fit.append(int(b))
        peak = peaks[i]
        if not out and peak is not None and peak > 0:
            if (members[i] or 1) > 1:
                # A fused member's peak is its group's process, every member's model, optimizer
                # state and batch in it: no one configuration's memory at b. It fit (above);
                # its peak stays out of the line.
                facts.fused_peaks.append(numbers[i])
            else:
                facts.peaks.append((float(b), peak))
    models = []
    for (kind, config), facts in sorted(groups.items(), key=lambda item: (item[0][0], repr(item[0][1]))):
        if not facts.fit and not facts.out_of_memory and not facts.peaks:
            continue
        limit = _limit(kind, facts.limits, limits)
        configuration = {p: v for p, v in zip(varying, config) if v is not None}
        models.append(_model(kind, configuration, facts, limit))
    return tuple(models)


@dataclass
class _Facts:
    fit: list[int] = field(default_factory=list)
    out_of_memory: list[tuple[int, int]] = field(default_factory=list)  # (per-device batch, trial)
    peaks: list[tuple[float, float]] = field(default_factory=list)  # (per-device batch, bytes)
    limits: list[float] = field(default_factory=list)  # memory_limit_bytes the trials recorded
    elsewhere: list[tuple[int, str]] = field(default_factory=list)  # (trial, phase): ran out outside training
    fused_peaks: list[int] = field(default_factory=list)  # trials whose peak is their fused group's


def _limit(kind: str, recorded: Sequence[float], limits: MemoryLimits) -> tuple[float, str] | None:
    """What a rank may hold on ``kind``, and where that comes from: the least its trials
    recorded (a GPU's memory a share of it where trials share the GPU), else the space's cap on
    a CPU rank."""
    if kind.startswith("cuda") and recorded:
        share = limits.gpu_share
        source = "the GPU's total memory" + (f" x gpus_per_worker {share:g} (trials share the GPU)" if share < 1 else "")
        return min(recorded) * min(share, 1.0), source
    if recorded:
        return min(recorded), "resources.memory_per_worker"
    if kind == "cpu" and limits.cpu_bytes:
        return float(limits.cpu_bytes), "resources.memory_per_worker"
    return None


def _model(kind: str, configuration: dict[str, Any], facts: _Facts, limit: tuple[float, str] | None) -> MemoryModel:
    notes: list[str] = []
    ignored: list[str] = []
    largest_fit = max(facts.fit, default=None)
    if largest_fit is not None:
        # Ran out at a batch no larger than one that fit: the batch was not the cause.
        contradicted = sorted((b, n) for b, n in facts.out_of_memory if b <= largest_fit)
        if contradicted:
            shown = ", ".join(f"trial {n} at {b}" for b, n in contradicted)
            ignored.append(f"not counted as running out, since {largest_fit} fit: {shown} (the batch was not "
                           "the cause)")
            facts = replace(facts, out_of_memory=[(b, n) for b, n in facts.out_of_memory if b > largest_fit])
    if facts.elsewhere:
        shown = ", ".join(f"trial {n} in {phase}" for n, phase in sorted(facts.elsewhere))
        ignored.append(f"ran out of memory outside training, not counted against its batch: {shown}")
    if facts.fused_peaks:
        ignored.append(f"{len(facts.fused_peaks)} fused trials' peaks left out of the line (each is its group's "
                       "process, all its members at once)")
    smallest = min((b for b, _ in facts.out_of_memory), default=None)
    fixed = per_sample = rmse = None
    batches = tuple(sorted({int(b) for b, _ in facts.peaks}))
    if len(batches) >= 2:
        b = np.array([p[0] for p in facts.peaks])
        peak = np.array([p[1] for p in facts.peaks])
        # The median peak of each batch, fitted on relative error (a 1 GiB and a 60 GiB peak
        # count alike); the scatter is read off every trial.
        xs = np.array(batches, dtype=float)
        ys = np.array([float(np.median(peak[b == x])) for x in xs])
        a, c = nonnegative_line(xs, ys, 1.0 / ys**2)
        fixed, per_sample = float(a), float(c)
        rmse = float(math.sqrt(np.mean((peak / (fixed + per_sample * b) - 1.0) ** 2)))
        if len(batches) == 2:
            notes.append("two per-device batches measured: the line goes through both, and nothing measures its "
                         "scatter")
        if per_sample == 0.0:
            notes.append("the peaks do not grow with the per-device batch here, so the line predicts no largest batch")
    elif batches:
        notes.append(f"one per-device batch measured ({batches[0]}): a line needs two")
    predicted = None
    limit_bytes, source = (limit if limit is not None else (None, None))
    model = MemoryModel(kind, configuration, max(facts.fit, default=None), smallest,
                        tuple(sorted({n for _, n in facts.out_of_memory})), len(facts.fit), batches, len(facts.peaks),
                        fixed, per_sample, rmse, limit_bytes, source, None, None)
    if limit_bytes is not None and fixed is not None and per_sample:
        predicted = max(0, math.floor((model._usable() - fixed) / per_sample))
        if smallest is not None and predicted >= smallest:
            notes.append(f"the line predicts {predicted} fits in {format_bytes(limit_bytes)}, yet {smallest} ran out: "
                         "more than the line was in memory there (the cap stays below what ran out)")
        if predicted == 0:
            notes.append(f"the line's fixed part alone leaves no room in {format_bytes(limit_bytes)}")
    return replace(model, predicted_largest=predicted, note="; ".join(notes) or None, ignored=tuple(ignored))


def _kinds(frame: pd.DataFrame) -> list[str | None]:
    """Each trial's device kind: its ``device``, else the kind its node's other trials ran on
    (one kind per node), else the study's kind where it has one."""
    devices = _texts(frame, r.DEVICE)
    nodes = _texts(frame, r.NODE_ID)
    by_node: dict[str, set[str]] = {}
    for device, node in zip(devices, nodes):
        if device is not None and node is not None:
            by_node.setdefault(node, set()).add(device)
    known = {d for d in devices if d is not None}
    only = next(iter(known)) if len(known) == 1 else None
    out: list[str | None] = []
    for device, node in zip(devices, nodes):
        if device is None and node is not None and len(by_node.get(node, ())) == 1:
            device = next(iter(by_node[node]))
        out.append(device if device is not None else only)
    return out


def _numbers(frame: pd.DataFrame, name: str) -> list[float | None]:
    if name not in frame.columns:
        return [None] * len(frame)
    return [finite_number(v) for v in frame[name].tolist()]


def _texts(frame: pd.DataFrame, name: str) -> list[str | None]:
    if name not in frame.columns:
        return [None] * len(frame)
    return [v if isinstance(v, str) else None for v in frame[name].tolist()]


def _param_values(column: pd.Series) -> list[Any]:
    """A param's values as the analysis's trial entries hold them (``_study._param_values``):
    plain Python, ``None`` where missing, integral floats beside missing values as integers."""
    values = [_plain(v) for v in column.tolist()]
    if column.isna().any() and all(isinstance(v, float) and v.is_integer() for v in values if v is not None):
        values = [None if v is None else int(v) for v in values]
    return values


def _plain(value: object) -> Any:
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
