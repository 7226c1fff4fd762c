"""Optuna samplers and distributions from a ``SearchSpace``."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from hpsearch import record
from hpsearch.errors import SpaceError
from hpsearch.search_spaces import (
    SAMPLER_CLASS_NAMES,
    Choice,
    Fixed,
    FloatRange,
    IntRange,
    Parameter,
    SearchSpace,
)
from hpsearch.study import sql_store, trial_configurations
from hpsearch.study.reasons import cut_short, occupies_its_configuration

if TYPE_CHECKING:
    import optuna

__all__ = ["ask_at", "create_sampler", "distributions", "grid_points", "held_by"]

def distributions(space: SearchSpace) -> dict[str, optuna.distributions.BaseDistribution]:
    """One Optuna distribution per parameter, fixed ones as a one-value categorical so that every
    trial records every parameter (and the grid sampler knows them all)."""
    return {name: _distribution(p) for name, p in space.parameters.items()}


def _distribution(p: Parameter) -> optuna.distributions.BaseDistribution:
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    if isinstance(p, Fixed):
        return CategoricalDistribution([p.value])
    if isinstance(p, Choice):
        return CategoricalDistribution(list(p.choices))
    if isinstance(p, IntRange):
        return IntDistribution(p.low, p.high, log=p.log, step=p.step)
    assert isinstance(p, FloatRange)
    return FloatDistribution(p.low, p.high, log=p.log, step=p.step)


def grid_points(space: SearchSpace) -> list[dict[str, Any]]:
    """Every configuration of an all-choices space, in the space's parameter order.

    Raises:
        SpaceError: some parameter is a range.
    """
    grid: dict[str, list[Any]] = {}
    for key, p in space.parameters.items():
        if isinstance(p, Fixed):
            grid[key] = [p.value]
        elif isinstance(p, Choice):
            grid[key] = list(p.choices)
        else:
            raise SpaceError("the grid sampler needs every searched parameter as {choices: [...]}",
                             key_path=f"parameters.{key}", source=space.source_path or "<space>")
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


def _configuration(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """A trial's parameters; for a queued (WAITING) trial, the ones it was queued with."""
    return dict(trial.params) or dict(trial.system_attrs.get("fixed_params", {}))


def _point_key(point: Mapping[str, Any]) -> tuple[Any, ...]:
    return record.params_key(point)


@dataclass
class _Read:
    """What the grid sampler has read of a study's trials: each trial's configuration key by
    trial id (``None``: cut short by the search, its configuration free again), the largest id
    read, and the ids that were unfinished when read."""

    keys: dict[int, tuple[Any, ...] | None] = field(default_factory=dict)
    newest: int = -1
    unfinished: set[int] = field(default_factory=set)


def _grid_sampler_class() -> type:
    import optuna

    class StudyGridSampler(optuna.samplers.BaseSampler):
        """Every configuration of the grid once, in a seeded random order, the trials of most
        processes first.

        Trials are placed on the devices first come, first served, so a two-rank trial asked
        while a one-rank trial runs waits for it with a device idle; running the grid's shapes
        largest first (their order within a shape random) leaves devices idle only where one
        shape gives way to the next (``benchmarks/search_span.py``).

        Unlike Optuna's ``GridSampler``, the configurations still to run are read from the study
        each time: a trial cut short by an interrupted search (FAIL, ``interrupted``) frees its
        configuration again, a configuration queued for a rerun counts as taken, and the grid
        never calls ``study.stop()`` (only allowed inside ``study.optimize``; from the ask/tell
        searcher it raised on the last grid point).
        """

        def __init__(self, points: list[dict[str, Any]], seed: int | None = None,
                     processes: Callable[[dict[str, Any]], int] | None = None) -> None:
            import numpy as np

            order = np.random.default_rng(seed).permutation(len(points))
            shuffled = [points[i] for i in order]
            self._points = shuffled if processes is None else sorted(shuffled, key=lambda p: -processes(p))
            self._rng = np.random.default_rng(seed)
            self._chosen: dict[int, dict[str, Any]] = {}
            self._read: dict[int, _Read] = {}  # by study id: what ``_taken`` has read

        def remaining(self, study: optuna.Study) -> list[dict[str, Any]]:
            """The configurations no trial of the study holds yet, in the order they will run."""
            taken = self._taken(study)
            return [p for p in self._points if _point_key(p) not in taken]

        def _taken(self, study: optuna.Study) -> set[tuple[Any, ...]]:
            """The configurations the study's trials hold. From an SQL store, read incrementally
            (``trial_configurations``): the trials new since the last call and those unfinished
            then. A search that asks ahead holds a running trial per configuration asked, which
            Optuna's trial cache reads whole again on every call."""
            store = sql_store(study._storage)
            if store is None:
                return {_point_key(_configuration(t)) for t in study.get_trials(deepcopy=False)
                        if occupies_its_configuration(t)}
            read = self._read.setdefault(study._study_id, _Read())
            for trial_id, state, params, reason in trial_configurations(
                    store, study._study_id, after=read.newest, watched=sorted(read.unfinished)):
                read.newest = max(read.newest, trial_id)
                read.keys[trial_id] = None if cut_short(state, reason) else _point_key(params)
                if state in ("RUNNING", "WAITING"):
                    read.unfinished.add(trial_id)
                else:
                    read.unfinished.discard(trial_id)
            return {key for key in read.keys.values() if key is not None}

        def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
            return {}

        def sample_relative(self, study: Any, trial: Any, search_space: Any) -> dict[str, Any]:
            return {}

        def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            if "fixed_params" in trial.system_attrs or trial.params:  # queued, or asked at its point
                return
            left = self.remaining(study)
            if left:
                self._chosen[trial._trial_id] = left[0]

        def sample_independent(self, study: Any, trial: optuna.trial.FrozenTrial, param_name: str,
                               param_distribution: Any) -> Any:
            point = self._chosen.get(trial._trial_id)
            if point is not None and param_name in point:
                return point[param_name]
            # The grid is used up (the searcher stops asking before this): any grid value.
            values = param_distribution.choices
            return values[int(self._rng.integers(len(values)))]

        def after_trial(self, study: Any, trial: optuna.trial.FrozenTrial, state: Any, values: Any) -> None:
            self._chosen.pop(trial._trial_id, None)

    return StudyGridSampler


