"""Trained models out of a search: which finished trials keep their final weights.

With ``workload.save_model`` set, rank 0 of every trial writes its final weights to
``model.pt`` in the trial's run folder and reports the path. As each trial completes, the
search decides (``ModelKeeper``, in the search's one writer process):

- ``all``: every COMPLETE trial keeps its file; the path is its ``model_path`` user attr.
- ``best``: a trial keeps its file while no other COMPLETE trial beats it on every objective
  (the Pareto front of a multi-objective study; the best value, ties kept, of a
  single-objective one). A trial that completes behind the front has its file deleted and
  records no path; one that moves the front deletes the files of the trials it beats, and the
  study lists those trials in its ``hpsearch.removed_models`` attr (a finished trial's own
  attrs can no longer be written), so every reader of the trials table sees their
  ``model_path`` cleared.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch.record import ATTR_REMOVED_MODELS, MODEL_PATH

if TYPE_CHECKING:
    import optuna

__all__ = ["ATTR_REMOVED_MODELS", "ModelKeeper", "dominates"]



def dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str]) -> bool:
    """Whether values ``a`` beat ``b``: at least as good on every objective and better on one.

    Example:
        >>> dominates([0.9, 10.0], [0.8, 12.0], ["maximize", "minimize"])
        True
        >>> dominates([0.9, 10.0], [0.9, 10.0], ["maximize", "minimize"])
        False
    """
    sign = [1.0 if d == "minimize" else -1.0 for d in directions]
    pairs = [(s * x, s * y) for s, x, y in zip(sign, a, b)]
    return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)


@dataclass
class ModelKeeper:
    """Decides, as each trial completes, whether its saved weights stay (see the module).

    Attributes:
        mode: ``none``, ``all`` or ``best`` (``workload.save_model``).
        directions: The study's objective directions.
        front: Trial number -> objective values of the COMPLETE trials no other beats.
        paths: Trial number -> saved weights, for the front's trials that have them.
        removed: Trial numbers whose weights were deleted after they completed.
    """

    mode: str
    directions: tuple[str, ...]
    front: dict[int, list[float]] = field(default_factory=dict)
    paths: dict[int, str] = field(default_factory=dict)
    removed: list[int] = field(default_factory=list)

    @classmethod
    def of_study(cls, study: optuna.Study, mode: str) -> ModelKeeper:
        """The keeper of a study that may already have trials (``resume``)."""
        from optuna.trial import TrialState

        directions = tuple(d.name.lower() for d in study.directions)
        if mode == "none":
            return cls(mode, directions)
        keeper = cls(mode, directions, removed=[int(n) for n in study.user_attrs.get(ATTR_REMOVED_MODELS, [])])
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if t.values is not None:
                keeper._enter(t.number, [float(v) for v in t.values], t.user_attrs.get(MODEL_PATH))
        return keeper

    def keep(self, number: int, values: Sequence[float], path: str | None, study: optuna.Study | None = None
             ) -> dict[str, Any]:
        """Record that trial ``number`` completed with ``values`` and saved its weights at
        ``path`` (``None``: it saved none). Deletes the files the rule no longer keeps, lists
        the trials that lost theirs on ``study``, and returns the attrs to write on the trial
        (``model_path`` when it keeps its file).

        Example:
            >>> keeper = ModelKeeper("best", ("maximize",))
            >>> keeper.keep(0, [0.8], "/nowhere/0/model.pt"), keeper.keep(1, [0.9], "/nowhere/1/model.pt")
            ({'model_path': '/nowhere/0/model.pt'}, {'model_path': '/nowhere/1/model.pt'})
            >>> keeper.keep(2, [0.5], "/nowhere/2/model.pt"), keeper.removed
            ({}, [0])
        """
        if self.mode == "none" or path is None:
            return {}
        if self.mode == "all":
            return {MODEL_PATH: path}
        finite = [float(v) for v in values]
        if not all(math.isfinite(v) for v in finite) or any(
                dominates(other, finite, self.directions) for other in self.front.values()):
            _delete(path)
            return {}
        beaten = self._enter(number, finite, path)
        if beaten and study is not None:
            study.set_user_attr(ATTR_REMOVED_MODELS, sorted(self.removed))
        return {MODEL_PATH: path}

    def _enter(self, number: int, values: list[float], path: str | None) -> list[int]:
        """Put a non-dominated trial on the front; drop (and delete the files of) those it beats."""
        if any(dominates(other, values, self.directions) for other in self.front.values()):
            return []
        beaten = [n for n, other in self.front.items() if dominates(values, other, self.directions)]
        for n in beaten:
            del self.front[n]
            old = self.paths.pop(n, None)
            if old is not None and self.mode == "best":
                _delete(old)
                if n not in self.removed:
                    self.removed.append(n)
        self.front[number] = values
        if path is not None and number not in self.removed:
            self.paths[number] = path
        return beaten


def _delete(path: str) -> None:
    # On a Ray cluster a trial's files are on the node of its rank 0; a file this process
    # cannot see is left there (docs/workloads.md: run folders on a shared file system).
    Path(path).unlink(missing_ok=True)
