"""The answer: which per-device batch, device count, accumulation, rule and LR to run on N devices,
at what predicted time, device-hours and samples to the target.

Predicted time to the target of (b, W, A) is startup(W) + S(B) x step_time(b, W, A), with S(B)
the steps to the target of the critical-batch fit (B = b x W x A), the steady step time of the
device kind's throughput model, and the start-up its trials measured (their first steps' extra
cost); device-hours are W x time. Every candidate with W <= N is scored; the best
by the chosen measure wins. Intervals come from the fits' bootstrap draws, paired draw by draw.
Where a fit is missing, the answer falls back to the best measured trial and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from hpsearch.analysis._stats import Interval, percentile_interval
from hpsearch.analysis._study import StudyAnalysis
from hpsearch.analysis._target import Target
from hpsearch.errors import AnalysisError
from hpsearch.search_spaces.space import LR_RULES

__all__ = ["Alternative", "Recommendation", "recommend"]

Minimize = Literal["time", "device-hours"]

#: Accumulation steps a recommendation may use besides those the study tried.
_ACCUMULATION = (1, 2, 4, 8)
#: How far past the largest batch that reached the target the critical-batch fit is trusted.
_BEYOND_DATA = 2.0


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
        lr: The LR to train with at B.
        lr_interval: Its interval from the LR law, when there is one.
        warmup_epochs: The study's warmup.
        time_s: Predicted training time to the target (evaluations left out).
        time_interval: Its interval.
        device_hours: Predicted device-hours to the target.
        device_hours_interval: Its interval.
        samples: Predicted training samples to the target.
        samples_interval: Its interval.
        steps: Predicted optimizer steps to the target.
        basis: ``fitted laws``, or ``measured trials`` when a fit was missing.
        extrapolated: What the prediction reads beyond the study's data.
        explanation: How the answer was reached, line by line.
        alternatives: The best configuration at each world size (powers of two and N).
        target: What "reached" means.
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

    def params(self) -> dict[str, Any]:
        """The recommendation as the engine's parameters (a space's ``search.enqueue`` entry)."""
        out: dict[str, Any] = {"per_device_batch_size": self.per_device_batch_size, "world_size": self.world_size,
                               "grad_accum_steps": self.grad_accum_steps}
        if self.rule is not None and self.base_lr is not None:
            out.update(lr_rule=self.rule, base_lr=self.base_lr)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""

        def iv(interval: Interval | None) -> list[float | None] | None:
            return None if interval is None else [_finite(interval.low), _finite(interval.high)]

        return {
            "devices": self.devices, "device_kind": self.device_kind, "minimize": self.minimize,
            "per_device_batch_size": self.per_device_batch_size, "world_size": self.world_size,
            "grad_accum_steps": self.grad_accum_steps, "effective_batch_size": self.effective_batch_size,
            "rule": self.rule, "base_lr": self.base_lr, "lr": self.lr, "lr_interval": iv(self.lr_interval),
            "warmup_epochs": self.warmup_epochs,
            "time_s": self.time_s, "time_interval": iv(self.time_interval),
            "device_hours": self.device_hours, "device_hours_interval": iv(self.device_hours_interval),
            "samples": self.samples, "samples_interval": iv(self.samples_interval), "steps": self.steps,
            "basis": self.basis, "extrapolated": list(self.extrapolated), "explanation": list(self.explanation),
            "alternatives": [vars(a) for a in self.alternatives],
            "target": None if self.target is None else str(self.target),
        }


def recommend(analysis: StudyAnalysis, devices: int, *, minimize: Minimize = "time",
              allow_larger_batch: bool = False, device_kind: str | None = None) -> Recommendation:
    """The configuration that minimises predicted time (or device-hours) to the target on
    ``devices`` devices.

    Args:
        analysis: The study's analysis (``analyze``).
        devices: How many devices the run may use (W <= devices; a trial spans one node).
        minimize: ``time`` (wall time to the target) or ``device-hours``.
        allow_larger_batch: Let the per-device batch go up to 4x the largest that ran on the
            device kind (it may not fit in a device's memory); by default it stays within
            what ran.
        device_kind: The device kind to plan for (a value of the trials' ``device``); default:
            the kind most trials ran on.

    Raises:
        AnalysisError: ``devices`` below 1, an unknown device kind, or no trial reached the target.
    """
    if devices < 1:
        raise AnalysisError(f"devices must be 1 or more, got {devices}")
    if minimize not in ("time", "device-hours"):
        raise AnalysisError(f"minimize must be 'time' or 'device-hours', got {minimize!r}")
    kind = device_kind or analysis.device_kind
    if device_kind is not None and device_kind not in analysis.throughput:
        known = ", ".join(sorted(analysis.throughput)) or "none"
        raise AnalysisError(f"no step-time model for device kind {device_kind!r}; kinds with one: {known}")
    if analysis.critical_batch is None or kind is None:
        return _from_measurements(analysis, devices, minimize, kind)
    return _from_laws(analysis, devices, minimize, allow_larger_batch, kind)


def _from_laws(analysis: StudyAnalysis, devices: int, minimize: Minimize, allow_larger_batch: bool,
               kind: str) -> Recommendation:
    cb = analysis.critical_batch
    model = analysis.throughput[kind]
    assert cb is not None
    ran = sorted({int(t["per_device_batch_size"]) for t in analysis.trials
                  if t["device"] == kind and t["per_device_batch_size"] and t["state"] in ("COMPLETE", "PRUNED")})
    b_choices = ran + ([2 * ran[-1], 4 * ran[-1]] if allow_larger_batch and ran else [])
    tried_a = {int(t["grad_accum_steps"]) for t in analysis.trials if t["grad_accum_steps"]}
    a_choices = sorted(set(_ACCUMULATION) | tried_a)
    reached = [p.effective_batch_size for p in analysis.batches]
    ceiling = _BEYOND_DATA * max(reached)
    b, w, a = (np.array(x, dtype=float).ravel() for x in np.meshgrid(b_choices, np.arange(1, devices + 1), a_choices))
    batch = b * w * a
    keep = batch <= ceiling
    if not keep.any():
        raise AnalysisError(f"every configuration on {devices} device(s) has an effective batch above {ceiling:,.0f}, "
                            f"twice the largest batch that reached the target; the fit says nothing there")
    b, w, a, batch = b[keep], w[keep], a[keep], batch[keep]
    steps = np.asarray(cb.steps(batch), dtype=float)
    startup = np.array([analysis.startup(kind, int(x)) for x in w], dtype=float)
    time_s = startup + steps * np.asarray(model.step_time(b, w, a), dtype=float)
    hours = w * time_s / 3600
    score = time_s if minimize == "time" else hours
    # Ties (flat scores) go to fewer devices, then less accumulation.
    order = np.lexsort((a, w, np.round(score, 9)))
    best = int(order[0])
    bb, ww, aa, big_b = int(b[best]), int(w[best]), int(a[best]), float(batch[best])

    e_draws = np.asarray(cb.examples_draws(big_b), dtype=float).ravel()
    t_draws = np.asarray(model.step_time_draws(bb, ww, aa), dtype=float).ravel()
    n = min(len(e_draws), len(t_draws))
    time_draws = analysis.startup(kind, ww) + e_draws[:n] / big_b * t_draws[:n]
    rule, base_lr, lr, lr_interval, lr_lines = _learning_rate(analysis, big_b)
    extrapolated = _extrapolations(analysis, model, bb, ww, aa)
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
        lr_interval=lr_interval, warmup_epochs=analysis.warmup_epochs,
        time_s=float(time_s[best]), time_interval=percentile_interval(time_draws, cb.level),
        device_hours=float(hours[best]), device_hours_interval=percentile_interval(time_draws * ww / 3600, cb.level),
        samples=float(cb.examples(big_b)), samples_interval=percentile_interval(e_draws, cb.level),
        steps=float(cb.steps(big_b)), basis="fitted laws", extrapolated=tuple(extrapolated),
        explanation=tuple(_explain(analysis, kind) + lr_lines),
        alternatives=_alternatives(b, w, a, batch, time_s, hours, score, devices,
                                   lambda *c: _extrapolations(analysis, model, *c)),
        target=analysis.target)


def _extrapolations(analysis: StudyAnalysis, model: Any, b: int, w: int, a: int) -> tuple[str, ...]:
    """What a prediction for (b, W, A) reads beyond the study's data."""
    big_b = float(b * w * a)
    out = list(model.extrapolations(b, w, a))
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
                                                                    list[str]]:
    """The LR at ``batch`` (from the LR law, else the best configuration of the nearest batch
    scaled by its rule), and the rule and base LR that give it."""
    law = analysis.lr_law
    b0 = analysis.base_batch_size
    if law is not None:
        lr = float(law.lr(batch))
        interval = percentile_interval(np.asarray(law.lr_draws(batch), dtype=float).ravel(), law.level)
        # The rule whose exponent matches the law's local slope at B: the one that keeps the LR
        # right for the neighbouring batches a follow-up search tries.
        step = math.log(1.25)
        slope = (math.log(float(law.lr(batch * 1.25))) - math.log(float(law.lr(batch / 1.25)))) / (2 * step)
        rule = _closest_rule(slope)
        lines = [f"LR: {law.summary}; its slope at B {batch:,.0f} is {slope:.2f}, so the {rule} rule states it"]
    else:
        nearest = min(analysis.batches, key=lambda p: abs(math.log(p.effective_batch_size / batch)))
        rule = nearest.rule if nearest.rule in LR_RULES else "linear"
        lr = nearest.lr * _scale(rule, batch / nearest.effective_batch_size)
        interval = None
        lines = [f"LR: no LR law ({analysis.lr_law_refusal}); the best configuration at B "
                 f"{nearest.effective_batch_size:,.0f} (lr {nearest.lr:.4g}) scaled by its {rule} rule"]
    base_lr = None if b0 is None else lr / _scale(rule, batch / b0)
    return (rule if b0 is not None else None), base_lr, lr, interval, lines


def _closest_rule(slope: float) -> str:
    """The rule whose exponent in B is nearest ``slope`` (constant 0, sqrt 0.5, linear 1)."""
    exponents = {"constant": 0.0, "sqrt": 0.5, "linear": 1.0}
    return min(exponents, key=lambda r: abs(exponents[r] - slope))


def _scale(rule: str, k: float) -> float:
    from hpsearch.trials.scaling import scale_factor

    return scale_factor(rule, k)


def _explain(analysis: StudyAnalysis, kind: str) -> list[str]:
    cb = analysis.critical_batch
    assert cb is not None
    model = analysis.throughput[kind]
    lines = [f"target: {analysis.target}" + (f" ({analysis.target.note})" if analysis.target.note else ""),
             f"{analysis.n_reached} of {analysis.n_trials} trials reached it, at {cb.n_batch_sizes} effective batch "
             f"sizes; each batch at its best configuration ({cb.n_runs} runs)",
             f"critical batch B_crit {_num(cb.b_crit)} {cb.b_crit_interval}, E_min {_num(cb.e_min)} samples "
             f"({cb.method})" + (f"; {cb.note}" if cb.note else "")]
    if analysis.noise_scale is not None:
        ns = analysis.noise_scale
        lines.append(f"measured gradient noise scale B_simple: median {_num(ns['median'])} "
                     f"(quartiles {_num(ns['q1'])} to {_num(ns['q3'])}, {int(ns['n_trials'])} trials)")
    comm = (f" + {model.t_ar:.3g} s x 2(W-1)/W all-reduce" if model.allreduce_measured
            else "; all-reduce never measured (every trial ran on one device)")
    lines.append(f"steady step time on {kind}: A x ({model.t0:.3g} s + {model.t1:.3g} s x b){comm}, from "
                 f"{model.n_trials} configurations (relative error {model.relative_rmse:.0%})")
    if analysis.startup_s.get(kind):
        starts = ", ".join(f"W {w}: {s:.3g} s" for w, s in analysis.startup_s[kind].items())
        lines.append(f"plus a start-up per run (the first steps' extra cost, from the trials' curves): {starts}")
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


def _from_measurements(analysis: StudyAnalysis, devices: int, minimize: Minimize, kind: str | None) -> Recommendation:
    """Without a critical-batch fit or a step-time model: the measured trial that reached the
    target fastest (or in the fewest device-seconds) on at most ``devices`` devices."""
    why = analysis.critical_batch_refusal if analysis.critical_batch is None else (
        "; ".join(analysis.throughput_refusals.values()) or "no trial recorded its step time")
    runs = [t for t in analysis.trials if t["state"] in ("COMPLETE", "PRUNED") and t["seconds_to_target"] is not None
            and t["devices"] <= devices and (kind is None or t["device"] == kind)]
    if not runs:
        raise AnalysisError(f"no trial on at most {devices} device(s) reached the target {analysis.target}, so "
                            f"there is nothing to recommend ({why}); lower the target or run more trials")
    key = "seconds_to_target" if minimize == "time" else "device_seconds_to_target"
    best = min(runs, key=lambda t: (t[key], t["devices"], t["number"]))
    b0 = analysis.base_batch_size
    rule = str(best["lr_rule"]) if best["lr_rule"] in LR_RULES else None
    base_lr = best["base_lr"] if rule is not None and b0 is not None else None
    seconds = best["train_seconds_to_target"] or best["seconds_to_target"]
    return Recommendation(
        devices=devices, device_kind=kind, minimize=minimize, per_device_batch_size=int(best["per_device_batch_size"]),
        world_size=int(best["world_size"]), grad_accum_steps=int(best["grad_accum_steps"]),
        effective_batch_size=int(best["effective_batch_size"]), rule=rule, base_lr=base_lr, lr=float(best["lr"]),
        lr_interval=None, warmup_epochs=analysis.warmup_epochs, time_s=float(seconds), time_interval=None,
        device_hours=float(seconds) * best["devices"] / 3600, device_hours_interval=None,
        samples=float(best["samples_to_target"]), samples_interval=None, steps=float(best["steps_to_target"] or 0),
        basis="measured trials", extrapolated=(),
        explanation=(f"target: {analysis.target}" + (f" ({analysis.target.note})" if analysis.target.note else ""),
                     f"no prediction from fitted laws: {why}",
                     f"the measured trial #{best['number']} reached the target "
                     f"{'fastest' if minimize == 'time' else 'in the fewest device-seconds'} on at most {devices} "
                     f"device(s); its time is measured, so there is no interval"),
        target=analysis.target)


def _num(value: float) -> str:
    return "inf (beyond the data)" if math.isinf(value) else f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def follow_up_space(recommendation: Recommendation, space_text: str, study: str) -> str:
    """A space file for a follow-up search on the recommendation's devices, centred on it: the
    recommended per-device batch and its neighbours, base LRs around the recommended one (x0.5
    to x2), the recommended rule, world size and accumulation; the recommendation itself
    enqueued to run first. Everything else (workload, scaling, objectives, resources) is the
    study's own.

    Raises:
        AnalysisError: the study has no space text to start from.
    """
    import yaml

    if not space_text:
        raise AnalysisError(f"study {study!r} keeps no space text, so no follow-up space can be written from it")
    document = yaml.safe_load(space_text) or {}
    rec = recommendation
    b = rec.per_device_batch_size
    parameters: dict[str, Any] = dict(document.get("parameters") or {})
    parameters.update(
        per_device_batch_size={"choices": sorted({max(1, b // 2), b, 2 * b})},
        world_size=rec.world_size,
        grad_accum_steps=rec.grad_accum_steps,
    )
    first = rec.params()
    if rec.rule is not None and rec.base_lr is not None:
        lrs = sorted({float(f"{rec.base_lr * f:.3g}") for f in (0.5, 2 ** -0.5, 1.0, 2 ** 0.5, 2.0)})
        first["base_lr"] = float(f"{rec.base_lr:.3g}")
        parameters.update(lr_rule=rec.rule, base_lr={"choices": lrs})
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
