"""A study's trials turned into laws: time-to-target, the critical batch, the LR law, each rule's
regret and breaking batch, and the step-time model of each device kind (SCIENCE.md, "What the
analysis fits").

``analyze_trials`` is the one implementation; ``analyze(search)`` reads the study for it, and
the dashboard calls it on the table and curves it keeps per revision.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hpsearch.analysis._batches import (
    COUNTED,
    BatchPoint,
    LRPoint,
    best_lrs,
    best_per_batch,
    critical_batch,
    lr_law,
    median,
)
from hpsearch.analysis._critical_batch import CriticalBatchFit
from hpsearch.analysis._lr_law import LRLawFit
from hpsearch.analysis._rules import RuleReport, rule_reports
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

__all__ = ["ANALYSIS_ATTRS", "CURVE_STATES", "StudyAnalysis", "analyze", "analyze_trials", "resolve_target"]


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
        throughput: The step-time model of each device kind (steady steps: see ``startup_s``).
        throughput_refusals: Why a device kind has no model.
        startup_s: Per device kind and device count, the median seconds a trial's first steps
            cost beyond its steady step time (the intercept of its training seconds against
            its steps): a run pays it once, whatever its length.
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
    startup_s: Mapping[str, Mapping[int, float]]
    base_batch_size: float | None
    warmup_epochs: float

    def startup(self, kind: str, world_size: int) -> float:
        """The start-up seconds of a run of ``world_size`` devices of ``kind``: measured at that
        device count, else at the nearest one measured (0 when none was)."""
        by_w = self.startup_s.get(kind) or {}
        if not by_w:
            return 0.0
        nearest = min(by_w, key=lambda w: (abs(math.log(w / world_size)), -w))
        return float(by_w[nearest])

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
            "startup_s": {kind: {str(w): s for w, s in by_w.items()} for kind, by_w in self.startup_s.items()},
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
    with _without_cycle_collection():
        return _analyze(search, target, seed)


@contextmanager
def _without_cycle_collection() -> Iterator[None]:
    """The cyclic garbage collector paused: reading a large study builds some 10^5 dicts and
    lists, which set off full collections that scan everything the process holds (15% of a
    10,000-trial analysis, measured). The analysis makes no reference cycles; reference
    counting frees what it drops, and the collector runs again afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _analyze(search: Search, target: Target | tuple[str, float] | None, seed: int) -> StudyAnalysis:
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
CURVE_STATES: tuple[str, ...] = COUNTED

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
    frame = frame[frame["state"].isin((*COUNTED, "FAIL"))].reset_index(drop=True)
    sizes = _column(frame, r.EFFECTIVE_BATCH_SIZE)
    arrays = curve_arrays([curves.get(int(n)) for n in frame["number"].tolist()],
                          target.metric if target is not None else metric, sizes)
    if target is None:
        sense: Direction = "minimize" if direction == "minimize" else "maximize"
        counted = frame["state"].isin(COUNTED).to_numpy()
        target = default_target([b for b, c in zip(sizes, counted) if c],
                                [float(v) for v, c in zip(arrays.best(sense), counted) if c], metric, sense)
    trials = _trial_costs(frame, crossings(arrays, target))
    step_s, startup_s = arrays.step_lines()
    reached = [t for t in trials if t["state"] in COUNTED and t["samples_to_target"] is not None]
    batches = best_per_batch(reached)
    critical, critical_refusal = critical_batch(batches, reached, seed)
    lr_points = best_lrs(trials, target)
    fitted_law, lr_refusal = lr_law(lr_points, seed)
    throughput, refusals, startup = _throughput(frame, step_s, startup_s, seed)
    base_batch = _first(frame, r.BASE_BATCH_SIZE)
    warmup = _first(frame, r.WARMUP_EPOCHS)
    return StudyAnalysis(
        study=study, target=target, n_trials=len(trials), n_reached=len(reached), trials=tuple(trials),
        batches=batches, critical_batch=critical, critical_batch_refusal=critical_refusal,
        noise_scale=_noise_scale(frame), lr_points=lr_points, lr_law=fitted_law, lr_law_refusal=lr_refusal,
        rules=rule_reports(trials, target), throughput=throughput, throughput_refusals=refusals, startup_s=startup,
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


def _throughput(frame: pd.DataFrame, step_s: Any, startup_s: Any, seed: int) -> tuple[
        dict[str, ThroughputModel], dict[str, str], dict[str, dict[int, float]]]:
    """One step-time model per device kind, on the median steady step time of each
    configuration (processes, micro-steps per process and per-device batch), and the median
    start-up seconds of each device kind and device count.

    A trial's steady step time is the slope of its training seconds against its steps over its
    evaluations (``CurveArrays.step_lines``); where it has fewer than two, its training seconds
    over its steps."""
    rows: dict[str, dict[tuple[float, float, float], list[float]]] = {}
    starts: dict[str, dict[int, list[float]]] = {}
    train_s, runtime = _column(frame, r.TRAIN_S), _column(frame, r.RUNTIME_S)
    devices = frame[r.DEVICE].tolist() if r.DEVICE in frame.columns else [None] * len(frame)
    states = frame["state"].tolist()
    for i, (steps, seconds, b, w, a, v, device) in enumerate(zip(
            _column(frame, r.STEPS), [t or w for t, w in zip(train_s, runtime)],
            _column(frame, r.PER_DEVICE_BATCH_SIZE), _column(frame, r.WORLD_SIZE),
            _column(frame, r.GRAD_ACCUM_STEPS), _column(frame, r.EMULATED_RANKS), devices)):
        if states[i] not in COUNTED or not steps or not seconds or not b or not w or not isinstance(device, str):
            continue  # a trial stopped early reports no device: its step time is measured anyway
        # V emulated ranks run one after another in each process: W / V devices, A x V micro-steps.
        a, v = a or 1.0, v or 1.0
        key = (b, max(1.0, w / v), a * v)
        steady = float(step_s[i]) if math.isfinite(step_s[i]) else seconds / steps
        rows.setdefault(device, {}).setdefault(key, []).append(steady)
        if math.isfinite(startup_s[i]):
            starts.setdefault(device, {}).setdefault(int(key[1]), []).append(float(startup_s[i]))
    models, refusals = {}, {}
    for kind, configs in rows.items():
        keys = sorted(configs)
        try:
            models[kind] = fit_throughput([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys],
                                          [median(configs[k]) for k in keys], device=kind, seed=seed)
        except AnalysisError as exc:
            refusals[kind] = str(exc)
    startup = {kind: {w: median(values) for w, values in sorted(by_w.items())} for kind, by_w in starts.items()}
    return models, refusals, startup


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
