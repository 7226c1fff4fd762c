"""Which proposed configurations a search skips without training them (``constraints:``)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from hpsearch.search_spaces import Constraints
from hpsearch.trials.spec import TrialSpec

__all__ = ["equivalence_key", "violation"]


def violation(spec: TrialSpec, constraints: Constraints) -> str | None:
    """Why ``spec`` breaks a cap of ``constraints``, or ``None`` when it keeps them all.

    Example:
        >>> spec = TrialSpec(per_device_batch_size=256, world_size=2, base_lr=0.01)
        >>> violation(spec, Constraints(max_effective_batch_size=256))
        'effective batch 512 (b 256 x W 2 x A 1) is above max_effective_batch_size 256'
    """
    cap = constraints.max_effective_batch_size
    if cap is not None and spec.effective_batch_size > cap:
        return (f"effective batch {spec.effective_batch_size} (b {spec.per_device_batch_size} x W "
                f"{spec.world_size} x A {spec.grad_accum_steps}) is above max_effective_batch_size {cap}")
    if constraints.max_lr is not None and spec.lr > constraints.max_lr * (1 + 1e-12):
        return f"scaled lr {spec.lr:.4g} ({spec.lr_rule} rule at B {spec.effective_batch_size}) is above max_lr {constraints.max_lr:g}"
    return None


def equivalence_key(spec: TrialSpec) -> Hashable:
    """What makes two trials train the same optimisation (docs/science.md, accumulation equivalence):
    the effective batch, the applied peak LR and every other setting, but not how B is split
    into b x W x A nor which rule produced the LR.

    ``base_lr`` counts only when a warmup starts from it (``scaling.warmup_from: base_lr``).

    Example:
        >>> a = TrialSpec(per_device_batch_size=64, world_size=1, base_lr=0.01, lr_rule="linear")
        >>> b = TrialSpec(per_device_batch_size=32, world_size=2, base_lr=0.01, lr_rule="linear")
        >>> equivalence_key(a) == equivalence_key(b)
        True
    """
    return (
        spec.effective_batch_size,
        _rounded(spec.lr),
        _rounded(spec.base_lr) if spec.warms_from_base_lr else None,
        spec.warmup_epochs,
        spec.warmup_from,
        spec.schedule,
        spec.epochs,
        spec.workload,
        _frozen(spec.workload_options),
        _frozen(spec.hyperparameters),
    )


def _rounded(x: float) -> float:
    # sqrt(4) * 0.01 and 2 * 0.01 must compare equal.
    return float(f"{x:.10g}")


def _frozen(mapping: Any) -> Hashable:
    return tuple(sorted((k, _frozen(v) if isinstance(v, dict) else (_rounded(v) if isinstance(v, float) else v))
                        for k, v in dict(mapping).items()))
