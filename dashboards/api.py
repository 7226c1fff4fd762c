"""The dashboard's JSON API as plain functions: what each endpoint returns, without HTTP.

Every function takes a ``StudyCache`` (one per store) and returns JSON-ready data, or raises an
``HPSearchError`` whose ``http_status`` the web layer answers with (404 for an unknown study or
trial, 400 for a bad parameter). ``hpsearch.dashboards.app`` maps URLs onto these.

Everything a study says comes from the service's read model (``hpsearch.study``); this module
only keeps it per revision and shapes it for HTTP. Reading a study is incremental: a poll asks
the store a few cheap aggregates (``hpsearch.study.revision``); the trials table is rebuilt only when some trial changed,
and what each endpoint computes from it (the summary, the table's row order, each figure's JSON)
is kept until then. So a page polling a 10,000-trial study every few seconds costs little, and
a second browser opening the same study gets its figures from memory.

The table leaves each trial's per-epoch ``curves`` in the store (most of a study's bytes): the
learning-curves figure reads them for the trials it ranks or draws, the trial page for its trial.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hpsearch import record
from hpsearch import study as read_model
from hpsearch.analysis import CURVE_FIELDS, CURVE_STATES, parse_target, recommend, study_analysis
from hpsearch.dashboards import accuracy_vs_batch, frontier, learning_curves, noise_scale, peak_memory, throughput
from hpsearch.dashboards import analysis_figures as drawn
from hpsearch.dashboards.queries import DEFAULT_MAX_POINTS, BadRequest, FigureQuery, NotFound, whole_number
from hpsearch.errors import AnalysisError
from hpsearch.record import ATTR_N_TRIALS, ATTR_SPACE_TEXT, ATTR_VERSIONS
from hpsearch.search import load
from hpsearch.store import study_names
from hpsearch.study.reasons import describe_reason

if TYPE_CHECKING:
    import optuna
    import plotly.graph_objects as go

    from hpsearch.search import Search

__all__ = [
    "ANALYSIS_FIGURES",
    "DEFAULT_MAX_POINTS",
    "FIGURES",
    "BadRequest",
    "NotFound",
    "StudyCache",
    "analysis_json",
    "figure_json",
    "list_studies",
    "study_detail",
    "trial_detail",
    "trials_csv",
    "trials_page",
    "warm_up",
]

#: Rows per page of the trials table unless the client asks otherwise, and the most it may ask.
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000

#: User attrs the cached table leaves in the store (read per trial where they are drawn).
LAZY_ATTRS = frozenset({record.CURVES})

#: Results kept per study and revision before the oldest are dropped (figures with their
#: parameters, table orders per filter and sort).
_MEMO_SIZE = 128

#: The figures the study page draws, in its order, and the function of each figure's own module
#: that answers ``GET .../figures/{kind}`` (its query parameters are read there).
FIGURES: dict[str, Callable[[FigureQuery], go.Figure]] = {
    "frontier": frontier.frontier_from_query,
    "device_frontier": frontier.device_seconds_frontier_from_query,
    "accuracy_vs_batch": accuracy_vs_batch.accuracy_vs_batch_from_query,
    "learning_curves": learning_curves.learning_curves_from_query,
    "throughput": throughput.throughput_from_query,
    "memory": peak_memory.memory_from_query,
    "noise_scale": noise_scale.noise_scale_from_query,  # not a record name: the figure
}
#: The analysis section's figures (``GET .../figures/{kind}?target=METRIC=VALUE``).
ANALYSIS_FIGURES = ("tradeoff", "lr_law")


@dataclass
class _Entry:
    search: Search
    version: tuple[Any, ...] = ()
    frame: pd.DataFrame | None = None
    # What endpoints computed from this frame, by (version, what): dropped with the frame.
    memo: dict[Any, Any] = field(default_factory=dict)
    # Held while the table is read: a page's parallel requests wait for one read, not make two.
    lock: threading.Lock = field(default_factory=threading.Lock)


class StudyCache:
    """The studies of one store, with each study's trials table, and what the endpoints
    compute from it, kept until a trial changes."""

    def __init__(self, storage: str) -> None:
        self.storage = storage
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def search(self, name: str) -> Search:
        """The study ``name`` (raises ``StudyNotFoundError``)."""
        with self._lock:
            entry = self._entries.get(name)
        if entry is None:
            entry = _Entry(load(name, storage=self.storage))
            with self._lock:
                self._entries[name] = entry
        return entry.search

    def frame(self, name: str) -> pd.DataFrame:
        """The study's ``trials_dataframe(all_attrs=True)`` less the ``LAZY_ATTRS`` columns,
        rebuilt only when a trial changed."""
        return self._current(name)[1]

    def _current(self, name: str) -> tuple[_Entry, pd.DataFrame, tuple[Any, ...]]:
        search = self.search(name)
        entry = self._entries[name]
        known = entry.version
        version = self._version(search, known or None)
        with entry.lock:
            if entry.frame is None or entry.version != version:
                if known:  # something changed: watch the trials unfinished now, then read
                    version = self._version(search, None)
                entry.frame, entry.version, entry.memo = _read_table(search), version, {}
            return entry, entry.frame, entry.version

    def memo(self, name: str, key: Any, compute: Callable[[pd.DataFrame], Any]) -> Any:
        """``compute(frame)`` for the study's current table, computed once per revision.

        ``key`` names what is computed (and from which parameters); an exception is not kept.
        """
        return self._memo(name, key, compute)[0]

    def _memo(self, name: str, key: Any, compute: Callable[[pd.DataFrame], Any]) -> tuple[Any, tuple[Any, ...]]:
        entry, frame, version = self._current(name)
        memo = entry.memo
        try:
            return memo[version, key], version
        except KeyError:
            pass
        value = compute(frame)
        if len(memo) >= _MEMO_SIZE:
            memo.pop(next(iter(memo)), None)
        memo[version, key] = value
        return value, version

    def curves(self, name: str, *, numbers: Iterable[int] | None = None,
               states: Iterable[str] | None = None, limit: int | None = None,
               fields: Iterable[str] | None = None) -> dict[int, Any]:
        """The ``curves`` attr of the trials numbered in ``numbers`` and in one of ``states``
        (all when ``None``; the first ``limit`` by number), by trial number, with only the
        series named in ``fields`` (all when ``None``); kept per revision."""
        chosen = None if numbers is None else tuple(sorted({int(n) for n in numbers}))
        wanted = None if states is None else tuple(sorted(set(states)))
        series = None if fields is None else tuple(dict.fromkeys(fields))

        def read(frame: pd.DataFrame) -> dict[int, Any]:
            return read_model.read_attr(self.search(name).backend, name, record.CURVES, numbers=chosen,
                                        states=wanted, limit=limit, fields=series)

        return dict(self.memo(name, (record.CURVES, chosen, wanted, limit, series), read))

    def _version(self, search: Search, since: tuple[Any, ...] | None) -> tuple[Any, ...]:
        return read_model.revision(search.backend, search.study_name, since=since)

    def trial(self, name: str, number: int) -> optuna.trial.FrozenTrial:
        """One trial by number, read alone (raises ``NotFound``)."""
        backend = self.search(name).backend
        study_id = backend.get_study_id_from_name(name)
        try:
            trial_id = backend.get_trial_id_from_study_id_trial_number(study_id, number)
        except KeyError:
            total = len(self.frame(name))
            raise NotFound(f"study {name!r} has no trial #{number} (it has {total} trials)") from None
        return backend.get_trial(trial_id)

    def revision(self, name: str) -> str:
        """A short token that changes whenever a trial of the study changes."""
        return _token(self._current(name)[2])


def _token(version: tuple[Any, ...]) -> str:
    return hashlib.blake2b(repr(version).encode(), digest_size=8).hexdigest()


def _read_table(search: Search) -> pd.DataFrame:
    """The study's trials table without the ``LAZY_ATTRS`` (never parsed, for an SQL store)."""
    return read_model.read_trials(search.backend, search.study_name, search.objectives, hidden=LAZY_ATTRS)


