"""A study's trials turned into laws: time-to-target, the critical batch, the LR law, each rule's
regret and breaking batch, and the step-time model of each device kind (SCIENCE.md, "What the
analysis fits").

``analyze_trials`` is the one implementation; ``analyze(search)`` reads the study for it, and
the dashboard calls it on the table and curves it keeps per revision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hpsearch.analysis._critical_batch import CriticalBatchFit, fit_critical_batch
from hpsearch.analysis._lr_law import LRLawFit, fit_lr_law
from hpsearch.analysis._stats import Interval
from hpsearch.analysis._target import (
    CURVE_FIELDS,
    Crossings,
    Target,
    crossings,
    curve_arrays,
    default_target,
    quality_metric,
)
from hpsearch.analysis._throughput import ThroughputModel, fit_throughput
from hpsearch.errors import AnalysisError
from hpsearch.search_spaces import record as r
from hpsearch.search_spaces.record import Direction

if TYPE_CHECKING:
    import pandas as pd

    from hpsearch.search import Search

__all__ = ["CURVE_STATES", "BatchPoint", "LRPoint", "RulePoint", "RuleReport", "StudyAnalysis", "analyze",
           "analyze_trials", "resolve_target"]

#: A rule whose best trial at a batch needs this much more (relative) samples to reach the
#: target than the best trial there has fallen behind.
FALLS_BEHIND = 0.25

#: Trial states whose curves count: a trial stopped early by ASHA reached what it reached.
_COUNTED = ("COMPLETE", "PRUNED")


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
        n_configurations: Configurations (LRs) tried at this batch that reached the target.
        method: ``best of N LRs`` (the best configuration's runs) or ``parabola ...`` (the
            optimum of a parabola through the runs around it, see ``_optimum``).
    """

    effective_batch_size: float
    samples: float
    steps: float
    runs: tuple[int, ...]
    lr: float
    rule: str
    n_configurations: int
    method: str = ""


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
    """

    effective_batch_size: float
    lr: float
    trial: int
    n_lrs: int
    at_edge: bool
    by: str


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


@dataclass(frozen=True)
class StudyAnalysis:
    """What a study's trials say about batch size, devices and learning rate.

    Attributes:
        study: The study's name.
        target: What "reached" means.
        n_trials: Trials whose curves were read (COMPLETE, PRUNED, FAIL).
        n_reached: Of those, the COMPLETE and PRUNED ones that reached the target.
        trials: Per trial: configuration and cost to the target (``None`` where not reached).
        batches: Each effective batch that reached the target, at its best configuration.
        critical_batch: The fit of E(B) = E_min (1 + B / B_crit), or ``None``.
        critical_batch_refusal: Why there is no such fit.
        noise_scale: Median and quartiles of the measured gradient noise scale (B_simple) of
            the COMPLETE trials, and how many measured one; ``None`` when none did.
        lr_points: The best LR at each effective batch where two LRs or more were tried.
        lr_law: The fit of the best LR against B, or ``None``.
        lr_law_refusal: Why there is no such fit.
        rules: Each LR rule's regret and breaking batch.
        throughput: The step-time model of each device kind.
        throughput_refusals: Why a device kind has no model.
        base_batch_size: B0 of the study's LR rules.
        warmup_epochs: The study's warmup.
    """

    study: str
    target: Target
    n_trials: int
    n_reached: int
    trials: tuple[Mapping[str, Any], ...] = field(repr=False)
    batches: tuple[BatchPoint, ...]
    critical_batch: CriticalBatchFit | None
    critical_batch_refusal: str | None
    noise_scale: Mapping[str, float] | None
    lr_points: tuple[LRPoint, ...]
    lr_law: LRLawFit | None
    lr_law_refusal: str | None
    rules: tuple[RuleReport, ...]
    throughput: Mapping[str, ThroughputModel]
    throughput_refusals: Mapping[str, str]
    base_batch_size: float | None
    warmup_epochs: float

    @property
    def device_kind(self) -> str | None:
        """The device kind most trials ran on that has a step-time model."""
        if not self.throughput:
            return None
        return max(self.throughput, key=lambda kind: self.throughput[kind].n_trials)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (``hpsearch recommend --json``, the dashboard)."""
        cb = self.critical_batch
        law = self.lr_law
        data: dict[str, Any] = _plain({
            "study": self.study,
            "target": {"metric": self.target.metric, "value": self.target.value, "direction": self.target.direction,
                       "source": self.target.source, "note": self.target.note},
            "n_trials": self.n_trials,
            "n_reached": self.n_reached,
            "batches": [vars(b) for b in self.batches],
            "critical_batch": None if cb is None else {
                "b_crit": cb.b_crit, "b_crit_interval": _interval(cb.b_crit_interval), "e_min": cb.e_min,
                "e_min_interval": _interval(cb.e_min_interval), "s_min": cb.s_min,
                "s_min_interval": _interval(cb.s_min_interval), "n_batch_sizes": cb.n_batch_sizes, "n_runs": cb.n_runs,
                "method": cb.method, "note": cb.note},
            "critical_batch_refusal": self.critical_batch_refusal,
            "noise_scale": None if self.noise_scale is None else dict(self.noise_scale),
            "lr_points": [vars(p) for p in self.lr_points],
            "lr_law": None if law is None else {
                "alpha": law.alpha, "alpha_interval": _interval(law.alpha_interval), "coefficient": law.coefficient,
                "preferred": law.preferred, "eps_max": law.eps_max, "b_noise": law.b_noise,
                "b_noise_interval": None if law.b_noise_interval is None else _interval(law.b_noise_interval),
                "rules_supported": list(law.rules_supported), "summary": law.summary,
                "n_batch_sizes": law.n_batch_sizes},
            "lr_law_refusal": self.lr_law_refusal,
            "rules": [{"rule": rr.rule, "breaks_at": rr.breaks_at, "summary": rr.summary,
                       "points": [vars(p) for p in rr.points]} for rr in self.rules],
            "throughput": {kind: {
                "t0": m.t0, "t1": m.t1, "t_allreduce": m.t_ar, "n_trials": m.n_trials,
                "per_device_batch_range": list(m.per_device_batch_range), "world_sizes": list(m.world_sizes),
                "allreduce_measured": m.allreduce_measured, "relative_rmse": m.relative_rmse, "note": m.note}
                for kind, m in self.throughput.items()},
            "throughput_refusals": dict(self.throughput_refusals),
            "base_batch_size": self.base_batch_size,
            "warmup_epochs": self.warmup_epochs,
        })
        return data


