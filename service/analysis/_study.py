"""A study's trials turned into laws: time-to-target, the critical batch, the LR law, each rule's
regret and breaking batch, and the step-time model of each device kind (docs/science.md, "What
the analysis fits").

The analysis takes the study's data, not the study API: ``study_analysis(info, frame, curves)``
assembles it (the target, the study's parameters, the space's memory limits) and
``analyze_trials`` fits the laws on the trials table and the curves. ``analyze_study(storage,
info)`` reads them from a store for it (``info``: the read model's ``StudyInfo``, what the study
declares); ``analyze(search)`` is that for a study as ``hpsearch.load`` returns it; the dashboard
calls ``study_analysis`` on the table and curves it keeps per revision.
"""

from __future__ import annotations

import functools
import gc
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd

from hpsearch import record as r
from hpsearch import study as read_model
from hpsearch.analysis._batches import (
    COUNTED,
    CUT_SHORT,
    BatchBound,
    BatchPoint,
    LRPoint,
    batch_bounds,
    best_lrs,
    best_per_batch,
    critical_batch,
    lr_law,
    median,
)
from hpsearch.analysis._critical_batch import CriticalBatchFit
from hpsearch.analysis._lr_law import LRLawFit
from hpsearch.analysis._memory_model import MemoryLimits, MemoryModel, memory_models, ran_shapes
from hpsearch.analysis._rule_reports import RuleReport, rule_reports
from hpsearch.analysis._stats import Interval, finite_number
from hpsearch.analysis._step_time import ThroughputModel, fit_throughput
from hpsearch.analysis._target import (
    CURVE_FIELDS,
    Crossings,
    Target,
    crossings,
    curve_arrays,
    default_target,
    quality_metric,
)
from hpsearch.errors import AnalysisError, NoAnswerError
from hpsearch.record import ATTR_SPACE_TEXT, Direction
from hpsearch.search_spaces import SearchSpace, SpaceError, parse_space
from hpsearch.search_spaces.space import CORE_PARAMETERS, WARMUP_FROM_BASE_LR
from hpsearch.study import StudyInfo

if TYPE_CHECKING:
    import optuna
    import pandas as pd

    from hpsearch.study import StudyInfo

__all__ = ["ANALYSIS_ATTRS", "CURVE_STATES", "StudyAnalysis", "StudyHandle", "analyze", "analyze_study",
           "analyze_trials", "memory_limits", "resolve_target"]


class StudyHandle(Protocol):
    """A study in its store, as ``hpsearch.load`` returns it (``hpsearch.Search``): all the
    analysis asks of it is the store and what the study declares."""

    @property
    def backend(self) -> optuna.storages.BaseStorage:
        """The Optuna storage the study lives in."""

    @property
    def info(self) -> StudyInfo:
        """What the study declares: its name, objectives, their directions, its own attrs."""


