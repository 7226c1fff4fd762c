"""The analysis: a study's trials turned into an answer (docs/science.md, "What the analysis fits").

- **Time to target**: for a target (a metric and a threshold), each trial's samples, steps,
  training seconds, wall seconds and device-seconds at its first crossing, interpolated between
  evaluations, or "not reached".
- **Critical batch** (McCandlish et al. 2018): with each effective batch at its best
  configuration (Shallue et al. 2018), examples to the target follow E(B) = E_min (1 + B / B_crit);
  ``fit_critical_batch`` fits it with weighted least squares and a bootstrap interval.
- **LR law**: the best LR against B, lr_opt = c B^alpha (alpha 1: linear, 0.5: sqrt, 0:
  constant), or eps_max / (1 + B_noise / B) where it bends (SGD), or eps_max / ((1/2)
  (sqrt(B_peak / B) + sqrt(B / B_peak))) where it peaks and falls (the surge of Adam-type
  optimizers, Li et al. 2024); each rule's regret and the batch where it breaks.
- **Throughput**: step time A (t0 + t1 b) + t_allreduce 2 (W - 1) / W per device kind, with
  t_allreduce_inter in place of t_allreduce for ranks that span nodes (the ring's slowest link).
- **Memory**: peak memory per rank fixed + per_sample x b per device kind and configuration,
  the largest per-device batch that fit and the smallest that ran out (``memory_models``).
- **Recommendation**: the (b, W <= N, A, rule, LR) with the least predicted time (or
  device-hours) to the target, with intervals, and what was extrapolated; its per-device batch
  never above what fit in memory; N devices on nodes of G (``NodeLayout``: given, or assumed
  from the trials), W ranks on ceil(W / G) of them.

The analysis takes the study's data: ``study_analysis(info, frame, curves)`` assembles it, the
one way every caller gets it (the target, the study's parameters, the space's memory limits),
and ``analyze_trials`` fits the laws on the trials table and curves; ``analyze_study(storage,
info)`` reads them from a store for it, and ``analyze(search)`` is that for a study as
``hpsearch.load`` returns it. ``recommend(analysis,
devices)`` is what ``hpsearch recommend``, ``Search.recommend`` and the dashboard's analysis
call; a study that holds no answer raises ``hpsearch.errors.NoAnswerError``, which carries the
analysis that exists (bad input is an ``AnalysisError``). This package imports numpy and scipy: ``import hpsearch``
does not load it.

Example:
    >>> from hpsearch.analysis import fit_critical_batch
    >>> fit = fit_critical_batch([64, 256, 1024, 4096], [1.05e5, 1.25e5, 2.0e5, 5.0e5])
    >>> round(fit.b_crit, -2), fit.n_batch_sizes
    (1000.0, 4)
"""

from hpsearch.analysis._batches import BatchPoint, LRPoint
from hpsearch.analysis._critical_batch import CriticalBatchFit, fit_critical_batch
from hpsearch.analysis._layout import NodeLayout, node_layout
from hpsearch.analysis._lr_law import LRLawFit, fit_lr_law
from hpsearch.analysis._memory_model import MEMORY_MARGIN, MemoryLimits, MemoryModel, memory_models, ran_shapes
from hpsearch.analysis._recommend import (
    FITTED,
    MEASURED,
    MEASURED_UPPER_BOUND,
    Alternative,
    Minimize,
    Recommendation,
    follow_up_space,
    recommend,
)
from hpsearch.analysis._rule_reports import RulePoint, RuleReport
from hpsearch.analysis._stats import Interval
from hpsearch.analysis._step_time import ThroughputModel, fit_throughput
from hpsearch.analysis._study import (
    CURVE_STATES,
    StudyAnalysis,
    StudyHandle,
    analyze,
    analyze_study,
    analyze_trials,
    memory_limits,
    resolve_target,
    study_analysis,
)
from hpsearch.analysis._target import CURVE_FIELDS, Crossing, Target, crossing, default_target, parse_target

__all__ = [
    "CURVE_FIELDS",
    "CURVE_STATES",
    "FITTED",
    "MEASURED",
    "MEASURED_UPPER_BOUND",
    "MEMORY_MARGIN",
    "Alternative",
    "BatchPoint",
    "CriticalBatchFit",
    "Crossing",
    "Interval",
    "LRLawFit",
    "LRPoint",
    "MemoryLimits",
    "MemoryModel",
    "Minimize",
    "NodeLayout",
    "Recommendation",
    "RulePoint",
    "RuleReport",
    "StudyAnalysis",
    "StudyHandle",
    "Target",
    "ThroughputModel",
    "analyze",
    "analyze_study",
    "analyze_trials",
    "crossing",
    "default_target",
    "fit_critical_batch",
    "fit_lr_law",
    "fit_throughput",
    "follow_up_space",
    "memory_limits",
    "memory_models",
    "node_layout",
    "parse_target",
    "ran_shapes",
    "recommend",
    "resolve_target",
    "study_analysis",
]
