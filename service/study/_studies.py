"""The studies of a store and what each one declares: its objectives, their directions, its
params and its own attrs, read without touching its trials."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hpsearch import record
from hpsearch.study._schema import direct_sql
from hpsearch.study._summary import StudyListing, study_listing
from hpsearch.study._table import read_trials

# optuna and sqlalchemy are imported where a store is read (``import hpsearch`` stays light).
if TYPE_CHECKING:
    import optuna

__all__ = ["StudyInfo", "list_studies", "param_names", "study_info", "study_infos"]

#: Where Optuna keeps the names ``Study.set_metric_names`` gives the objectives.
_METRIC_NAMES = "study:metric_names"

#: User attrs the listing's table leaves in the store: series and long text.
_BULKY = frozenset({record.CURVES, record.STATUS_DETAIL})


@dataclass(frozen=True)
class StudyInfo:
    """What a study declares about itself.

    Attributes:
        name: The study's name.
        objectives: The objective metric names, in order (``value0``... when the study names none).
        directions: ``maximize`` or ``minimize`` per objective.
        user_attrs: The study's own user attrs (hpsearch keeps its space text and versions there).
    """

    name: str
    objectives: tuple[str, ...]
    directions: tuple[str, ...]
    user_attrs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def objective_directions(self) -> dict[str, str]:
        """Objective name -> direction."""
        return dict(zip(self.objectives, self.directions))


def _info(study: optuna.study._frozen.FrozenStudy) -> StudyInfo:
    directions = tuple(d.name.lower() for d in study.directions)
    names = study.system_attrs.get(_METRIC_NAMES) or [f"value{i}" for i in range(len(directions))]
    return StudyInfo(study.study_name, tuple(names), directions, dict(study.user_attrs))


def study_infos(storage: optuna.storages.BaseStorage) -> list[StudyInfo]:
    """Every study of the store, by creation order, without reading trials."""
    return [_info(s) for s in storage.get_all_studies()]


def study_info(storage: optuna.storages.BaseStorage, name: str) -> StudyInfo:
    """One study's ``StudyInfo``.

    Raises:
        KeyError: no study of that name.
    """
    study_id = storage.get_study_id_from_name(name)
    directions = tuple(d.name.lower() for d in storage.get_study_directions(study_id))
    names = storage.get_study_system_attrs(study_id).get(_METRIC_NAMES) or [f"value{i}" for i in range(len(directions))]
    return StudyInfo(name, tuple(names), directions, dict(storage.get_study_user_attrs(study_id)))


def param_names(storage: optuna.storages.BaseStorage, name: str) -> list[str]:
    """The names of the params any trial of the study has, in first-seen order.

    Raises:
        KeyError: no study of that name.
    """
    study_id = storage.get_study_id_from_name(name)
    if direct_sql(storage):
        from optuna.storages._rdb import models
        from sqlalchemy import func, select

        trials_t = models.TrialModel.__table__
        params_t = models.TrialParamModel.__table__
        query = (select(params_t.c.param_name, func.min(params_t.c.param_id).label("first"))
                 .join(trials_t, trials_t.c.trial_id == params_t.c.trial_id)
                 .where(trials_t.c.study_id == study_id).group_by(params_t.c.param_name).order_by("first"))
        with storage.engine.connect() as conn:  # type: ignore[attr-defined]
            return [str(n) for n, _ in conn.execute(query)]
    seen: dict[str, None] = {}
    for t in storage.get_all_trials(study_id, deepcopy=False):
        seen.update(dict.fromkeys(t.params))
    return list(seen)


def list_studies(storage: optuna.storages.BaseStorage) -> list[StudyListing]:
    """Every study of the store with its trials by state, its best values and its last activity
    (``hpsearch ls``)."""
    out = []
    for info in study_infos(storage):
        frame = read_trials(storage, info.name, info.objectives, hidden=_BULKY)
        out.append(study_listing(info.name, frame, info.objectives, info.directions))
    return out
