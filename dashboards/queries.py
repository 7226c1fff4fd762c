"""What a figure endpoint was asked: :class:`FigureQuery`, and the errors of a bad request.

The dashboard's API (:mod:`hpsearch.dashboards.api`) answers ``GET /api/studies/NAME/figures/KIND``
by handing a :class:`FigureQuery` to the function of its figure table, which lives in the
figure's own module beside the figure's data and drawing (``frontier_from_query`` in
:mod:`hpsearch.dashboards.frontier`...). So a figure's query parameters are read where the
figure is, and the API's table only names which function answers which kind. Nothing here
imports plotly.

Example:
    >>> import pandas as pd
    >>> frame = pd.DataFrame({"number": [0], "state": ["COMPLETE"], "val_loss": [0.3]})
    >>> query = FigureQuery(frame, {"max_points": "50"}, ("val_loss",), lambda metric: "minimize")
    >>> query.metric(), query.max_points()
    ('val_loss', 50)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from hpsearch.dashboards.points import quality_metric, require_columns
from hpsearch.errors import HPSearchError
from hpsearch.record import Direction

__all__ = [
    "DEFAULT_MAX_POINTS",
    "BadRequest",
    "FigureQuery",
    "NotFound",
    "whole_number",
]

#: Scatter figures (the frontiers, the noise scale) draw at most this many trials unless the
#: client asks otherwise (``max_points``; 0 draws every trial): every Pareto-front trial, the
#: extremes of each axis, and one trial per occupied cell of a grid over the plot
#: (:func:`hpsearch.dashboards.points.thin_points`). Beyond a few thousand markers a scatter is
#: solid ink, and a 10,000-trial study's figure would be megabytes of JSON.
DEFAULT_MAX_POINTS = 2000


class BadRequest(HPSearchError):
    """A query parameter the API cannot use (not a number, an unknown column...)."""

    exit_code = 2
    http_status = 400


class NotFound(HPSearchError):
    """No such trial, figure or page."""

    exit_code = 2
    http_status = 404


def whole_number(query: Mapping[str, str], key: str, default: int, *, minimum: int,
                 maximum: int | None = None) -> int:
    """The query parameter ``key`` as a whole number, or ``default`` when absent or empty.

    Raises:
        BadRequest: Not a whole number, or outside ``minimum`` to ``maximum``.

    Example:
        >>> whole_number({"limit": "20"}, "limit", 50, minimum=1), whole_number({}, "limit", 50, minimum=1)
        (20, 50)
    """
    raw = query.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{key} must be a whole number, got {raw!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise BadRequest(f"{key} must be {bound}, got {value}")
    return value


def _no_curves(*, numbers: Iterable[int] | None = None, states: Iterable[str] | None = None,
               limit: int | None = None, fields: Iterable[str] | None = None) -> Mapping[int, Any]:
    return {}


@dataclass(frozen=True)
class FigureQuery:
    """One request for a study figure.

    Attributes:
        frame: The study's trials table (without the per-epoch ``curves``).
        params: The request's query parameters.
        objectives: The study's objectives, in order: a figure shows the first one that
            measures quality unless asked for another (:meth:`metric`).
        direction: Which values of a metric are better, for this study
            (``Search.direction``: its own direction for its objectives).
        curves: The ``curves`` attr of chosen trials (``StudyCache.curves`` of this study):
            ``curves(numbers=..., states=..., limit=..., fields=...)`` by trial number.
        space_text: The space file the study was started with (what a rank may hold, for the
            memory figure); empty where unknown.
    """

    frame: pd.DataFrame
    params: Mapping[str, str]
    objectives: Sequence[str]
    direction: Callable[[str], Direction]
    curves: Callable[..., Mapping[int, Any]] = field(default=_no_curves)
    space_text: str = ""

    def column(self, key: str, default: str) -> str:
        """The column named by the parameter ``key``, or ``default``.

        Raises:
            ColumnError: Some trial completed and the table has no such column (a 400).
        """
        value = self.params.get(key) or default
        require_columns(self.frame, value)
        return value

    def metric(self, key: str = "metric") -> str:
        """The metric named by the parameter ``key``, or by default the study's own quality
        objective (:func:`hpsearch.dashboards.points.quality_metric`): ``val_loss`` for a study
        of ``val_loss``."""
        return self.column(key, quality_metric(self.objectives))

    def whole_number(self, key: str, default: int, *, minimum: int, maximum: int | None = None) -> int:
        """The parameter ``key`` as a whole number (:func:`whole_number`)."""
        return whole_number(self.params, key, default, minimum=minimum, maximum=maximum)

    def max_points(self) -> int | None:
        """How many trials a scatter draws at most: ``max_points`` (0: all, ``None``), by
        default :data:`DEFAULT_MAX_POINTS`."""
        return self.whole_number("max_points", DEFAULT_MAX_POINTS, minimum=0) or None
