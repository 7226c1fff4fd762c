"""Rank 0's reports of a run's evaluations, for the solo loop (``hpsearch.trials.rank.loop``)
and the fused one (``hpsearch.trials.rank.fused``): what every report carries from the run's
setup, the memory's phase around an evaluation, and what the final report adds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from hpsearch import record
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.data import DataPath
from hpsearch.trials.rank.memory import RankMemory
from hpsearch.trials.spec import TrialSpec

__all__ = ["Reporter"]

T = TypeVar("T")


class Reporter:
    """The reports of one run on one rank (only rank 0 reports; every rank joins the final
    report's all-reduce of the peak memory).

    Args:
        ctx: The rank's context, which takes the reports.
        memory: The rank's memory watch.
        spec: The trial (``save_model``).
        setup: What every report carries about the run's setup (``run_setup``).
    """

    def __init__(self, ctx: RankContext, memory: RankMemory, spec: TrialSpec, setup: dict[str, Any]) -> None:
        self.ctx, self.memory, self.setup = ctx, memory, setup
        self.save_model = spec.save_model
        self.device = torch.device(ctx.device)

    @staticmethod
    def run_setup(spec: TrialSpec, path: DataPath, data_cache: str, memory: RankMemory, began: float) -> dict[str, Any]:
        """The setup's fields of every report: the data path and cache, the precision, the
        setup's seconds since ``began`` and the memory cap."""
        setup: dict[str, Any] = {record.DATA_PATH: path.kind, record.DATA_PATH_REASON: path.reason,
                                 record.DATA_CACHE: data_cache, record.PRECISION: spec.precision,
                                 record.SETUP_S: time.perf_counter() - began}
        if memory.limit is not None:
            setup[record.MEMORY_LIMIT_BYTES] = memory.limit
        return setup

    def evaluate(self, measure: Callable[[], T]) -> T:
        """Run ``measure`` as the evaluation: memory out of it is out of memory in evaluation
        (the phase stays so when it raises, for the failure to say)."""
        self.memory.phase = "evaluation"
        measured = measure()
        self.memory.phase = "training"
        return measured

    def peak_memory(self, final: bool) -> int | None:
        """The peak memory a report carries: at the final evaluation the largest over the
        processes (every rank joins that all-reduce), else this rank's own so far (a trial
        stopped early keeps it)."""
        return self.memory.peak(self.ctx.world_size if final else 1)

    def device_name(self) -> str:
        """The final report's ``device``."""
        return f"cuda ({torch.cuda.get_device_name(self.device)})" if self.device.type == "cuda" else "cpu"

    def model_path(self, name: str) -> Path | None:
        """Where the final weights go (``name`` in the run folder), or ``None`` when the trial
        keeps none."""
        return self.ctx.run_dir / name if self.save_model and self.ctx.run_dir is not None else None

    def report(self, metrics: dict[str, Any]) -> None:
        self.ctx.report(metrics)
