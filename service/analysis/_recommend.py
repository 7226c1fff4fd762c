"""The answer: which per-device batch, device count, accumulation, rule and LR to run on N devices,
at what predicted time, device-hours and samples to the target.

Predicted time to the target of (b, W, A) is startup(W) + S(B) x step_time(b, W, A, n), with S(B)
the steps to the target of the critical-batch fit (B = b x W x A), the steady step time of the
device kind's throughput model on the n = ceil(W / G) nodes W ranks take where a node holds G
devices (``NodeLayout``: G given, or assumed from the trials), and the start-up its trials
measured (their first steps' extra cost); device-hours are W x time. Every candidate with W <= N is scored; the best
by the chosen measure wins. Intervals come from the fits' bootstrap draws, paired draw by draw;
draws that left a model's support (a sample count or step time of zero or less) are dropped,
and the answer says how many draws its intervals rest on. Where a fit is missing, or leaves no
scatter to bound its prediction with (intervals of zero width), the answer falls back to the
best measured trial and says so; one that reached the target at its first evaluation is an
upper bound, and said to be. The study's other parameters (the workload's own, optimizer
settings) are those of the trials the answer rests on.

Memory bounds the per-device batch (``hpsearch.analysis.MemoryModel.cap``): never above the
largest that fit on the device kind with the answer's configuration, nor at or above the
smallest that ran out; with ``allow_larger_batch``, up to the one the memory fit predicts to fit
where a rank's memory is known. Where the fastest configuration's batch would not fit, the
answer keeps its effective batch with more accumulation when it can, and says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import yaml

from hpsearch import record
from hpsearch.analysis._batches import NO_TRIAL_REACHED, BatchPoint
from hpsearch.analysis._layout import NodeLayout, node_layout
from hpsearch.analysis._lr_law import LRLawFit
from hpsearch.analysis._memory_model import MemoryModel
from hpsearch.analysis._stats import Interval, format_batch, format_number, percentile_interval
from hpsearch.analysis._study import StudyAnalysis
from hpsearch.analysis._target import Target
from hpsearch.errors import AnalysisError, NoAnswerError
from hpsearch.search_spaces.space import LR_RULES, WARMUP_FROM_BASE_LR, WARMUP_FROM_ZERO
from hpsearch.study import ConfirmationStatus, confirmation_status, format_bytes
from hpsearch.trials.scaling import FEW_LRS, STEP_GAMMA, STEP_MILESTONES, scale_factor

__all__ = ["FITTED", "MEASURED", "MEASURED_UPPER_BOUND", "Alternative", "Minimize", "Recommendation", "follow_up_space",
           "recommend"]

#: What ``recommend`` minimises: the wall time to the target, or the device-hours.
Minimize = Literal["time", "device-hours"]

#: Accumulation steps a recommendation may use besides those the study tried.
_ACCUMULATION = (1, 2, 4, 8)
#: How far past the largest batch that reached the target the critical-batch fit is trusted.
_BEYOND_DATA = 2.0

#: ``Recommendation.basis``: predicted from the fitted laws, or read off the best measured
#: trial (an upper bound where that trial reached the target at its first evaluation).
FITTED = "fitted laws"
MEASURED = "measured trials"
MEASURED_UPPER_BOUND = "measured trials, an upper bound"

#: The largest natural log whose exp is a finite float.
_LOG_MAX = math.log(float(np.finfo(np.float64).max))

#: The least share of the paired bootstrap draws that must stay inside the models for a fitted
#: answer to give intervals (below it, the answer is the best measured trial).
_LEAST_KEPT = 0.5

#: An interval narrower than this share of its estimate has no width: its draws all agree.
_NO_WIDTH = 1e-9

#: Seeds the draws of one run's scatter in the answer's intervals (``_run_noise``).
_NOISE_SEED = 0x72756E

#: Tied candidates are ranked in bands of this factor of the fastest's predicted time (1 to
#: 1.25x, 1.25 to 1.56x, ...) before the fewest samples: a noisy step-time law ties candidates
#: 2x apart (the teacher MLP's b 64 with b 256, which takes half its time on a CPU), and the
#: fewest samples alone then always picks the smallest batch. A band is as wide as the
#: step-time laws' typical error (10-25%), so step-time noise seldom moves a candidate across.
_TIE_BAND = 1.25


@dataclass(frozen=True)
class Alternative:
    """The best configuration at one world size, and what its prediction extrapolates."""

    world_size: int
    per_device_batch_size: int
    grad_accum_steps: int
    effective_batch_size: int
    time_s: float
    device_hours: float
    extrapolated: tuple[str, ...] = ()
    ran: bool = False
    samples: float | None = None


@dataclass(frozen=True)
class Recommendation:
    """What to run on ``devices`` devices, and what it is predicted to cost.

    Attributes:
        devices: The devices the answer may use (W <= devices).
        device_kind: The device kind the step time was fitted on.
        minimize: ``time`` or ``device-hours``.
        per_device_batch_size: b.
        world_size: W.
        grad_accum_steps: A.
        effective_batch_size: B = b x W x A.
        rule: The LR rule to state the LR with (``None`` where the study's base batch is unknown).
        base_lr: The base LR that ``rule`` turns into ``lr`` at B (with the study's base batch).
        lr: The LR to train with at B: the LR the rule scales to, which warmup rises to and the
            schedule starts from (the one to set as a scheduler's initial or peak LR).
        lr_interval: Its interval from the LR law, when there is one.
        lr_note: Why the answer states its LR as a constant rule where its batch lies beyond the
            LR law's peak (a surge: the best LR falls there, so scaling up would overshoot);
            ``None`` elsewhere.
        warmup_epochs: The study's warmup.
        warmup_from: Where that warmup starts (``base_lr`` or ``zero``), as its trials ran it.
        lr_schedule: The schedule after warmup the answer assumes: the one its trials ran.
        epochs: The epochs its trials' schedule ran over, where the study's space says.
        compile_s: The longest compilation its device kind's trials recorded (torch.compile with
            a cold cache), paid once by a run and not in ``time_s``; ``None`` where none compiled.
        time_s: Predicted training time to the target (evaluations left out): the start-up
            plus steps x step time.
        time_interval: Its interval.
        device_hours: Predicted device-hours to the target.
        device_hours_interval: Its interval.
        samples: Predicted training samples to the target.
        samples_interval: Its interval.
        steps: Predicted optimizer steps to the target.
        basis: ``fitted laws``; ``measured trials`` when a fit was missing or left no scatter
            to bound its prediction with; ``measured trials, an upper bound`` when that trial
            reached the target at its first evaluation.
        extrapolated: What the prediction reads beyond the study's data.
        explanation: How the answer was reached, line by line.
        alternatives: The best configuration at each world size (powers of two and N).
        confirmation: Whether a confirmation round ran this answer's configuration and it held
            (``confirmed by trial #N: ...``), or why it is unconfirmed.
        tied: The configurations the data cannot tell from the fastest (the answer first): the
            answer is the one of them that ran, then that reads least beyond the data, then on
            fewest devices, then that needs fewest samples (docs/analysis.md, "Ties").
        target: What "reached" means.
        step_time_s: Predicted seconds per optimizer step (``None`` for a measured answer).
        step_time_interval: Its interval from the step-time model's draws.
        startup_s: The start-up seconds in ``time_s`` (paid once per run).
        interval_draws: How many paired bootstrap draws (critical batch, step time) the
            intervals rest on: the draws that stayed inside both models' support (``None`` for
            a measured answer).
        interval_draws_total: How many draws there were before those outside were dropped.
        upper_bound: The answer's time, samples and steps are upper bounds: its trial reached
            the target at its first evaluation, so it may have reached it sooner.
        other_params: The study's other parameters (the workload's own, such as ``hidden``,
            and optimizer settings), as the trials the answer rests on ran them.
        source_trials: The trials those come from: the measured trial, or the runs of the best
            configuration at the batch nearest the answer's.
        memory: The memory facts of the answer's device kind and configuration, where the trials
            have any (``MemoryModel``: the peak's line, the largest batch that fit, the
            smallest that ran out).
        per_device_batch_cap: The largest per-device batch the answer could use there
            (``MemoryModel.cap``); ``None`` where nothing bounded it.
        peak_memory_bytes: The answer's peak memory per rank: the memory fit's prediction at
            its per-device batch, or the measured trial's own.
        emulated_ranks: Ranks per device of the measured trial the time comes from: above 1 it
            ran its W ranks emulated on W / ``emulated_ranks`` devices, one after the other (the
            math of W exactly, not its time; ``emulation_note``). 1 for real ranks and for a
            fitted answer.
        layout: The nodes the ``devices`` are assumed to sit on ("16 devices on 2 nodes of 8"),
            and where the devices per node come from (given, or read off the trials).
        nodes: The nodes the answer's W ranks run on: ceil(W / devices per node) for a fitted
            answer, the measured trial's own for a measured one. Above 1, its step time
            carries the all-reduce across nodes.
    """

    devices: int
    device_kind: str | None
    minimize: Minimize
    per_device_batch_size: int
    world_size: int
    grad_accum_steps: int
    effective_batch_size: int
    rule: str | None
    base_lr: float | None
    lr: float
    lr_interval: Interval | None
    warmup_epochs: float
    time_s: float
    time_interval: Interval | None
    device_hours: float
    device_hours_interval: Interval | None
    samples: float
    samples_interval: Interval | None
    steps: float
    basis: str
    extrapolated: tuple[str, ...]
    explanation: tuple[str, ...]
    alternatives: tuple[Alternative, ...] = field(default=())
    target: Target | None = None
    step_time_s: float | None = None
    step_time_interval: Interval | None = None
    startup_s: float = 0.0
    interval_draws: int | None = None
    interval_draws_total: int | None = None
    upper_bound: bool = False
    other_params: Mapping[str, Any] = field(default_factory=dict)
    source_trials: tuple[int, ...] = ()
    memory: MemoryModel | None = None
    per_device_batch_cap: int | None = None
    peak_memory_bytes: float | None = None
    lr_schedule: str = "none"
    epochs: int | None = None
    compile_s: float | None = None
    emulated_ranks: int = 1
    warmup_from: str = WARMUP_FROM_BASE_LR
    layout: NodeLayout | None = None
    nodes: int = 1
    tied: tuple[Alternative, ...] = ()
    confirmation: ConfirmationStatus | None = None
    lr_note: str | None = None

    @property
    def interval_coverage(self) -> float | None:
        """The least share of all the bootstrap draws the intervals hold: their level where no
        draw was dropped, level x kept / total where some were (a dropped draw may lie beyond
        either end); ``None`` for a measured answer."""
        if self.interval_draws is None or not self.interval_draws_total or self.time_interval is None:
            return None
        return self.time_interval.level * self.interval_draws / self.interval_draws_total

    def emulation_note(self) -> str | None:
        """What the time means where it was measured with emulated ranks; ``None`` where not."""
        if self.emulated_ranks <= 1:
            return None
        return "time measured with " + _emulated_text(self.world_size, self.emulated_ranks)

    def __str__(self) -> str:
        """The answer in one paragraph: what to run and what it is predicted to cost (the full
        data stay on the attributes and in ``to_dict``; ``print`` of all of it ran to 3 KB)."""
        where = [f"{self.layout.nodes} nodes of {self.layout.devices_per_node}"] if (
            self.layout is not None and self.layout.nodes > 1) else []
        where += [self.device_kind] if self.device_kind else []
        kind = f" ({', '.join(where)})" if where else ""
        rule = f", {self.rule} rule from base_lr {self.base_lr:.4g}" if self.rule and self.base_lr is not None else ""
        most = "at most " if self.upper_bound else ""
        to = f" to reach {self.target}" if self.target is not None else ""
        return (f"on {self.devices} device{'' if self.devices == 1 else 's'}{kind}: run b {self.per_device_batch_size} "
                f"x W {self.world_size} x A {self.grad_accum_steps} = B {self.effective_batch_size}, lr {self.lr:.4g}"
                f"{rule}; {most}{self.time_s:.4g} s and {most}{self.device_hours:.3g} device-hours{to} "
                f"({self.basis})")

    def __repr__(self) -> str:
        return f"<Recommendation {self}>"

    def batch_cap_text(self) -> str | None:
        """What bounds the per-device batch, in a phrase: a memory ceiling (a batch that ran out,
        or the memory fit's prediction) as ``at most N (memory: ...)``; otherwise only the
        largest batch the study searched, said as such (it is no memory limit). ``None`` where
        nothing bounded it."""
        cap, memory = self.per_device_batch_cap, self.memory
        if cap is None or memory is None:
            return None
        on = f" on {self.device_kind}" if self.device_kind else ""
        if memory.smallest_out_of_memory is not None:
            fit = "" if memory.largest_fit is None else f"largest that fit {memory.largest_fit}, "
            return f"per-device batch at most {cap}{on} (memory: {fit}{memory.smallest_out_of_memory} ran out)"
        if memory.largest_fit is None or cap > memory.largest_fit:
            return f"per-device batch at most {cap}{on} (memory: the memory fit's prediction)"
        return f"per-device batch: largest searched {cap}{on}; no memory limit seen"

    def schedule_text(self) -> str:
        """How the LR runs in the answer, as its trials ran it (``describe_schedule``)."""
        return describe_schedule(self.lr, self.base_lr, self.warmup_epochs, self.lr_schedule, self.epochs,
                                 warmup_from=self.warmup_from)

    def params(self) -> dict[str, Any]:
        """The recommendation as the study's parameters (a space's ``search.enqueue`` entry):
        the batch, world size, accumulation, LR rule and base LR it chose, and the study's
        other parameters as its trials ran them, so a script can run what it says."""
        out: dict[str, Any] = {record.PER_DEVICE_BATCH_SIZE: self.per_device_batch_size, record.WORLD_SIZE: self.world_size,
                               record.GRAD_ACCUM_STEPS: self.grad_accum_steps}
        if self.rule is not None and self.base_lr is not None:
            out.update(lr_rule=self.rule, base_lr=self.base_lr)
        out.update({k: v for k, v in self.other_params.items() if v is not None and k not in out})
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""

        def iv(interval: Interval | None) -> list[float | None] | None:
            return None if interval is None else [_finite(interval.low), _finite(interval.high)]

        return {
            "devices": self.devices, "device_kind": self.device_kind, "minimize": self.minimize,
            record.PER_DEVICE_BATCH_SIZE: self.per_device_batch_size, record.WORLD_SIZE: self.world_size,
            record.GRAD_ACCUM_STEPS: self.grad_accum_steps, record.EFFECTIVE_BATCH_SIZE: self.effective_batch_size,
            "rule": self.rule, record.BASE_LR: self.base_lr, "lr": self.lr, "lr_interval": iv(self.lr_interval),
            "lr_note": self.lr_note,
            record.WARMUP_EPOCHS: self.warmup_epochs, record.WARMUP_FROM: self.warmup_from,
            record.LR_SCHEDULE: self.lr_schedule, "epochs": self.epochs,
            "schedule": self.schedule_text(), record.COMPILE_S: self.compile_s,
            "time_s": self.time_s, "time_interval": iv(self.time_interval),
            "device_hours": self.device_hours, "device_hours_interval": iv(self.device_hours_interval),
            "samples": self.samples, "samples_interval": iv(self.samples_interval), "steps": self.steps,
            "basis": self.basis, "upper_bound": self.upper_bound,
            "step_time_s": self.step_time_s, "step_time_interval": iv(self.step_time_interval),
            "startup_s": self.startup_s,
            "interval_draws": self.interval_draws, "interval_draws_total": self.interval_draws_total,
            "interval_coverage": self.interval_coverage,
            "params": self.params(), "other_params": dict(self.other_params), "source_trials": list(self.source_trials),
            "extrapolated": list(self.extrapolated), "explanation": list(self.explanation),
            "alternatives": [vars(a) for a in self.alternatives],
            "tied": [vars(a) for a in self.tied],
            "confirmation": None if self.confirmation is None else self.confirmation.to_dict(),  # not a record name: the answer's status
            "target": None if self.target is None else str(self.target),
            record.PEAK_MEMORY_BYTES: self.peak_memory_bytes, "per_device_batch_cap": self.per_device_batch_cap,
            "memory": None if self.memory is None else self.memory.to_dict(),
            record.EMULATED_RANKS: self.emulated_ranks, "emulation_note": self.emulation_note(),
            "layout": None if self.layout is None else self.layout.to_dict(), record.NODES: self.nodes,
        }


def describe_schedule(lr: float, base_lr: float | None, warmup_epochs: float, schedule: str,
                      epochs: int | None, *, warmup_from: str = WARMUP_FROM_BASE_LR) -> str:
    """How a run's LR goes: warmup from ``base_lr`` (or from zero, ``warmup_from="zero"``) to
    ``lr``, then the ``schedule`` over the epochs up to ``epochs``
    (``hpsearch.trials.scaling.lr_at``), as a phrase.

    Example:
        >>> describe_schedule(0.02, 0.01, 1.0, "cosine", 3)
        'warm up from base_lr 0.01 to lr 0.02 over 1 epoch, then cosine decay to 0 by epoch 3 (as the trials ran)'
        >>> describe_schedule(0.02, 0.01, 2.0, "cosine", 3, warmup_from="zero")
        'warm up from 0 to lr 0.02 over 2 epochs, then cosine decay to 0 by epoch 3 (as the trials ran)'
        >>> describe_schedule(0.02, 0.01, 0.0, "none", 10)
        'lr 0.02 from the first step, then held (as the trials ran)'
    """
    over = f"over {warmup_epochs:g} epoch{'' if warmup_epochs == 1 else 's'}"
    if warmup_epochs > 0 and warmup_from == WARMUP_FROM_ZERO:
        text = f"warm up from 0 to lr {lr:.4g} {over}, then "
    elif warmup_epochs > 0 and base_lr is not None and math.isclose(base_lr, lr, rel_tol=1e-9):
        # At B = B0 a warmup from base_lr rises nowhere: say so rather than "from 0.003 to 0.003".
        text = f"lr {lr:.4g} from the first step (a warmup from base_lr starts at it at this batch), then "
    elif warmup_epochs > 0:
        start = f"base_lr {base_lr:.4g}" if base_lr is not None else "the base LR"
        text = f"warm up from {start} to lr {lr:.4g} {over}, then "
    else:
        text = f"lr {lr:.4g} from the first step, then "
    end = f"epoch {epochs}" if epochs is not None else "the last epoch"
    if schedule == "cosine":
        text += f"cosine decay to 0 by {end}"
    elif schedule == "step":
        text += (f"x{STEP_GAMMA:g} at {' and '.join(f'{m:.0%}' for m in STEP_MILESTONES)} of the epochs after warmup"
                 + (f", up to {end}" if epochs is not None else ""))
    else:
        text += "held"
    return text + " (as the trials ran)"


def recommend(analysis: StudyAnalysis, devices: int, *, minimize: Minimize = "time",
              allow_larger_batch: bool = False, device_kind: str | None = None,
              devices_per_node: int | None = None) -> Recommendation:
    """The configuration that minimises predicted time (or device-hours) to the target on
    ``devices`` devices.

    Args:
        analysis: The study's analysis (``analyze``).
        devices: How many devices the run may use (W <= devices; W ranks take ceil(W / G)
            nodes of ``devices_per_node`` G, and across nodes their all-reduce costs
            ``t_ar_inter``).
        minimize: ``time`` (wall time to the target) or ``device-hours``.
        allow_larger_batch: Let the per-device batch go up to 4x the largest that ran on the
            device kind, though below the smallest that ran out of memory and, where a rank's
            memory is known, at most the one the memory fit predicts to fit; by default it
            stays within what ran and fit.
        device_kind: The device kind to plan for (a value of the trials' ``device``); default:
            the kind most trials ran on.
        devices_per_node: The devices one node holds, G; default: the most devices a trial of
            the device kind ran on one node, said as assumed (``Recommendation.layout``).

    Raises:
        NoAnswerError: no trial on at most ``devices`` devices reached the target and no law
            was fitted, or every configuration's batch lies beyond what the fit covers; it
            carries ``analysis``.
        AnalysisError: ``devices`` or ``devices_per_node`` below 1, an unknown device kind or
            ``minimize``.
    """
    if devices < 1:
        raise AnalysisError(f"devices must be 1 or more, got {devices}")
    if minimize not in ("time", "device-hours"):
        raise AnalysisError(f"minimize must be 'time' or 'device-hours', got {minimize!r}")
    kind = device_kind or analysis.device_kind
    if device_kind is not None and device_kind not in analysis.throughput:
        known = ", ".join(sorted(analysis.throughput)) or "none"
        raise AnalysisError(f"no step-time model for device kind {device_kind!r}; kinds with one: {known}")
    layout = node_layout(analysis.trials, devices, devices_per_node, kind)
    if analysis.critical_batch is None or kind is None:
        why = analysis.critical_batch_refusal if analysis.critical_batch is None else (
            "; ".join(analysis.throughput_refusals.values()) or "no trial recorded its step time")
        answer = _from_measurements(analysis, layout, minimize, kind, str(why))
    else:
        answer = _from_laws(analysis, layout, minimize, allow_larger_batch, kind)
    # Whether the search ran this answer and it held (docs/analysis.md, "Confirmation").
    return replace(answer, confirmation=confirmation_status(analysis.confirmations, answer.params()))


def _from_laws(analysis: StudyAnalysis, layout: NodeLayout, minimize: Minimize, allow_larger_batch: bool,
               kind: str) -> Recommendation:
    devices = layout.devices
    cb = analysis.critical_batch
    model = analysis.throughput[kind]
    assert cb is not None
    ran = sorted({int(t[record.PER_DEVICE_BATCH_SIZE]) for t in analysis.trials
                  if t["device"] == kind and t[record.PER_DEVICE_BATCH_SIZE] and t["state"] in ("COMPLETE", "PRUNED")})
    b_choices = ran + ([2 * ran[-1], 4 * ran[-1]] if allow_larger_batch and ran else [])
    # The batches that ran out of memory are candidates too, so that an answer held below them
    # says so (memory rules them out below); with allow_larger_batch, so is the largest batch the
    # memory fit predicts to fit, in steps of 8.
    kinds_memory = [m for m in analysis.memory if m.device == kind]
    b_choices += [m.smallest_out_of_memory for m in kinds_memory if m.smallest_out_of_memory is not None]
    if allow_larger_batch and ran:
        b_choices += [m.predicted_largest // 8 * 8 for m in kinds_memory
                      if m.predicted_largest is not None and m.predicted_largest // 8 * 8 > ran[-1]]
    b_choices = sorted(set(b_choices))
    tried_a = {int(t[record.GRAD_ACCUM_STEPS]) for t in analysis.trials if t[record.GRAD_ACCUM_STEPS]}
    a_choices = sorted(set(_ACCUMULATION) | tried_a)
    reached = [p.effective_batch_size for p in analysis.batches]
    # Beyond the batches that reached the target the line is read only where its form error was
    # measured (``CriticalBatchFit.form_error``), and never far: an interval that cannot own its
    # extrapolation is not offered.
    ceiling = (_BEYOND_DATA if cb.form_error is not None else 1.0) * max(reached)
    b, w, a = (np.array(x, dtype=float).ravel() for x in np.meshgrid(b_choices, np.arange(1, devices + 1), a_choices))
    batch = b * w * a
    keep = batch <= ceiling * (1 + 1e-9)
    if not keep.any():
        raise NoAnswerError(f"every configuration on {_count(devices, 'device')} has an effective batch above {ceiling:,.0f}, "
                            f"{'twice ' if cb.form_error is not None else ''}the largest batch that reached the target; "
                            "the fit says nothing there", analysis)
    b, w, a, batch = b[keep], w[keep], a[keep], batch[keep]
    # Memory: each candidate's per-device batch at most its configuration's cap on this kind.
    memory_of = _memory_at(analysis, kind, batch)
    caps = np.array([_cap(memory_of[float(x)], allow_larger_batch) for x in batch], dtype=float)
    if not allow_larger_batch and ran:  # and within what ran on the kind, memory facts or none
        caps = np.minimum(caps, ran[-1])
    fits = b <= caps
    if not fits.any():
        raise NoAnswerError(f"no configuration on {_count(devices, 'device')} has a per-device batch that fit in memory on "
                            f"{kind} (every batch tried is at or above one that ran out of memory)", analysis)
    samples_at = np.asarray(cb.examples(batch), dtype=float)
    # What the runs that missed the target say: at a batch where every run trained S samples
    # without reaching it, no candidate is offered that the fit predicts below S (a bound the fit
    # was held to cannot be; one it left out, contradicted by a larger batch, still can).
    contradicted = {float(x): bound for x in set(batch.tolist()) for bound in analysis.bounds
                    if bound.effective_batch_size == float(x) and float(cb.examples(float(x))) < bound.samples}
    allowed = fits & np.array([float(x) not in contradicted for x in batch])
    if not allowed.any():
        raise NoAnswerError(f"every configuration on {_count(devices, 'device')} that fits is at a batch where every run missed "
                            "the target in more samples than the fit predicts there", analysis)
    steps = samples_at / batch
    startup = np.array([analysis.startup(kind, int(x)) for x in w], dtype=float)
    # W ranks on ceil(W / G) nodes: those of more than one pay the all-reduce across nodes.
    nodes = np.ceil(w / layout.devices_per_node)
    time_s = startup + steps * np.asarray(model.step_time(b, w, a, nodes), dtype=float)
    hours = w * time_s / 3600
    score = time_s if minimize == "time" else hours
    # The fastest, then the candidates the data cannot tell from it (``_ties``): the answer is
    # the one of those that ran, then that reads least beyond the data, on fewest devices.
    order = np.lexsort((a, w, np.round(score, 9)))
    unbounded = int(order[0])
    fastest = int(order[allowed[order]][0])

    def extrapolations(i: int) -> tuple[str, ...]:
        return _extrapolations(analysis, model, int(b[i]), int(w[i]), int(a[i]), kind, memory_of[float(batch[i])],
                               layout.nodes_of(int(w[i])))

    best, tied, tie_lines = _ties(analysis, cb, model, (b, w, a, batch, nodes, startup, score), allowed, fastest,
                                  minimize, kind, extrapolations)
    bb, ww, aa, big_b = int(b[best]), int(w[best]), int(a[best]), float(batch[best])
    nn = layout.nodes_of(ww)
    memory = memory_of[big_b]
    memory_lines = _memory_lines(kind, memory, b_choices, (b, w, a, batch), unbounded, fastest, memory_of,
                                 allow_larger_batch)
    bound_lines = _bound_lines(contradicted, samples_at, batch, order, fits)
    time_best = float(time_s[best])
    b, w, a, batch, time_s, hours, score = (x[allowed] for x in (b, w, a, batch, time_s, hours, score))

    # The intervals pair the two fits' draws, draw by draw, over the draws both kept: a draw
    # that left its model's support is NaN there (dropped, not clipped), and the answer says
    # how many draws its intervals rest on.
    e_all = np.asarray(cb.examples_draws(big_b), dtype=float).ravel()
    t_all = np.asarray(model.step_time_draws(bb, ww, aa, nn), dtype=float).ravel()
    n = min(len(e_all), len(t_all))
    kept = np.isfinite(e_all[:n]) & np.isfinite(t_all[:n]) & (e_all[:n] > 0) & (t_all[:n] > 0)
    e_draws, t_draws = e_all[:n][kept], t_all[:n][kept]
    startup_s = analysis.startup(kind, ww)
    samples, step_s, time = float(cb.examples(big_b)), float(model.step_time(bb, ww, aa, nn)), time_best
    if kept.sum() < _LEAST_KEPT * n:
        # Intervals of the draws that fitted hold their level of those draws only: of all the
        # draws, as little as level x kept / total. Below half, that is no interval at all.
        return _from_measurements(analysis, layout, minimize, kind,
                                  f"only {int(kept.sum())} of {n:,} bootstrap draws of the fitted laws stayed inside "
                                  f"their models at the best configuration (b {bb}, W {ww}, A {aa}): intervals of "
                                  "those would cover far less than their level says")
    fit_iv = percentile_interval(e_draws, cb.level).including(samples)
    step_iv = percentile_interval(t_draws, model.level).including(step_s)
    flat = [what for what, iv, point in (("samples to the target", fit_iv, samples), ("step time", step_iv, step_s))
            if iv.width <= _NO_WIDTH * point]
    if flat:
        # Zero width is not certainty: the fit went exactly through its points (as many as
        # its coefficients, or all equal), so nothing measured its scatter. A configuration
        # that never ran is not recommended on that.
        return _from_measurements(analysis, layout, minimize, kind,
                                  f"the fitted laws leave no scatter to bound their prediction of the "
                                  f"{' and the '.join(flat)} with (every bootstrap draw agrees: "
                                  f"{_why_exact(analysis, kind)}), so they are no evidence for a configuration")
    # What one run of the answer measures: the line's uncertainty, a run's own scatter about it
    # (``run_scatter``) and, beyond the batches that reached the target, the line's form error.
    run_draws = e_draws * _run_noise(cb.run_scatter, len(e_draws))
    form = cb.form_factor(big_b) or 1.0
    floor = cb.lower_bound(big_b)
    samples_iv = _widened(percentile_interval(run_draws, cb.level), form, floor).including(samples)
    # The time's draws are the two fits' draws multiplied; where the step time's draws gather on
    # a bound of its fit (no all-reduce cost, t_ar = 0), the product's 5th percentile fell a
    # fraction of a percent below the fewest samples at the fastest step. A time the two
    # intervals it is made of rule out is not offered.
    fewest = startup_s + samples_iv.low / big_b * step_iv.low
    most = startup_s + samples_iv.high / big_b * step_iv.high
    product = _widened(percentile_interval(startup_s + run_draws / big_b * t_draws, cb.level), form,
                       startup_s + floor / big_b * step_iv.low)
    low, high = max(product.low, fewest), min(product.high, most)
    time_iv = (Interval(low, high, cb.level) if low <= high else Interval(fewest, most, cb.level)).including(time)
    rule, base_lr, lr, lr_interval, lr_lines, lr_note = _learning_rate(analysis, big_b)
    if lr_interval is not None:
        lr_interval = lr_interval.including(lr)
    dropped = n - int(kept.sum())
    coverage = cb.level * int(kept.sum()) / n
    lr_lines.append(f"intervals: {cb.level:.0%} of {int(kept.sum()):,} paired bootstrap draws of the critical batch "
                    f"and the step time, with one run's scatter about the line ({cb.run_scatter:.0%})"
                    + (f" and its form error beyond B {format_batch(cb.batch_sizes[-1])} (x{form:.2f} each way)"
                       if form > 1 else "")
                    + ": what one run of the answer measures"
                    + (f" ({dropped} of {n:,} dropped: they left a model's support, a sample "
                       "count or step time of zero or less; the dropped draws may lie beyond "
                       f"either end, so the intervals hold at least {coverage:.0%} of all the "
                       f"draws, not {cb.level:.0%})" if dropped else ""))
    others, sources, other_lines = _params_near(analysis, big_b)
    extrapolated = _extrapolations(analysis, model, bb, ww, aa, kind, memory, nn)
    if minimize == "time" and ww < devices:
        # Say why devices are left idle: the best use of all of them is predicted slower.
        at_all = np.flatnonzero(w == devices)
        if len(at_all):
            j = int(at_all[np.argmin(time_s[at_all])])
            lr_lines.append(f"the answer uses {ww} of the {devices} devices: the best use of all {devices} "
                            f"(b {int(b[j])}, A {int(a[j])}) is predicted at {time_s[j]:.3g} s, slower, since "
                            f"its all-reduce and its larger batch's extra samples cost more than the devices save")
    return Recommendation(
        devices=devices, device_kind=kind, minimize=minimize, per_device_batch_size=bb, world_size=ww,
        grad_accum_steps=aa, effective_batch_size=int(big_b), rule=rule, base_lr=base_lr, lr=lr,
        lr_interval=lr_interval, lr_note=lr_note, warmup_epochs=analysis.warmup_epochs,
        warmup_from=analysis.warmup_from, lr_schedule=analysis.lr_schedule,
        epochs=analysis.epochs, compile_s=analysis.compile_s.get(kind) if kind is not None else None,
        time_s=time, time_interval=time_iv, device_hours=time * ww / 3600,
        device_hours_interval=Interval(time_iv.low * ww / 3600, time_iv.high * ww / 3600, time_iv.level),
        samples=samples, samples_interval=samples_iv, steps=samples / big_b, basis=FITTED,
        extrapolated=tuple(extrapolated),
        explanation=tuple(_explain(analysis, kind) + _layout_lines(layout, model, ww) + memory_lines + bound_lines
                          + tie_lines + lr_lines + other_lines),
        alternatives=_alternatives(b, w, a, batch, time_s, hours, score, devices,
                                   lambda b_, w_, a_: _extrapolations(analysis, model, b_, w_, a_, kind,
                                                                      memory_of[float(b_ * w_ * a_)],
                                                                      layout.nodes_of(w_))),
        target=analysis.target, step_time_s=step_s, step_time_interval=step_iv, startup_s=startup_s,
        interval_draws=int(kept.sum()), interval_draws_total=n, other_params=others, source_trials=sources,
        memory=memory, per_device_batch_cap=None if memory is None else memory.cap(allow_larger_batch),
        peak_memory_bytes=None if memory is None else memory.peak(bb), layout=layout, nodes=nn, tied=tied)


def _run_noise(scatter: float, n: int) -> np.ndarray:
    """``n`` factors of one run's scatter about the line (lognormal, sigma ``scatter``), from a
    stream of their own: the same study gives the same interval."""
    if scatter <= 0:
        return np.ones(n)
    return np.random.default_rng(_NOISE_SEED).lognormal(0.0, scatter, size=n)


def _widened(interval: Interval, factor: float, floor: float = 0.0) -> Interval:
    """``interval`` widened by ``factor`` on each side (the form error), its low end never below
    ``floor`` (what runs that missed the target trained)."""
    low = max(interval.low / factor, floor)
    return Interval(min(low, interval.high * factor), interval.high * factor, interval.level)


def _ties(analysis: StudyAnalysis, cb: Any, model: Any, candidates: tuple[np.ndarray, ...], allowed: np.ndarray,
          fastest: int, minimize: Minimize, kind: str,
          extrapolations: Any) -> tuple[int, tuple[Alternative, ...], list[str]]:
    """The answer among the candidates the data cannot tell from the fastest, the tied ones, and
    a line saying so.

    A candidate is tied with the fastest when the 90% interval of the ratio of their predicted
    times (or device-hours), over the fits' paired bootstrap draws and widened by each one's
    form error, reaches 1: the draws share the line and the step-time model, so this is the
    comparison of the two once what they have in common is taken out (comparing their own
    intervals would tie candidates half again as slow). Of the tied ones the answer is the one
    whose configuration ran and reached the target, then the one with the fewest
    extrapolations (no accumulation, world size or batch the study never ran), then the one on
    the fewest devices, then the one within the fewest bands of ``_TIE_BAND`` of the fastest's
    predicted time, then the one that needs the fewest samples (a property of the accuracies
    alone): so step-time noise, which moves the fastest among equals from run to run, does not
    move the answer (two identical quickstart searches answered B 64 and B 128), and a tie that a
    noisy step-time law widens does not hand the answer to the smallest batch."""
    b, w, a, batch, nodes, startup, score = candidates
    idx = np.flatnonzero(allowed)
    e = np.asarray(cb.examples_draws(batch[idx]), dtype=float)
    t = np.asarray(model.step_time_draws(b[idx], w[idx], a[idx], nodes[idx]), dtype=float)
    n = min(len(e), len(t))
    draws = startup[idx] + e[:n] / batch[idx] * t[:n]
    if minimize == "device-hours":
        draws = draws * w[idx]
    ok = np.isfinite(draws).all(axis=1) & (draws > 0).all(axis=1)
    where = int(np.flatnonzero(idx == fastest)[0])
    forms = np.array([cb.form_factor(float(x)) or 1.0 for x in batch[idx]])
    if ok.sum() < 10:
        low_ratio = score[idx] / score[fastest]
    else:
        ratio = draws[ok] / draws[ok][:, where:where + 1]
        low_ratio = np.quantile(ratio, (1 - cb.level) / 2, axis=0) / (forms * forms[where])
        # The form error widens what the line may be wrong by, never below what runs that missed
        # the target trained there (a bound the line was held to).
        floors = np.array([cb.lower_bound(float(x)) for x in batch[idx]])
        steps_s = np.asarray(model.step_time(b[idx], w[idx], a[idx], nodes[idx]), dtype=float)
        floor_score = (startup[idx] + floors / batch[idx] * steps_s) * (w[idx] if minimize == "device-hours" else 1.0)
        low_ratio = np.maximum(low_ratio, floor_score / (score[fastest] * forms[where]))
    tied_idx = [int(i) for i, lr in zip(idx, low_ratio) if lr <= 1.0 or int(i) == fastest]
    ran_shapes = {(float(t_[record.PER_DEVICE_BATCH_SIZE]), float(t_[record.WORLD_SIZE]), float(t_[record.GRAD_ACCUM_STEPS]))
                  for t_ in analysis.trials if t_["device"] == kind and t_["samples_to_target"] is not None
                  and t_["state"] in ("COMPLETE", "PRUNED") and t_[record.PER_DEVICE_BATCH_SIZE]}
    samples = np.asarray(cb.examples(batch), dtype=float)

    def rank(i: int) -> tuple[Any, ...]:
        ran = (float(b[i]), float(w[i]), float(a[i])) in ran_shapes
        band = math.floor(math.log(max(float(score[i] / score[fastest]), 1.0)) / math.log(_TIE_BAND) + 1e-9)
        return (not ran, len(extrapolations(i)), int(w[i]), band, round(float(samples[i]), 6), int(a[i]), int(b[i]))

    tied_idx.sort(key=rank)
    best = tied_idx[0]
    tied = tuple(Alternative(int(w[i]), int(b[i]), int(a[i]), int(batch[i]), float(score[i] if minimize == "time"
                             else score[i] * 3600 / w[i]), float(score[i] * w[i] / 3600 if minimize == "time"
                             else score[i]), extrapolations(i),
                             ran=(float(b[i]), float(w[i]), float(a[i])) in ran_shapes, samples=float(samples[i]))
                 for i in tied_idx)
    if len(tied) == 1:
        return best, tied, []
    shown = "; ".join(f"b {x.per_device_batch_size} x W {x.world_size} x A {x.grad_accum_steps}"
                      f"{' (ran)' if x.ran else ''}" for x in tied[:6]) + (f"; and {len(tied) - 6} more"
                                                                           if len(tied) > 6 else "")
    why = ("it ran and reached the target" if tied[0].ran and not tied[1].ran else
           "it reads least beyond the data" if len(tied[0].extrapolated) < len(tied[1].extrapolated) else
           "it uses fewer devices" if tied[0].world_size < tied[1].world_size else
           f"it needs the fewest samples of those within {_TIE_BAND:g}x of the fastest's predicted "
           f"{'time' if minimize == 'time' else 'device-hours'}"
           if any(rank(i)[:3] == rank(best)[:3] and rank(i)[3] > rank(best)[3] for i in tied_idx) else
           "it needs the fewest samples")
    measure = "time" if minimize == "time" else "device-hours"
    lines = [f"{len(tied)} configurations are tied in predicted {measure} with the fastest (b {int(b[fastest])} x W "
             f"{int(w[fastest])} x A {int(a[fastest])}): the {cb.level:.0%} interval of their ratio over paired draws "
             f"reaches 1 ({shown}); the answer is the first: {why}"]
    return best, tied, lines


def _bound_lines(contradicted: Mapping[float, Any], samples_at: np.ndarray, batch: np.ndarray, order: np.ndarray,
                 fits: np.ndarray) -> list[str]:
    """Why candidates at a batch where every run missed the target were left out, where one of
    them would have been the fastest."""
    lines = []
    for i in order[fits[order]]:
        bound = contradicted.get(float(batch[i]))
        if bound is None:
            break  # the fastest that fits is allowed: nothing was left out ahead of it
        lines.append(f"B {format_batch(float(batch[i]))} left out: the fit predicts {samples_at[i]:,.0f} samples there, "
                     f"but every run at B {format_batch(float(batch[i]))} trained {bound.samples:,.0f} without reaching "
                     f"the target ({bound.why_not})")
        break
    return lines


def _why_exact(analysis: StudyAnalysis, kind: str) -> str:
    """Why a fit's draws all agree, in a few words."""
    model = analysis.throughput[kind]
    if model.note and "as many trials as coefficients" in model.note:
        return f"the step-time model has as many configurations ({model.n_trials}) as coefficients"
    return "the points lie exactly on the fitted laws"


def _nearest_point(analysis: StudyAnalysis, batch: float) -> BatchPoint:
    """The batch at its best configuration nearest ``batch`` (in ratio) that the critical-batch
    fit used: the answer at ``batch`` runs its other parameters."""
    points = [p for p in analysis.batches if not p.upper_bound] or list(analysis.batches)
    return min(points, key=lambda p: (abs(math.log(p.effective_batch_size / batch)), -p.effective_batch_size))


def _memory_at(analysis: StudyAnalysis, kind: str, batches: np.ndarray) -> dict[float, MemoryModel | None]:
    """The memory facts on ``kind`` of the configuration an answer at each effective batch would
    run (``_nearest_point``'s), by batch."""
    trials = {t["number"]: t for t in analysis.trials}
    out: dict[float, MemoryModel | None] = {}
    for batch in {float(x) for x in batches}:
        point = _nearest_point(analysis, batch)
        out[batch] = analysis.memory_model(kind, _params_of(analysis.parameters, trials.get(point.runs[0])))
    return out


def _cap(memory: MemoryModel | None, allow_larger: bool) -> float:
    cap = None if memory is None else memory.cap(allow_larger)
    return math.inf if cap is None else float(cap)


def _memory_lines(kind: str, memory: MemoryModel | None, b_choices: Sequence[int],
                  candidates: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], unbounded: int, best: int,
                  memory_of: Mapping[float, MemoryModel | None], allow_larger: bool) -> list[str]:
    """What memory says of the answer: the facts of its configuration, and, where the fastest
    configuration's per-device batch would not fit, the cap and what the answer did instead
    (the same effective batch with more accumulation, where it could)."""
    b, w, a, batch = candidates
    lines = [] if memory is None else [memory.describe()]
    if unbounded == best:
        return lines
    ub, uw, ua, u_batch = int(b[unbounded]), int(w[unbounded]), int(a[unbounded]), float(batch[unbounded])
    bounding = memory_of[u_batch]
    cap = None if bounding is None else bounding.cap(allow_larger)
    if bounding is None or cap is None or ub <= cap:
        return lines  # ruled out for not having run on the kind, not by memory
    shown = max((v for v in b_choices if v <= cap), default=cap)
    lines.append(f"per-device batch capped at {shown}: {bounding.why_not(ub)}")
    bb, ww, aa = int(b[best]), int(w[best]), int(a[best])
    if float(batch[best]) == u_batch and ww == uw:
        lines.append(f"b {ub} x A {ua} would not fit, so the answer keeps the effective batch B {format_batch(u_batch)} "
                     f"with accumulation: b {bb} x A {aa} (the same gradient, docs/science.md; {aa // ua} "
                     "micro-steps per step where there was one)")
    else:
        lines.append(f"the fastest configuration without the cap, b {ub} x W {uw} x A {ua} (B "
                     f"{format_batch(u_batch)}), is left out: it would not fit in memory on {kind}")
    return lines


def _params_near(analysis: StudyAnalysis, batch: float) -> tuple[dict[str, Any], tuple[int, ...], list[str]]:
    """The study's other parameters for an answer at ``batch``: those of the best configuration
    at the batch nearest it (in ratio) that the critical-batch fit used, its runs, and a line
    saying so, or where the best configurations of other batches ran other values."""
    points = [p for p in analysis.batches if not p.upper_bound] or list(analysis.batches)
    nearest = _nearest_point(analysis, batch)
    if not analysis.parameters:
        return {}, nearest.runs, []
    trials = {t["number"]: t for t in analysis.trials}
    of = {p.effective_batch_size: _params_of(analysis.parameters, trials.get(p.runs[0])) for p in points}
    others = of[nearest.effective_batch_size]
    shown = ", ".join(f"{k} {v}" for k, v in others.items())
    runs = ", ".join(f"#{n}" for n in nearest.runs[:3]) + (f" and {len(nearest.runs) - 3} more"
                                                           if len(nearest.runs) > 3 else "")
    lines = [f"other parameters: {shown}, as the best configuration at B {format_batch(nearest.effective_batch_size)} "
             f"ran them (trial {runs}), the batch nearest the answer's"]
    for name, value in others.items():
        elsewhere = {format_batch(b): params.get(name) for b, params in of.items() if params.get(name) != value}
        if elsewhere:
            lines.append(f"the best configurations of other batches ran other values of {name} ("
                         + ", ".join(f"{v} at B {b}" for b, v in elsewhere.items()) + "): the laws mix them")
    return others, nearest.runs, lines


def _params_of(parameters: Sequence[str], trial: Mapping[str, Any] | None) -> dict[str, Any]:
    """A trial's values of the study's other parameters (of a batch's best configuration: its
    first run's, which its runs share)."""
    return {} if trial is None else {k: trial[k] for k in parameters if trial.get(k) is not None}


def _extrapolations(analysis: StudyAnalysis, model: Any, b: int, w: int, a: int, kind: str,
                    memory: MemoryModel | None, nodes: int = 1) -> tuple[str, ...]:
    """What a prediction for (b, W, A) on ``nodes`` nodes of ``kind`` reads beyond the study's
    data, its memory (``memory``: the facts of its configuration) included."""
    big_b = float(b * w * a)
    out = list(model.extrapolations(b, w, a, nodes))
    largest = None if memory is None else memory.largest_fit
    if largest is None or b > largest:
        peak = None if memory is None else memory.peak(b)
        if memory is not None and memory.predicted_largest is not None and peak is not None and memory.limit_bytes:
            out.append(f"per-device batch {b} has not run on {kind}: the memory fit predicts {format_bytes(peak)} per "
                       f"rank, within the {format_bytes(memory.limit_bytes)} a rank may hold")
        elif largest is not None or b > model.per_device_batch_range[1]:
            out.append(f"per-device batch {b} has not run on {kind}, and nothing says it fits in memory (no trial ran "
                       "out of it, and a rank's memory is not known)")
    reached = [p.effective_batch_size for p in analysis.batches]
    low, high = min(reached), max(reached)
    if big_b > high:
        out.append(f"effective batch {big_b:,.0f} is beyond the largest that reached the target "
                   f"({high:,.0f}): samples to the target read off the fitted E(B)")
    elif big_b < low:
        out.append(f"effective batch {big_b:,.0f} is below the smallest that reached the target ({low:,.0f})")
    if analysis.lr_law is not None:
        lr_low, lr_high = min(analysis.lr_law.batch_sizes), max(analysis.lr_law.batch_sizes)
        if not lr_low <= big_b <= lr_high:
            out.append(f"the LR law is read at B {big_b:,.0f}, outside the batches it was fitted on "
                       f"({lr_low:,.0f} to {lr_high:,.0f})")
    return tuple(out)


def _learning_rate(analysis: StudyAnalysis, batch: float) -> tuple[str | None, float | None, float, Interval | None,
                                                                    list[str], str | None]:
    """The LR at ``batch`` (from the LR law, else the best configuration of the nearest batch
    scaled by its rule), the rule and base LR that give it, the explanation's line, and why
    the answer does not scale up where ``batch`` lies beyond the law's peak (else ``None``)."""
    law = analysis.lr_law
    b0 = analysis.base_batch_size
    if law is not None:
        lr = float(law.lr(batch))
        # In log space: with three batch sizes a draw's LR can lie past any float (its alpha
        # has one degree of freedom), and its exp overflowed into a warning the user saw.
        logs = percentile_interval(np.asarray(law.log_lr_draws(batch), dtype=float).ravel(), law.level)
        interval = Interval(_exp(logs.low), _exp(logs.high), logs.level)
        # The rule whose exponent matches the law's local slope at B: the one that keeps the LR
        # right for the neighbouring batches a follow-up search tries.
        step = math.log(1.25)
        slope = (math.log(float(law.lr(batch * 1.25))) - math.log(float(law.lr(batch / 1.25)))) / (2 * step)
        rule = _closest_rule(slope)
        if law.past_peak(batch):
            # Past the surge's peak the best LR falls as B grows: a rule that scales the LR up
            # from a smaller batch overshoots there, so the answer states the law's own LR at B
            # as a constant rule (base_lr = lr), which runs that LR whatever the base batch.
            note = _past_peak_note(law, batch, lr)
            if analysis.warmup_epochs > 0 and analysis.warmup_from == WARMUP_FROM_BASE_LR:
                # A warmup from base_lr = lr has nothing to rise from: the trials' rose from their own base LR.
                note += ("; with scaling.warmup_from: base_lr that run holds lr through its warmup, where the trials "
                         "rose to theirs: warmup_from: zero keeps a warmup")
            lines = [f"LR: {law.summary}; {note}" + _left_out(analysis)]
            return "constant", lr, lr, interval, lines, note
        lines = [f"LR: {law.summary}; its slope at B {batch:,.0f} is {slope:.2f}, so the {rule} rule states it"
                 + _left_out(analysis)]
    else:
        # The configuration the answer's other parameters come from (``_params_near``): a
        # nearest batch of its own left out upper bounds and broke ties the other way, and gave
        # an answer whose LR and other parameters no one configuration ran.
        nearest = _nearest_point(analysis, batch)
        rule = nearest.rule if nearest.rule in LR_RULES else "linear"
        lr = nearest.lr * _scale(rule, batch / nearest.effective_batch_size)
        interval = None
        lines = [f"LR: the best configuration at B {nearest.effective_batch_size:,.0f} (lr {nearest.lr:.4g}) scaled by "
                 f"its {rule} rule; there is no LR law: {analysis.lr_law_refusal}"]
    base_lr = None if b0 is None else lr / _scale(rule, batch / b0)
    return (rule if b0 is not None else None), base_lr, lr, interval, lines, None


def _past_peak_note(law: LRLawFit, batch: float, lr: float) -> str:
    """Why an answer beyond the LR law's peak runs the law's LR as a constant rule, with what
    the rules that scale up from the peak would have set instead."""
    assert law.b_peak is not None and law.peak_lr is not None and law.b_peak_interval is not None
    iv = law.b_peak_interval
    k = batch / law.b_peak
    sqrt_lr, linear_lr = law.peak_lr * math.sqrt(k), law.peak_lr * k
    return (f"B {format_batch(batch)} is beyond the LR law's peak (B {format_number(law.b_peak)} [{format_number(iv.low)}, "
            f"{format_number(iv.high)}]): the best LR falls there as the batch grows (surge, Li et al. 2024), so the "
            f"answer runs the law's lr {lr:.4g} at B {format_batch(batch)} as a constant rule (base_lr = lr) rather than "
            f"scaling up; the sqrt rule from the peak would set {sqrt_lr:.4g} ({sqrt_lr / lr:.1f}x), the linear "
            f"rule {linear_lr:.4g} ({linear_lr / lr:.1f}x)")


def _left_out(analysis: StudyAnalysis) -> str:
    """The batches whose best LR the law was not fitted to, and why (``law_points``), as a clause."""
    out = [p for p in analysis.lr_points if not p.used]
    if not out:
        return ""
    shown = "; ".join(f"B {format_batch(p.effective_batch_size)}: {p.why}" for p in out[:4])
    return f" (left out of the law: {shown}{'; ...' if len(out) > 4 else ''})"


def _exp(log: float) -> float:
    """``e^log``, ``inf`` past the largest float (not an overflow)."""
    return math.exp(log) if log < _LOG_MAX else math.inf


def _closest_rule(slope: float) -> str:
    """The rule whose exponent in B is nearest ``slope`` (constant 0, sqrt 0.5, linear 1)."""
    exponents = {"constant": 0.0, "sqrt": 0.5, "linear": 1.0}
    return min(exponents, key=lambda r: abs(exponents[r] - slope))


def _scale(rule: str, k: float) -> float:
    return scale_factor(rule, k)


def _few_lrs(analysis: StudyAnalysis) -> str | None:
    """A line where some batch of the fit ran at fewer than ``FEW_LRS`` LRs: its best run is read
    as its best LR, which it may not be (``hpsearch validate`` says so of the space)."""
    lrs: dict[float, set[float]] = {}
    for t in analysis.trials:
        batch, lr = t.get(record.EFFECTIVE_BATCH_SIZE), t.get(record.LR)
        if batch is not None and lr is not None:
            lrs.setdefault(float(batch), set()).add(round(float(lr), 12))
    fitted = {float(p.effective_batch_size) for p in analysis.batches}
    few = sorted(batch for batch in fitted if len(lrs.get(batch, ())) < FEW_LRS)
    if not few:
        return None
    shown = ", ".join(f"B {format_batch(batch)} at {len(lrs.get(batch, ()))}" for batch in few[:6])
    return (f"few LRs: {shown} (fewer than {FEW_LRS}): such a batch's best run may sit above its optimum, so the "
            "fit reads it as needing more samples than it does")


def _explain(analysis: StudyAnalysis, kind: str) -> list[str]:
    cb = analysis.critical_batch
    assert cb is not None
    model = analysis.throughput[kind]
    lines = [f"target: {analysis.target}" + (f" ({analysis.target.note})" if analysis.target.note else ""),
             f"{analysis.n_reached} of {analysis.n_trials} trials reached it, at {cb.n_batch_sizes} effective batch "
             f"sizes; each batch at its best configuration ({cb.n_runs} runs)",
             f"critical batch B_crit {_num(cb.b_crit)} {cb.b_crit_interval}, E_min {_num(cb.e_min)} samples "
             f"({cb.method})" + (f"; {cb.note}" if cb.note else "")]
    few = _few_lrs(analysis)
    if few:
        lines.append(few)
    if analysis.noise_scale is not None:
        ns = analysis.noise_scale
        lines.append(f"measured gradient noise scale B_simple: median {_num(ns['median'])} "
                     f"(quartiles {_num(ns['q1'])} to {_num(ns['q3'])}, {int(ns['n_trials'])} trials)")
    if model.inter_node_measured:
        within = f"{model.t_ar:.3g} s" if model.allreduce_measured else "unmeasured"
        comm = (f" + 2(W-1)/W x the all-reduce: {within} within a node, {model.t_ar_inter:.3g} s "
                f"{model.t_ar_inter_interval} across nodes")
    elif model.allreduce_measured:
        comm = f" + {model.t_ar:.3g} s x 2(W-1)/W all-reduce"
    else:
        comm = "; all-reduce never measured (every trial ran on one device)"
    lines.append(f"steady step time on {kind}: A x ({model.t0:.3g} s + {model.t1:.3g} s x b){comm}, from "
                 f"{model.n_trials} configurations (relative error {model.relative_rmse:.0%})")
    if analysis.startup_s.get(kind):
        starts = ", ".join(f"W {w}: {s:.3g} s" for w, s in analysis.startup_s[kind].items())
        lines.append(f"plus a start-up per run (the first steps' extra cost, from the trials' curves): {starts}")
    return lines


def _layout_lines(layout: NodeLayout, model: Any, world_size: int) -> list[str]:
    """The nodes the answer assumes, where that comes from, and what its all-reduce across nodes
    rests on where ranks may span nodes."""
    g = layout.devices_per_node
    lines = [f"layout: {layout} ({layout.source}); the answer's {_count(world_size, 'rank')} run on "
             f"{_count(layout.nodes_of(world_size), 'node')}"]
    if layout.nodes == 1:
        return lines
    if model.inter_node_measured:
        lines.append(f"more than {g} ranks span nodes: their all-reduce costs {model.t_ar_inter:.3g} s x 2(W-1)/W, "
                     f"measured on trials over up to {model.node_counts[-1]} nodes")
    elif model.allreduce_measured:
        lines.append(f"more than {g} ranks span nodes, and no trial did: the all-reduce across nodes was never "
                     f"measured, so they are predicted with the one measured within a node ({model.t_ar:.3g} s x "
                     "2(W-1)/W), a lower bound: links between nodes are seldom faster")
    else:
        lines.append(f"more than {g} ranks span nodes, and no trial ran on more than one device: their all-reduce, "
                     "within a node or across nodes, is left out of the prediction")
    return lines


def _alternatives(b: np.ndarray, w: np.ndarray, a: np.ndarray, batch: np.ndarray, time_s: np.ndarray,
                  hours: np.ndarray, score: np.ndarray, devices: int,
                  extrapolations: Any) -> tuple[Alternative, ...]:
    sizes = sorted({2 ** k for k in range(int(math.log2(devices)) + 1)} | {devices})
    out = []
    for size in sizes:
        at = np.flatnonzero(w == size)
        if not len(at):
            continue
        i = int(at[np.lexsort((a[at], np.round(score[at], 9)))[0]])
        out.append(Alternative(size, int(b[i]), int(a[i]), int(batch[i]), float(time_s[i]), float(hours[i]),
                               extrapolations(int(b[i]), size, int(a[i]))))
    return tuple(out)


def _from_measurements(analysis: StudyAnalysis, layout: NodeLayout, minimize: Minimize, kind: str | None,
                       why: str) -> Recommendation:
    """Without a law to predict from (``why``): the measured trial that reached the target
    fastest (or in the fewest device-seconds) on at most ``layout.devices`` devices; an upper
    bound where it reached the target at its first evaluation."""
    devices = layout.devices
    # On at most N devices means a world size of at most N: a trial of W emulated ranks ran on
    # fewer devices, but what it tells a user to run is W ranks, on W devices.
    runs = [t for t in analysis.trials if t["state"] in ("COMPLETE", "PRUNED") and t["seconds_to_target"] is not None
            and t[record.WORLD_SIZE] <= devices and (kind is None or t["device"] == kind)]
    if not runs:
        head = f"no trial on at most {_count(devices, 'device')} reached the target {analysis.target}"
        wider = [int(t[record.WORLD_SIZE]) for t in analysis.trials if t["state"] in ("COMPLETE", "PRUNED")
                 and t["seconds_to_target"] is not None and (kind is None or t["device"] == kind)]
        if wider:
            raise NoAnswerError(f"{head}: the trials that reached it ran {min(wider)} ranks or more, so there is "
                                f"nothing to recommend on {devices} ({why}); ask for --devices {min(wider)}, or run "
                                "trials of fewer ranks", analysis)
        # Which way is easier depends on the metric's direction: a loss target is met by
        # raising it (a "lower the target" for val_loss <= 0.4 sent users the wrong way).
        easier = "lower" if analysis.target.direction == "maximize" else "raise"
        # ``why`` is why no law answers; where it only restates that no trial reached the
        # target, saying it twice read "nothing to recommend (no trial reached the target)".
        besides = "" if why == NO_TRIAL_REACHED else f" No law answers either: {why}."
        raise NoAnswerError(f"{head}{_best_seen(analysis)}, so there is nothing to recommend; {easier} the target or "
                            f"run more trials.{besides}", analysis)

    def cost(t: Mapping[str, Any]) -> float:
        # Device-seconds of the answer's W devices (the measured seconds x W; an emulated trial
        # recorded its own, fewer, devices).
        return float(t["seconds_to_target"]) * (1.0 if minimize == "time" else float(t[record.WORLD_SIZE]))

    best = min(runs, key=lambda t: (cost(t), t[record.WORLD_SIZE], t["number"]))
    b0 = analysis.base_batch_size
    rule = str(best[record.LR_RULE]) if best[record.LR_RULE] in LR_RULES else None
    base_lr = best[record.BASE_LR] if rule is not None and b0 is not None else None
    seconds = best["train_seconds_to_target"] or best["seconds_to_target"]
    upper = bool(best["first_evaluation"])
    others = {k: best[k] for k in analysis.parameters if best.get(k) is not None}
    lines = [f"target: {analysis.target}" + (f" ({analysis.target.note})" if analysis.target.note else ""),
             f"no prediction from fitted laws: {why}",
             f"the measured trial #{best['number']} reached the target "
             f"{'fastest' if minimize == 'time' else 'in the fewest device-seconds'} on at most {devices} "
             f"{'device' if devices == 1 else 'devices'}; its time is measured, so there is no interval"]
    if upper:
        lines.append(f"trial #{best['number']} reached the target at its first evaluation, so its time, samples and "
                     "steps are upper bounds: it may have reached the target sooner (evaluate more often with "
                     "workload.eval_every_samples, or set a harder target)")
    world, emulated = int(best[record.WORLD_SIZE]), int(best.get(record.EMULATED_RANKS) or 1)
    nodes = max(1, int(best.get(record.NODES) or 1))
    lines.append(f"layout: {layout} ({layout.source}); trial #{best['number']} ran on {_count(nodes, 'node')}")
    if emulated > 1:
        lines.append(f"trial #{best['number']} ran {_emulated_text(world, emulated)}")
    if others:
        lines.append("other parameters: " + ", ".join(f"{k} {v}" for k, v in others.items())
                     + f", as trial #{best['number']} ran them")
    memory = None if best["device"] is None else analysis.memory_model(best["device"], others)
    if memory is not None:
        lines.append(memory.describe())
    if best["out_of_memory_at"] is not None:
        lines.append(f"trial #{best['number']} ran as b {best[record.PER_DEVICE_BATCH_SIZE]:g} x A "
                     f"{best[record.GRAD_ACCUM_STEPS]:g} (the same effective batch): {best['out_of_memory_at']} ran "
                     "out of memory (search.on_oom: accumulate)")
    return Recommendation(
        devices=devices, device_kind=kind or best["device"], minimize=minimize,
        per_device_batch_size=int(best[record.PER_DEVICE_BATCH_SIZE]),
        world_size=world, grad_accum_steps=int(best[record.GRAD_ACCUM_STEPS]),
        effective_batch_size=int(best[record.EFFECTIVE_BATCH_SIZE]), rule=rule, base_lr=base_lr, lr=float(best["lr"]),
        lr_interval=None, warmup_epochs=analysis.warmup_epochs, warmup_from=analysis.warmup_from,
        lr_schedule=analysis.lr_schedule,
        epochs=analysis.epochs, compile_s=analysis.compile_s.get(kind or best["device"] or ""),
        time_s=float(seconds), time_interval=None,
        device_hours=float(seconds) * world / 3600, device_hours_interval=None,
        samples=float(best["samples_to_target"]), samples_interval=None, steps=float(best["steps_to_target"] or 0),
        basis=MEASURED_UPPER_BOUND if upper else MEASURED, extrapolated=(), explanation=tuple(lines),
        target=analysis.target, upper_bound=upper, other_params=others, source_trials=(int(best["number"]),),
        memory=memory, per_device_batch_cap=None if memory is None else memory.cap(),
        peak_memory_bytes=best[record.PEAK_MEMORY_BYTES], emulated_ranks=emulated, layout=layout, nodes=nodes)


def _best_seen(analysis: StudyAnalysis) -> str:
    """``; the best any trial recorded is 0.52``: the best value of the target's metric at any
    evaluation of a trial that ran, so that a refused target can be set within reach; empty
    where none recorded it."""
    values = [float(t["best_value"]) for t in analysis.trials
              if t["state"] in ("COMPLETE", "PRUNED") and t["best_value"] is not None]
    if not values:
        return ""
    best = max(values) if analysis.target.direction == "maximize" else min(values)
    return f"; the best any trial recorded is {best:.4g}"


def _emulated_text(world_size: int, emulated: int) -> str:
    """What a time measured with emulated ranks means, after "ran" or "measured with"."""
    real = max(1, world_size // emulated)
    return (f"its {world_size} ranks emulated on {_count(real, 'device')}, {emulated} per device one after the "
            f"other: the math of W {world_size} exactly, not its time (that of {_count(real, 'device')}; "
            f"{world_size} devices run the ranks at once and pay an all-reduce never measured); device-hours "
            f"count the answer's {world_size} devices")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _num(value: float) -> str:
    return "inf (beyond the data)" if math.isinf(value) else f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def follow_up_space(recommendation: Recommendation, space_text: str, study: str) -> str:
    """A space file for a follow-up search on the recommendation's devices, centred on it: the
    recommended per-device batch and its neighbours (less those at or above one that ran out of
    memory), base LRs around the recommended one (x0.5 to x2), the recommended rule, world size
    and accumulation, and the study's other parameters at the answer's values; the
    recommendation itself enqueued to run first.
    Everything else (workload, scaling, objectives, resources) is the study's own.

    Raises:
        AnalysisError: the study has no space text to start from.
    """
    if not space_text:
        raise AnalysisError(f"study {study!r} keeps no space text, so no follow-up space can be written from it")
    document = yaml.safe_load(space_text) or {}
    rec = recommendation
    b = rec.per_device_batch_size
    parameters: dict[str, Any] = dict(document.get("parameters") or {})
    # Its neighbours, less those at or above a batch that ran out of memory there: a follow-up
    # study would only run out again.
    out_of_memory = None if rec.memory is None else rec.memory.smallest_out_of_memory
    batches = sorted(c for c in {max(1, b // 2), b, 2 * b} if out_of_memory is None or c < out_of_memory)
    parameters.update(
        per_device_batch_size={"choices": batches},
        world_size=rec.world_size,
        grad_accum_steps=rec.grad_accum_steps,
    )
    # The study's other parameters the answer names (hidden, momentum...) are held at the
    # answer's values, as W and A are: the grid is the batch and the LR around the answer.
    parameters.update({k: v for k, v in rec.other_params.items() if k in parameters and v is not None})
    if rec.rule is not None and rec.base_lr is not None:
        lrs = sorted({float(f"{rec.base_lr * f:.3g}") for f in (0.5, 2 ** -0.5, 1.0, 2 ** 0.5, 2.0)})
        parameters.update(lr_rule=rec.rule, base_lr={"choices": lrs})
    # The answer runs first: its parameters that the follow-up space declares (one it does not
    # would not validate as an enqueued entry).
    first = {k: v for k, v in rec.params().items() if k in parameters}
    if rec.rule is not None and rec.base_lr is not None:
        first[record.BASE_LR] = float(f"{rec.base_lr:.3g}")
    search: dict[str, Any] = dict(document.get("search") or {})
    search.update(sampler="grid", n_trials=3 * (5 if rec.base_lr is not None else 1), enqueue=[first])
    search.pop("scheduler", None)
    document.update(study=f"{study}-on-{rec.devices}", parameters=parameters, search=search)
    document.pop("storage", None)
    header = (f"# Follow-up search written by 'hpsearch recommend {study} --devices {rec.devices}': the\n"
              f"# recommendation (b {b}, W {rec.world_size}, A {rec.grad_accum_steps}, {rec.rule} rule, lr "
              f"{rec.lr:.4g}) runs first,\n# then its neighbours. Predicted time to {rec.target}: "
              f"{rec.time_s:.4g} s.\n")
    return header + yaml.safe_dump(document, sort_keys=False, default_flow_style=None)
