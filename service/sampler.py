"""Optuna samplers and distributions from a ``SearchSpace``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    import optuna

__all__ = ["create_sampler", "distributions", "grid_size"]



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


def grid_size(space: SearchSpace) -> int | None:
    """Number of distinct configurations, or ``None`` when some parameter is continuous."""
    sizes = []
    for p in space.parameters.values():
        if isinstance(p, Fixed):
            sizes.append(1)
        elif isinstance(p, Choice):
            sizes.append(len(p.choices))
        else:
            return None
    return math.prod(sizes)


def _grid_sampler_class() -> type:
    import optuna

    class AskTellGridSampler(optuna.samplers.GridSampler):
        """Optuna's grid sampler without its end-of-grid ``study.stop()``.

        That call is only allowed inside ``study.optimize``; from the ask/tell searcher it raised
        ``RuntimeError`` on the last grid point and Tune marked a finished trial as errored. The
        searcher stops asking at the grid size instead.
        """

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            return None

    return AskTellGridSampler


def create_sampler(space: SearchSpace) -> optuna.samplers.BaseSampler:
    """The seeded Optuna sampler ``search.sampler`` names.

    Raises:
        SpaceError: unknown sampler name, or grid over a continuous parameter.
    """
    import optuna

    name = space.search.sampler
    cls_name = SAMPLER_CLASS_NAMES.get(name.lower(), name)
    cls = getattr(optuna.samplers, cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, optuna.samplers.BaseSampler)):
        raise SpaceError(f"sampler must be one of {', '.join(SAMPLER_CLASS_NAMES)} or an optuna.samplers class name, got {name!r}",
                         key_path="search.sampler", source=space.source_path or "<space>")
    seed = space.search.seed
    if cls is optuna.samplers.GridSampler:
        grid: dict[str, list[Any]] = {}
        for key, p in space.parameters.items():
            if isinstance(p, Fixed):
                grid[key] = [p.value]
            elif isinstance(p, Choice):
                grid[key] = list(p.choices)
            else:
                raise SpaceError("the grid sampler needs every searched parameter as {choices: [...]}",
                                 key_path=f"parameters.{key}", source=space.source_path or "<space>")
        return _grid_sampler_class()(grid, seed=seed)
    try:
        return cls(seed=seed)
    except TypeError:  # a sampler without a seed argument
        return cls()