def list_studies(cache: StudyCache) -> list[dict[str, Any]]:
    """``GET /api/studies``: every study with its state counts, best values and last activity.

    Each study is read through the cache, so a poll re-reads only the trials that changed."""
    out = []
    for name in study_names(cache.storage):
        search = cache.search(name)

        def listing(frame: pd.DataFrame, search: Search = search, name: str = name) -> dict[str, Any]:
            return read_model.study_listing(name, frame, search.objectives, search.directions).to_dict()

        out.append(cache.memo(name, "listing", listing))
    return out


def _summary(cache: StudyCache, name: str, frame: pd.DataFrame) -> dict[str, Any]:
    """The study's ``hpsearch.study.StudySummary`` (less its target, a study attr read on every
    call), with the table's columns and the searched params the trial table shows
    (``hpsearch.study.searched_params``)."""
    search = cache.search(name)
    params = read_model.param_names(search.backend, name)
    summary = read_model.summarize(name, frame, search.objectives, search.directions, params=params).to_dict()
    return _plain({
        **summary,
        "searched": read_model.searched_params(frame, params),
        "columns": [c for c in frame.columns if c not in LAZY_ATTRS],
        "numeric_columns": [c for c in frame.columns if _numeric(frame[c])],
    })


def study_detail(cache: StudyCache, name: str) -> dict[str, Any]:
    """``GET /api/studies/{name}``: the summary, the space text, versions, the columns and the
    searched params the trial table shows besides the core ones (``searched``).

    What comes from the trials is computed once per revision; the study's own attrs (its
    target, space text, versions) are read on every call, since they change without a trial.
    """
    search = cache.search(name)
    # One look at the store per poll: the summary and the revision of the same table.
    trials, version = cache._memo(name, "summary", lambda frame: _summary(cache, name, frame))
    attrs = search.study.user_attrs
    target = attrs.get(ATTR_N_TRIALS)
    summary = {key: trials[key] for key in ("study", "objectives", "directions", "n_trials", "finished")}
    summary.update(
        target=None if target is None else int(target),
        states=trials["states"],
        # Why trials ended as they did, in words (the trial table's legend), and which reasons
        # mean the trial never ran (shown apart from the trials that did).
        reasons=[{"reason": reason, "count": n, "meaning": describe_reason(reason, n),
                  "not_run": reason in record.NOT_RUN_REASONS} for reason, n in trials["reasons"].items()],
        best_trial=trials["best_trial"],
        space_text=attrs.get(ATTR_SPACE_TEXT, ""),
        versions=attrs.get(ATTR_VERSIONS, {}),
        columns=trials["columns"],
        numeric_columns=trials["numeric_columns"],
        # The params that vary besides the core ones (the optimizer, the workload's own...): the
        # trial table shows them after the LR, so two rows of one batch and LR read apart.
        searched=trials["searched"],
        # Its fused groups and why other trials ran on their own (``hpsearch.study.FusedSummary``):
        # the table adds a group column and marks the members' runtimes, solo estimates.
        fused=trials["fused"],
        figures=list(FIGURES),
        analysis_figures=list(ANALYSIS_FIGURES),
        # Changes whenever a trial does: a page redraws its figures and table only then.
        revision=_token(version),
    )
    return _plain(summary)


