"""The trials table of a study, read once for every reader: the one place that reads trials in bulk.

``Search.trials_dataframe``, the CLI, the dashboard's API and the analysis all show this table.
Optuna's own ``get_trials`` builds an ORM object for every param, attr and value of every trial:
about 14 s for a 10,000-trial study on SQLite (roughly 368,000 row objects). For an
SQL store of a known schema (``_schema.direct_sql``) this module reads the same five tables of
Optuna's schema with one plain query each and builds the same rows, an order of magnitude
faster; any other store is read through Optuna's public API into the same rows.
``tests/service_tests/test_table.py`` checks that both give the same table.
"""

from __future__ import annotations

import datetime
import functools
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from hpsearch import record
from hpsearch.record import ATTR_REMOVED_MODELS, format_bytes
from hpsearch.study._schema import direct_sql
from hpsearch.trials.scaling import LR_RULES, scaled_lr

# pandas, optuna and sqlalchemy (half a second together) are imported inside the functions
# that read a store, so that ``import hpsearch`` stays light; so are hashlib (OpenSSL, 2 ms) for
# the dashboard's revision and hpsearch.planner.saved_models for the studies that keep weights.
if TYPE_CHECKING:
    import optuna
    import pandas as pd

__all__ = ["display_state", "display_value", "evaluations", "ran_as_text", "read_attr", "read_trials", "revision", "trial_attr", "trial_configurations", "trial_rows", "with_scaled_lr"]

#: Trial states that can still change. Optuna refuses to write to a finished trial (its state,
#: params, values, attrs and intermediate values are final), so only these need watching.
_UNFINISHED = ("RUNNING", "WAITING")

#: The state the table shows for a RUNNING trial whose ranks have not started: it is waiting for
#: its resources (Ray Tune's word for it). Optuna's own state stays RUNNING.
PENDING = "PENDING"


def display_state(state: str, attrs: Mapping[str, Any]) -> str:
    """The state a reader shows: Optuna's, except that a RUNNING trial still waiting for its
    resources (no ``training_started`` attr yet) is ``PENDING``.

    Example:
        >>> display_state("RUNNING", {}), display_state("RUNNING", {"training_started": True})
        ('PENDING', 'RUNNING')
    """
    if state == "RUNNING" and not attrs.get(record.TRAINING_STARTED):
        return PENDING
    return state


def evaluations(curves: Any) -> list[dict[str, Any]]:
    """A trial's stored ``curves`` (``{metric: [value per evaluation]}``) as its evaluations in
    order, one dict per evaluation; ``[]`` for none.

    Example:
        >>> evaluations({"samples_seen": [100, 200], "val_accuracy": [0.5, 0.7]})
        [{'samples_seen': 100, 'val_accuracy': 0.5}, {'samples_seen': 200, 'val_accuracy': 0.7}]
    """
    if not isinstance(curves, Mapping):
        return []
    series = {k: v for k, v in curves.items() if isinstance(v, list)}
    n = max((len(v) for v in series.values()), default=0)
    return [{k: v[i] if i < len(v) else None for k, v in series.items()} for i in range(n)]


def ran_as_text(attrs: Mapping[str, Any]) -> str | None:
    """How a trial the search halved ran (``ran_as``): ``"ran as b 512 x A 2 (b 1024 ran out of
    memory)"``; ``None`` for a trial that ran as asked. A halved trial showed b 1024 in the table
    and on its page with no mark, though no rank ever held a batch of 1024.

    Example:
        >>> ran_as_text({"ran_as": {"per_device_batch_size": 512, "grad_accum_steps": 2, "out_of_memory_at": 1024}})
        'ran as b 512 x A 2 (b 1024 ran out of memory)'
    """
    ran = attrs.get(record.RAN_AS)
    if not isinstance(ran, Mapping):
        return None
    text = f"ran as b {ran.get(record.PER_DEVICE_BATCH_SIZE)} x A {ran.get(record.GRAD_ACCUM_STEPS)}"
    at = ran.get("out_of_memory_at")
    return text + (f" (b {at} ran out of memory)" if at is not None else "")


#: Attrs holding wall-clock times (seconds since the epoch).
_TIMESTAMPS = frozenset({record.TRAINING_STARTED})