def analyze(search: Search, target: Target | tuple[str, float] | None = None, *, seed: int = 0) -> StudyAnalysis:
    """Analyse a study: read its trials and their curves, and fit the laws.

    Args:
        search: The study.
        target: A ``Target``, or ``(metric, value)`` (its direction from the study or the
            trial record); default: the space's ``analysis.target``, else one derived from the
            study (``default_target``).
        seed: Seeds the bootstrap intervals.

    Raises:
        AnalysisError: the study has no trial with curves, or no target can be derived.
    """
    from concurrent.futures import ThreadPoolExecutor

    from hpsearch import study as read_model

    def read_curves(metric: str) -> dict[int, Any]:
        return read_model.read_attr(search.backend, search.study_name, r.CURVES, states=CURVE_STATES,
                                    fields=(*CURVE_FIELDS, metric))

    # The table (only the attrs the analysis reads: the whole table costs twice as much at
    # 10,000 trials) and the curves are read at once, each on its own connection: the database
    # works on one while Python parses the other.
    with ThreadPoolExecutor(2, thread_name_prefix="hpsearch-analysis-read") as pool:
        table = pool.submit(read_model.read_trials, search.backend, search.study_name, search.objectives,
                            attrs=ANALYSIS_ATTRS)
        known = resolve_target(search, target, ()) if _metric_known(search, target) else None
        curves = pool.submit(read_curves, known[0]) if known is not None else None
        frame = table.result()
        metric, resolved = known if known is not None else resolve_target(search, target, list(frame.columns))
        by_number = curves.result() if curves is not None else read_curves(metric)
    return analyze_trials(search.study_name, frame, by_number, target=resolved, metric=metric,
                          direction=search.direction(metric), seed=seed)


def _metric_known(search: Search, target: Target | tuple[str, float] | None) -> bool:
    """Whether the analysis's metric is known before the table is read (a target, the space's,
    or a quality objective)."""
    return target is not None or _space_target(search.space_text) is not None or any(
        m not in _COSTS and m in r.FIELDS for m in search.objectives)