def trials_page(cache: StudyCache, name: str, query: Mapping[str, str]) -> dict[str, Any]:
    """``GET /api/studies/{name}/trials``: one page of the trials table.

    Query parameters: ``offset`` and ``limit`` (at most ``MAX_LIMIT``); ``sort`` (a column,
    ``-column`` for descending; missing values last); ``state`` (``COMPLETE``, ``FAIL``...);
    ``q`` (rows where any cell contains this text, case-insensitive); ``columns`` (comma list).
    """
    offset = whole_number(query, "offset", 0, minimum=0)
    limit = whole_number(query, "limit", DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
    states = sorted({s.strip().upper() for s in query["state"].split(",")}) if query.get("state") else None
    needle = query["q"].lower() if query.get("q") else None
    sort = query.get("sort", "number")
    column = sort.lstrip("-")

    def order(frame: pd.DataFrame) -> tuple[pd.DataFrame, Any]:
        """The table and the positions of the rows the filters keep, in the sort's order: kept
        per revision, so paging and polling neither filter nor sort again."""
        if not len(frame):
            return frame, np.arange(0)
        columns = [c for c in frame.columns if c not in _NOT_IN_TABLE]
        if column not in columns:
            raise BadRequest(f"cannot sort by {column!r}: no such column; columns: {', '.join(map(str, columns))}")
        keep = np.ones(len(frame), dtype=bool)
        if states is not None:
            keep &= frame["state"].isin(states).to_numpy()
        if needle is not None and keep.any():
            rows = frame.iloc[np.flatnonzero(keep)][columns]
            hits = rows.astype(str).apply(lambda col: col.str.lower().str.contains(needle, regex=False))
            keep[np.flatnonzero(keep)] = hits.any(axis=1).to_numpy()
        positions = np.flatnonzero(keep)
        keys = frame[column].iloc[positions].set_axis(positions)
        if len(keys):
            keys = keys.sort_values(ascending=not sort.startswith("-"), na_position="last", kind="stable")
        return frame, keys.index.to_numpy()

    def answer(_: pd.DataFrame) -> dict[str, Any]:
        frame, positions = cache.memo(name, ("order", tuple(states or ()), needle, sort), order)
        if not len(frame):  # a study that has no trial yet has no columns either
            return {"total": 0, "offset": offset, "limit": limit, "columns": [], "rows": []}
        columns = [c for c in frame.columns if c not in _NOT_IN_TABLE]
        if query.get("columns"):
            wanted = ["number", *[c for c in query["columns"].split(",") if c and c != "number"]]
            unknown = [c for c in wanted if c not in columns]
            if unknown:
                raise BadRequest(f"unknown columns {unknown}")
            columns = wanted
        page = frame.iloc[positions[offset:offset + limit]][columns]
        return {
            "total": len(positions),
            "offset": offset,
            "limit": limit,
            "columns": list(page.columns),
            "rows": [_plain(r) for r in page.to_dict(orient="records")],
        }

    # The page itself is kept too: a reload or a second browser gets it from memory.
    key = ("page", offset, limit, tuple(states or ()), needle, sort, query.get("columns") or "")
    return dict(cache.memo(name, key, answer))


#: Columns the trials table leaves out: series and long text (the trial page shows them).
_NOT_IN_TABLE = (record.CURVES, record.STATUS_DETAIL)


def trials_csv(cache: StudyCache, name: str) -> str:
    """``GET /api/studies/{name}/trials.csv``: every trial, every param and attr (curves as JSON).

    Read whole from the store for each download: it is the one answer that needs every curve."""
    return read_model.to_csv(cache.search(name).trials_dataframe(all_attrs=True))


def trial_detail(cache: StudyCache, name: str, number: str) -> dict[str, Any]:
    """``GET /api/studies/{name}/trials/{number}``: params, values, attrs, curves, reason,
    ``model_path``, where its saved weights are (``None`` when it kept none), ``phases``,
    where its time went (``hpsearch.study.PhaseTimeline.to_dict``; ``None`` when it recorded
    none), ``memory``: its peak per rank and the batch it ran halved at, in one line
    (``None`` when it recorded neither), and ``fused``: its fused group, the group's members, what
    its runtime means and the step times (``hpsearch.study.FusedTrial.to_dict``; ``None`` for a
    trial that says nothing of fusing)."""
    search = cache.search(name)
    if not number.isdigit():
        raise BadRequest(f"a trial number is a whole number, got {number!r}")
    t = cache.trial(name, int(number))
    # Its LR as every other reader shows it (a study of an earlier release recorded the last one).
    row = read_model.with_scaled_lr({**t.params, **t.user_attrs})
    attrs = {k: row[k] for k in (*t.user_attrs, record.LAST_LR) if k in row}
    timeline = read_model.phase_timeline(attrs)
    reason = attrs.get(record.STATUS_REASON)
    fused = read_model.fused_trial(attrs, _group_members(cache.frame(name), attrs.get(record.FUSED_GROUP)))
    return _plain({
        "memory": read_model.trial_phases(t).memory_line(),
        "fused": None if fused is None else fused.to_dict(),
        "status_meaning": describe_reason(reason) if isinstance(reason, str) else None,
        record.MODEL_PATH: _model_path(cache.frame(name), t.number),
        "number": t.number,
        "state": read_model.display_state(t.state.name, attrs),
        "params": t.params,
        "values": None if t.values is None else dict(zip(search.objectives, t.values)),
        "user_attrs": {k: v for k, v in attrs.items() if k not in (record.CURVES, record.PHASES)},
        record.CURVES: attrs.get(record.CURVES, {}),
        record.PHASES: None if timeline is None else timeline.to_dict(),
        "intermediate_values": {str(k): v for k, v in sorted(t.intermediate_values.items())},
        record.STATUS_REASON: attrs.get(record.STATUS_REASON),
        record.STATUS_DETAIL: attrs.get(record.STATUS_DETAIL),
        "datetime_start": t.datetime_start,
        "datetime_complete": t.datetime_complete,
    })


def _group_members(frame: pd.DataFrame, group: Any) -> tuple[int, ...]:
    """The numbers of the trials of fused group ``group``, from the cached table."""
    if group is None or record.FUSED_GROUP not in frame.columns:
        return ()
    return read_model.group_members(zip(frame["number"].tolist(), frame[record.FUSED_GROUP].tolist()), group)


def _model_path(frame: pd.DataFrame, number: int) -> str | None:
    """Where the trial's saved weights are, from the table (which leaves out the ones the
    search deleted under ``save_model: best``); ``None`` when it kept none."""
    if record.MODEL_PATH not in frame.columns:
        return None
    rows = frame.loc[frame["number"] == number, record.MODEL_PATH]
    value = rows.iloc[0] if len(rows) else None
    return value if isinstance(value, str) else None


def figure_json(cache: StudyCache, name: str, kind: str, query: Mapping[str, str]) -> str:
    """``GET /api/studies/{name}/figures/{kind}``: a plotly figure as JSON, for ``Plotly.react``.

    The study figures (:data:`FIGURES`) default to the study's own quality objective and take
    the parameters their modules read: ``frontier`` and ``device_frontier`` take ``x`` and ``y``
    (any numeric column); ``accuracy_vs_batch`` and ``learning_curves`` take ``metric``;
    ``learning_curves`` also ``trials`` (comma-separated numbers; default: the best few) and
    ``limit``; the scatter figures (``frontier``, ``device_frontier``, ``noise_scale``) take
    ``max_points`` (default ``DEFAULT_MAX_POINTS``; 0 draws every trial). The analysis figures
    take ``target``.
    """
    if kind not in (*FIGURES, *ANALYSIS_FIGURES):
        raise NotFound(f"no figure {kind!r}; figures: {', '.join((*FIGURES, *ANALYSIS_FIGURES))}")
    # One figure per revision and parameters: a poll, a reload or a second browser reuses it.
    key = ("figure", kind, tuple(sorted(query.items())))
    return str(cache.memo(name, key, lambda frame: _figure_json(cache, name, kind, query, frame)))


def _figure_json(cache: StudyCache, name: str, kind: str, query: Mapping[str, str], frame: pd.DataFrame) -> str:
    if kind in ANALYSIS_FIGURES:
        return _analysis_figure_json(cache, name, kind, query)
    search = cache.search(name)

    def curves(**chosen: Any) -> dict[int, Any]:
        return cache.curves(name, **chosen)

    figure_query = FigureQuery(frame, query, tuple(search.objectives), search.direction, curves,
                               search.space_text if kind == "memory" else "")
    return str(FIGURES[kind](figure_query).to_json())


def _analysis_figure_json(cache: StudyCache, name: str, kind: str, query: Mapping[str, str]) -> str:
    """One of the analysis section's figures for the study's analysis at ``target``."""
    try:
        studied = _analysis(cache, name, query.get("target") or None)
    except AnalysisError as exc:  # nothing to analyse yet: an empty figure that says why
        empty = drawn.TradeOffInfo("the target", (), (), (), (), None, None, None, None, "", None, str(exc))
        return str(drawn.tradeoff_figure(empty).to_json())
    if kind == "tradeoff":
        return str(drawn.tradeoff_figure(drawn.tradeoff_info(studied)).to_json())
    return str(drawn.lr_law_figure(drawn.lr_law_info(studied)).to_json())


def _analysis(cache: StudyCache, name: str, target: str | None) -> Any:
    """The study's ``hpsearch.analysis.StudyAnalysis`` for ``target`` (``METRIC=VALUE``, or
    ``None`` for the space's or a derived one), assembled as every caller's is
    (``hpsearch.analysis.study_analysis``), once per revision, from the cached table and the
    curves it needs.

    Raises:
        AnalysisError: a malformed target, or nothing to analyse yet.
    """
    parsed = parse_target(target) if target else None
    search = cache.search(name)

    def curves(metric: str) -> dict[int, Any]:
        return cache.curves(name, states=CURVE_STATES, fields=(*CURVE_FIELDS, metric))

    return cache.memo(name, ("analysis", parsed), lambda frame: study_analysis(search.info, frame, curves, parsed))


def analysis_json(cache: StudyCache, name: str, query: Mapping[str, str]) -> dict[str, Any]:
    """``GET /api/studies/{name}/analysis``: what the trials say, and the recommendation for a
    device count.

    Query parameters: ``devices`` (default: the largest world size the study ran), ``minimize``
    (``time`` or ``device-hours``), ``target`` (``METRIC=VALUE``; default: the space's, else
    derived), ``allow_larger_batch`` (``1`` lets the per-device batch grow past what ran).
    A study with nothing to analyse yet (it has just started) is a normal answer:
    ``analysis`` is ``None`` and ``analysis_error`` says why. A bad parameter is a 400.
    """
    target = query.get("target") or None
    if target:
        try:
            parse_target(target)
        except AnalysisError as exc:
            raise BadRequest(str(exc)) from None
    try:
        studied = _analysis(cache, name, target)
    except AnalysisError as exc:
        return {"devices": None, "analysis": None, "analysis_error": str(exc), "recommendation": None,
                "recommendation_error": str(exc)}
    ran = [int(t[record.WORLD_SIZE]) for t in studied.trials if t[record.WORLD_SIZE]]
    devices = whole_number(query, "devices", max(ran, default=1), minimum=1, maximum=100_000)
    minimize = query.get("minimize") or "time"
    if minimize not in ("time", "device-hours"):
        raise BadRequest(f"minimize must be 'time' or 'device-hours', got {minimize!r}")
    larger = query.get("allow_larger_batch", "") in ("1", "true", "yes")

    def answer(_: pd.DataFrame) -> dict[str, Any]:
        try:
            found = recommend(studied, devices, minimize=minimize, allow_larger_batch=larger)  # type: ignore[arg-type]
            recommendation: dict[str, Any] = {"recommendation": found.to_dict(), "recommendation_error": None}
        except AnalysisError as exc:
            recommendation = {"recommendation": None, "recommendation_error": str(exc)}
        return {"devices": devices, "analysis": studied.to_dict(), "analysis_error": None, **recommendation}

    return dict(cache.memo(name, ("recommend", query.get("target") or "", devices, minimize, larger), answer))


#: How many studies ``prefetch`` reads ahead, in the store's order.
PREFETCH_STUDIES = 8


def prefetch(cache: StudyCache, *, studies: int = PREFETCH_STUDIES) -> None:
    """Read ahead what a study page asks first, for the store's first ``studies`` studies: the
    trials table, the summary and the study's figures, kept in ``cache`` as the requests would
    keep them. A dashboard runs this in the background once it serves, so the page a person
    opens a few seconds later is answered from memory (at 10,000 trials: about 20 ms, against
    1.1-1.4 s on 2 CPU cores for the first page of a dashboard that read nothing yet; a
    request that comes while its study is being read waits for that read, not for a second).

    Never raises: a study it cannot read is left to the request that asks for it, which reports
    what is wrong.
    """
    try:
        names = study_names(cache.storage)[:studies]
    except Exception:  # the store unreachable now: the pages say so when asked
        return
    for name in names:
        try:
            detail = study_detail(cache, name)
            for kind in detail.get("figures") or ():
                figure_json(cache, name, str(kind), {})
        except Exception:  # the request for this study reports it
            continue


def warm_up() -> None:
    """Import and initialise what the first study page would (Optuna, plotly and its figure
    machinery): a dashboard calls this before it says it is ready, so its first page open
    waits for the study, not for imports."""
    import optuna  # noqa: F401 - imported for its side effect
    import sqlalchemy  # noqa: F401

    frontier.frontier_figure(pd.DataFrame()).to_json()


def _numeric(column: Any) -> bool:
    return bool(pd.api.types.is_numeric_dtype(column)) and not pd.api.types.is_bool_dtype(column)


def _plain(value: Any) -> Any:
    """JSON-ready data: NaN, NaT and infinities become None, numpy scalars Python ones,
    datetimes ISO text."""
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
