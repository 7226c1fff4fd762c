"""A validated space's settings as a search runs them, defaults filled in, in the file's own key
names: what ``hpsearch validate`` prints, so that a value YAML read differently than meant (a
bare ``yes`` is ``true``, ``off`` is ``false``) or a default the file left out is seen before
a search runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpsearch import record
from hpsearch.search_spaces._budget_text import format_duration
from hpsearch.search_spaces.space import Budget, Choice, Fixed, SearchSpace

__all__ = ["resolved_settings"]


def resolved_settings(space: SearchSpace) -> dict[str, str]:
    """Per section of the space file, its resolved settings as ``key value`` pairs.

    Example:
        >>> from hpsearch.search_spaces import parse_space
        >>> settings = resolved_settings(parse_space("parameters: {per_device_batch_size: 8, base_lr: 0.1}\\n"
        ...                                          "search: {fuse: yes}"))
        >>> settings["search"].split(", ")[:3], settings["fixed"]
        (['sampler tpe', 'n_trials 10', 'seed 0'], 'per_device_batch_size 8, base_lr 0.1, world_size 1, grad_accum_steps 1, lr_rule linear')
        >>> "fuse true" in settings["search"]
        True
    """
    w, sc, s, r, c, a = space.workload, space.scaling, space.search, space.resources, space.constraints, space.analysis
    rule = space.parameters[record.LR_RULE]
    rules = " | ".join(map(str, rule.choices)) if isinstance(rule, Choice) else _text(getattr(rule, "value", rule))
    out = {
        "workload": _pairs(name=w.name, epochs=w.epochs, eval_every_samples=w.eval_every_samples or "epoch ends",
                           data=w.data, precision=w.precision, compile=w.compile, keep_data=w.keep_data,
                           save_model=w.save_model),
        "scaling": _pairs(base_batch_size=sc.base_batch_size, warmup_epochs=sc.warmup_epochs, warmup_from=sc.warmup_from,
                          schedule=sc.schedule,
                          lr_rule=rules),
        "fixed": ", ".join(f"{k} {_text(p.value)}" for k, p in space.parameters.items() if isinstance(p, Fixed))
                 or "none",
        "search": _pairs(sampler=s.sampler, n_trials=s.n_trials, seed=s.seed, max_concurrent=s.max_concurrent or "auto",
                         scheduler=s.scheduler if s.scheduler == "none" else
                         f"{s.scheduler} (grace_epochs {_text(s.grace_epochs)}, reduction_factor {s.reduction_factor})",
                         fuse=s.fuse, fuse_max=s.fuse_max, on_oom=s.on_oom, trial_timeout_s=s.trial_timeout_s,
                         budget=_budget(s.budget), enqueue=len(s.enqueue) or None),
        "resources": _pairs(device=r.device, cpus_per_worker=r.cpus_per_worker, gpus_per_worker=r.gpus_per_worker,
                            emulate_ranks=r.emulate_ranks, span_nodes=r.span_nodes, reuse_workers=r.reuse_workers,
                            mps=r.mps, memory_per_worker=r.memory_per_worker),
        "constraints": _pairs(max_effective_batch_size=c.max_effective_batch_size, max_lr=c.max_lr,
                              skip_equivalent=c.skip_equivalent),
        "analysis": _pairs(target=_target(space), confirm=a.confirm,
                           confirm_budget=f"rounds {a.confirm_rounds}, share {_text(a.confirm_share)}"),
    }
    return out


def _pairs(**values: Any) -> str:
    return ", ".join(f"{key} {_text(value)}" for key, value in values.items())


def _text(value: Any) -> str:
    """A value as the space file would write it: ``true``, ``none``, ``0.25``, ``10``."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _budget(budget: Budget) -> str:
    parts = ([format_duration(budget.wall_s)] if budget.wall_s is not None else []) + (
        [f"{budget.device_hours:g}dh"] if budget.device_hours is not None else [])
    return ", ".join(parts) or "none"


def _target(space: SearchSpace) -> str:
    if space.analysis.target is None:
        return "derived from the study"
    metric, value = space.analysis.target
    directions: Mapping[str, str] = {o.metric: o.direction for o in space.objectives}
    direction = directions.get(metric) or record.direction_of(metric) or "maximize"
    return f"{metric} {'>=' if direction == 'maximize' else '<='} {value:g}"