#: Metrics that measure cost, not quality: a default target is never stated in them.
_COSTS = frozenset({r.RUNTIME_S, r.DEVICE_SECONDS, r.SAMPLES_PER_S, r.COMM_FRACTION})


#: The trials whose curves the analysis reads (a failed trial's crossing enters no fit).
CURVE_STATES: tuple[str, ...] = _COUNTED

#: The user attrs the analysis reads from the trials table (besides the params).
ANALYSIS_ATTRS: tuple[str, ...] = (
    r.EFFECTIVE_BATCH_SIZE, r.BASE_BATCH_SIZE, r.LR, r.WARMUP_EPOCHS, r.STEPS, r.TRAIN_S, r.RUNTIME_S,
    r.NOISE_SCALE, r.EMULATED_RANKS, r.DEVICE, r.STATUS_REASON,
)


def resolve_target(search: Search, target: Target | tuple[str, float] | None,
                   columns: Sequence[str]) -> tuple[str, Target | None]:
    """The metric the analysis reads and the target: the one given, else the space's
    ``analysis.target``, else ``None`` (``analyze_trials`` derives one in the study's first
    quality objective)."""
    if isinstance(target, Target):
        return target.metric, target
    if target is not None:
        return target[0], Target(target[0], target[1], search.direction(target[0]), "argument")
    space_target = _space_target(search.space_text)
    if space_target is not None:
        return space_target[0], Target(space_target[0], space_target[1], search.direction(space_target[0]), "space")
    return quality_metric(search.objectives, columns), None


def _space_target(space_text: str) -> tuple[str, float] | None:
    """The space's ``analysis.target``, when the study's space text has one."""
    if not space_text:
        return None
    from hpsearch.search_spaces import SpaceError, parse_space

    try:
        return parse_space(space_text).analysis.target
    except SpaceError:  # a space that no longer validates: no target from it (resume says why)
        return None


def analyze_trials(study: str, frame: pd.DataFrame, curves: Mapping[int, Any], *, target: Target | None,
                   metric: str, direction: str, seed: int = 0) -> StudyAnalysis:
    """``analyze`` on data already read: the trials table and each trial's curves by number.

    Raises:
        AnalysisError: no trial has curves, or no target can be derived.
    """
    if not len(frame) or r.EFFECTIVE_BATCH_SIZE not in frame.columns:
        raise AnalysisError(f"study {study!r} has no trial with an effective batch size to analyse yet")
    frame = frame[frame["state"].isin((*_COUNTED, "FAIL"))].reset_index(drop=True)
    sizes = _column(frame, r.EFFECTIVE_BATCH_SIZE)
    arrays = curve_arrays([curves.get(int(n)) for n in frame["number"].tolist()],
                          target.metric if target is not None else metric, sizes)
    if target is None:
        sense: Direction = "minimize" if direction == "minimize" else "maximize"
        counted = frame["state"].isin(_COUNTED).to_numpy()
        target = default_target([b for b, c in zip(sizes, counted) if c],
                                [float(v) for v, c in zip(arrays.best(sense), counted) if c], metric, sense)
    trials = _trial_costs(frame, crossings(arrays, target))
    reached = [t for t in trials if t["state"] in _COUNTED and t["samples_to_target"] is not None]
    batches = _best_per_batch(reached)
    critical, critical_refusal = _critical_batch(batches, reached, seed)
    lr_points = _best_lrs(trials, target)
    lr_law, lr_refusal = _lr_law(lr_points, seed)
    throughput, refusals = _throughput(frame, seed)
    base_batch = _first(frame, r.BASE_BATCH_SIZE)
    warmup = _first(frame, r.WARMUP_EPOCHS)
    return StudyAnalysis(
        study=study, target=target, n_trials=len(trials), n_reached=len(reached), trials=tuple(trials),
        batches=batches, critical_batch=critical, critical_batch_refusal=critical_refusal,
        noise_scale=_noise_scale(frame), lr_points=lr_points, lr_law=lr_law, lr_law_refusal=lr_refusal,
        rules=_rules(trials, target), throughput=throughput, throughput_refusals=refusals,
        base_batch_size=base_batch, warmup_epochs=warmup or 0.0)


