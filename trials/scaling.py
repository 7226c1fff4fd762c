"""Learning-rate scaling rules and the warmup schedule (docs/science.md, "Learning-rate scaling rules").

With B the effective batch and B0 the batch ``base_lr`` was tuned for, k = B / B0:

- constant: lr = base_lr
- linear:   lr = base_lr * k        (Goyal et al. 2017)
- sqrt:     lr = base_lr * sqrt(k)  (Krizhevsky 2014; Malladi et al. 2022 for Adam-type)

Warmup (Goyal et al., section 2.2) starts at ``base_lr`` and rises linearly to the scaled peak
over ``warmup_epochs``; a constant low LR followed by a jump fails at large batch.
"""

from __future__ import annotations

import math

from hpsearch.search_spaces.space import LR_RULES, LR_SCHEDULES

__all__ = ["LR_RULES", "LR_SCHEDULES", "STEP_MILESTONES", "effective_batch_size", "lr_at", "scale_factor", "scaled_lr"]

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
) -> float:
    """The LR applied at a point of training, measured in (fractional) epochs done.

    During warmup the LR goes linearly from ``base_lr`` (at 0) to ``peak_lr`` (at
    ``warmup_epochs``). After it, ``schedule`` runs over the remaining epochs up to
    ``total_epochs``: ``none`` holds the peak, ``cosine`` decays it as
    ``peak * (1 + cos(pi * t)) / 2`` with t the post-warmup fraction done, ``step`` multiplies
    it by 0.1 at each of ``STEP_MILESTONES`` of the post-warmup epochs.

    Example:
        >>> lr_at(0.5, base_lr=0.1, peak_lr=0.5, warmup_epochs=1.0)
        0.3
        >>> lr_at(6.0, base_lr=0.1, peak_lr=0.5, warmup_epochs=2.0, schedule="cosine", total_epochs=10)
        0.25
    """
    if warmup_epochs > 0 and epoch_progress < warmup_epochs:
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
