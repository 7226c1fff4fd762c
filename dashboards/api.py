"""The dashboard's JSON API as plain functions: what each endpoint returns, without HTTP.

Every function takes a ``StudyCache`` (one per store) and returns JSON-ready data, or raises an
``HPSearchError`` whose ``http_status`` the web layer answers with (404 for an unknown study or
trial, 400 for a bad parameter). ``hpsearch.dashboards.app`` maps URLs onto these.

Reading a study is incremental: Optuna's storage re-reads only trials that changed since the
last read, and the trials table is rebuilt only when some trial changed, so a page polling a
10,000-trial study every few seconds costs little.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hpsearch.errors import ColumnError, HPSearchError

import pandas as pd

if TYPE_CHECKING:
    import optuna
    from hpsearch.search import Search

__all__ = [
    "BadRequest",
    "StudyCache",
    "figure_json",
    "list_studies",
    "study_detail",
    "trial_detail",
    "trials_csv",
    "trials_page",
]

#: Rows per page of the trials table unless the client asks otherwise, and the most it may ask.
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000


class BadRequest(HPSearchError):
    """A query parameter the API cannot use (not a number, an unknown column...)."""

    exit_code = 2
    http_status = 400


class NotFound(HPSearchError):
    """No such trial (or page)."""

    exit_code = 2
    http_status = 404


@dataclass
class _Entry:
    search: Search
    version: tuple[Any, ...] = ()
    frame: pd.DataFrame | None = None


class StudyCache:
    """The studies of one store, with each study's trials table kept until a trial changes."""

    def __init__(self, storage: str) -> None:
        self.storage = storage
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def search(self, name: str) -> Search:
        """The study ``name`` (raises ``StudyNotFoundError``)."""
        from hpsearch.search import load

        with self._lock:
            entry = self._entries.get(name)
        if entry is None:
            entry = _Entry(load(name, storage=self.storage))
            with self._lock:
                self._entries[name] = entry
        return entry.search

    def frame(self, name: str) -> pd.DataFrame:
        """The study's ``trials_dataframe(all_attrs=True)``, rebuilt only when a trial changed."""
        search = self.search(name)
        entry = self._entries[name]
        version = self._version(search)
        if entry.frame is None or entry.version != version:
            entry.frame, entry.version = search.trials_dataframe(all_attrs=True), version
        return entry.frame

    def _version(self, search: Search) -> tuple[Any, ...]:
        import optuna
        from hpsearch.store import open_storage
        from hpsearch.table import study_revision

        backend = open_storage(self.storage)
        if isinstance(backend, optuna.storages.RDBStorage):
            return study_revision(backend, search.study_name)
        # Other stores: a trial changes by state, by a new epoch or by its end.
        return tuple((t.number, t.state, len(t.intermediate_values), len(t.user_attrs), t.datetime_complete)
                     for t in search.study.get_trials(deepcopy=False))

    def trial(self, name: str, number: int) -> optuna.trial.FrozenTrial:
        """One trial by number, read alone (raises ``NotFound``)."""
        from hpsearch.store import open_storage

        backend = open_storage(self.storage)
        study_id = backend.get_study_id_from_name(name)
        try:
            trial_id = backend.get_trial_id_from_study_id_trial_number(study_id, number)
        except KeyError:
            total = len(self.frame(name))
            raise NotFound(f"study {name!r} has no trial #{number} (it has {total} trials)") from None
        return backend.get_trial(trial_id)

    def revision(self, name: str) -> str:
        """A short token that changes whenever a trial of the study changes."""
        import hashlib

        self.frame(name)
        return hashlib.blake2b(repr(self._entries[name].version).encode(), digest_size=8).hexdigest()


def list_studies(cache: StudyCache) -> list[dict[str, Any]]:
    """``GET /api/studies``: every study with its state counts, best values and last activity.

    Each study is read through the cache, so a poll re-reads only the trials that changed."""
    from hpsearch.store import study_names

    out = []
    for name in study_names(cache.storage):
        search, frame = cache.search(name), cache.frame(name)
        states = frame["state"].value_counts().to_dict() if len(frame) else {}
        best = _best_row(search, frame)
        stamps = pd.concat([frame["datetime_start"], frame["datetime_complete"]]).dropna() if len(frame) else []
        out.append({
            "name": name,
            "n_trials": len(frame),
            "states": dict(sorted(states.items())),
            "objectives": search.objectives,
            "best_values": None if best is None else [best[m] for m in search.objectives],
            "started": frame["datetime_start"].min() if len(frame) else None,
            "last_activity": max(stamps) if len(stamps) else None,
        })
    return _plain(out)