def _trial_costs(frame: pd.DataFrame, hits: Crossings) -> list[dict[str, Any]]:
    """Each trial's configuration and its cost to the target (``hits``: its crossing)."""
    numbers = [int(n) for n in frame["number"].tolist()]
    batch = _column(frame, r.EFFECTIVE_BATCH_SIZE)
    states = frame["state"].tolist()
    world = [w or 1.0 for w in _column(frame, r.WORLD_SIZE)]
    emulated = [v or 1.0 for v in _column(frame, r.EMULATED_RANKS)]
    columns = {name: _column(frame, name) for name in (r.PER_DEVICE_BATCH_SIZE, r.GRAD_ACCUM_STEPS, r.LR, r.BASE_LR)}
    texts = {name: (frame[name].tolist() if name in frame.columns else [None] * len(frame))
             for name in (r.LR_RULE, r.DEVICE, r.STATUS_REASON)}
    out = []
    for i, number in enumerate(numbers):
        devices = max(1.0, world[i] / emulated[i])
        runtime = _finite_or_none(hits.runtime_s[i])
        out.append({
            "number": number, "state": states[i], "status_reason": _text(texts[r.STATUS_REASON][i]),
            "effective_batch_size": batch[i], "per_device_batch_size": columns[r.PER_DEVICE_BATCH_SIZE][i],
            "world_size": world[i], "grad_accum_steps": columns[r.GRAD_ACCUM_STEPS][i] or 1.0,
            "lr_rule": _text(texts[r.LR_RULE][i]), "lr": columns[r.LR][i], "base_lr": columns[r.BASE_LR][i],
            "device": _text(texts[r.DEVICE][i]), "devices": devices,
            "best_value": _finite_or_none(hits.best[i]),
            "samples_to_target": _finite_or_none(hits.samples[i]), "steps_to_target": _finite_or_none(hits.steps[i]),
            "train_seconds_to_target": _finite_or_none(hits.train_s[i]), "seconds_to_target": runtime,
            "device_seconds_to_target": None if runtime is None else runtime * devices,
            "first_evaluation": bool(hits.first_evaluation[i]),
        })
    return out


def _column(frame: pd.DataFrame, name: str) -> list[float | None]:
    """A numeric column as floats, ``None`` where missing or not finite (a missing column: all
    ``None``)."""
    import numpy as np
    import pandas as pd

    if name not in frame.columns:
        return [None] * len(frame)
    values = pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float)
    return [None if not math.isfinite(v) else v for v in np.where(np.isfinite(values), values, np.nan).tolist()]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True)
class _Optimum:
    """The best LR at one batch and the samples to the target there."""

    lr: float
    samples: float
    steps: float
    runs: tuple[int, ...]
    rule: str
    method: str


#: The LRs around the best one that the parabola of ``_optimum`` spans (a factor each way).
_WINDOW = 3.0


def _optimum(batch: float, reached: Sequence[Mapping[str, Any]]) -> _Optimum:
    """The LR at ``batch`` that reaches the target in the fewest samples, and that number.

    The best run of many is lucky as well as good: the least of N noisy runs sits below what
    its configuration needs (the winner's curse; on synthetic studies of ~100 LRs per batch,
    8% below). Where five runs or more at three LRs or more lie within a factor of ``_WINDOW``
    of the best configuration's LR, a parabola through log(samples) against log(LR) places the
    optimum and reads the samples off it, averaging the runs' noise; it is kept when it opens
    upward, its vertex lies inside those LRs and its value within 25% of the best
    configuration's. Otherwise the best configuration's runs (the median of its seeds) stand.
    """
    import numpy as np

    configs: dict[float, list[Mapping[str, Any]]] = {}
    for t in reached:
        configs.setdefault(_key(t["lr"]), []).append(t)
    lr, runs = min(configs.items(), key=lambda item: (_median([t["samples_to_target"] for t in item[1]]), item[0]))
    samples = _median([t["samples_to_target"] for t in runs])
    steps = _median([t["steps_to_target"] or t["samples_to_target"] / batch for t in runs])
    best = _Optimum(lr, samples, steps, tuple(sorted(int(t["number"]) for t in runs)), str(runs[0]["lr_rule"]),
                    f"best of {len(configs)} LRs")
    near = [t for t in reached if abs(math.log(t["lr"] / lr)) <= math.log(_WINDOW)]
    n_lrs = len({_key(t["lr"]) for t in near})
    if len(near) < 5 or n_lrs < 3:
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
    import numpy as np

    near = [(math.log(lr), cost) for lr, cost in zip(lrs, costs) if abs(math.log(lr / around)) <= math.log(_WINDOW)]
    if len(near) < 5 or len({round(x, 9) for x, _ in near}) < 3:
        return None
    x = np.array([p[0] for p in near])
    curvature, slope, _ = (float(c) for c in np.polyfit(x, np.array([p[1] for p in near]), 2))
    if curvature <= 0:
        return None
    vertex = -slope / (2 * curvature)
    return math.exp(vertex) if x.min() <= vertex <= x.max() else None