def display_value(key: str, value: Any) -> str | None:
    """A trial's param or attr as a reader shows it, or ``None`` for one a listing leaves out:
    times as local dates, byte counts in a binary unit, numbers to three significant digits
    with thousands separators, ``ran_as`` in words; the ``phases`` dict and the ``curves`` are
    left out (``hpsearch status STUDY --trial N`` and the trial page draw them). ``hpsearch
    best`` printed ``training_started 1.8e+09`` and ``memory_limit_bytes 629145600``.

    Example:
        >>> display_value("memory_limit_bytes", 629145600), display_value("samples_per_s", 2048.3)
        ('600 MiB', '2,050')
        >>> display_value("phases", {"asked": 0.0}) is None, display_value("lr_rule", "sqrt")
        (True, 'sqrt')
    """
    if key in (record.PHASES, record.CURVES):
        return None
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if key == record.RAN_AS:
        return ran_as_text({key: value}) or str(value)
    if key in _TIMESTAMPS and isinstance(value, (int, float)) and not isinstance(value, bool) and value > 1e8:
        return datetime.datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M:%S")
    if key.endswith("_bytes") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_bytes(value)
    if isinstance(value, float):
        if value != 0 and math.isfinite(value) and abs(value) >= 1000:
            return f"{float(f'{value:.3g}'):,.0f}"
        return f"{value:.3g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def read_trials(storage: optuna.storages.BaseStorage, study_name: str, objectives: Sequence[str], *,
                hidden: frozenset[str] = frozenset(), attrs: Sequence[str] | None = None) -> pd.DataFrame:
    """The study's trials table: one row per trial, in trial-number order, with ``number``,
    ``state`` (``display_state``), every param and user attr (except ``hidden``; only those in
    ``attrs`` when given: a reader that needs a few columns of a large study reads only those)
    as a column, the objective values under ``objectives``' names, ``datetime_start``,
    ``datetime_complete`` and ``duration_s``. A ``model_path`` whose file the search deleted
    (``workload.save_model: best``, ``hpsearch.planner.saved_models``) is left out. ``lr`` is the LR the
    trial's rule scaled to, also for a study written before trials kept it apart from the
    schedule's last LR (``with_scaled_lr``).

    Raises:
        KeyError: no study of that name.
    """
    import pandas as pd

    if attrs is not None:  # the state needs this one (PENDING until it is set), the params a confirmation ran, and the LR the batches
        attrs = [*attrs, record.TRAINING_STARTED, record.ROLE, record.CONFIRMATION,
                 *((record.EFFECTIVE_BATCH_SIZE, record.BASE_BATCH_SIZE) if record.LR in attrs else ())]
    if direct_sql(storage):
        rows = trial_rows(storage, study_name, objectives, hidden=hidden, attrs=attrs)  # type: ignore[arg-type]
    else:
        rows = _api_rows(storage, study_name, objectives, hidden, attrs)
    for row in rows:
        row["state"] = display_state(row["state"], row)
        with_ran_params(row)
        with_scaled_lr(row)
    if any(record.MODEL_PATH in row for row in rows):
        _clear_removed_models(storage, study_name, rows)
    return pd.DataFrame(rows)


def with_ran_params(row: dict[str, Any]) -> dict[str, Any]:
    """Lay a confirmation run's exact configuration over its params (``row``: its params and user
    attrs): a value its study's distributions cannot hold (an LR between the choices) is kept in
    its ``confirmation`` record, and the table shows what the trial ran. Returns ``row``.

    Example:
        >>> with_ran_params({"base_lr": 0.01, "confirmation": {"params": {"base_lr": 0.0174}}})["base_lr"]
        0.0174
    """
    ran = row.get(record.CONFIRMATION)
    params = ran.get("params") if isinstance(ran, Mapping) else None
    if isinstance(params, Mapping):
        row.update(params)
    return row


