"""The planner's decisions, as typed values: a configuration proposed, one skipped, a trial to
launch (alone or as a fused group), and the end of the search.

A ``Proposal`` holds its Optuna trial (RUNNING from the ask) and so lives only in the search's
own process; the others are plain values.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpsearch.planner.task import TrialTask
from hpsearch.trials.spec import TrialSpec

if TYPE_CHECKING:
    import optuna

__all__ = ["Ending", "Finished", "Launch", "Proposal", "Skip"]


@dataclass(frozen=True)
class Proposal:
    """A configuration the study proposed and the search will run.

    Attributes:
        trial: Its Optuna trial (RUNNING from the ask).
        params: Its parameters.
        spec: What it trains (at the halved shape where the memory ceilings say so).
        derived: What the planner derived from them, recorded before it runs (``lr``...).
        asked: When it was asked (wall clock), the start of its phases.
    """

    trial: optuna.Trial
    params: dict[str, Any]
    spec: TrialSpec
    derived: Mapping[str, Any]
    asked: float


@dataclass(frozen=True)
class Skip:
    """Why a proposed configuration is not run: its ``status_reason`` and ``status_detail``."""

    reason: str
    detail: str


class Ending(enum.Enum):
    """Why the search proposes no more trials."""

    #: It launched ``n_trials`` (duplicates and skips counted as the reasons say).
    N_TRIALS = "n_trials"
    #: The sampler has nothing left to propose: the grid or the space used up, or the
    #: constraints skipped too many in a row.
    EXHAUSTED = "exhausted"
    #: It was interrupted (Ctrl-C, SIGTERM).
    INTERRUPTED = "interrupted"
    #: The budget is spent, or cannot fit the next trial.
    BUDGET = "budget"


@dataclass(frozen=True)
class Finished:
    """No more trials start: ``ending`` says why."""

    ending: Ending


@dataclass(frozen=True)
class Launch:
    """A trial to start: ``task`` as its process gets it, for the study's trials ``members``
    (one, or a fused group's, in the group's order)."""

    task: TrialTask
    members: tuple[Proposal, ...]

    @property
    def fused(self) -> bool:
        """It trains a fused group."""
        return len(self.members) > 1
