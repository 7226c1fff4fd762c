"""Search events and the live progress display of ``hpsearch start``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hpsearch.search_spaces import format_duration

__all__ = ["ProgressDisplay", "SearchEvent"]


@dataclass(frozen=True)
class SearchEvent:
    """Something that happened to one trial during a search.

    Attributes:
        kind: ``started`` (proposed; PENDING until its devices are granted), ``training`` (its
            devices were granted and its ranks start: RUNNING), ``result`` (one evaluation), ``completed``, ``pruned`` (stopped early),
            ``failed``, ``skipped`` (a constraint skipped the configuration), ``queued`` (the
            search stopped before it started: back in the study's queue) or ``exhausted``
            (the sampler found nothing left to run; ``number`` is -1) or ``store`` (the store
            stopped or started answering again; ``number`` is -1), ``budget`` (what the search
            spent and has left, every second; ``number`` is -1) or ``budget_stop`` (the budget
            cannot fit the next trial, ``number`` being that trial, or ran out, -1), or
            ``confirmation`` (a confirmation round starts, ends, or none runs: ``detail``, and
            ``runs`` the round's runs; -1).
        number: The Optuna trial number.
        data: ``params`` (started), ``result`` (result), ``values`` (completed),
            ``reason``/``detail`` (pruned, failed, skipped), ``detail`` (exhausted, store,
            budget_stop), ``status`` (budget: a ``hpsearch.planner.budget.BudgetStatus``).
    """

    kind: str
    number: int
    data: dict[str, Any] = field(default_factory=dict)


class ProgressDisplay:
    """A one-line live progress bar: done, training, pending (proposed, waiting for their
    devices: the PENDING of ``hpsearch status``), failed, best so far, estimated time left, and a
    budgeted search's budget spent and left.

    Use as a context manager and pass ``display.on_event`` to the search.
    """

    def __init__(self, n_trials: int, objective: str, maximize: bool, *, enabled: bool = True) -> None:
        # rich (a tenth of a second to import) only when a display is made: not for --help.
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.console = Console(stderr=True)
        self.n_trials = n_trials
        self.objective = objective
        self.maximize = maximize
        self.running: set[int] = set()  # training
        self.pending: set[int] = set()  # proposed, waiting for their devices
        self.failed = 0
        self.pruned = 0
        self.skipped = 0
        self.done = 0
        self.budget_stopped = 0
        self.confirming = 0  # confirmation runs planned (counted on the bar, apart from n_trials)
        self.budget: Any = None  # the latest BudgetStatus of a budgeted search
        self.best: float | None = None
        self.started = time.monotonic()
        self._progress = Progress(
            TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(), console=self.console, disable=not enabled, transient=False,
            # Its clock counts seconds and a trial's events come seconds apart: rich's default of 10
            # redraws a second cost the search's process about 1% of a core for nothing to see.
            refresh_per_second=2,
        )
        self._task = self._progress.add_task("search", total=n_trials, info="")
        self._shown = False  # drawn from the plan or the first event on (__enter__)

    def __enter__(self) -> ProgressDisplay:
        # Drawn once the search is planned (set_total) or a trial event comes, not before: the
        # checks before the plan (the workload built once...) may refuse the space, and a
        # "trials 0/2 0:00:05" line drawn sooner would stand above the error as if trials had begun.
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if not self._shown:
            return
        if kind is not None:
            self._progress.live.transient = True  # an error message follows: no stale bar above it
        self._progress.stop()

    def _show(self) -> None:
        if not self._shown:
            self._shown = True
            self._progress.start()

    def set_total(self, n_trials: int) -> None:
        """Change the number of trials the search will run (known once it is planned)."""
        self.n_trials = n_trials
        self._progress.update(self._task, total=n_trials)
        self._show()

    def on_event(self, event: SearchEvent) -> None:
        """Update the display from one search event."""
        self._show()
        if event.kind == "started":
            self.pending.add(event.number)
        elif event.kind == "training":
            self.pending.discard(event.number)
            self.running.add(event.number)
        elif event.kind == "skipped":
            self.skipped += 1
        elif event.kind == "queued":  # never started: back in the study's queue, for resume
            self.pending.discard(event.number)
        elif event.kind in ("store", "exhausted", "budget_stop", "memory", "fuse", "tracking"):  # not a record name: the event kind
            self.console.print(f"[yellow]{event.data.get('detail', '')}[/]", highlight=False, soft_wrap=True)
        elif event.kind == "confirmation":  # not a record name: the event kind
            # A round of the answer's runs: said, and counted on the bar beside the search's trials.
            self.console.print(f"[cyan]{event.data.get('detail', '')}[/]", highlight=False, soft_wrap=True)
            runs = int(event.data.get("runs") or 0)
            if runs:
                self.confirming += runs
                self.set_total(self.n_trials + runs)
        elif event.kind == "budget":
            self.budget = event.data.get("status")
        elif event.kind in ("completed", "failed", "pruned"):
            self.running.discard(event.number)
            self.pending.discard(event.number)
            self.done += 1
            if event.kind == "pruned":
                self.pruned += 1
            elif event.kind == "failed" and event.data.get("reason") == "budget":
                self.budget_stopped += 1  # the search's stop, not the trial's failure
            elif event.kind == "failed":
                self.failed += 1
                self.console.print(f"[yellow]trial {event.number} failed: {event.data.get('reason')}[/] "
                                   f"{event.data.get('detail', '')}".rstrip(), highlight=False, soft_wrap=True)
            else:
                value = event.data["values"][0]
                if self.best is None or (value > self.best if self.maximize else value < self.best):
                    self.best = value
        best = "-" if self.best is None else f"{self.best:.4g}"
        self._progress.update(
            self._task, completed=self.done,
            info=f"training {len(self.running)}  "
                 + (f"pending {len(self.pending)}  " if self.pending else "")
                 + f"failed {self.failed}  "
                 + (f"stopped early {self.pruned}  " if self.pruned else "")
                 + (f"skipped {self.skipped}  " if self.skipped else "")
                 + (f"stopped by budget {self.budget_stopped}  " if self.budget_stopped else "")
                 + (f"confirmation runs {self.confirming}  " if self.confirming else "")
                 + f"best {self.objective} {best}  left ~{self._eta()}"
                 + (f"  {self._budget()}" if self.budget is not None else ""),
        )

    def _budget(self) -> str:
        """``budget 1m10s of 2m (50s left)``, and device-hours when they are limited."""
        status, parts = self.budget, []
        if status.budget.wall_s is not None:
            parts.append(f"{format_duration(status.spent.wall_s)} of {format_duration(status.budget.wall_s)} "
                         f"({format_duration(status.wall_left_s)} left)")
        if status.budget.device_hours is not None:
            parts.append(f"{status.spent.device_hours:.3g} of {status.budget.device_hours:g} device-hours "
                         f"({status.device_hours_left:.3g} left)")
        return "budget " + ", ".join(parts)

    def _eta(self) -> str:
        if self.done == 0:
            return "?"
        per_trial = (time.monotonic() - self.started) / self.done
        seconds = per_trial * (self.n_trials - self.done)
        if self.budget is not None and self.budget.wall_left_s is not None:
            seconds = min(seconds, self.budget.wall_left_s)  # the budget ends it first
        return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.1f}min"
