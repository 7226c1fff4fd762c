"""Learning-rate scaling rules and the warmup schedule (docs/science.md, "Learning-rate scaling rules").

With B the effective batch and B0 the batch ``base_lr`` was tuned for, k = B / B0:

- constant: lr = base_lr
- linear:   lr = base_lr * k        (Goyal et al. 2017)
- sqrt:     lr = base_lr * sqrt(k)  (Krizhevsky 2014; Malladi et al. 2022 for Adam-type)

Warmup rises linearly to the scaled peak over ``warmup_epochs``, from one of two starts
(``scaling.warmup_from``):

- ``base_lr`` (Goyal et al., section 2.2, "gradual warmup"): from the LR tuned for B0 to
  k x base_lr, the recipe the linear rule was measured with; at B = B0 it holds ``base_lr``.
- ``zero``: from (about) zero to the peak, as Hugging Face's, timm's and most transformer
  recipes warm up: step i of n warmup steps runs at peak x (i + 1) / n, so no step runs at LR 0.

A constant low LR followed by a jump fails at large batch.
"""

from __future__ import annotations

import itertools
import math

from hpsearch import record
from hpsearch.search_spaces.space import (
    LR_RULES,
    LR_SCHEDULES,
    WARMUP_FROM,
    WARMUP_FROM_BASE_LR,
    WARMUP_FROM_ZERO,
    Choice,
    Fixed,
    Scalar,
    SearchSpace,
)

__all__ = ["FEW_LRS", "LR_RULES", "LR_SCHEDULES", "STEP_MILESTONES", "WARMUP_FROM", "effective_batch_size", "few_lrs_warning", "lr_at",
           "lrs_per_batch", "scale_factor", "scaled_lr"]

#: The ``step`` schedule multiplies the LR by ``STEP_GAMMA`` at these fractions of the
#: post-warmup epochs (the ResNet-style 50% / 75% milestones).
STEP_MILESTONES: tuple[float, ...] = (0.5, 0.75)
STEP_GAMMA = 0.1


def effective_batch_size(per_device_batch_size: int, world_size: int, grad_accum_steps: int) -> int:
    """B = b x W x A: the samples behind one optimizer step under DDP with accumulation.

    Example:
        >>> effective_batch_size(32, 4, 2)
        256
    """
    return per_device_batch_size * world_size * grad_accum_steps


def scale_factor(rule: str, k: float) -> float:
    """The LR multiplier a rule gives for the batch ratio ``k = B / B0``.

    Raises:
        ValueError: for an unknown rule or a non-positive ``k``.

    Example:
        >>> scale_factor("sqrt", 16.0)
        4.0
    """
    if k <= 0 or not math.isfinite(k):
        raise ValueError(f"batch ratio must be a positive number, got {k}")
    if rule == "constant":
        return 1.0
    if rule == "linear":
        return k
    if rule == "sqrt":
        return math.sqrt(k)
    raise ValueError(f"lr_rule must be one of {', '.join(LR_RULES)}, got {rule!r}")


def scaled_lr(rule: str, base_lr: float, batch_size: int, base_batch_size: int) -> float:
    """The peak LR for effective batch ``batch_size``: ``base_lr * scale_factor(rule, B / B0)``.

    Example:
        >>> scaled_lr("linear", 0.01, 512, 8)
        0.64
    """
    return base_lr * scale_factor(rule, batch_size / base_batch_size)


