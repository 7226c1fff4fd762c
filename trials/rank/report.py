"""Rank 0's reports of a run's evaluations, for the solo loop (``hpsearch.trials.rank.loop``)
and the fused one (``hpsearch.trials.rank.fused``): what every report carries from the run's
setup, the memory's phase around an evaluation, and what the final report adds.
"""

from __future__ import annotations

import math
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

__all__ = ["Reporter", "language_model_metrics"]

T = TypeVar("T")


class Reporter:
    """The reports of one run on one rank (only rank 0 reports; every rank joins the final
    report's all-reduce of the peak memory).

    Args:
        ctx: The rank's context, which takes the reports.
        memory: The rank's memory watch.
        spec: The trial (``save_model``).
        setup: What every report carries about the run's setup (``run_setup``).
        tokens_per_sample: A language model's tokens per sample (``Workload.tokens_per_sample``):
            each report then carries ``tokens_seen`` and ``val_perplexity``.
    """

    def __init__(self, ctx: RankContext, memory: RankMemory, spec: TrialSpec, setup: dict[str, Any],
                 tokens_per_sample: int | None = None) -> None:
        self.ctx, self.memory, self.setup = ctx, memory, setup
        self.save_model = spec.save_model
        self.device = torch.device(ctx.device)
        self.tokens_per_sample = tokens_per_sample

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
        """Report ``metrics`` (adding a language model's measures to them, in place: the caller's
        final metrics carry them too)."""
        if self.tokens_per_sample is not None:
            metrics.update(language_model_metrics(metrics, self.tokens_per_sample))
        self.ctx.report(metrics)


def language_model_metrics(metrics: dict[str, Any], tokens_per_sample: int) -> dict[str, Any]:
    """What a language model's report adds: ``tokens_seen`` (``samples_seen`` x the tokens per
    sample) and ``val_perplexity`` (``exp(val_loss)``, infinite past float's range).

    Example:
        >>> language_model_metrics({"samples_seen": 10, "val_loss": 0.0}, 64)
        {'tokens_seen': 640, 'val_perplexity': 1.0}
    """
    added: dict[str, Any] = {}
    samples = metrics.get(record.SAMPLES_SEEN)
    if isinstance(samples, int):
        added[record.TOKENS_SEEN] = samples * tokens_per_sample
    loss = metrics.get(record.VAL_LOSS)
    if isinstance(loss, (int, float)):
        added[record.VAL_PERPLEXITY] = math.exp(loss) if loss < 709.0 else math.inf
    return added
