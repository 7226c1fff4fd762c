"""A rank's memory during one trial: its peak, the cap of ``resources.memory_per_worker`` on the
CPU, and running out of it as a failure of its own (``out_of_memory``).

- **What a trial is charged.** A warm rank process served earlier trials, and what they leave
  behind is not this trial's: at the trial's start the process collects its garbage, gives the
  heap back to the system (``malloc_trim``) and empties CUDA's cache, and what it still holds
  beyond what it held before its first trial (and beyond the data it keeps for this trial) is
  *carried*: neither counted in this trial's peak nor against its cap. A trial is so charged in
  a warm process what it would be in a fresh one (otherwise a batch of 64 can run out of a
  600 MiB cap after two batches of 256 in the same process fit, the process holding 170 MiB more
  of heap mappings than when it began).
- **Peak.** On CUDA the caching allocator's peak (``torch.cuda.max_memory_allocated``, reset at
  the trial's start); on the CPU the process's peak resident memory (``VmHWM``, reset at the
  trial's start by writing ``5`` to ``/proc/self/clear_refs``), less the carried memory; where
  it cannot be reset (another OS, a ``/proc`` mounted read-only) the figure is the process's
  peak since it started (``getrusage``).
- **Cap.** ``resources.memory_per_worker`` becomes the soft ``RLIMIT_DATA`` of the rank's process
  for the trial, raised by the carried memory: Linux refuses the process more writable private
  memory (its heap and anonymous mappings: what it asked for, touched or not), so a tensor that
  would pass the cap fails to allocate with the CPU allocator's own error, as one past a GPU's
  memory does with CUDA's. The limit is put back when the trial ends; a rank that ran out exits
  (its pool replaces it).
- **Out of memory.** CUDA's ``OutOfMemoryError``, the CPU allocator's ``can't allocate memory``
  and Python's ``MemoryError`` become ``TrialFailed("out_of_memory", ...)``, whose detail says
  where the rank was (``phase``: training at its per-device batch, evaluation, or setup) and
  gives the memory figures: what was asked, the limit, the peak so far.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import re
import resource
import sys
from types import TracebackType
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from hpsearch.record import (
    DEVICE,
    MEMORY_LIMIT_BYTES,
    OUT_OF_MEMORY_PHASE,
    PEAK_MEMORY_BYTES,
    REASON_OUT_OF_MEMORY,
    format_bytes,
)
from hpsearch.trials.errors import TrialFailed

if TYPE_CHECKING:
    from hpsearch.trials.spec import TrialSpec

__all__ = ["PHASES", "RankMemory", "is_out_of_memory"]

_CPU_ALLOCATOR = "DefaultCPUAllocator: can't allocate memory"
# "you tried to allocate 314572800 bytes" (the CPU's), "Tried to allocate 20.00 MiB" (CUDA's).
_ASKED = re.compile(r"[Tt]ried to allocate ([0-9.]+) ?(bytes|B|KiB|MiB|GiB|TiB)")
_UNIT = {"bytes": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` (or the error it was raised from) says a device ran out of memory.

    Example:
        >>> is_out_of_memory(MemoryError()), is_out_of_memory(ValueError("can't allocate memory"))
        (True, False)
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (MemoryError, torch.OutOfMemoryError)):
            return True
        if isinstance(current, RuntimeError) and (_CPU_ALLOCATOR in str(current) or "CUDA out of memory" in
                                                  str(current)):
            return True
        current = current.__cause__ or current.__context__
    return False


#: Where a rank can be when it runs out of memory (``RankMemory.phase``, recorded as
#: ``out_of_memory_phase``): only ``training`` says its per-device batch is too large.
PHASES = ("setup", "training", "evaluation")

# What this process held before its first trial (VmData, VmRSS, less the data it kept), once
# measured: the base every later trial in it is measured against.
_fresh: tuple[int, int] | None = None


class RankMemory:
    """One rank's memory over one trial: ``with RankMemory(device, limit) as memory:`` releases
    what earlier trials left, resets the peak and applies the cap (on the CPU) for the trial, and
    puts the cap back at its end.

    Args:
        device: The rank's torch device.
        limit: ``resources.memory_per_worker`` in bytes (``TrialSpec.memory_limit_bytes``),
            applied on the CPU only; ``None``: no cap.
        kept_bytes: Bytes of workload data the process keeps for this trial (a fresh process
            would build them in the trial): they count as the trial's, never as carried.

    Attributes:
        limit: The bytes the rank could hold: the cap on the CPU (``None`` without one), the
            GPU's total memory on CUDA (shared with other trials' ranks where they share it).
        limit_source: What set ``limit``, in words, for a failure's detail.
        held_at_start: The rank's memory when the trial began (resident on the CPU, allocated
            on CUDA), carried memory left out: what a fresh process would hold, kept data included.
        carried: Bytes the process held at the trial's start beyond its own base and the kept
            data (on the CPU: resident for the peak; ``carried_data``: heap mappings for the cap).
        since_start: Whether ``peak`` counts this trial alone (``False``: the process's peak
            since it started, where the CPU's peak cannot be reset).
        phase: Where the rank is (``PHASES``); the loop sets it, a failure records it.
        eval_batch: The validation batch size, for a failure in evaluation.
    """

    def __init__(self, device: torch.device, limit: int | None, kept_bytes: int = 0) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.cap = None if self.cuda else limit
        self.kept_bytes = kept_bytes
        self.limit: int | None = None
        self.limit_source = ""
        self.held_at_start = 0
        self.carried = 0
        self.carried_data = 0
        self.since_start = True
        self.phase = "setup"
        self.eval_batch: int | None = None
        self._soft: int | None = None

    def __enter__(self) -> RankMemory:
        global _fresh
        # What the last trial let go of goes now: its objects in reference cycles, and the
        # memory its allocator keeps for reuse.
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self.held_at_start = torch.cuda.memory_allocated(self.device)
            self.limit = torch.cuda.get_device_properties(self.device).total_memory
            self.limit_source = "the GPU's total memory"
            return self
        _trim_heap()
        self.since_start = _reset_cpu_peak()
        data, resident = _status("VmData"), _status("VmRSS") or 0
        if _fresh is None and data is not None:
            _fresh = (data - self.kept_bytes, resident - self.kept_bytes)
        if _fresh is not None and data is not None:
            self.carried_data = max(0, data - _fresh[0] - self.kept_bytes)
            self.carried = max(0, resident - _fresh[1] - self.kept_bytes)
        self.held_at_start = resident - self.carried
        if self.cap is not None:
            soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
            self._soft = soft
            # The cap holds for what this trial adds to what a fresh process holds: the heap
            # mappings earlier trials left (glibc keeps them mapped, and RLIMIT_DATA counts
            # them, resident or not) are let through.
            raised = self.cap + self.carried_data
            cap = raised if hard == resource.RLIM_INFINITY else min(raised, hard)
            resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
            self.limit, self.limit_source = self.cap, "resources.memory_per_worker"
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # A warm process serves the next trial under that trial's own cap, or none.
        if self._soft is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (self._soft, resource.getrlimit(resource.RLIMIT_DATA)[1]))
            self._soft = None

    def peak(self, processes: int = 1) -> int | None:
        """The most memory this rank held since the trial began, in bytes, carried memory left
        out; with ``processes`` above 1, the largest over the trial's processes (a MAX
        all-reduce every process joins). ``None`` where it cannot be measured."""
        own = self._own_peak()
        if processes <= 1:
            return own
        # On the rank's device: NCCL reduces CUDA tensors only.
        value = torch.tensor([-1 if own is None else own], dtype=torch.int64, device=self.device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        largest = int(value.item())
        return None if largest < 0 else largest

    def _own_peak(self) -> int | None:
        if self.cuda:
            return int(torch.cuda.max_memory_allocated(self.device))
        peak = _status("VmHWM") if self.since_start else None
        if peak is None:
            # ru_maxrss: kilobytes on Linux, bytes on macOS.
            maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return maxrss if sys.platform == "darwin" else maxrss * 1024
        return peak - self.carried

    def failure(self, exc: BaseException, spec: TrialSpec) -> TrialFailed:
        """``out_of_memory``, saying where the rank was (``phase``) with the per-device batch,
        and what was asked, the limit and the peak so far."""
        figures = []
        asked = _asked(exc)
        if asked is not None:
            figures.append(f"asked for {format_bytes(asked)} more")
        if self.limit is not None:
            figures.append(f"the limit is {format_bytes(self.limit)} ({self.limit_source})")
        elif not self.cuda:
            figures.append(f"no cap set, the machine has {format_bytes(_machine_memory())}")
        if self.cuda:
            free, _ = torch.cuda.mem_get_info(self.device)
            figures.append(f"{format_bytes(free)} free on the GPU")
        peak = self._own_peak()
        if peak is not None:
            held = "allocated" if self.cuda else "resident"
            start = f"{format_bytes(self.held_at_start)} at the trial's start"
            if self.carried:
                start += f"; {format_bytes(self.carried)} left by earlier trials not counted"
            figures.append(f"peak so far {format_bytes(peak)} {held} ({start})")
        where = f"{self.device.type}" if not self.cuda else f"cuda ({torch.cuda.get_device_name(self.device)})"
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        shape = (f"per-device batch {spec.per_device_batch_size} (grad_accum_steps {spec.grad_accum_steps}, "
                 f"world_size {spec.world_size})")
        if self.phase == "evaluation":
            # Not the training batch's doing: evaluation asks no more than a training step at b
            # did, so this says the trial's memory was nearly full, not that b is too large.
            what = (f"ran out of memory in evaluation (validation batches of {self.eval_batch}), not in training, "
                    f"at {shape}")
        elif self.phase == "setup":
            what = f"ran out of memory in setup (the model built, the data placed), before training at {shape}"
        else:
            what = f"ran out of memory at {shape}"  # in training: its per-device batch is the cause
        measured = {DEVICE: where, PEAK_MEMORY_BYTES: peak, MEMORY_LIMIT_BYTES: self.limit,
                    OUT_OF_MEMORY_PHASE: self.phase}
        return TrialFailed(REASON_OUT_OF_MEMORY, (
            f"{what} on {where}: {'; '.join(figures)}. {type(exc).__name__}: {_short(message)}"),
            {k: v for k, v in measured.items() if v is not None})


def _short(message: str) -> str:
    # The CPU allocator's message starts with the C++ check that failed: "[enforce fail at
    # alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: ...".
    at = message.find(_CPU_ALLOCATOR)
    message = message[at:] if at > 0 else message
    return message if len(message) <= 300 else message[:300] + "..."


def _asked(exc: BaseException) -> int | None:
    match = _ASKED.search(str(exc))
    return None if match is None else int(float(match.group(1)) * _UNIT[match.group(2)])


def _trim_heap() -> None:
    """Give the memory an earlier trial freed back to the system (glibc keeps freed heap pages for
    reuse): without it a warm process's peak, and what counts toward its cap, would start from
    what the largest earlier trial left resident (a batch of 8 peaks some 50 MiB higher after a
    batch of 512 in the same process than in a fresh one)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # not glibc (musl has no malloc_trim)
            ctypes.CDLL("libc.so.6").malloc_trim(0)


def _reset_cpu_peak() -> bool:
    """Reset the process's peak resident memory to its current one; whether that could be done."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _status(key: str) -> int | None:
    """A ``kB`` figure of ``/proc/self/status`` in bytes (``None`` where there is no such file)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _machine_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (OSError, ValueError):
        return 0