def lr_at(
    epoch_progress: float,
    *,
    base_lr: float,
    peak_lr: float,
    warmup_epochs: float,
    schedule: str = "none",
    total_epochs: float | None = None,
    warmup_from: str = WARMUP_FROM_BASE_LR,
    step_epochs: float = 0.0,
) -> float:
    """The LR applied at a point of training, measured in (fractional) epochs done.

    During warmup the LR goes linearly to ``peak_lr`` (at ``warmup_epochs``) from ``base_lr``
    (``warmup_from="base_lr"``, at 0) or from zero (``warmup_from="zero"``). A step from zero
    takes the LR of its own end, ``epoch_progress + step_epochs`` (``step_epochs``: one
    optimizer step's share of an epoch), so the first step of a warmup from zero is not a step
    at LR 0 and the last one reaches the peak (nanoGPT's ``lr * (it + 1) / warmup``; Hugging
    Face's linear warmup runs its first step at 0). After warmup, ``schedule`` runs over the
    remaining epochs up to ``total_epochs``: ``none`` holds the peak, ``cosine`` decays it as
    ``peak * (1 + cos(pi * t)) / 2`` with t the post-warmup fraction done, ``step`` multiplies
    it by 0.1 at each of ``STEP_MILESTONES`` of the post-warmup epochs.

    Raises:
        ValueError: for an unknown ``schedule`` or ``warmup_from``.

    Example:
        >>> lr_at(0.5, base_lr=0.1, peak_lr=0.5, warmup_epochs=1.0)
        0.3
        >>> lr_at(0.0, base_lr=0.1, peak_lr=0.5, warmup_epochs=1.0, warmup_from="zero", step_epochs=0.25)
        0.125
        >>> lr_at(6.0, base_lr=0.1, peak_lr=0.5, warmup_epochs=2.0, schedule="cosine", total_epochs=10)
        0.25
    """
    if warmup_from not in WARMUP_FROM:
        raise ValueError(f"warmup_from must be one of {', '.join(WARMUP_FROM)}, got {warmup_from!r}")
    if warmup_epochs > 0 and epoch_progress < warmup_epochs:
        if warmup_from == WARMUP_FROM_ZERO:
            return peak_lr * min(1.0, (epoch_progress + step_epochs) / warmup_epochs)
        return base_lr + (peak_lr - base_lr) * (epoch_progress / warmup_epochs)
    if schedule == "none":
        return peak_lr
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(LR_SCHEDULES)}, got {schedule!r}")
    if total_epochs is None or total_epochs <= warmup_epochs:
        return peak_lr
    t = min(1.0, (epoch_progress - warmup_epochs) / (total_epochs - warmup_epochs))
    if schedule == "cosine":
        return peak_lr * 0.5 * (1.0 + math.cos(math.pi * t))
    return peak_lr * STEP_GAMMA ** sum(t >= m for m in STEP_MILESTONES)


#: Fewer distinct LRs than this at a batch and its best measured LR may sit far from its
#: optimum: the critical-batch fit reads each batch's best as the optimum (docs/analysis.md).
FEW_LRS = 3


def lrs_per_batch(space: SearchSpace) -> dict[int, tuple[float, ...]] | None:
    """The distinct peak LRs a grid of ``space`` runs at each effective batch (every choice of
    b, W, A, rule and base LR); ``None`` where one of those is continuous (any LR can be drawn).

    Example:
        >>> from hpsearch.search_spaces import space_from_mapping
        >>> space = space_from_mapping({"study": "s", "workload": {"name": "digits_mlp"},
        ...     "scaling": {"base_batch_size": 8},
        ...     "parameters": {"per_device_batch_size": {"choices": [8, 32]}, "world_size": 1,
        ...                    "lr_rule": {"choices": ["constant", "linear", "sqrt"]}, "base_lr": 0.01}})
        >>> {b: [round(lr, 4) for lr in lrs] for b, lrs in lrs_per_batch(space).items()}
        {8: [0.01], 32: [0.01, 0.02, 0.04]}
    """
    def values(name: str, default: Scalar) -> tuple[Scalar, ...] | None:
        p = space.parameters.get(name)
        if p is None:
            return (default,)
        if isinstance(p, Fixed):
            return (p.value,)
        if isinstance(p, Choice):
            return p.choices
        return None

    found = [values(n, d) for n, d in ((record.PER_DEVICE_BATCH_SIZE, 1), (record.WORLD_SIZE, 1),
                                        (record.GRAD_ACCUM_STEPS, 1), (record.LR_RULE, "constant"),
                                        (record.BASE_LR, 0.0))]
    axes = [v for v in found if v is not None]
    if len(axes) < len(found):
        return None
    base_batch = space.scaling.base_batch_size
    out: dict[int, set[float]] = {}
    for b, w, a, rule, base in itertools.product(*axes):
        batch = effective_batch_size(int(b), int(w), int(a))
        out.setdefault(batch, set()).add(float(f"{scaled_lr(str(rule), float(base), batch, base_batch):.12g}"))
    return {batch: tuple(sorted(lrs)) for batch, lrs in sorted(out.items())}


def few_lrs_warning(space: SearchSpace) -> str | None:
    """One sentence where a grid of ``space`` gives some batch fewer than ``FEW_LRS`` LRs (the
    quickstart's three rules at one base LR give its smallest batch one), else ``None``. Only a
    space of three batches or more says it: fewer fit no critical batch, so no answer leans on
    where each batch's best LR is."""
    per_batch = lrs_per_batch(space)
    if not per_batch or len(per_batch) < 3:
        return None
    few = {batch: lrs for batch, lrs in per_batch.items() if len(lrs) < FEW_LRS}
    if not few:
        return None
    shown = ", ".join(f"B {batch} at {len(lrs)}" for batch, lrs in list(few.items())[:6])
    return (f"few LRs per batch: {shown} {'LR' if len(few) == 1 and len(next(iter(few.values()))) == 1 else 'LRs'} "
            f"(fewer than {FEW_LRS}); each batch's best run is read as its best LR, so the critical batch and the "
            f"answer's LR lean on where the grid put them: give base_lr more choices, or expect the confirmation "
            "to move the answer")