def _best_row(search: Search, frame: pd.DataFrame) -> Any:
    """The COMPLETE row best on the first objective, or ``None``."""
    if not len(frame):
        return None
    done = frame[frame["state"] == "COMPLETE"]
    first = search.objectives[0]
    if not len(done) or first not in done.columns:
        return None
    maximize = search.study.directions[0].name == "MAXIMIZE"
    return done.loc[done[first].idxmax() if maximize else done[first].idxmin()]


def _summary(cache: StudyCache, name: str, frame: pd.DataFrame) -> dict[str, Any]:
    """``Search.summary()``, computed from the cached table instead of every trial object."""
    from hpsearch.reasons import NOT_RUN_REASONS
    from hpsearch.store import ATTR_N_TRIALS

    search = cache.search(name)
    states = frame["state"].value_counts().to_dict() if len(frame) else {}
    finished = 0
    if len(frame):
        reasons = frame["status_reason"] if "status_reason" in frame.columns else pd.Series(None, index=frame.index)
        finished = int((frame["state"].isin(["COMPLETE", "PRUNED", "FAIL"]) & ~reasons.isin(NOT_RUN_REASONS)).sum())
    best = _best_row(search, frame)
    best_trial = None
    if best is not None:
        trial = cache.trial(name, int(best["number"]))
        best_trial = {"number": trial.number, "values": dict(zip(search.objectives, trial.values)),
                      "params": trial.params}
    target = search.study.user_attrs.get(ATTR_N_TRIALS)
    return {
        "study": name,
        "objectives": search.objectives,
        "directions": [d.name.lower() for d in search.study.directions],
        "n_trials": len(frame),
        "finished": finished,
        "target": None if target is None else int(target),
        "states": dict(sorted(states.items())),
        "best_trial": best_trial,
    }


def study_detail(cache: StudyCache, name: str) -> dict[str, Any]:
    """``GET /api/studies/{name}``: the summary, the space text, versions and the columns."""
    from hpsearch.store import ATTR_SPACE_TEXT, ATTR_VERSIONS

    search = cache.search(name)
    frame = cache.frame(name)
    summary = _summary(cache, name, frame)
    summary.update(
        space_text=search.study.user_attrs.get(ATTR_SPACE_TEXT, ""),
        versions=search.study.user_attrs.get(ATTR_VERSIONS, {}),
        columns=[c for c in frame.columns if c != "curves"],
        numeric_columns=[c for c in frame.columns if _numeric(frame[c])],
        figures=list(FIGURES),
        # Changes whenever a trial does: a page redraws its figures and table only then.
        revision=cache.revision(name),
    )
    return _plain(summary)