@dataclass(frozen=True)
class StudyAnalysis:
    """What a study's trials say about batch size, devices and learning rate.

    Attributes:
        study: The study's name.
        target: What "reached" means.
        n_trials: Trials that ran (COMPLETE, PRUNED, FAIL), less those that never did: skipped,
            or not started above a batch that ran out of memory (``NOT_RUN_REASONS``).
        n_reached: Of those, the COMPLETE and PRUNED ones that reached the target.
        trials: Per trial: configuration and cost to the target (``None`` where not reached).
        batches: Each effective batch that reached the target, at its best configuration.
        bounds: Each effective batch at which every run that trained missed the target: a
            lower bound (right-censored) on its samples to the target, which the
            critical-batch fit is held at or above where nothing contradicts it (``BatchBound``).
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
        warmup_from: Where its warmup starts: ``base_lr`` or ``zero`` (``base_lr`` for a study
            recorded before ``scaling.warmup_from`` existed).
        lr_schedule: What the trials ran after warmup (``none``, ``cosine``, ``step``): every
            LR of the analysis is the LR the rule scaled to, the schedule's peak
            (docs/science.md, "The trial's LR").
        epochs: The epochs each trial was to run (the schedule's length), where the study's
            space says.
        compile_s: Per device kind, the longest compilation a trial recorded (``compile_s``:
            torch.compile with a cold cache); absent where no trial compiled.
        parameters: The study's parameters besides the batch, world size, accumulation, LR
            rule and base LR (the workload's own, such as ``hidden``, and optimizer settings):
            each is a key of every ``trials`` entry, and part of what makes a configuration.
        diverging: Trials whose metric diverged (went non-finite, or ended worse than it
            started): a derived target leaves them out.
        memory: Peak memory per rank against the per-device batch, with the largest batch
            that fit and the smallest that ran out, per device kind and configuration
            (``MemoryModel``; docs/analysis.md, "Memory").
        confirmations: The study's confirmation rounds (``hpsearch.study.ConfirmationRound``):
            an answer's ``confirmation`` says whether one of them ran it and held.
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
    lr_schedule: str = "none"
    epochs: int | None = None
    compile_s: Mapping[str, float] = field(default_factory=dict)
    warmup_from: str = WARMUP_FROM_BASE_LR
    parameters: tuple[str, ...] = ()
    diverging: tuple[int, ...] = ()
    memory: tuple[MemoryModel, ...] = ()
    bounds: tuple[BatchBound, ...] = ()
    confirmations: tuple[read_model.ConfirmationRound, ...] = ()

    def __str__(self) -> str:
        """A few lines a user reads first: what was analysed, the fitted laws or why none, and
        where the answer and the rest are (``print(search.analyze())``).

        Example:
            >>> import optuna
            >>> from hpsearch.testing import synthetic_study
            >>> analysis = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=300).analyze(
            ...     "val_accuracy=0.9")
            >>> print(str(analysis).splitlines()[0])
            analysis of study 'demo': 300 trials, 84 reached val_accuracy >= 0.9
        """
        cb = self.critical_batch
        lines = [f"analysis of study {self.study!r}: {self.n_trials:,} trials, {self.n_reached:,} reached {self.target}"]
        if cb is None:
            lines.append(f"critical batch: none: {self.critical_batch_refusal}")
        else:
            low, high = cb.b_crit_interval.low, cb.b_crit_interval.high
            lines.append(f"critical batch: B_crit {_number(cb.b_crit)} ({cb.level:.0%} interval [{_number(low)}, {_number(high)}]), "
                         f"E_min {_number(cb.e_min)} samples, fitted on {cb.n_batch_sizes} batch sizes")
        lines.append(f"LR law: {self.lr_law.summary}" if self.lr_law is not None
                     else f"LR law: none: {self.lr_law_refusal}")
        lines += [f"rule {report.summary}" for report in self.rules]
        for kind, model in self.throughput.items():
            lines.append(f"step time on {kind}: fitted on {model.n_trials} trials, {model.relative_rmse:.0%} scatter")
        for kind, why in self.throughput_refusals.items():
            lines.append(f"step time on {kind}: none: {why}")
        lines.append("the answer for N devices: search.recommend(N); every number: .to_dict()")
        return "\n".join(lines)

    def __repr__(self) -> str:
        # The dataclass's own repr printed every trial, fit draw and point: thousands of lines in
        # a notebook, with no summary.
        return f"<StudyAnalysis {self!s}>"

    def memory_model(self, kind: str, configuration: Mapping[str, Any] | None = None) -> MemoryModel | None:
        """The memory facts of device ``kind`` for a configuration (its values of the study's
        other ``parameters``; those that vary among the trials tell configurations apart),
        ``None`` where there are none."""
        wanted = configuration or {}
        return next((m for m in self.memory if m.device == kind
                     and all(wanted.get(k) == v for k, v in m.configuration.items())), None)

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
            "bounds": [vars(b) for b in self.bounds],
            "critical_batch": None if cb is None else {
                "b_crit": cb.b_crit, "b_crit_interval": _interval(cb.b_crit_interval), "e_min": cb.e_min,
                "e_min_interval": _interval(cb.e_min_interval), "s_min": cb.s_min,
                "s_min_interval": _interval(cb.s_min_interval), "n_batch_sizes": cb.n_batch_sizes, "n_runs": cb.n_runs,
                "method": cb.method, "note": cb.note, "n_draws": cb.n_draws, "n_boot": len(cb.e_min_draws)},
            "critical_batch_refusal": self.critical_batch_refusal,
            r.NOISE_SCALE: None if self.noise_scale is None else dict(self.noise_scale),
            "lr_points": [vars(p) for p in self.lr_points],
            "lr_law": None if law is None else {
                "alpha": law.alpha, "alpha_interval": _interval(law.alpha_interval), "coefficient": law.coefficient,
                "preferred": law.preferred, "eps_max": law.eps_max, "b_noise": law.b_noise,
                "b_noise_interval": None if law.b_noise_interval is None else _interval(law.b_noise_interval),
                "delta_aicc": law.delta_aicc, "b_peak": law.b_peak,
                "b_peak_interval": None if law.b_peak_interval is None else _interval(law.b_peak_interval),
                "peak_lr": law.peak_lr, "surge_delta_aicc": law.surge_delta_aicc,
                "rules_supported": list(law.rules_supported), "summary": law.summary,
                "n_batch_sizes": law.n_batch_sizes},
            "lr_law_refusal": self.lr_law_refusal,
            "rules": [{"rule": rr.rule, "breaks_at": rr.breaks_at, "summary": rr.summary,
                       "points": [vars(p) for p in rr.points]} for rr in self.rules],
            "throughput": {kind: {
                "t0": m.t0, "t1": m.t1, "t_allreduce": m.t_ar, "n_trials": m.n_trials,
                "per_device_batch_range": list(m.per_device_batch_range), "world_sizes": list(m.world_sizes),
                "allreduce_measured": m.allreduce_measured, "t_allreduce_inter": m.t_ar_inter,
                "t_allreduce_interval": _interval(m.t_ar_interval),
                "t_allreduce_inter_interval": _interval(m.t_ar_inter_interval), "node_counts": list(m.node_counts),
                "inter_node_measured": m.inter_node_measured, "relative_rmse": m.relative_rmse, "note": m.note,
                "n_draws": m.n_draws, "n_boot": len(m.coefficient_draws)}
                for kind, m in self.throughput.items()},
            "throughput_refusals": dict(self.throughput_refusals),
            "startup_s": {kind: {str(w): s for w, s in by_w.items()} for kind, by_w in self.startup_s.items()},
            r.BASE_BATCH_SIZE: self.base_batch_size,
            r.WARMUP_EPOCHS: self.warmup_epochs,
            r.WARMUP_FROM: self.warmup_from,
            r.LR_SCHEDULE: self.lr_schedule,
            "epochs": self.epochs,
            r.COMPILE_S: dict(self.compile_s),
            "parameters": list(self.parameters),
            "diverging": list(self.diverging),
            "memory": [m.to_dict() for m in self.memory],
            "confirmations": [c.to_dict() for c in self.confirmations],
        })
        return data


def study_analysis(info: StudyInfo, frame: pd.DataFrame, curves: Callable[[str], Mapping[int, Any]],
                   target: Target | tuple[str, float] | None = None, *, seed: int = 0) -> StudyAnalysis:
    """A study's analysis, from its trials table and its curves: the one place it is assembled,
    whoever asks (``Search.analyze`` and ``hpsearch recommend`` through ``analyze_study``; the
    dashboard on the table and curves it keeps per revision).

    It resolves the target (``resolve_target``: the one given, the space's, or one derived from
    the study's first quality objective), reads the curves of its metric (``curves(metric)``:
    each trial's ``curves`` attr by number), and fits the laws (``analyze_trials``) with the
    study's own parameters (those of its space) and the space's limits on a rank's memory.

    Args:
        info: What the study declares (``hpsearch.study.study_info``).
        frame: The trials table (``hpsearch.study.read_trials``), with at least the params and
            ``ANALYSIS_ATTRS``.
        curves: The curves of the trials in ``CURVE_STATES`` with ``CURVE_FIELDS`` and the metric.
        target: A ``Target``, ``(metric, value)``, or ``None``.
        seed: Seeds the bootstrap intervals.

    Raises:
        NoAnswerError: the study has no trial with curves, or no target can be derived.
        AnalysisError: a malformed target.
    """
    metric, resolved = resolve_target(info, target, list(frame.columns))
    space = _space(info)
    metric_curves = curves(metric)
    if resolved is not None:
        _check_recorded(info.name, resolved, metric_curves, curves)
    analysis = analyze_trials(info.name, frame, metric_curves, target=resolved, metric=metric,
                              direction=read_model.direction(metric, info.objective_directions), seed=seed,
                              parameters=None if space is None else list(space.parameters),
                              memory_limits=memory_limits(info),
                              lr_schedule=None if space is None else space.scaling.schedule,
                              epochs=None if space is None else space.workload.epochs)
    return replace(analysis, confirmations=read_model.confirmation_rounds(info.user_attrs))


def _check_recorded(study: str, target: Target, metric_curves: Mapping[int, Any],
                    curves: Callable[[str], Mapping[int, Any]]) -> None:
    """Refuse a target in a metric the study's trials never record, naming those they do.

    Such a target is bad input, not a study without an answer: ``val_accuracy=0.4`` on a
    regression study (only ``val_loss`` recorded) was refused with "lower the target", which no
    value could satisfy.

    Raises:
        AnalysisError: trials were evaluated, and none recorded the target's metric.
    """
    evaluated = [c for c in metric_curves.values() if isinstance(c, Mapping) and c.get(r.SAMPLES_SEEN)]
    if not evaluated or any(_recorded(c, target.metric) for c in evaluated):
        return
    candidates = [m for m in r.METRICS if m in r.CURVE_METRICS and m not in _COSTS and m != target.metric]
    recorded = [m for m in candidates if any(_recorded(c, m) for c in curves(m).values() if isinstance(c, Mapping))]
    where = "the space's analysis.target" if target.source == "space" else "the target"
    raise AnalysisError(
        f"{where} {target} names {target.metric}, which no trial of study {study!r} records; its trials record "
        + (", ".join(recorded) if recorded else "none of " + ", ".join(candidates))
        + (f" (for example --target {recorded[0]}=VALUE)" if recorded else ""))


def _recorded(curves: Mapping[str, Any], metric: str) -> bool:
    """Whether a trial's curves hold a value of ``metric`` at some evaluation."""
    return any(v is not None for v in curves.get(metric) or ())


def analyze_study(storage: optuna.storages.BaseStorage, info: StudyInfo,
                  target: Target | tuple[str, float] | None = None, *, seed: int = 0) -> StudyAnalysis:
    """Analyse a study in a store: read its trials and their curves, and assemble its analysis
    (``study_analysis``).

    The table (only the attrs the analysis reads: the whole table costs twice as much at 10,000
    trials) and the curves are read at once, each on its own connection, where the metric is
    known before the table is (the database works on one while Python parses the other).

    Args:
        storage: The Optuna storage the study lives in.
        info: What the study declares (``hpsearch.study.study_info``): its name, its objectives
            and their directions, its space text.
        target: A ``Target``, or ``(metric, value)`` (its direction from the study or the
            trial record); default: the space's ``analysis.target``, else one derived from the
            study (``default_target``).
        seed: Seeds the bootstrap intervals.

    Raises:
        NoAnswerError: the study has no trial with curves, or no target can be derived.
        AnalysisError: a malformed target.
    """

    def read_curves(metric: str) -> dict[int, Any]:
        return read_model.read_attr(storage, info.name, r.CURVES, states=CURVE_STATES, fields=(*CURVE_FIELDS, metric))

    with _without_cycle_collection(), ThreadPoolExecutor(2, thread_name_prefix="hpsearch-analysis-read") as pool:
        table = pool.submit(read_model.read_trials, storage, info.name, info.objectives, attrs=ANALYSIS_ATTRS)
        known = resolve_target(info, target, ())[0] if _metric_known(info, target) else None
        early = pool.submit(read_curves, known) if known is not None else None

        def curves(metric: str) -> Mapping[int, Any]:
            return early.result() if early is not None and metric == known else read_curves(metric)

        return study_analysis(info, table.result(), curves, target, seed=seed)


def analyze(search: StudyHandle, target: Target | tuple[str, float] | None = None, *, seed: int = 0) -> StudyAnalysis:
    """``analyze_study`` of a study as ``hpsearch.load`` returns it: its store and what it
    declares (``search.backend``, ``search.info``) are all the analysis reads of it.

    Raises:
        NoAnswerError: the study has no trial with curves, or no target can be derived.
        AnalysisError: a malformed target.
    """
    return analyze_study(search.backend, search.info, target, seed=seed)


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


def _metric_known(info: StudyInfo, target: Target | tuple[str, float] | None) -> bool:
    """Whether the analysis's metric is known before the table is read (a target, the space's,
    or a quality objective)."""
    return target is not None or _space_target(info) is not None or any(
        m not in _COSTS and m in r.FIELDS for m in info.objectives)


#: Metrics that measure cost, not quality: a default target is never stated in them.
_COSTS = frozenset({r.RUNTIME_S, r.DEVICE_SECONDS, r.SAMPLES_PER_S, r.COMM_FRACTION})


#: The trials whose curves the analysis reads: a failed trial's crossing enters no fit, but one
#: the search cut short (its budget, an interruption) trained what it trained (``CUT_SHORT``).
CURVE_STATES: tuple[str, ...] = (*COUNTED, "FAIL")

#: The user attrs the analysis reads from the trials table (besides the params).
ANALYSIS_ATTRS: tuple[str, ...] = (
    r.EFFECTIVE_BATCH_SIZE, r.BASE_BATCH_SIZE, r.LR, r.WARMUP_EPOCHS, r.WARMUP_FROM, r.LR_SCHEDULE, r.STEPS, r.TRAIN_S, r.RUNTIME_S,
    r.COMPILE_S, r.NOISE_SCALE, r.EMULATED_RANKS, r.DEVICE, r.STATUS_REASON, r.PEAK_MEMORY_BYTES, r.MEMORY_LIMIT_BYTES,
    r.RAN_AS, r.NODE_ID, r.NODES, r.RUNTIME_BASIS, r.SOLO_STEP_S, r.CHANCE_ACCURACY, r.FUSED_MEMBERS,
)


def _refuse_a_target_at_chance(frame: pd.DataFrame, target: Target) -> None:
    """A derived accuracy target no better than chance is no target: a study whose trials
    learned nothing (random labels, an LR far too large everywhere) was answered with "reach
    val_accuracy >= 0.261" where always answering the commonest class scores 0.264.

    Raises:
        NoAnswerError: ``target`` is an accuracy at or below the trials' ``chance_accuracy``.
    """
    if target.metric != r.VAL_ACCURACY or r.CHANCE_ACCURACY not in frame.columns:
        return
    chance = pd.to_numeric(frame[r.CHANCE_ACCURACY], errors="coerce").max()
    if not (math.isfinite(chance) and target.value <= chance):
        return
    raise NoAnswerError(
        f"no target can be derived: the best trials of most batch sizes reach val_accuracy {target.value:.3g}, "
        f"no better than chance ({chance:.3g}: always answering the validation set's commonest class), so the "
        "trials learned nothing to recommend from; check the workload's labels and the LRs searched, or give a "
        "target (analysis.target in the space, or --target METRIC=VALUE)")


def resolve_target(study: StudyInfo | StudyHandle, target: Target | tuple[str, float] | None,
                   columns: Sequence[str]) -> tuple[str, Target | None]:
    """The metric the analysis reads and the target: the one given, else the space's
    ``analysis.target``, else ``None`` (``analyze_trials`` derives one in the study's first
    quality objective).

    Args:
        study: What the study declares (``StudyInfo``), or a study that has it (``Search``).
        target: A ``Target``, ``(metric, value)`` or ``None``.
        columns: The trials table's columns (where the study's objectives name no quality metric).
    """
    info = _info(study)

    def direction(metric: str) -> Direction:
        return read_model.direction(metric, info.objective_directions)

    if isinstance(target, Target):
        return target.metric, target
    if target is not None:
        return target[0], Target(target[0], target[1], direction(target[0]), "argument")
    space_target = _space_target(info)
    if space_target is not None:
        return space_target[0], Target(space_target[0], space_target[1], direction(space_target[0]), "space")
    return quality_metric(info.objectives, columns), None


def _info(study: StudyInfo | StudyHandle) -> StudyInfo:
    return study if isinstance(study, StudyInfo) else study.info


def memory_limits(study: StudyInfo | StudyHandle | str) -> MemoryLimits:
    """What the study's space says of a rank's memory (``MemoryLimits``): ``resources.memory_per_worker``
    caps a CPU rank, and ``resources.gpus_per_worker`` below 1 shares a GPU's memory among
    trials. Trials record what their ranks could hold (``memory_limit_bytes``); this fills in
    for a study whose trials did not.

    Args:
        study: What the study declares (``StudyInfo``), a study that has it (``Search``), or
            the study's space text itself.
    """
    space = _parsed_space(study) if isinstance(study, str) else _space(_info(study))
    if space is None:
        return MemoryLimits()
    cap = space.resources.memory_per_worker
    share = float(space.resources.gpus_per_worker)
    return MemoryLimits(None if cap is None else float(cap), share if 0 < share < 1 else 1.0)


def _space_target(info: StudyInfo) -> tuple[str, float] | None:
    """The space's ``analysis.target``, when the study's space text has one."""
    space = _space(info)
    return None if space is None else space.analysis.target


def _space(info: StudyInfo) -> SearchSpace | None:
    """The study's space, parsed from its space text (``None``: no space text)."""
    space_text = info.user_attrs.get(ATTR_SPACE_TEXT)
    return _parsed_space(space_text) if isinstance(space_text, str) else None


@functools.lru_cache(maxsize=16)
def _parsed_space(space_text: str) -> SearchSpace | None:
    """``space_text`` parsed, or ``None`` when empty or when it no longer validates (nothing is
    taken from it; ``resume`` says why)."""
    if not space_text:
        return None
    try:
        return parse_space(space_text)
    except SpaceError:
        return None


def analyze_trials(study: str, frame: pd.DataFrame, curves: Mapping[int, Any], *, target: Target | None,
                   metric: str, direction: str, seed: int = 0,
                   parameters: Sequence[str] | None = None,
                   memory_limits: MemoryLimits | None = None,
                   lr_schedule: str | None = None, epochs: int | None = None) -> StudyAnalysis:
    """``analyze`` on data already read: the trials table and each trial's curves by number.

    Args:
        study: The study's name.
        frame: The trials table (``hpsearch.study.read_trials``), with at least the columns of
            ``ANALYSIS_ATTRS`` and the params.
        curves: Each trial's ``curves`` attr by trial number (COMPLETE and PRUNED trials).
        target: What "reached" means; ``None`` derives one in ``metric`` (``default_target``).
        metric: The metric of a derived target.
        direction: ``metric``'s direction.
        seed: Seeds the bootstrap intervals.
        parameters: The study's parameters besides the batch, world size, accumulation, LR
            rule and base LR (``hidden``, ``momentum``...); default: the table's columns that
            are neither the trial record's names nor the table's own.
        memory_limits: What the study's space says of a rank's memory (``memory_limits(study)``),
            where its trials did not record it.
        lr_schedule: The space's ``scaling.schedule``, for trials that did not record theirs
            (``lr_schedule``: studies written by earlier releases).
        epochs: The space's ``workload.epochs``.

    Raises:
        NoAnswerError: no trial has curves, or no target can be derived.
    """
    if not len(frame) or r.EFFECTIVE_BATCH_SIZE not in frame.columns:
        raise NoAnswerError(f"study {study!r} has no trial with an effective batch size to analyse yet")
    frame = frame[frame["state"].isin((*COUNTED, "FAIL"))].reset_index(drop=True)
    others = _parameters(frame, parameters)
    sizes = _column(frame, r.EFFECTIVE_BATCH_SIZE)
    arrays = curve_arrays([curves.get(int(n)) for n in frame["number"].tolist()],
                          target.metric if target is not None else metric, sizes)
    sense: Direction = "minimize" if (target.direction if target is not None else direction) == "minimize" \
        else "maximize"
    counted = frame["state"].isin(COUNTED).to_numpy()
    diverging = arrays.diverging(sense) & counted
    if target is None:
        # A failed trial or a diverging one says nothing of what its configuration reaches.
        usable = counted & ~diverging
        target = default_target([b for b, u in zip(sizes, usable) if u],
                                [float(v) for v, u in zip(arrays.best(sense), usable) if u], metric, sense,
                                ignored=int(diverging.sum()))
        _refuse_a_target_at_chance(frame, target)
    shapes = ran_shapes(frame)
    trials = _trial_costs(frame, crossings(arrays, target), others, shapes, arrays.trained().tolist())
    step_s, startup_s = arrays.step_lines()
    # Runs that count: those that trained to their end or were stopped on the way (by ASHA, the
    # budget or an interruption), not failed ones.
    ran = [t for t in trials if t["state"] in COUNTED or (t["state"] == "FAIL" and t[r.STATUS_REASON] in CUT_SHORT)]
    reached = [t for t in ran if t["samples_to_target"] is not None]
    batches = best_per_batch(reached, others)
    # A run that trained S samples without reaching the target needs more (right-censored);
    # one whose training diverged says nothing of what its configuration needs.
    dropped = {int(n) for n, d in zip(frame["number"].tolist(), diverging) if d}
    bounds = batch_bounds([t for t in ran if t["samples_to_target"] is None and t["number"] not in dropped],
                          batches, others)
    critical, critical_refusal = critical_batch(batches, reached, seed, bounds)
    # A trial that never trained (not started, or out of memory before its first step) says
    # nothing about an LR or a rule: it would count as an LR tried, or as a rule that failed.
    trained = [t for t in trials if t[r.STATUS_REASON] not in _NEVER_TRAINED]
    lr_points = best_lrs(trained, target, others)
    fitted_law, lr_refusal = lr_law(lr_points, seed)
    throughput, refusals, startup = _throughput(frame, step_s, startup_s, seed, shapes)
    base_batch = _first(frame, r.BASE_BATCH_SIZE)
    warmup = _first(frame, r.WARMUP_EPOCHS)
    recorded = _strings(frame, r.LR_SCHEDULE)
    # A study recorded before scaling.warmup_from existed warmed up from base_lr.
    warmup_from = (_strings(frame, r.WARMUP_FROM) or [WARMUP_FROM_BASE_LR])[0]
    return StudyAnalysis(
        study=study, target=target, n_trials=sum(t[r.STATUS_REASON] not in r.NOT_RUN_REASONS for t in trials),
        n_reached=len(reached), trials=tuple(trials),
        batches=batches, critical_batch=critical, critical_batch_refusal=critical_refusal,
        noise_scale=_noise_scale(frame), lr_points=lr_points, lr_law=fitted_law, lr_law_refusal=lr_refusal,
        rules=rule_reports(trained, target), throughput=throughput, throughput_refusals=refusals, startup_s=startup,
        base_batch_size=base_batch, warmup_epochs=warmup or 0.0, parameters=others,
        lr_schedule=recorded[0] if recorded else lr_schedule or "none", epochs=epochs, compile_s=_compile_seconds(frame),
        warmup_from=warmup_from,
        diverging=tuple(int(n) for n, d in zip(frame["number"].tolist(), diverging) if d),
        memory=memory_models(frame, others, memory_limits), bounds=bounds)


def _compile_seconds(frame: pd.DataFrame) -> dict[str, float]:
    """Per device kind, the longest ``compile_s`` of a trial that ran: what compiling costs with
    a cold cache (a trial that found the compiled graphs cached records a fraction of it)."""
    if r.COMPILE_S not in frame.columns or r.DEVICE not in frame.columns:
        return {}
    out: dict[str, float] = {}
    for device, seconds in zip(frame[r.DEVICE].tolist(), _column(frame, r.COMPILE_S)):
        if isinstance(device, str) and seconds is not None:
            out[device] = max(out.get(device, 0.0), seconds)
    return out


#: Reasons of trials that never trained: not started, or out of memory.
_NEVER_TRAINED = r.NOT_RUN_REASONS | {r.REASON_OUT_OF_MEMORY}


#: The trials table's own columns, besides the params, the record's names and the objectives.
_TABLE_COLUMNS = frozenset({"number", "state", "datetime_start", "datetime_complete", "duration_s"})


def _parameters(frame: pd.DataFrame, parameters: Sequence[str] | None) -> tuple[str, ...]:
    """The study's other parameters that the table holds, less any whose name a trial's cost
    entry already uses (``_trial_costs``)."""
    if parameters is None:
        parameters = [c for c in frame.columns if isinstance(c, str) and c not in _TABLE_COLUMNS
                      and c not in r.FIELDS and not c.startswith("value")]
    return tuple(p for p in parameters if p in frame.columns and p not in CORE_PARAMETERS and p not in _COST_KEYS)


#: The keys of a trial's entry in ``StudyAnalysis.trials`` besides its other parameters.
_COST_KEYS = frozenset({
    "number", "state", r.STATUS_REASON, r.EFFECTIVE_BATCH_SIZE, r.PER_DEVICE_BATCH_SIZE, r.WORLD_SIZE,
    r.GRAD_ACCUM_STEPS, r.LR_RULE, "lr", r.BASE_LR, "device", "devices", "best_value", "samples_to_target",
    "steps_to_target", "train_seconds_to_target", "seconds_to_target", "device_seconds_to_target", "first_evaluation",
    "samples_trained", r.PEAK_MEMORY_BYTES, "out_of_memory_at", r.EMULATED_RANKS, r.NODES,
})


def _trial_costs(frame: pd.DataFrame, hits: Crossings, parameters: Sequence[str] = (),
                 shapes: tuple[list[float | None], list[float | None], list[int | None]] | None = None,
                 trained: Sequence[float] | None = None) -> list[dict[str, Any]]:
    """Each trial's configuration (with its values of the study's other ``parameters``; its
    per-device batch and accumulation as it ran, ``shapes``: see ``ran_shapes``), its cost
    to the target (``hits``: its crossing) and the samples it trained by its last evaluation
    (``trained``: ``CurveArrays.trained``)."""
    numbers = [int(n) for n in frame["number"].tolist()]
    batch = _column(frame, r.EFFECTIVE_BATCH_SIZE)
    states = frame["state"].tolist()
    world = [w or 1.0 for w in _column(frame, r.WORLD_SIZE)]
    emulated = [v or 1.0 for v in _column(frame, r.EMULATED_RANKS)]
    nodes = _nodes(frame)
    b_ran, a_ran, halved_from = shapes or ran_shapes(frame)
    peaks = _column(frame, r.PEAK_MEMORY_BYTES)
    columns = {name: _column(frame, name) for name in (r.LR, r.BASE_LR)}
    columns[r.PER_DEVICE_BATCH_SIZE], columns[r.GRAD_ACCUM_STEPS] = b_ran, a_ran
    texts = {name: (frame[name].tolist() if name in frame.columns else [None] * len(frame))
             for name in (r.LR_RULE, r.DEVICE, r.STATUS_REASON)}
    others = {name: _param_values(frame[name]) for name in parameters}
    out = []
    for i, number in enumerate(numbers):
        devices = max(1.0, world[i] / emulated[i])
        runtime = _finite_or_none(hits.runtime_s[i])
        out.append({
            **{name: values[i] for name, values in others.items()},
            "number": number, "state": states[i], r.STATUS_REASON: _text(texts[r.STATUS_REASON][i]),
            r.EFFECTIVE_BATCH_SIZE: batch[i], r.PER_DEVICE_BATCH_SIZE: columns[r.PER_DEVICE_BATCH_SIZE][i],
            r.WORLD_SIZE: world[i], r.GRAD_ACCUM_STEPS: columns[r.GRAD_ACCUM_STEPS][i] or 1.0,
            r.LR_RULE: _text(texts[r.LR_RULE][i]), "lr": columns[r.LR][i], r.BASE_LR: columns[r.BASE_LR][i],
            "device": _text(texts[r.DEVICE][i]), "devices": devices, r.EMULATED_RANKS: int(emulated[i]),
            r.NODES: nodes[i],
            "best_value": _finite_or_none(hits.best[i]),
            "samples_to_target": _finite_or_none(hits.samples[i]), "steps_to_target": _finite_or_none(hits.steps[i]),
            "train_seconds_to_target": _finite_or_none(hits.train_s[i]), "seconds_to_target": runtime,
            "device_seconds_to_target": None if runtime is None else runtime * devices,
            "first_evaluation": bool(hits.first_evaluation[i]),
            "samples_trained": None if trained is None else _finite_or_none(trained[i]),
            r.PEAK_MEMORY_BYTES: peaks[i], "out_of_memory_at": halved_from[i],
        })
    return out


def _nodes(frame: pd.DataFrame) -> list[int]:
    """Each trial's node count (``record.NODES``): 1 where it recorded none (a study recorded
    before trials could span nodes, or a trial that never started)."""
    return [max(1, int(n)) if n else 1 for n in _column(frame, r.NODES)]


def _column(frame: pd.DataFrame, name: str) -> list[float | None]:
    """A numeric column as floats, ``None`` where missing or not finite (a missing column: all
    ``None``)."""

    if name not in frame.columns:
        return [None] * len(frame)
    values = pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float)
    return [None if not math.isfinite(v) else v for v in np.where(np.isfinite(values), values, np.nan).tolist()]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _param_values(column: pd.Series) -> list[Any]:
    """A param's values as plain Python, ``None`` where a trial has none. Where some trials
    have none, the table holds an integer param as floats (NaN beside them): integral values
    are given back as the integers they were (a workload may check ``isinstance(v, int)``)."""
    values = [_scalar(v) for v in column.tolist()]
    if column.isna().any() and all(isinstance(v, float) and v.is_integer() for v in values if v is not None):
        values = [None if v is None else int(v) for v in values]
    return values


