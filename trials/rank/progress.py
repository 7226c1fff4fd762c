"""Where a run's training stands and where its time went, for its reports: the counts over all
ranks since the run began, and the clocks that split its wall time into training, evaluation
and compiling. Shared by the solo loop (``hpsearch.trials.rank.loop``) and the fused one
(``hpsearch.trials.rank.fused``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hpsearch import record
from hpsearch.trials.rank.schedule import Evaluation

__all__ = ["Progress"]


@dataclass
class Progress:
    """A run's counts and clocks since it began (its ``start``, on ``time.perf_counter``)."""

    start: float = field(default_factory=time.perf_counter)
    samples_seen: int = 0  # over all ranks
    steps: int = 0
    evaluations: int = 0
    eval_seconds: float = 0.0  # rank 0's time in evaluation, left out of ``train_s``
    compile_seconds: float = 0.0  # training steps that compiled the model, left out of ``train_s``
    epoch_start: float = 0.0
    epoch_eval_seconds: float = 0.0
    epoch_compile_seconds: float = 0.0

    def start_epoch(self) -> None:
        """An epoch begins: its own clocks start."""
        self.epoch_start = time.perf_counter()
        self.epoch_eval_seconds = self.epoch_compile_seconds = 0.0

    def stepped(self, samples: int) -> None:
        """An optimizer step is done, of ``samples`` samples over all ranks."""
        self.steps += 1
        self.samples_seen += samples

    def compiled(self, seconds: float) -> None:
        """A training step spent ``seconds`` compiling the model."""
        self.compile_seconds += seconds
        self.epoch_compile_seconds += seconds

    def evaluated(self, seconds: float, *, untimed: float = 0.0) -> None:
        """An evaluation took ``seconds``, of which ``untimed`` counts in the epoch's time but
        not in the run's (measuring for the reports rather than evaluating)."""
        self.eval_seconds += seconds - untimed
        self.epoch_eval_seconds += seconds

    def epoch_train_seconds(self, now: float) -> float:
        """The epoch's training time until ``now``: its evaluations and compiling steps left out."""
        return now - self.epoch_start - self.epoch_eval_seconds - self.epoch_compile_seconds

    def where(self, point: Evaluation) -> dict[str, Any]:
        """The report's first fields: where the run stands at the evaluation ``point``."""
        return {"epoch": point.epoch, record.EPOCHS_COMPLETED: point.epochs_completed, "evaluation": self.evaluations,
                "final": point.final, record.SAMPLES_SEEN: self.samples_seen, record.STEPS: self.steps}