def ask_at(study: optuna.Study, point: Mapping[str, Any],
           distributions: Mapping[str, optuna.distributions.BaseDistribution],
           user_attrs: Mapping[str, Any] | None = None) -> optuna.Trial:
    """``study.ask(distributions)`` for a configuration already chosen (the grid's next point,
    ``remaining(study)[0]``, or a confirmation run): the new RUNNING trial holds ``point`` as its
    params, and ``user_attrs``, from the start, written with the trial in one transaction.

    Optuna's ask writes each parameter in a transaction of its own and has the sampler read the
    study again to choose the point: on SQLite about 60% of an ask's 25 ms for the six
    parameters of a digits grid, paid for every configuration a fused search asks ahead.
    """
    import datetime

    from optuna.trial import FrozenTrial, Trial, TrialState

    template = FrozenTrial(number=-1, state=TrialState.RUNNING, value=None, datetime_start=datetime.datetime.now(),
                           datetime_complete=None, params=dict(point),
                           distributions={name: distributions[name] for name in point},
                           user_attrs=dict(user_attrs or {}),
                           system_attrs={}, intermediate_values={}, trial_id=-1)
    return Trial(study, study._storage.create_new_trial(study._study_id, template_trial=template))


def held_by(distributions: Mapping[str, optuna.distributions.BaseDistribution],
            params: Mapping[str, Any]) -> dict[str, Any]:
    """The ``params`` the study's ``distributions`` can hold as params: those of a parameter it
    has whose distribution contains the value (a categorical's choices are fixed for a study, so
    a value between them cannot be written as that param).

    Example:
        >>> from optuna.distributions import CategoricalDistribution
        >>> held_by({"base_lr": CategoricalDistribution([0.01]), "world_size": CategoricalDistribution([1, 2])},
        ...         {"base_lr": 0.0174, "world_size": 2, "hidden": 32})
        {'world_size': 2}
    """
    held = {}
    for name, value in params.items():
        distribution = distributions.get(name)
        if distribution is None:
            continue
        try:
            inside = distribution._contains(distribution.to_internal_repr(value))
        except (ValueError, TypeError):  # a categorical's to_internal_repr refuses a value it lacks
            inside = False
        if inside:
            held[name] = value
    return held


def create_sampler(space: SearchSpace) -> optuna.samplers.BaseSampler:
    """The seeded Optuna sampler ``search.sampler`` names (a short name of ``SAMPLERS``; the
    space file's parser reads an Optuna class name as its short name).

    Raises:
        SpaceError: a sampler that cannot be built from the space (the parser refuses it first;
            a ``SearchSpace`` built in Python can still name one), or grid over a continuous
            parameter.
    """
    import optuna

    name = space.search.sampler
    cls_name = SAMPLER_CLASS_NAMES.get(name.lower())
    if cls_name is None:
        raise SpaceError(f"sampler must be one of {', '.join(SAMPLER_CLASS_NAMES)}, got {name!r}",
                         key_path="search.sampler", source=space.source_path or "<space>")
    cls = getattr(optuna.samplers, cls_name)
    seed = space.search.seed
    if cls in (optuna.samplers.GridSampler, optuna.samplers.BruteForceSampler):
        # Both would call study.stop() at the end of the grid; the study grid sampler does not.
        emulated = space.resources.emulate_ranks
        sampler: optuna.samplers.BaseSampler = _grid_sampler_class()(
            grid_points(space), seed=seed,
            processes=lambda point: 1 if emulated == "on" else int(point.get(record.WORLD_SIZE, 1)))
        return sampler
    return cast("optuna.samplers.BaseSampler", cls(seed=seed))