def _scalar(value: object) -> Any:
    """A param's value as plain Python (numpy scalars unwrapped), ``None`` where the trial has
    none (NaN in the table)."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _throughput(frame: pd.DataFrame, step_s: Any, startup_s: Any, seed: int,
                shapes: tuple[list[float | None], list[float | None], list[int | None]] | None = None) -> tuple[
        dict[str, ThroughputModel], dict[str, str], dict[str, dict[int, float]]]:
    """One step-time model per device kind, on the median steady step time of each
    configuration (processes, micro-steps per process, per-device batch and the nodes its
    processes ran on: ``nodes``, 1 where not recorded), and the median start-up seconds of each
    device kind and device count.

    A trial's steady step time is the slope of its training seconds against its steps over its
    evaluations (``CurveArrays.step_lines``); where it has fewer than two, its training seconds
    over its steps. A trial that ran halved (``ran_as``) counts at the batch and accumulation it
    ran. A fused member (``runtime_basis: solo_estimate``) counts with the solo step its group
    timed on the same devices (``solo_step_s``): the model sees solo timings only, so what it
    recommends does not depend on whether trials were fused."""
    b_ran, a_ran, _ = shapes or ran_shapes(frame)
    solo_step = _column(frame, r.SOLO_STEP_S)
    basis = frame[r.RUNTIME_BASIS].tolist() if r.RUNTIME_BASIS in frame.columns else [None] * len(frame)
    rows: dict[str, dict[tuple[float, float, float, float], list[float]]] = {}
    starts: dict[str, dict[int, list[float]]] = {}
    train_s, runtime = _column(frame, r.TRAIN_S), _column(frame, r.RUNTIME_S)
    devices = frame[r.DEVICE].tolist() if r.DEVICE in frame.columns else [None] * len(frame)
    states = frame["state"].tolist()
    nodes = _nodes(frame)
    for i, (steps, seconds, b, w, a, v, device) in enumerate(zip(
            _column(frame, r.STEPS), [t or w for t, w in zip(train_s, runtime)],
            b_ran, _column(frame, r.WORLD_SIZE), a_ran, _column(frame, r.EMULATED_RANKS), devices)):
        if states[i] not in COUNTED or not steps or not seconds or not b or not w or not isinstance(device, str):
            continue  # a trial stopped early reports no device: its step time is measured anyway
        # V emulated ranks run one after another in each process: W / V devices, A x V micro-steps.
        a, v = a or 1.0, v or 1.0
        processes = max(1.0, w / v)
        key = (b, processes, a * v, float(min(nodes[i], processes)))
        steady = float(step_s[i]) if math.isfinite(step_s[i]) else seconds / steps
        solo = solo_step[i]
        if basis[i] == "solo_estimate" and solo:
            steady = solo
        rows.setdefault(device, {}).setdefault(key, []).append(steady)
        if math.isfinite(startup_s[i]):
            starts.setdefault(device, {}).setdefault(int(key[1]), []).append(float(startup_s[i]))
    models, refusals = {}, {}
    for kind, configs in rows.items():
        keys = sorted(configs)
        try:
            models[kind] = fit_throughput([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys],
                                          [median(configs[k]) for k in keys], nodes=[k[3] for k in keys],
                                          device=kind, seed=seed)
        except AnalysisError as exc:
            refusals[kind] = str(exc)
    startup = {kind: {w: median(values) for w, values in sorted(by_w.items())} for kind, by_w in starts.items()}
    return models, refusals, startup


def _noise_scale(frame: pd.DataFrame) -> dict[str, float] | None:
    if r.NOISE_SCALE not in frame.columns:
        return None
    done = frame[frame["state"] == "COMPLETE"]
    values = [float(v) for v in done[r.NOISE_SCALE].tolist() if finite_number(v)]
    if not values:
        return None
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return {"median": float(median), "q1": float(q1), "q3": float(q3), "n_trials": float(len(values))}


def _strings(frame: pd.DataFrame, column: str) -> list[str]:
    """The recorded text values of ``column``, in the frame's order (none where it is absent)."""
    return [v for v in frame[column].tolist() if isinstance(v, str)] if column in frame.columns else []


def _first(frame: pd.DataFrame, column: str, agg: Any = None) -> float | None:
    if column not in frame.columns:
        return None
    values = [float(v) for v in frame[column].tolist() if finite_number(v) is not None]
    if not values:
        return None
    return float(agg(values)) if agg is not None else values[0]


def _number(value: float) -> str:
    """``1,234``, ``0.5``, ``inf``: a fitted count for a line of text."""
    return "inf" if math.isinf(value) else f"{value:,.0f}" if abs(value) >= 10 else f"{value:.3g}"


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
