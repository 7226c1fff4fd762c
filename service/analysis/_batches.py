"""Each effective batch at its best configuration, and the best LR per batch: the points the
critical-batch fit and the LR law are fitted to (Shallue et al. 2018: compare batch sizes each at
its best LR)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from hpsearch import record
from hpsearch.analysis._critical_batch import CriticalBatchFit, fit_critical_batch
from hpsearch.analysis._lr_law import LRLawFit, fit_lr_law
from hpsearch.analysis._stats import format_batch
from hpsearch.analysis._target import Target
from hpsearch.errors import AnalysisError

__all__ = ["COUNTED", "CUT_SHORT", "NO_TRIAL_REACHED", "BatchBound", "BatchPoint", "LRPoint", "batch_bounds", "best_lrs", "best_per_batch",
           "config_key", "critical_batch", "law_points", "lr_key", "lr_law", "median"]

#: Trial states whose curves count: a trial stopped early by ASHA reached what it reached; a
#: failed one enters no fit.
COUNTED = ("COMPLETE", "PRUNED")

#: Reasons of FAIL trials that the search itself cut short while they trained: what they
#: trained without reaching the target is a lower bound like a COMPLETE run's.
CUT_SHORT = frozenset({record.REASON_BUDGET, record.REASON_INTERRUPTED})

#: Why there is no critical-batch fit when no trial reached the target.
NO_TRIAL_REACHED = "no trial reached the target"


@dataclass(frozen=True)
class BatchPoint:
    """One effective batch at its best configuration (Shallue et al.: compare each batch size
    at its best LR): the configuration of the trials that reached the target in the fewest
    samples.

    Attributes:
        effective_batch_size: B.
        samples: Median samples to the target over that configuration's runs.
        steps: Median optimizer steps to the target.
        runs: The trial numbers of the runs behind it.
        lr: The best LR.
        rule: The LR rule of the best run.
        n_configurations: Configurations (LRs, with the study's other parameters) tried at this
            batch that reached the target.
        method: ``best of N LRs`` (the best configuration's runs) or ``parabola ...`` (the
            optimum of a parabola through the runs around it, see ``_optimum``).
        upper_bound: Every run behind ``samples`` reached the target at its first evaluation,
            so ``samples`` and ``steps`` only bound it from above: the critical-batch fit
            leaves the point out.
    """

    effective_batch_size: float
    samples: float
    steps: float
    runs: tuple[int, ...]
    lr: float
    rule: str
    n_configurations: int
    method: str = ""
    upper_bound: bool = False


@dataclass(frozen=True)
class BatchBound:
    """An effective batch at which every configuration tried missed the target: a lower bound
    (right-censored) on the samples its best configuration needs.

    Each run trained ``samples`` or more without reaching the target (COMPLETE, stopped early
    by ASHA, or cut short by the budget; failed and diverging runs say nothing). A
    configuration's bound is the median of its runs'; the batch's is the least over its
    configurations (over those that trained on to their end, where some did: a run ASHA stopped
    was behind the others at its rung): at those LRs, and so far as the runs show between them,
    the batch needs more.

    Attributes:
        effective_batch_size: B.
        samples: The bound: the best configuration there needs more than this many samples.
        runs: The trial numbers of the runs behind it.
        n_configurations: Configurations (LRs, with the study's other parameters) tried there.
        lrs: The least and the largest LR tried there.
        used: Whether the critical-batch fit was held at or above it.
        why_not: Why it was not (a larger batch reached the target in fewer samples: its LRs
            were off, which says nothing of E(B)); ``None`` where used.
    """

    effective_batch_size: float
    samples: float
    runs: tuple[int, ...]
    n_configurations: int
    lrs: tuple[float, float]
    used: bool = True
    why_not: str | None = None


@dataclass(frozen=True)
class LRPoint:
    """The best LR found at one effective batch.

    Attributes:
        effective_batch_size: B.
        lr: The best LR (``_optimum``: the vertex of a parabola through log(samples to target)
            against log(LR) around the best run, where the runs allow one, else the best run's).
        trial: The best trial's number.
        n_lrs: Distinct LRs tried at this batch.
        at_edge: The best LR is the smallest or largest tried there: the optimum may lie beyond.
        by: ``samples to target`` or, where no trial reached it, the metric's best value.
        reached: Whether some run at this batch reached the target (``lr`` is then the fastest
            to it; else the best metric's).
        used: Whether the LR law is fitted to this point (``law_points``).
        why: Why it is not, or ``None``.
    """

    effective_batch_size: float
    lr: float
    trial: int
    n_lrs: int
    at_edge: bool
    by: str
    reached: bool = True
    used: bool = True
    why: str | None = None


@dataclass(frozen=True)
class _Optimum:
    """The best LR at one batch and the samples to the target there."""

    lr: float
    samples: float
    steps: float
    runs: tuple[int, ...]
    rule: str
    method: str
    upper_bound: bool = False


#: The LRs around the best one that the parabola of ``_optimum`` spans (a factor each way).
_WINDOW = 3.0


def config_key(trial: Mapping[str, Any], parameters: Sequence[str]) -> tuple[Any, ...]:
    """What, besides the batch and the LR, makes a trial's configuration: its values of the
    study's other parameters (the workload's own, such as ``hidden``, and optimizer settings)."""
    return tuple(record.param_value_key(trial.get(name)) for name in parameters)


def _optimum(batch: float, reached: Sequence[Mapping[str, Any]], parameters: Sequence[str] = ()) -> _Optimum:
    """The LR at ``batch`` that reaches the target in the fewest samples, and that number.

    A configuration is an LR and the study's other ``parameters``: runs of one configuration
    differ only in their seeds. The best run of many is lucky as well as good: the least of N
    noisy runs sits below what its configuration needs (the winner's curse; on synthetic studies
    of ~100 LRs per batch, 8% below). Where five runs or more at three LRs or more, with the
    best configuration's other parameters, lie within a factor of ``_WINDOW`` of its LR, a
    parabola through log(samples) against log(LR) places the optimum and reads the samples off
    it, averaging the runs' noise; it is kept when it opens upward, its vertex lies inside those
    LRs, its value within 25% of the best configuration's, and no run under it reached the
    target at its first evaluation (an upper bound, not a measurement). Otherwise the best
    configuration's runs (the median of its seeds) stand: an upper bound when every one of them
    reached the target at its first evaluation.
    """
    configs: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for t in reached:
        configs.setdefault((lr_key(t["lr"]), *config_key(t, parameters)), []).append(t)
    key, runs = min(configs.items(), key=lambda item: (median([t["samples_to_target"] for t in item[1]]),
                                                       item[0][0], repr(item[0][1:])))
    lr = float(key[0])
    samples = median([t["samples_to_target"] for t in runs])
    steps = median([t["steps_to_target"] or t["samples_to_target"] / batch for t in runs])
    best = _Optimum(lr, samples, steps, tuple(sorted(int(t["number"]) for t in runs)), str(runs[0][record.LR_RULE]),
                    f"best of {len({k[0] for k in configs})} LRs",
                    all(bool(t.get("first_evaluation")) for t in runs))
    same = key[1:]
    near = [t for t in reached if abs(math.log(t["lr"] / lr)) <= math.log(_WINDOW)
            and config_key(t, parameters) == same]
    n_lrs = len({lr_key(t["lr"]) for t in near})
    if len(near) < 5 or n_lrs < 3 or any(t.get("first_evaluation") for t in near):
        return best
    x = np.log([float(t["lr"]) for t in near])
    y = np.log([float(t["samples_to_target"]) for t in near])
    curvature, slope, intercept = (float(c) for c in np.polyfit(x, y, 2))
    if curvature <= 0:
        return best
    vertex = -slope / (2 * curvature)
    fitted = math.exp(intercept - slope * slope / (4 * curvature))
    if not x.min() <= vertex <= x.max() or not 0.75 * samples <= fitted <= 1.25 * samples:
        return best
    return _Optimum(math.exp(vertex), fitted, fitted / batch, tuple(sorted(int(t["number"]) for t in near)),
                    best.rule, f"parabola in log-log over {len(near)} runs at {n_lrs} LRs")


def _vertex(lrs: Sequence[float], costs: Sequence[float], around: float) -> float | None:
    """The LR at the minimum of a parabola of ``costs`` against log(LR), through the runs within
    a factor of ``_WINDOW`` of ``around``: ``None`` unless five runs or more at three LRs or
    more allow one that opens upward with its vertex among them."""
    near = [(math.log(lr), cost) for lr, cost in zip(lrs, costs) if abs(math.log(lr / around)) <= math.log(_WINDOW)]
    if len(near) < 5 or len({round(x, 9) for x, _ in near}) < 3:
        return None
    x = np.array([p[0] for p in near])
    curvature, slope, _ = (float(c) for c in np.polyfit(x, np.array([p[1] for p in near]), 2))
    if curvature <= 0:
        return None
    vertex = -slope / (2 * curvature)
    return math.exp(vertex) if x.min() <= vertex <= x.max() else None


def best_per_batch(reached: Sequence[Mapping[str, Any]], parameters: Sequence[str] = ()) -> tuple[BatchPoint, ...]:
    """Each batch at its best configuration (``_optimum``)."""
    by_batch: dict[float, list[Mapping[str, Any]]] = {}
    for t in reached:
        if t[record.EFFECTIVE_BATCH_SIZE] is not None and t["lr"]:
            by_batch.setdefault(float(t[record.EFFECTIVE_BATCH_SIZE]), []).append(t)
    points = []
    for batch in sorted(by_batch):
        opt = _optimum(batch, by_batch[batch], parameters)
        n_configs = len({(lr_key(t["lr"]), *config_key(t, parameters)) for t in by_batch[batch]})
        points.append(BatchPoint(batch, opt.samples, opt.steps, opt.runs, opt.lr, opt.rule, n_configs, opt.method,
                                 opt.upper_bound))
    return tuple(points)


def batch_bounds(missed: Sequence[Mapping[str, Any]], batches: Sequence[BatchPoint],
                 parameters: Sequence[str] = ()) -> tuple[BatchBound, ...]:
    """The batches at which every run that trained missed the target (``missed``: runs that
    trained without reaching it, each with its ``samples_trained``), as lower bounds
    (``BatchBound``). ``batches``: the batches that reached it, at their best configuration.

    A bound at B says E(B) is above it, and as E rises with B, so is every larger batch's: a
    larger batch that reached the target in fewer samples contradicts it. Then the LRs tried at
    B were off, not E(B) large, and the bound is kept out of the fit (``used`` false, with
    why); it still rules out an answer at B predicted below it."""
    reached_at = {p.effective_batch_size for p in batches}
    by_batch: dict[float, list[Mapping[str, Any]]] = {}
    for t in missed:
        batch = t[record.EFFECTIVE_BATCH_SIZE]
        if batch is not None and float(batch) not in reached_at and t.get("lr") and t.get("samples_trained"):
            by_batch.setdefault(float(batch), []).append(t)
    out = []
    for batch in sorted(by_batch):
        configs: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
        for t in by_batch[batch]:
            configs.setdefault((lr_key(t["lr"]), *config_key(t, parameters)), []).append(t)
        # A run ASHA stopped was behind the others at its rung: where some configuration here
        # trained on to its end, the batch's best is among those, and their bound is the batch's.
        ran_on = [runs for runs in configs.values() if any(t[record.STATUS_REASON] != record.REASON_EARLY_STOPPED for t in runs)]
        bound = min(median([float(t["samples_trained"]) for t in runs]) for runs in (ran_on or configs.values()))
        lrs = [float(t["lr"]) for t in by_batch[batch]]
        runs = tuple(sorted(int(t["number"]) for t in by_batch[batch]))
        faster = [p for p in batches if p.effective_batch_size > batch and p.samples < bound]
        why = None
        if faster:
            p = faster[0]
            why = (f"B {format_batch(p.effective_batch_size)} reached the target in {p.samples:,.0f} samples, fewer than "
                   f"the {bound:,.0f} every run at B {format_batch(batch)} trained without reaching it: the LRs tried "
                   f"there were off, which says nothing of E(B)")
        out.append(BatchBound(batch, bound, runs, len(configs), (min(lrs), max(lrs)), why is None, why))
    return tuple(out)


def critical_batch(batches: Sequence[BatchPoint], reached: Sequence[Mapping[str, Any]],
                    seed: int, bounds: Sequence[BatchBound] = ()) -> tuple[CriticalBatchFit | None, str | None]:
    """The fit on one entry per run of each batch's best configuration, or one per batch where
    its optimum came from a parabola (a smoothed value, not a run).

    A batch whose best configuration reached the target at its first evaluation is left out:
    its samples only bound the truth from above (a study whose every trial crossed there would
    otherwise fit a flat line through one epoch's samples, with intervals of zero width). A fit
    whose draws all agree (intervals of zero width) is refused: there is no scatter to bound
    it with, so it is no evidence of a law. The line is held at or above the ``bounds`` that
    are ``used`` (right-censored batches: ``batch_bounds``).
    """
    if not reached:
        return None, NO_TRIAL_REACHED
    bounded = [p for p in batches if p.upper_bound]
    batches = [p for p in batches if not p.upper_bound]
    if bounded and len(batches) < 3:
        shown = ", ".join(format_batch(p.effective_batch_size) for p in bounded)
        return None, (f"a critical-batch fit needs 3 batch sizes whose best runs reached the target between two "
                      f"evaluations; {len(batches)} did: at B {shown} the best runs reached it at their first "
                      "evaluation, so their samples to the target are upper bounds only (evaluate more often with "
                      "workload.eval_every_samples, or set a harder target)")
    runs = {t["number"]: t for t in reached}
    sizes, examples = [], []
    for point in batches:
        if point.method.startswith("parabola"):
            sizes.append(point.effective_batch_size)
            examples.append(point.samples)
            continue
        for number in point.runs:
            sizes.append(point.effective_batch_size)
            examples.append(runs[number]["samples_to_target"])
    try:
        fit = fit_critical_batch(sizes, examples, seed=seed,
                                 lower_bounds=[(b.effective_batch_size, b.samples) for b in bounds if b.used])
    except AnalysisError as exc:
        return None, str(exc)
    # Zero width up to rounding: draws that agree to a part in a billion all agree.
    if fit.e_min_interval.width <= 1e-9 * fit.e_min and fit.s_min_interval.width <= 1e-9 * max(fit.s_min, 1e-300):
        return None, (f"the {fit.n_runs} runs at {fit.n_batch_sizes} batch sizes lie exactly on a line, so every "
                      "bootstrap draw gives the same fit: no scatter to bound it with, and no evidence of a law")
    if bounded:
        shown = ", ".join(format_batch(p.effective_batch_size) for p in bounded)
        note = (f"B {shown} left out: their best runs reached the target at their first evaluation (an upper bound "
                "only)")
        fit = replace(fit, note=f"{fit.note}; {note}" if fit.note else note)
    return fit, None


def best_lrs(trials: Sequence[Mapping[str, Any]], target: Target, parameters: Sequence[str] = ()) -> tuple[LRPoint, ...]:
    """The best LR at each batch where two LRs or more were tried: ``_optimum``'s where some
    run reached the target, else the LR of the run with the best value of the metric."""
    by_batch: dict[float, list[Mapping[str, Any]]] = {}
    for t in trials:
        if t["state"] in COUNTED and t[record.EFFECTIVE_BATCH_SIZE] is not None and t["lr"]:
            by_batch.setdefault(float(t[record.EFFECTIVE_BATCH_SIZE]), []).append(t)
    points = []
    for batch in sorted(by_batch):
        runs = by_batch[batch]
        lrs = sorted({lr_key(t["lr"]) for t in runs})
        if len(lrs) < 2:
            continue
        reached = [t for t in runs if t["samples_to_target"] is not None]
        if reached:
            opt = _optimum(batch, reached, parameters)
            lr, trial, by = opt.lr, min(opt.runs), opt.method
        else:
            valued = [t for t in runs if t["best_value"] is not None]
            if not valued:
                continue
            sign = -1.0 if target.direction == "maximize" else 1.0
            top = min(valued, key=lambda t: (sign * t["best_value"], t["number"]))
            lr, trial, by = float(top["lr"]), int(top["number"]), f"best {target.metric} (none reached the target)"
            # As in ``_optimum``: the best of many noisy runs is lucky; a parabola of the metric
            # against log(LR) around it places the optimum where the runs allow one.
            vertex = _vertex([t["lr"] for t in valued], [sign * t["best_value"] for t in valued], lr)
            if vertex is not None:
                lr, by = vertex, by + ", parabola"
        at_edge = lr <= lrs[0] * (1 + 1e-9) or lr >= lrs[-1] * (1 - 1e-9)
        points.append(LRPoint(batch, lr, trial, len(lrs), at_edge, by, bool(reached)))
    return law_points(tuple(points))


def law_points(points: Sequence[LRPoint]) -> tuple[LRPoint, ...]:
    """``points`` marked with whether the LR law is fitted to them (``used``, and ``why`` not).

    The law is the LR that reaches the target soonest, so it is fitted to the batches that
    measured that: where three or more batches reached the target with their best LR inside the
    LRs they tried, to those only. A batch where no run reached the target names the LR of its
    best metric within its budget, another optimum (on the quickstart, B 256's best accuracy at
    10 epochs sat at half of B 128's fastest LR and pulled the law's LR at B 32 a quarter below
    the reference grid's best); a best LR at the edge of those tried bounds the optimum on one
    side only. With fewer such batches the edge points come back in, then the batches that
    missed, so that a study of few batches still has a law, each point being what it says."""
    timed = [p for p in points if p.reached]
    inside = [p for p in timed if not p.at_edge]
    fitted = inside if len(inside) >= 3 else timed if len(timed) >= 3 else list(points)
    out = []
    for p in points:
        if p in fitted:
            out.append(p)
        elif not p.reached:
            out.append(replace(p, used=False, why="no run reached the target here: its best LR is the best metric's "
                                                    "within the budget, not the fastest to the target"))
        else:
            out.append(replace(p, used=False, why="its best LR is at the edge of those tried here: the optimum may "
                                                    "lie beyond"))
    return tuple(out)


def lr_law(points: Sequence[LRPoint], seed: int) -> tuple[LRLawFit | None, str | None]:
    """The LR law fitted to the batches' best LRs, or ``None`` and why not, as a sentence a
    user reads after "there is no LR law: "."""
    points = [p for p in points if p.used]
    if len(points) < 3:
        # The fit's own refusal of too few points named its argument ("batch sizes is empty"),
        # in parentheses inside the recommendation's.
        shown = ", ".join(format_batch(p.effective_batch_size) for p in points)
        has = "none" if not points else f"{len(points)}, B {shown}"
        return None, ("it needs the best LR at 3 batch sizes or more, each with 2 LRs or more tried; "
                      f"this study has {has}")
    try:
        return fit_lr_law([p.effective_batch_size for p in points], [p.lr for p in points], seed=seed), None
    except AnalysisError as exc:
        return None, str(exc)


def lr_key(lr: float) -> float:
    """An LR as a grouping key: sqrt(4) x 0.01 and 2 x 0.01 are one LR."""
    return float(f"{lr:.10g}")


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return float(ordered[mid]) if len(ordered) % 2 else float((ordered[mid - 1] + ordered[mid]) / 2)