def _best_per_batch(reached: Sequence[Mapping[str, Any]]) -> tuple[BatchPoint, ...]:
    """Each batch at its best configuration (``_optimum``)."""
    by_batch: dict[float, list[Mapping[str, Any]]] = {}
    for t in reached:
        if t["effective_batch_size"] is not None and t["lr"]:
            by_batch.setdefault(float(t["effective_batch_size"]), []).append(t)
    points = []
    for batch in sorted(by_batch):
        opt = _optimum(batch, by_batch[batch])
        points.append(BatchPoint(batch, opt.samples, opt.steps, opt.runs, opt.lr, opt.rule,
                                 len({_key(t["lr"]) for t in by_batch[batch]}), opt.method))
    return tuple(points)


def _critical_batch(batches: Sequence[BatchPoint], reached: Sequence[Mapping[str, Any]],
                    seed: int) -> tuple[CriticalBatchFit | None, str | None]:
    """The fit on one entry per run of each batch's best configuration, or one per batch where
    its optimum came from a parabola (a smoothed value, not a run)."""
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
        return fit_critical_batch(sizes, examples, seed=seed), None
    except AnalysisError as exc:
        return None, str(exc)


def _best_lrs(trials: Sequence[Mapping[str, Any]], target: Target) -> tuple[LRPoint, ...]:
    """The best LR at each batch where two LRs or more were tried: ``_optimum``'s where some
    run reached the target, else the LR of the run with the best value of the metric."""
    by_batch: dict[float, list[Mapping[str, Any]]] = {}
    for t in trials:
        if t["state"] in _COUNTED and t["effective_batch_size"] is not None and t["lr"]:
            by_batch.setdefault(float(t["effective_batch_size"]), []).append(t)
    points = []
    for batch in sorted(by_batch):
        runs = by_batch[batch]
        lrs = sorted({_key(t["lr"]) for t in runs})
        if len(lrs) < 2:
            continue
        reached = [t for t in runs if t["samples_to_target"] is not None]
        if reached:
            opt = _optimum(batch, reached)
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
        points.append(LRPoint(batch, lr, trial, len(lrs), at_edge, by))
    return tuple(points)


def _lr_law(points: Sequence[LRPoint], seed: int) -> tuple[LRLawFit | None, str | None]:
    try:
        return fit_lr_law([p.effective_batch_size for p in points], [p.lr for p in points], seed=seed), None
    except AnalysisError as exc:
        return None, (f"{exc} (the LR law needs the best LR at three batch sizes or more, each with two LRs "
                      "or more tried)")


