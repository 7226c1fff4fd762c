"""Measurements taken inside the DDP loop: gradient all-reduce count and time, and the gradient
noise scale (docs/science.md, McCandlish et al. 2018, Appendix A)."""

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["CommStats", "NoiseScale", "timed_allreduce_hook"]


@dataclass
class CommStats:
    """What the all-reduce hook saw.

    Attributes:
        calls: Bucket all-reduces launched (one per gradient bucket per synchronised step).
        seconds: Wall time from launching each bucket's all-reduce to its completion, summed.
            Buckets can overlap with each other and with the backward pass, so this is an upper
            bound on the time the step spent waiting for communication.
        local_sq_norm: Squared norm of this process's gradient before the reduction, for the
            step in progress (reset by the loop): a float64 tensor on the gradient's device, so
            that no bucket waits for the device to read it.
        world_size: Processes in the group.
    """

    world_size: int
    calls: int = 0
    seconds: float = 0.0
    local_sq_norm: Any = 0.0


# No ``from __future__ import annotations`` here: DDP checks the hook's annotations at
# registration and rejects string annotations ("bucket annotation should be dist.GradBucket").
def timed_allreduce_hook(state: CommStats, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook doing what the default one does (average the bucket over the
    ranks) while counting calls, timing them and keeping the local squared gradient norm, which
    the noise-scale estimate needs at no extra backward pass."""
    buffer = bucket.buffer()
    # float64 holds the float32 sum exactly, and adds the buckets as Python floats would.
    state.local_sq_norm = state.local_sq_norm + buffer.pow(2).sum().double()
    state.calls += 1
    start = time.perf_counter()
    future = dist.all_reduce(buffer.div_(state.world_size), async_op=True).get_future()

    def finished(fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        state.seconds += time.perf_counter() - start
        return fut.value()[0]

    reduced: torch.futures.Future[torch.Tensor] = future.then(finished)
    return reduced


class NoiseScale:
    """The simple noise scale B_simple = tr(S) / |G|^2 from gradient norms at two batch sizes.

    Each step gives one pair: a small-batch squared norm |g_small|^2 (per process under DDP, or
    per micro-batch) and the big-batch |g_big|^2 (the step's whole gradient). The unbiased
    estimators

        |G|^2 ~ (B_big |g_big|^2 - B_small |g_small|^2) / (B_big - B_small)
        tr(S) ~ (|g_small|^2 - |g_big|^2) / (1 / B_small - 1 / B_big)

    are averaged separately over the steps of a window (one epoch) and then divided: each step's
    ratio is far too noisy, the ratio of the averages is not.
    """

    def __init__(self) -> None:
        self.g2_sum = 0.0
        self.trace_sum = 0.0
        self.n = 0

    def add(self, small_sq: float, b_small: float, big_sq: float, b_big: float) -> None:
        """One step's pair of squared norms of mean gradients, and their batch sizes."""
        if b_big <= b_small:
            return
        self.g2_sum += (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
        self.trace_sum += (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big)
        self.n += 1

    def value(self) -> float | None:
        """B_simple over the window, ``None`` with no pairs or a non-positive |G|^2 estimate."""
        if self.n == 0 or self.g2_sum <= 0:
            return None
        value = self.trace_sum / self.g2_sum
        return value if math.isfinite(value) else None

    def reset(self) -> None:
        self.g2_sum = self.trace_sum = 0.0
        self.n = 0


def grad_vector(model: torch.nn.Module) -> torch.Tensor:
    """All parameter gradients as one flat tensor (zeros where a gradient is missing)."""
    return torch.cat([
        (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in model.parameters()
    ])