def with_scaled_lr(row: dict[str, Any]) -> dict[str, Any]:
    """Set a trial's ``lr`` (``row``: its params and user attrs) to the LR its rule scaled to,
    from its ``base_lr``, ``lr_rule``, effective batch and base batch, where it has them all;
    returns ``row``.

    Releases before ``last_lr`` existed overwrote ``lr`` with the LR of the trial's last step:
    under a cosine schedule that is about 0, and the LR law fitted it (a search of base LRs
    0.02 and 0.05 was answered with 0.000147). Their params still say what the rule gave; the
    value they recorded is what ``last_lr`` means now, and is kept as that.

    Example:
        >>> row = with_scaled_lr({"base_lr": 0.05, "lr_rule": "sqrt", "effective_batch_size": 64,
        ...                       "base_batch_size": 16, "lr": 4.7e-05, "samples_seen": 4314})
        >>> row["lr"], row["last_lr"]
        (0.1, 4.7e-05)
    """
    base, rule = row.get(record.BASE_LR), row.get(record.LR_RULE)
    batch, base_batch = row.get(record.EFFECTIVE_BATCH_SIZE), row.get(record.BASE_BATCH_SIZE)
    if rule not in LR_RULES or not all(_positive(v) for v in (base, batch, base_batch)):
        return row
    stored = row.get(record.LR)
    if record.LAST_LR not in row and record.SAMPLES_SEEN in row and isinstance(stored, (int, float)):
        row[record.LAST_LR] = stored
    row[record.LR] = scaled_lr(rule, float(base), int(batch), int(base_batch))  # type: ignore[arg-type]
    return row


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _clear_removed_models(storage: optuna.storages.BaseStorage, study_name: str, rows: list[dict[str, Any]]) -> None:
    """Drop the ``model_path`` of trials whose weights the search deleted after they finished
    (their own attrs can no longer be written; the study lists them)."""
    removed = removed_models(storage.get_study_user_attrs(storage.get_study_id_from_name(study_name)))
    for row in rows:
        if row["number"] in removed:
            row.pop(record.MODEL_PATH, None)