def trials_page(cache: StudyCache, name: str, query: Mapping[str, str]) -> dict[str, Any]:
    """``GET /api/studies/{name}/trials``: one page of the trials table.

    Query parameters: ``offset`` and ``limit`` (at most ``MAX_LIMIT``); ``sort`` (a column,
    ``-column`` for descending; missing values last); ``state`` (``COMPLETE``, ``FAIL``...);
    ``q`` (rows where any cell contains this text, case-insensitive); ``columns`` (comma list).
    """
    frame = cache.frame(name).drop(columns=["curves", "status_detail"], errors="ignore")
    offset = _int(query, "offset", 0, minimum=0)
    limit = _int(query, "limit", DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
    if not len(frame):  # a study that has no trial yet has no columns either
        return {"total": 0, "offset": offset, "limit": limit, "columns": [], "rows": []}
    rows = frame
    if query.get("state"):
        states = {s.strip().upper() for s in query["state"].split(",")}
        rows = rows[rows["state"].isin(states)] if len(rows) else rows
    if query.get("q"):
        needle = query["q"].lower()
        text = rows.astype(str).apply(lambda col: col.str.lower().str.contains(needle, regex=False))
        rows = rows[text.any(axis=1)] if len(rows) else rows
    sort = query.get("sort", "number")
    column = sort.lstrip("-")
    if column not in frame.columns:
        raise BadRequest(f"cannot sort by {column!r}: no such column; columns: {', '.join(map(str, frame.columns))}")
    if len(rows):
        rows = rows.sort_values(column, ascending=not sort.startswith("-"), na_position="last", kind="stable")
    if query.get("columns"):
        wanted = ["number", *[c for c in query["columns"].split(",") if c and c != "number"]]
        unknown = [c for c in wanted if c not in frame.columns]
        if unknown:
            raise BadRequest(f"unknown columns {unknown}")
        rows = rows[wanted]
    page = rows.iloc[offset:offset + limit]
    return {
        "total": len(rows),
        "offset": offset,
        "limit": limit,
        "columns": list(page.columns),
        "rows": [_plain(r) for r in page.to_dict(orient="records")],
    }


def trials_csv(cache: StudyCache, name: str) -> str:
    """``GET /api/studies/{name}/trials.csv``: every trial, every param and attr (curves as JSON)."""
    import json

    frame = cache.frame(name).copy()
    if "curves" in frame.columns:
        frame["curves"] = frame["curves"].map(lambda v: json.dumps(v) if isinstance(v, dict) else v)
    return str(frame.to_csv(index=False))


def trial_detail(cache: StudyCache, name: str, number: str) -> dict[str, Any]:
    """``GET /api/studies/{name}/trials/{number}``: params, values, attrs, curves, reason."""
    search = cache.search(name)
    if not number.isdigit():
        raise BadRequest(f"a trial number is a whole number, got {number!r}")
    t = cache.trial(name, int(number))
    attrs = dict(t.user_attrs)
    return _plain({
        "number": t.number,
        "state": t.state.name,
        "params": t.params,
        "values": None if t.values is None else dict(zip(search.objectives, t.values)),
        "user_attrs": {k: v for k, v in attrs.items() if k != "curves"},
        "curves": attrs.get("curves", {}),
        "intermediate_values": {str(k): v for k, v in sorted(t.intermediate_values.items())},
        "status_reason": attrs.get("status_reason"),
        "status_detail": attrs.get("status_detail"),
        "datetime_start": t.datetime_start,
        "datetime_complete": t.datetime_complete,
    })


#: Figures the study page draws, in its order; each answers ``GET .../figures/{kind}``.
FIGURES = ("frontier", "device_frontier", "accuracy_vs_batch", "learning_curves", "throughput", "noise_scale")


def figure_json(cache: StudyCache, name: str, kind: str, query: Mapping[str, str]) -> str:
    """``GET /api/studies/{name}/figures/{kind}``: a plotly figure as JSON, for ``Plotly.react``.

    Query parameters: ``frontier`` and ``device_frontier`` take ``x`` and ``y`` (any numeric
    column); ``accuracy_vs_batch`` and ``learning_curves`` take ``metric``; ``learning_curves``
    also ``trials`` (comma-separated numbers; default: the best few) and ``limit``.
    """
    from hpsearch.dashboards import figures
    from hpsearch.search import metric_direction

    if kind not in FIGURES:
        raise NotFound(f"no figure {kind!r}; figures: {', '.join(FIGURES)}")
    frame = cache.frame(name)
    completed = len(frame) and bool((frame["state"] == "COMPLETE").any())

    def column(key: str, default: str) -> str:
        value = query.get(key) or default
        if completed and value not in frame.columns:
            raise ColumnError(f"no column {value!r} in this study's trials")
        return value

    if kind in ("frontier", "device_frontier"):
        x = column("x", "runtime_s" if kind == "frontier" else "device_seconds")
        y = column("y", "val_accuracy")
        fig = figures.frontier_figure(frame, x=x, y=y, x_direction=metric_direction(x),
                                      y_direction=metric_direction(y))
    elif kind == "accuracy_vs_batch":
        metric = column("metric", "val_accuracy")
        fig = figures.accuracy_vs_batch_figure(frame, metric=metric, direction=metric_direction(metric))
    elif kind == "learning_curves":
        metric = query.get("metric") or "val_accuracy"
        trials = None
        if query.get("trials"):
            try:
                trials = [int(n) for n in query["trials"].split(",") if n]
            except ValueError:
                raise BadRequest(f"trials must be trial numbers separated by commas, got {query['trials']!r}") from None
        limit = _int(query, "limit", 20, minimum=1, maximum=200)
        try:
            fig = figures.learning_curves_figure(frame, trials=trials, metric=metric,
                                                 direction=metric_direction(metric), limit=limit)
        except ValueError as exc:  # an unknown trial number
            raise BadRequest(str(exc)) from None
    elif kind == "throughput":
        fig = figures.throughput_figure(frame)
    else:
        fig = figures.noise_scale_figure(frame)
    return str(fig.to_json())


def _int(query: Mapping[str, str], key: str, default: int, *, minimum: int, maximum: int | None = None) -> int:
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


def _numeric(column: Any) -> bool:
    import pandas as pd

    return bool(pd.api.types.is_numeric_dtype(column)) and not pd.api.types.is_bool_dtype(column)


def _plain(value: Any) -> Any:
    """JSON-ready data: NaN, NaT and infinities become None, numpy scalars Python ones,
    datetimes ISO text."""
    import pandas as pd

    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, bool)):
        return value
    if pd.api.types.is_scalar(value) and pd.isna(value):
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if isinstance(value, (int, float, str, bool)) else str(value)
