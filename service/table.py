"""The trials table of a study in an SQL store, read in bulk.

``Search.trials_dataframe`` is what the CLI, the API and the dashboard show. Optuna's own
``get_trials`` builds an ORM object for every param, attr and value of every trial: about 14 s
for a 10,000-trial study on SQLite (measured; roughly 368,000 row objects). This module reads
the same five tables of Optuna's schema with one plain query each and builds the same rows,
an order of magnitude faster. ``tests/service_tests/test_table.py`` checks that both give the
same table, so a change of Optuna's schema shows up as a failing test, not a wrong dashboard.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

__all__ = ["study_revision", "trial_rows"]


def trial_rows(storage: optuna.storages.RDBStorage, study_name: str, objectives: Sequence[str],
               *, hidden: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """One dict per trial, in trial-number order: ``number``, ``state``, the params, the user
    attrs (except ``hidden``), the objective values under ``objectives``' names and the times.

    Raises:
        KeyError: no study of that name (as Optuna's storage does).
    """
    from optuna.distributions import json_to_distribution
    from optuna.storages._rdb import models
    from sqlalchemy import select

    study_id = storage.get_study_id_from_name(study_name)
    trials_t = models.TrialModel.__table__
    of_study = select(trials_t.c.trial_id).where(trials_t.c.study_id == study_id).scalar_subquery()
    params_t = models.TrialParamModel.__table__
    values_t = models.TrialValueModel.__table__
    attrs_t = models.TrialUserAttributeModel.__table__
    with storage.engine.connect() as conn:
        trials = conn.execute(
            select(trials_t.c.trial_id, trials_t.c.number, trials_t.c.state, trials_t.c.datetime_start,
                   trials_t.c.datetime_complete).where(trials_t.c.study_id == study_id).order_by(trials_t.c.number)
        ).all()
        params = conn.execute(
            select(params_t.c.trial_id, params_t.c.param_name, params_t.c.param_value, params_t.c.distribution_json)
            .where(params_t.c.trial_id.in_(of_study)).order_by(params_t.c.param_id)
        ).all()
        values = conn.execute(
            select(values_t.c.trial_id, values_t.c.objective, values_t.c.value, values_t.c.value_type)
            .where(values_t.c.trial_id.in_(of_study)).order_by(values_t.c.objective)
        ).all()
        attrs = conn.execute(
            select(attrs_t.c.trial_id, attrs_t.c.key, attrs_t.c.value_json)
            .where(attrs_t.c.trial_id.in_(of_study)).order_by(attrs_t.c.trial_user_attribute_id)
        ).all()

    rows: dict[int, dict[str, Any]] = {}
    for trial_id, number, state, _, _ in trials:
        rows[trial_id] = {"number": number, "state": _name(state)}
    distributions: dict[str, Any] = {}
    for trial_id, name, value, dist_json in params:
        dist = distributions.get(dist_json)
        if dist is None:
            dist = distributions[dist_json] = json_to_distribution(dist_json)
        rows[trial_id][name] = dist.to_external_repr(value)
    for trial_id, key, value_json in attrs:
        if key not in hidden:
            rows[trial_id][key] = json.loads(value_json)
    for trial_id, objective, value, value_type in values:
        if objective < len(objectives):
            rows[trial_id][objectives[objective]] = _value(value, _name(value_type))
    for trial_id, _, _, start, complete in trials:
        row = rows[trial_id]
        row["datetime_start"] = _local(start)
        row["datetime_complete"] = _local(complete)
        row["duration_s"] = (complete - start).total_seconds() if start and complete else None
    return list(rows.values())


def study_revision(storage: optuna.storages.RDBStorage, study_name: str) -> tuple[Any, ...]:
    """A few aggregates that change whenever a trial of the study does, in one cheap query
    each: trials by state (a new trial, a trial that ends), the last completion time, the
    number of intermediate values (one per epoch of a running trial) and the newest attr row.

    The dashboard polls this and rebuilds a study's table only when it moved.
    """
    from optuna.storages._rdb import models
    from sqlalchemy import func, select

    study_id = storage.get_study_id_from_name(study_name)
    trials_t = models.TrialModel.__table__
    of_study = select(trials_t.c.trial_id).where(trials_t.c.study_id == study_id).scalar_subquery()
    steps_t = models.TrialIntermediateValueModel.__table__
    attrs_t = models.TrialUserAttributeModel.__table__
    with storage.engine.connect() as conn:
        states = conn.execute(select(trials_t.c.state, func.count(), func.max(trials_t.c.datetime_complete))
                              .where(trials_t.c.study_id == study_id).group_by(trials_t.c.state)).all()
        steps = conn.execute(select(func.count()).where(steps_t.c.trial_id.in_(of_study))).scalar()
        newest_attr = conn.execute(select(func.max(attrs_t.c.trial_user_attribute_id))
                                   .where(attrs_t.c.trial_id.in_(of_study))).scalar()
    return (tuple(sorted((_name(s), n, str(last)) for s, n, last in states)), steps, newest_attr)


def _name(enum_or_text: Any) -> str:
    return enum_or_text.name if hasattr(enum_or_text, "name") else str(enum_or_text)


def _value(value: float | None, value_type: str) -> float:
    if value_type == "INF_POS":
        return math.inf
    if value_type == "INF_NEG":
        return -math.inf
    return float("nan") if value is None else float(value)


def _local(stamp: datetime.datetime | None) -> datetime.datetime | None:
    """Optuna stores naive UTC and shows naive local time; so does this table."""
    if stamp is None:
        return None
    return stamp.replace(tzinfo=datetime.timezone.utc).astimezone().replace(tzinfo=None)