def _api_rows(storage: optuna.storages.BaseStorage, study_name: str, objectives: Sequence[str],
              hidden: frozenset[str], attrs: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """``trial_rows`` through Optuna's public API: any store, any schema."""
    study_id = storage.get_study_id_from_name(study_name)
    wanted = None if attrs is None else set(attrs)
    rows = []
    for t in storage.get_all_trials(study_id, deepcopy=False):
        row: dict[str, Any] = {"number": t.number, "state": t.state.name}
        row.update(t.params)
        row.update({k: v for k, v in t.user_attrs.items() if k not in hidden and (wanted is None or k in wanted)})
        if t.values is not None:
            row.update({name: value for name, value in zip(objectives, t.values)})
        row["datetime_start"] = t.datetime_start
        row["datetime_complete"] = t.datetime_complete
        row["duration_s"] = ((t.datetime_complete - t.datetime_start).total_seconds()
                             if t.datetime_start and t.datetime_complete else None)
        rows.append(row)
    return rows


def read_attr(storage: optuna.storages.BaseStorage, study_name: str, key: str, *,
              numbers: Sequence[int] | None = None, states: Sequence[str] | None = None,
              limit: int | None = None, fields: Sequence[str] | None = None) -> dict[int, Any]:
    """One user attr of a study's trials, by trial number (see ``trial_attr``), from any store.

    The table leaves large attrs (the per-evaluation ``curves``) out; the trial page, the
    learning-curves figure and the analysis read them here, for the trials they need.

    Raises:
        KeyError: no study of that name.
    """
    if direct_sql(storage):
        return trial_attr(storage, study_name, key, numbers=numbers, states=states,  # type: ignore[arg-type]
                          limit=limit, fields=fields)
    chosen = None if numbers is None else {int(n) for n in numbers}
    wanted = None if states is None else set(states)
    found: dict[int, Any] = {}
    study_id = storage.get_study_id_from_name(study_name)
    for t in storage.get_all_trials(study_id, deepcopy=False):
        if key not in t.user_attrs or (chosen is not None and t.number not in chosen) \
                or (wanted is not None and t.state.name not in wanted):
            continue
        value = t.user_attrs[key]
        if fields is not None:
            value = {f: value.get(f) for f in fields} if isinstance(value, dict) else value
        found[t.number] = value
        if limit is not None and len(found) >= limit:
            break
    return found


def revision(storage: optuna.storages.BaseStorage, study_name: str, *,
             since: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
    """Something that changes whenever a trial of the study does, read cheaply from an SQL
    store (``study_revision``); from any other store, each trial's state, evaluations, attrs
    and end.

    Raises:
        KeyError: no study of that name.
    """
    if direct_sql(storage):
        return study_revision(storage, study_name, since=since)  # type: ignore[arg-type]
    study_id = storage.get_study_id_from_name(study_name)
    return tuple((t.number, t.state, len(t.intermediate_values), len(t.user_attrs), t.datetime_complete)
                 for t in storage.get_all_trials(study_id, deepcopy=False))


def trial_rows(storage: optuna.storages.RDBStorage, study_name: str, objectives: Sequence[str],
               *, hidden: frozenset[str] = frozenset(), attrs: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One dict per trial, in trial-number order: ``number``, ``state``, the params, the user
    attrs (except ``hidden``; only those in ``attrs`` when given), the objective values under
    ``objectives``' names and the times.

    Raises:
        KeyError: no study of that name (as Optuna's storage does).
    """
    from optuna.storages._rdb import models
    from sqlalchemy import select

    study_id = storage.get_study_id_from_name(study_name)
    trials_t = models.TrialModel.__table__
    of_study = select(trials_t.c.trial_id).where(trials_t.c.study_id == study_id).scalar_subquery()
    params_t = models.TrialParamModel.__table__
    values_t = models.TrialValueModel.__table__
    attrs_t = models.TrialUserAttributeModel.__table__
    with storage.engine.connect() as conn:
        trials = _plain_rows(conn, (
            select(trials_t.c.trial_id, trials_t.c.number, trials_t.c.state, trials_t.c.datetime_start,
                   trials_t.c.datetime_complete).where(trials_t.c.study_id == study_id).order_by(trials_t.c.number)
        ))
        params = _plain_rows(conn, (
            select(params_t.c.trial_id, params_t.c.param_name, params_t.c.param_value, params_t.c.distribution_json)
            .where(params_t.c.trial_id.in_(of_study)).order_by(params_t.c.param_id)
        ))
        values = _plain_rows(conn, (
            select(values_t.c.trial_id, values_t.c.objective, values_t.c.value, values_t.c.value_type)
            .where(values_t.c.trial_id.in_(of_study)).order_by(values_t.c.objective)
        ))
        of_attrs = (select(attrs_t.c.trial_id, attrs_t.c.key, attrs_t.c.value_json)
                    .where(attrs_t.c.trial_id.in_(of_study)))
        if hidden:  # left in the database: ``curves`` is most of a study's bytes
            of_attrs = of_attrs.where(attrs_t.c.key.not_in(sorted(hidden)))
        if attrs is not None:
            of_attrs = of_attrs.where(attrs_t.c.key.in_(sorted(set(attrs) - hidden)))
        found = _plain_rows(conn, of_attrs.order_by(attrs_t.c.trial_user_attribute_id))

    # Each query reads the database as it is when that query runs: a trial created after the
    # first one (by a search writing while the dashboard reads) has rows in the later ones.
    # It is left for the next read, as a trial created a moment later would be.
    rows: dict[int, dict[str, Any]] = {}
    for trial_id, number, state, _, _ in trials:
        rows[trial_id] = {"number": number, "state": _name(state)}
    for trial_id, name, value in _external_params(params):
        if trial_id in rows:
            rows[trial_id][name] = value
    for (trial_id, key, _), value in zip(found, _json_values([a[2] for a in found])):
        if trial_id in rows:
            rows[trial_id][key] = value
    for trial_id, objective, value, value_type in values:
        if objective < len(objectives) and trial_id in rows:
            rows[trial_id][objectives[objective]] = _value(value, _name(value_type))
    for trial_id, _, _, start, complete in trials:
        row = rows[trial_id]
        start, complete = _stamp(start), _stamp(complete)
        row["datetime_start"] = _local(start)
        row["datetime_complete"] = _local(complete)
        row["duration_s"] = (complete - start).total_seconds() if start and complete else None
    return list(rows.values())


def trial_configurations(storage: optuna.storages.RDBStorage, study_id: int, *, after: int,
                         watched: Sequence[int] = ()) -> list[tuple[int, str, dict[str, Any], Any]]:
    """The study's trials with an id above ``after`` or in ``watched``, by id: ``(trial_id,
    state, params, status_reason)``; a queued (WAITING) trial's params are the ones it was
    queued with, and ``status_reason`` is ``None`` where it has none.

    What the grid sampler needs to know which configurations are taken, read incrementally:
    finished trials never change, so a caller that keeps them asks only for the new trials and
    the ones it last saw unfinished. Optuna's trial cache reads each unfinished trial whole
    again (its curves too) on every call.
    """
    from optuna.storages._rdb import models
    from sqlalchemy import or_, select

    trials_t = models.TrialModel.__table__
    params_t = models.TrialParamModel.__table__
    attrs_t = models.TrialUserAttributeModel.__table__
    system_t = models.TrialSystemAttributeModel.__table__
    which = [trials_t.c.study_id == study_id,
             or_(trials_t.c.trial_id > after, trials_t.c.trial_id.in_(sorted({int(i) for i in watched})))]
    ids = select(trials_t.c.trial_id).where(*which).scalar_subquery()
    with storage.engine.connect() as conn:
        trials = _plain_rows(conn, select(trials_t.c.trial_id, trials_t.c.state).where(*which)
                             .order_by(trials_t.c.trial_id))
        if not trials:
            return []
        params = _plain_rows(conn, select(params_t.c.trial_id, params_t.c.param_name, params_t.c.param_value,
                                          params_t.c.distribution_json).where(params_t.c.trial_id.in_(ids)))
        reasons = _plain_rows(conn, select(attrs_t.c.trial_id, attrs_t.c.value_json).where(
            attrs_t.c.key == record.STATUS_REASON, attrs_t.c.trial_id.in_(ids)))
        queued = _plain_rows(conn, select(system_t.c.trial_id, system_t.c.value_json).where(
            system_t.c.key == "fixed_params", system_t.c.trial_id.in_(ids)))
    found: dict[int, dict[str, Any]] = {trial_id: {} for trial_id, _ in trials}
    # A trial created after the first query is left for the next read (see ``trial_rows``).
    for trial_id, name, value in _external_params(params):
        if trial_id in found:
            found[trial_id][name] = value
    for (trial_id, _), fixed in zip(queued, _json_values([v for _, v in queued])):
        if trial_id in found and not found[trial_id] and isinstance(fixed, dict):
            found[trial_id] = fixed
    why = dict(zip((trial_id for trial_id, _ in reasons), _json_values([v for _, v in reasons])))
    return [(trial_id, _name(state), found[trial_id], why.get(trial_id)) for trial_id, state in trials]


def trial_attr(storage: optuna.storages.RDBStorage, study_name: str, key: str, *,
               numbers: Sequence[int] | None = None, states: Sequence[str] | None = None,
               limit: int | None = None, fields: Sequence[str] | None = None) -> dict[int, Any]:
    """One user attr of a study's trials, by trial number: those numbered in ``numbers`` and in
    one of ``states`` (all trials when ``None``), the first ``limit`` of them by number (all
    when ``None``). Trials without the attr are left out.

    ``trial_rows`` leaves large attrs (the per-epoch ``curves``) out of the table; the trial
    page and the learning-curves figure read them here, for the trials they draw. With
    ``fields``, each value (a JSON object) comes back with only those keys (``None`` for a key
    it lacks); SQLite then picks them out of the stored text itself, which spares parsing the
    rest (a 10,000-trial study's learning curves need 2 of the 8 series of each trial).

    Raises:
        KeyError: no study of that name.
    """
    from optuna.storages._rdb import models
    from sqlalchemy import func
    from sqlalchemy.exc import DBAPIError

    study_id = storage.get_study_id_from_name(study_name)
    trials_t = models.TrialModel.__table__
    attrs_t = models.TrialUserAttributeModel.__table__
    dialect = storage.engine.dialect
    if fields is not None and len(fields) > 1 and dialect.name == "sqlite" and all('"' not in f for f in fields):
        # With two paths or more, json_extract answers a JSON array of the values, as stored.
        picked = func.json_extract(attrs_t.c.value_json, *[f'$."{f}"' for f in fields])
        unparsable: tuple[type[BaseException], ...] = (DBAPIError, ValueError, *_driver_errors(dialect))
        try:
            with storage.engine.connect() as conn:
                found = _plain_rows(conn, _attr_query(trials_t, attrs_t, picked, study_id, key, numbers, states, limit))
            return {number: dict(zip(fields, value))
                    for number, value in zip((n for n, _ in found), _json_values([v for _, v in found]))}
        except unparsable:  # text SQLite will not parse (NaN): parse it here
            pass
    query = _attr_query(trials_t, attrs_t, attrs_t.c.value_json, study_id, key, numbers, states, limit)
    with storage.engine.connect() as conn:
        found = _plain_rows(conn, query)
    values = dict(zip((number for number, _ in found), _json_values([v for _, v in found])))
    if fields is not None:
        values = {n: {f: v.get(f) for f in fields} if isinstance(v, dict) else v for n, v in values.items()}
    return values


def _driver_errors(dialect: Any) -> tuple[type[BaseException], ...]:
    """The database driver's own error class (sqlite3.Error...), which SQLAlchemy may let through."""
    error = getattr(dialect.dbapi, "Error", None)
    return (error,) if isinstance(error, type) and issubclass(error, BaseException) else ()


def _attr_query(trials_t: Any, attrs_t: Any, value: Any, study_id: int, key: str, numbers: Sequence[int] | None,
                states: Sequence[str] | None, limit: int | None) -> Any:
    from sqlalchemy import select

    query = (select(trials_t.c.number, value)
             .join(trials_t, trials_t.c.trial_id == attrs_t.c.trial_id)
             .where(trials_t.c.study_id == study_id, attrs_t.c.key == key))
    if numbers is not None:
        query = query.where(trials_t.c.number.in_(sorted({int(n) for n in numbers})))
    if states is not None:
        query = query.where(trials_t.c.state.in_(sorted(set(states))))
    query = query.order_by(trials_t.c.number)
    if limit is not None:
        query = query.limit(limit)
    return query


def study_revision(storage: optuna.storages.RDBStorage, study_name: str, *,
                   since: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
    """Something that changes whenever a trial of the study does, read cheaply: the study's
    largest trial id (a new trial: ids only grow), and of the unfinished trials their state and
    completion time (a trial that ends) and a digest of their params, attrs and intermediate
    values (a new epoch, an attr written again); and a digest of the study's confirmation rounds
    (``ATTR_CONFIRMATIONS``: a round is judged after its trials ended).

    Finished trials need no watching: Optuna refuses every write to a finished trial, so a
    trial changes only while it runs, and a new one moves the largest id. Given the revision it last
    returned (``since``), a poll reads one entry of the trials table's study index (its largest
    id) and the rows of the trials that were unfinished then, not the study's trials;
    without it, it finds the unfinished trials by reading the study's trial states. When
    nothing changed both give the same revision; after a change, ask again without ``since``
    to watch the trials unfinished now.

    The dashboard polls this and rebuilds a study's table only when it moved.
    """
    import hashlib

    from optuna.storages._rdb import models
    from sqlalchemy import func, select

    study_id = storage.get_study_id_from_name(study_name)
    trials_t = models.TrialModel.__table__
    steps_t = models.TrialIntermediateValueModel.__table__
    attrs_t = models.TrialUserAttributeModel.__table__
    params_t = models.TrialParamModel.__table__
    study_attrs_t = models.StudyUserAttributeModel.__table__
    with storage.engine.connect() as conn:
        newest = conn.execute(select(func.max(trials_t.c.trial_id)).where(trials_t.c.study_id == study_id)).scalar()
        # The study's confirmation rounds: judged after their trials ended, which moved nothing else.
        rounds = conn.execute(select(study_attrs_t.c.value_json).where(
            study_attrs_t.c.study_id == study_id, study_attrs_t.c.key == record.ATTR_CONFIRMATIONS)).scalar()
        if since is not None and since[0] == study_id:
            watched = list(since[2])
        else:
            watched = list(conn.execute(select(trials_t.c.trial_id).where(
                trials_t.c.study_id == study_id, trials_t.c.state.in_(_UNFINISHED)).order_by(trials_t.c.trial_id)
            ).scalars())
        states: tuple[Any, ...] = ()
        digest = None
        if watched:
            states = tuple((trial_id, _name(state), str(complete)) for trial_id, state, complete in conn.execute(
                select(trials_t.c.trial_id, trials_t.c.state, trials_t.c.datetime_complete)
                .where(trials_t.c.trial_id.in_(watched)).order_by(trials_t.c.trial_id)))
            held = hashlib.blake2b(digest_size=16)
            for table, key, value in ((attrs_t, attrs_t.c.trial_user_attribute_id, attrs_t.c.value_json),
                                      (steps_t, steps_t.c.trial_intermediate_value_id, steps_t.c.intermediate_value),
                                      (params_t, params_t.c.param_id, params_t.c.param_value)):
                rows = conn.execute(select(key, value).where(table.c.trial_id.in_(watched)).order_by(key)).all()
                held.update(repr([tuple(r) for r in rows]).encode())
            digest = held.hexdigest()
    confirmed = None if rounds is None else hashlib.blake2b(str(rounds).encode(), digest_size=8).hexdigest()
    return (study_id, newest, tuple(watched), states, digest, confirmed)


def _external_params(params: Sequence[tuple[Any, ...]]) -> Iterator[tuple[int, str, Any]]:
    """``(trial_id, name, value)`` of rows of Optuna's params table read as ``(trial_id, name,
    internal value, distribution JSON)``: each value as the trial's user sees it (a choice, not
    its index), each distribution parsed once."""
    from optuna.distributions import json_to_distribution

    distributions: dict[str, Any] = {}
    for trial_id, name, value, dist_json in params:
        dist = distributions.get(dist_json)
        if dist is None:
            dist = distributions[dist_json] = json_to_distribution(dist_json)
        yield trial_id, name, dist.to_external_repr(value)


def _plain_rows(conn: Any, query: Any) -> list[tuple[Any, ...]]:
    """The rows of a query straight from the database driver's cursor, as the driver types
    them: enums as their names, SQLite's timestamps as text (see ``_stamp``). SQLAlchemy's
    row objects cost more than the rows here: for the 180,000 attrs of a 10,000-trial study
    about 0.7 s against 0.25 s. The query's parameters (a study id, attr names) are rendered
    into it as literals."""
    sql = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql)
        return list(cursor.fetchall())
    finally:
        cursor.close()


def _json_values(texts: Sequence[str]) -> list[Any]:
    """``[json.loads(t) for t in texts]``, as one parse: one call of a C decoder instead of one
    per value (a 10,000-trial study has some 180,000 attr values and 10 MB of curves).

    orjson parses the curves' numbers in less than half the standard decoder's time (0.10 s
    against 0.23 s for a 10,000-trial study's time-to-target series); it refuses the ``NaN``
    that Python's ``json.dumps`` writes for a non-finite float, and then the standard decoder
    reads the same text.
    """
    if not texts:
        return []
    joined = "[" + ",".join(texts) + "]"
    try:
        values = orjson.loads(joined)
    except orjson.JSONDecodeError:
        try:
            values = json.loads(joined)
        except ValueError:  # some text is not one JSON value: parse each, so the bad one raises
            return [json.loads(t) for t in texts]
    if len(values) != len(texts):  # e.g. a text that holds "1, 2": parse each
        return [json.loads(t) for t in texts]
    return list(values)


def _name(enum_or_text: Any) -> str:
    return enum_or_text.name if hasattr(enum_or_text, "name") else str(enum_or_text)


def _value(value: float | None, value_type: str) -> float:
    if value_type == "INF_POS":
        return math.inf
    if value_type == "INF_NEG":
        return -math.inf
    return float("nan") if value is None else float(value)


def _stamp(value: datetime.datetime | str | None) -> datetime.datetime | None:
    """A timestamp as the database driver hands it: SQLite's is text (as SQLAlchemy wrote it)."""
    return datetime.datetime.fromisoformat(value) if isinstance(value, str) else value


def _local(stamp: datetime.datetime | None) -> datetime.datetime | None:
    """Optuna stores naive UTC and shows naive local time; so does this table."""
    if stamp is None:
        return None
    return stamp + _utc_offset(stamp.replace(minute=stamp.minute - stamp.minute % 15, second=0, microsecond=0))


@functools.lru_cache(maxsize=4096)
def _utc_offset(quarter: datetime.datetime) -> datetime.timedelta:
    """The local time's offset from UTC during the quarter hour (UTC, naive) from ``quarter``:
    one lookup per quarter hour rather than a time-zone conversion per timestamp (20,000 of them
    take a tenth of the cold 10,000-trial study page's summary). Zones change their offset on
    a quarter hour of UTC (Lord Howe Island on the half hour)."""
    offset = quarter.replace(tzinfo=datetime.timezone.utc).astimezone().utcoffset()
    return offset if offset is not None else datetime.timedelta(0)


def removed_models(study_user_attrs: Mapping[str, Any]) -> frozenset[int]:
    """The trials whose saved weights were deleted, from a study's user attrs."""
    numbers: Iterable[Any] = study_user_attrs.get(ATTR_REMOVED_MODELS) or ()
    return frozenset(int(n) for n in numbers)
