"""When a run evaluates: the one schedule of the solo loop (``hpsearch.trials.rank.loop``) and
the fused one (``hpsearch.trials.rank.fused``).

A run evaluates at the end of every epoch and, with ``eval_every_samples`` = N, each time N
more samples of the epoch were seen. The periodic evaluations are counted within each epoch,
from its start, as Lightning's ``val_check_interval`` counts within an epoch: every N samples,
then the epoch's end. Counted over the whole run instead, their multiples would drift against
the epochs' ends and land a step or two after one, near-duplicates of its evaluation. A periodic
evaluation due on the step before the epoch's last is left to the epoch's end, one step on,
which stands for it.

Every rank keeps its own schedule and counts the samples alike, so every rank knows when an
evaluation is due and joins its collectives.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EvalSchedule", "Evaluation"]


@dataclass(frozen=True)
class Evaluation:
    """One evaluation the schedule calls for: where it stands on the epochs' axis."""

    #: Epochs trained: whole at an epoch's end, else the epoch plus the share of its steps done.
    epoch: float
    #: Whole epochs done (``epochs_completed`` in the reports).
    epochs_completed: int
    #: The run's last evaluation (the last epoch's end).
    final: bool


class EvalSchedule:
    """Which steps end with an evaluation.

    Args:
        epochs: Epochs of the run.
        steps_per_epoch: Optimizer steps in each epoch.
        every_samples: Evaluate each time this many more samples of an epoch were seen
            (``TrialSpec.eval_every_samples``); ``None`` or 0: at the epochs' ends only.

    Example:
        >>> schedule = EvalSchedule(epochs=1, steps_per_epoch=4, every_samples=20)
        >>> schedule.start_epoch(0, samples_seen=0)
        >>> [schedule.after_step(step, samples_seen=10 * (step + 1)) for step in range(4)]
        [None, Evaluation(epoch=0.5, epochs_completed=0, final=False), None,
         Evaluation(epoch=1, epochs_completed=1, final=True)]
    """

    def __init__(self, *, epochs: int, steps_per_epoch: int, every_samples: int | None) -> None:
        self.epochs = epochs
        self.steps_per_epoch = steps_per_epoch
        self.every = every_samples
        self.epoch = 0
        self.next_eval: int | None = None  # samples seen at which the next periodic one is due

    def start_epoch(self, epoch: int, samples_seen: int) -> None:
        """Epoch ``epoch`` begins, ``samples_seen`` samples into the run (over all ranks)."""
        self.epoch = epoch
        self.next_eval = samples_seen + self.every if self.every else None

    def after_step(self, step: int, samples_seen: int) -> Evaluation | None:
        """Step ``step`` of the epoch is done, ``samples_seen`` samples into the run: the
        evaluation due now, or ``None``."""
        end_of_epoch = step == self.steps_per_epoch - 1
        due = self.next_eval is not None and samples_seen >= self.next_eval
        if due and step == self.steps_per_epoch - 2:
            due = False  # the epoch's end, one step on, evaluates for it
        if not (due or end_of_epoch):
            return None
        while self.every and self.next_eval is not None and self.next_eval <= samples_seen:
            self.next_eval += self.every
        epoch = self.epoch
        return Evaluation(epoch=epoch + 1 if end_of_epoch else epoch + (step + 1) / self.steps_per_epoch,
                          epochs_completed=epoch + 1 if end_of_epoch else epoch,
                          final=end_of_epoch and epoch == self.epochs - 1)