def _rules(trials: Sequence[Mapping[str, Any]], target: Target) -> tuple[RuleReport, ...]:
    """Each rule's regret at each batch and the batch where it breaks."""
    by_cell: dict[tuple[str, float], list[Mapping[str, Any]]] = {}
    for t in trials:
        if t["lr_rule"] is None or t["effective_batch_size"] is None:
            continue
        by_cell.setdefault((str(t["lr_rule"]), float(t["effective_batch_size"])), []).append(t)
    best_at: dict[float, float] = {}
    for (_, batch), runs in by_cell.items():
        for t in runs:
            if t["state"] in _COUNTED and t["samples_to_target"] is not None:
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
    counted = [t for t in runs if t["state"] in _COUNTED]
    values = [t["best_value"] for t in runs if t["best_value"] is not None]
    best_value = (max(values) if target.direction == "maximize" else min(values)) if values else None
    reached = [t for t in counted if t["samples_to_target"] is not None]
    if reached:
        mine = min(reached, key=lambda t: (t["samples_to_target"], t["number"]))
        regret = mine["samples_to_target"] / best - 1 if best else 0.0
        status = "best" if regret <= 1e-12 else "within" if regret <= FALLS_BEHIND else "behind"
        return RulePoint(batch, status, regret, best_value, int(mine["number"]))
    if runs and all(t["state"] == "FAIL" and t["status_reason"] == r.REASON_DIVERGED for t in runs):
        return RulePoint(batch, "diverged", None, best_value, None)
    if best is None:
        return RulePoint(batch, "none reached", None, best_value, None)
    return RulePoint(batch, "not reached", None, best_value, None)


def _breaking_batch(points: Sequence[RulePoint]) -> float | None:
    """The smallest batch from which on every batch tried (where some rule reached the target
    or this one diverged) is a failure of the rule."""
    judged = [p for p in points if p.status != "none reached"]
    broken = {"behind", "not reached", "diverged"}
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


def _throughput(frame: pd.DataFrame, seed: int) -> tuple[dict[str, ThroughputModel], dict[str, str]]:
    """One step-time model per device kind, on the median step time of each configuration
    (processes, micro-steps per process and per-device batch), training seconds per step."""
    rows: dict[str, dict[tuple[float, float, float], list[float]]] = {}
    done = frame[frame["state"].isin(_COUNTED)]
    train_s, runtime = _column(done, r.TRAIN_S), _column(done, r.RUNTIME_S)
    devices = done[r.DEVICE].tolist() if r.DEVICE in done.columns else [None] * len(done)
    for steps, seconds, b, w, a, v, device in zip(_column(done, r.STEPS), [t or w for t, w in zip(train_s, runtime)],
                                                  _column(done, r.PER_DEVICE_BATCH_SIZE), _column(done, r.WORLD_SIZE),
                                                  _column(done, r.GRAD_ACCUM_STEPS), _column(done, r.EMULATED_RANKS),
                                                  devices):
        if not steps or not seconds or not b or not w or not isinstance(device, str):
            continue  # a trial stopped early reports no device: its step time is measured anyway
        # V emulated ranks run one after another in each process: W / V devices, A x V micro-steps.
        a, v = a or 1.0, v or 1.0
        key = (b, max(1.0, w / v), a * v)
        rows.setdefault(device, {}).setdefault(key, []).append(seconds / steps)
    models, refusals = {}, {}
    for kind, configs in rows.items():
        keys = sorted(configs)
        try:
            models[kind] = fit_throughput([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys],
                                          [_median(configs[k]) for k in keys], device=kind, seed=seed)
        except AnalysisError as exc:
            refusals[kind] = str(exc)
    return models, refusals


def _noise_scale(frame: pd.DataFrame) -> dict[str, float] | None:
    import numpy as np

    if r.NOISE_SCALE not in frame.columns:
        return None
    done = frame[frame["state"] == "COMPLETE"]
    values = [float(v) for v in done[r.NOISE_SCALE].tolist() if _num(v)]
    if not values:
        return None
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return {"median": float(median), "q1": float(q1), "q3": float(q3), "n_trials": float(len(values))}


def _first(frame: pd.DataFrame, column: str, agg: Any = None) -> float | None:
    if column not in frame.columns:
        return None
    values = [float(v) for v in frame[column].tolist() if _num(v) is not None]
    if not values:
        return None
    return float(agg(values)) if agg is not None else values[0]


def _num(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]  # numpy scalars
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _key(lr: float) -> float:
    """An LR as a grouping key: sqrt(4) x 0.01 and 2 x 0.01 are one LR."""
    return float(f"{lr:.10g}")


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return float(ordered[mid]) if len(ordered) % 2 else float((ordered[mid - 1] + ordered[mid]) / 2)


def _b(batch: float) -> str:
    return f"{batch:,.0f}"


def _interval(interval: Interval) -> list[float]:
    return [interval.low, interval.high]


def _plain(value: Any) -> Any:
    """JSON-ready: infinities and NaN become None, tuples lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
