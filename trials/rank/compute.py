"""How a trial computes: the arithmetic it trains and evaluates in (``workload.precision``), and
the clock of its compiled model (``workload.compile``).

- ``fp32``: float32 throughout, TF32 off on CUDA, in matrix products and in cuDNN's
  convolutions alike (torch's own default lets cuDNN use TF32).
- ``tf32``: float32 tensors, TF32 tensor cores for CUDA's matrix products and convolutions
  (about 10 bits of mantissa in the products). On the CPU it is ``fp32``.
- ``bf16``: ``torch.autocast`` to bfloat16 around each forward pass and loss (training and
  evaluation); the weights, their gradients and the optimizer stay float32 (no loss scaling
  needed: bfloat16 has float32's range).

The settings are the process's: a warm rank process puts them back before its next trial
(``hpsearch.trials.rank.process``, ``_FreshState``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import torch

__all__ = ["CompileClock", "set_precision", "synced_time", "synchronize"]


def set_precision(precision: str, device: torch.device) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """Set this process's float32 flags for ``precision`` on ``device``; returns the context
    each forward pass runs in (autocast for ``bf16``)."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
    if precision == "bf16":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA), so that a clock read now counts it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def synced_time(device: torch.device) -> float:
    """``time.perf_counter`` once the device's queued work ran (``synchronize``): a step's time
    on CUDA holds its kernels, not only their launching."""
    synchronize(device)
    return time.perf_counter()


class CompileClock:
    """The wall time of the steps that compiled a ``torch.compile``'d model: the first forward
    and backward of each batch shape and mode (training, evaluation), which trace and compile
    before they run, and any other step in which torch.compile compiled a graph (a guard that
    failed: it counts its frames). Their time, compute included, is ``compile_s``, left out of
    ``train_s``, so the step-time model sees only compiled steps.

    Example:
        >>> clock = CompileClock(enabled=True, device=torch.device("cpu"))
        >>> with clock.step(("train", 32)):
        ...     pass
        >>> with clock.step(("train", 32)):  # seen, and nothing compiled: not counted
        ...     pass
        >>> len(clock.seen), clock.steps
        (1, 1)
    """

    def __init__(self, *, enabled: bool, device: torch.device) -> None:
        self.enabled = enabled
        self.device = device
        self.seen: set[Hashable] = set()
        self.seconds = 0.0
        self.steps = 0

    @contextlib.contextmanager
    def step(self, key: Hashable) -> Iterator[None]:
        """Time the block when it is the first of ``key`` or compiles."""
        if not self.enabled:
            yield
            return
        expected = key not in self.seen
        self.seen.add(key)
        if expected:
            synchronize(self.device)  # what earlier steps queued is training time
        frames = _compiled_frames()
        start = time.perf_counter()
        yield
        if expected or _compiled_frames() != frames:
            synchronize(self.device)
            self.seconds += time.perf_counter() - start
            self.steps += 1


def _compiled_frames() -> int:
    """Frames torch.compile compiled in this process so far (its own counter)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover - torch without dynamo
        return 0
    return int(counters["frames"]["total"])
