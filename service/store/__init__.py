"""The study store: Optuna RDB storage behind one URL-or-object normaliser.

SQLite (the default) is a file next to the user's work and needs no server; it takes one writer,
so every write of a search goes through the orchestrator process (docs/design.md, "One writer per
SQLite study"). PostgreSQL serves clusters and concurrent studies. No tables of our own: study and trial attributes hold what hpsearch adds.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import re
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch.errors import SpaceError, StoreError, StoreLostError, StudyNotFoundError
from hpsearch.record import (  # the study's attr keys, declared with the trial record's names
    ATTR_N_TRIALS,
    ATTR_OBJECTIVES,
    ATTR_SPACE_TEXT,
    ATTR_STUDY_UID,
    ATTR_VERSIONS,
    FUSE,
    FUSED_GROUP,
    FUSED_MEMBERS,
)
from hpsearch.search_spaces import SearchSpace, parse_space
from hpsearch.study import direct_sql, sql_store

# optuna and sqlalchemy are imported inside the functions that open or read a store: together
# they take about 0.3 s to import, and ``import hpsearch`` and ``hpsearch --help`` stay light.
if TYPE_CHECKING:
    import optuna

__all__ = [
    "close_storages",
    "load_study",
    "missing_store",
    "open_storage",
    "parse_storage_url",
    "patient_storage",
    "redact_url",
    "return_to_queue",
    "space_of_study",
    "sqlite_file",
    "store_name",
    "study_attrs",
    "study_names",
    "write_trial_record",
]



def redact_url(url: str) -> str:
    """The URL with any password masked, for messages and logs; text that is no URL comes back
    as it was typed (a password in it masked all the same).

    Example:
        >>> redact_url("postgresql+psycopg://me:secret@db/hp")
        'postgresql+psycopg://me:***@db/hp'
        >>> redact_url("sqlite:/hpsearch.db")
        'sqlite:/hpsearch.db'
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # ValueError: a port that is no number
        return re.sub(_PASSWORD, r"\1***@", url)


# Patterns compiled on first use (the re module caches them), not by every ``import hpsearch``.
#: ``user:password@`` in text SQLAlchemy cannot parse.
_PASSWORD = r"(://[^/@:]*:)[^/@]*@"
#: The scheme of a URL (``sqlite``, ``postgresql+psycopg``) and what follows its colon.
_SCHEME = r"^(?P<scheme>[A-Za-z][\w+.-]*):(?P<rest>.*)$"

#: Schemes a store URL is most often meant to have, for "did you mean": SQLAlchemy's own
#: database kinds and the drivers people write with them.
_KNOWN_SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg", "postgresql+psycopg2", "mysql", "mysql+pymysql",
                  "mysql+mysqldb", "mariadb", "oracle", "mssql")

_EXAMPLES = "a store URL looks like sqlite:///hpsearch.db or postgresql+psycopg://user@host/db"


@functools.lru_cache(maxsize=64)
def parse_storage_url(url: str) -> str:
    """The store URL hpsearch opens for ``url``: checked, nothing opened or created.

    - ``postgres://`` (libpq's and many hosting services' spelling, which SQLAlchemy refuses)
      is ``postgresql://``; a ``postgresql://`` URL that names no driver gets psycopg, the
      driver ``hpsearch[postgres]`` installs, when it is installed (else SQLAlchemy's default).
    - A file path, ``sqlite:/x.db``, ``sqlite:x.db`` or ``sqlite://x.db`` (an in-memory
      database named ``x.db``: the study would vanish) is refused with the URL meant: SQLite
      takes three slashes before a relative path and four before an absolute one.
    - A kind of database SQLAlchemy does not know (``sqllite``, ``postgresl+psycopg``) is
      refused with the nearest one it knows.

    Raises:
        StoreError: the text is no URL, or names a kind of database SQLAlchemy does not know. The
            message quotes what was typed (its password masked) and the URL it was probably
            meant to be.

    Example:
        >>> parse_storage_url("sqlite:///hpsearch.db")
        'sqlite:///hpsearch.db'
        >>> try:
        ...     parse_storage_url("sqllite:///hpsearch.db")
        ... except StoreError as exc:
        ...     print(exc)
        storage 'sqllite:///hpsearch.db' names an unknown kind of database, 'sqllite'; did you mean 'sqlite:///hpsearch.db'?
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    text = url.strip()
    typed = redact_url(text)
    match = re.match(_SCHEME, text, re.DOTALL)
    if match is None or len(match["scheme"]) == 1:  # no scheme, or a Windows drive letter
        looks_like_a_file = Path(text).suffix in (".db", ".sqlite", ".sqlite3") or "/" in text or "\\" in text
        hint = f"; for an SQLite file write {'sqlite:///' + typed!r}" if looks_like_a_file else f" ({_EXAMPLES})"
        raise StoreError(f"storage {typed!r} is not a database URL{hint}")
    scheme, rest = match["scheme"], match["rest"]
    backend, _, driver = scheme.lower().partition("+")
    if backend == "sqlite" and not rest.startswith("//"):
        path = rest.lstrip("/")
        relative = f"{scheme}:///{path}"
        meant = repr(relative) if not rest.startswith("/") else \
            f"{relative!r} ({path} in the working folder) or {scheme + ':////' + path!r} (/{path})"
        raise StoreError(f"storage {typed!r} is not an SQLite URL, which takes three slashes before a relative "
                         f"path and four before an absolute one; did you mean {meant}?")
    if backend == "postgres":
        backend = "postgresql"
    if backend == "postgresql" and not driver and importlib.util.find_spec("psycopg") is not None:
        driver = "psycopg"
    scheme = backend + (f"+{driver}" if driver else "")
    text = scheme + ":" + rest
    try:
        parsed = make_url(text)
    except (ArgumentError, ValueError):  # ValueError: a port that is no number
        raise StoreError(f"storage {typed!r} is not a database URL ({_EXAMPLES})") from None
    try:
        parsed.get_dialect()
    except NoSuchModuleError:
        near = difflib.get_close_matches(scheme, _KNOWN_SCHEMES, n=1, cutoff=0.5)
        hint = f"; did you mean {near[0] + ':' + typed.partition(':')[2]!r}?" if near else f"; {_EXAMPLES}"
        raise StoreError(f"storage {typed!r} names an unknown kind of database, {scheme!r}{hint}") from None
    if parsed.get_backend_name() == "sqlite" and parsed.host:
        path = (parsed.host + "/" + (parsed.database or "")).rstrip("/")
        raise StoreError(f"storage {typed!r} is an in-memory SQLite database named {parsed.host!r}, which vanishes "
                         f"with the process; did you mean {scheme + ':///' + path!r}?")
    return text


def sqlite_file(url: str) -> Path | None:
    """The database file of an SQLite URL, ``None`` for other back ends or in-memory SQLite."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a port that is no number
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database).resolve()


def missing_store(storage: str | optuna.storages.BaseStorage) -> Path | None:
    """The SQLite file ``storage`` names when that file does not exist (a command that only
    reads a store must not create one); ``None`` when it exists, or the store is not a file.

    Example:
        >>> missing_store("sqlite:///no/such/folder/hpsearch.db").name
        'hpsearch.db'
    """
    if not isinstance(storage, str):
        return None
    db = sqlite_file(storage)
    return db if db is not None and not db.exists() else None


#: One storage (one SQLAlchemy engine and its connection pool) per URL and process: opening a
#: study, listing studies and the dashboard's requests share it instead of each making an engine
#: whose connections are dropped unclosed.
_STORAGES: dict[str, optuna.storages.RDBStorage] = {}


def open_storage(storage: str | optuna.storages.BaseStorage, *, create: bool = True) -> optuna.storages.BaseStorage:
    """Normalise a storage URL or object into an Optuna storage. The one place that does it.

    The URL is read by ``parse_storage_url``; the same URL gives the same storage object for
    the life of the process. SQLite files get WAL journaling (readers such as the dashboard do
    not block the writer) and a 30 s busy timeout; the file and its folder are created if
    needed, unless ``create`` is false.

    Raises:
        StoreError: the URL is malformed, its driver is missing, the server does not answer,
            or (``create=False``) the SQLite file does not exist.
    """
    import optuna  # heavy: see the imports at the top of this module

    if isinstance(storage, optuna.storages.BaseStorage):
        return storage
    url = parse_storage_url(storage)
    if not create and (missing := missing_store(url)) is not None:
        raise StoreError(f"there is no store at {redact_url(url)}: {missing} does not exist")
    if url not in _STORAGES:
        _STORAGES[url] = _create_storage(url)
    return _STORAGES[url]


def close_storages() -> None:
    """Close the connections of every storage ``open_storage`` made in this process. The last
    connection to an SQLite file to close folds its write-ahead log back into the file, so the
    file alone holds the study (``hpsearch.cli`` calls this as the command's process exits)."""
    while _STORAGES:
        _, storage = _STORAGES.popitem()
        storage.engine.dispose()


#: How long an SQLite connection waits for another process's lock before "database is locked".
_SQLITE_BUSY_TIMEOUT_S = 30.0


def _use_wal(db_file: Path) -> None:
    """Switch the SQLite file to WAL journaling, which is stored in the file, so it is done once.

    Several processes may open a new file at the same instant (a dashboard as the first search
    starts) while one of them creates Optuna's schema. The switch needs the file to itself, and
    SQLite answers "database is locked" at once, without waiting, where waiting could deadlock;
    so it is tried again until the busy timeout.
    """
    deadline = time.monotonic() + _SQLITE_BUSY_TIMEOUT_S
    while True:
        con = sqlite3.connect(db_file, timeout=_SQLITE_BUSY_TIMEOUT_S)
        try:
            if con.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                con.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        finally:
            con.close()
        time.sleep(0.05)


def _create_storage(storage: str) -> optuna.storages.RDBStorage:
    import optuna
    from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError

    engine_kwargs: dict[str, Any] = {}
    db_file = sqlite_file(storage)
    if db_file is not None:
        db_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            _use_wal(db_file)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open storage {redact_url(storage)}: {type(exc).__name__}: {exc}") from None
        engine_kwargs = {"connect_args": {"timeout": _SQLITE_BUSY_TIMEOUT_S}}
    else:
        engine_kwargs = {"pool_pre_ping": True}
    try:
        for attempt in range(5):
            try:
                return optuna.storages.RDBStorage(storage, engine_kwargs=engine_kwargs)
            except (IntegrityError, OperationalError) as exc:
                # Another process created Optuna's schema in the same moment (a dashboard
                # opened on the file as the first search starts): "table ... already exists",
                # or both inserted the schema's version row. It exists now; open it again.
                # Or SQLite refused a lock without waiting, where waiting could deadlock.
                if attempt == 4 or not (isinstance(exc, IntegrityError) or "already exists" in str(exc)
                                        or "database is locked" in str(exc)):
                    raise
                time.sleep(0.1 * (attempt + 1))
        raise AssertionError("unreachable: the last attempt returns or raises")
    except ModuleNotFoundError as exc:
        hint = ("; or use psycopg, which is installed: postgresql+psycopg://..."
                if exc.name == "psycopg2" and importlib.util.find_spec("psycopg") is not None else "")
        raise StoreError(f"the driver for {redact_url(storage)} is not installed ({exc.name}); "
                         f"for PostgreSQL install 'hpsearch[postgres]'{hint}") from None
    except (SQLAlchemyError, OSError) as exc:
        raise StoreError(f"cannot open storage {redact_url(storage)}: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0]}") from None


def patient_storage(
    storage: str,
    patience_s: float,
    on_wait: Callable[[str], None] | None = None,
) -> optuna.storages.BaseStorage:
    """The storage of ``storage`` for a search's writes: a call that fails because the database
    does not answer (a restart, a network blip) is tried again, with backoff, for up to
    ``patience_s`` seconds of outage; past that, ``StoreLostError``.

    ``on_wait`` is told when the store stops answering and when it is back. Reads stay
    incremental (Optuna's trial cache sits under the retries). A write whose reply was lost
    may be applied twice; Optuna's writes of attrs and values are idempotent, a new trial is
    not (resume then finds it RUNNING and reruns its configuration).

    Raises:
        StoreError: as ``open_storage``.
    """
    import optuna
    from optuna.storages._cached_storage import _CachedStorage

    backend = open_storage(storage)
    if not isinstance(backend, optuna.storages.RDBStorage):
        return backend
    inner = _CachedStorage(backend)
    where = redact_url(storage)

    def patient(method: Callable[..., Any], name: str) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            lost_at: float | None = None
            delay = 0.5
            while True:
                try:
                    result = method(*args, **kwargs)
                except Exception as exc:
                    if not _unreachable(exc):
                        raise
                    now = time.monotonic()
                    if lost_at is None:
                        lost_at = now
                        if on_wait is not None:
                            on_wait(f"the store {where} does not answer ({_first_line(exc)}); "
                                    f"retrying for up to {patience_s:g} s")
                    if now - lost_at >= patience_s:
                        raise StoreLostError(
                            f"the store {where} did not answer for {patience_s:g} s "
                            f"({_first_line(exc)}); finished trials are saved in it: when it is back, "
                            "'hpsearch resume STUDY' finishes the study") from None
                    time.sleep(delay)
                    delay = min(delay * 2, 10.0)
                    continue
                if lost_at is not None and on_wait is not None:
                    on_wait(f"the store {where} answers again after {time.monotonic() - lost_at:.0f} s")
                return result

        call.__name__ = name
        return call

    base = optuna.storages.BaseStorage
    names = sorted(n for n in dir(base) if not n.startswith("_") and callable(getattr(base, n)))
    methods: dict[str, Any] = {n: patient(getattr(inner, n), n) for n in names}
    methods["write_trial_record"] = patient(functools.partial(write_trial_record, backend), "write_trial_record")
    methods["_backend"] = backend  # for the direct reads (``hpsearch.study.sql_store``)
    if direct_sql(backend):
        methods["get_all_trials"] = patient(_waiting_read_cheaply(inner, backend), "get_all_trials")
    cls = type("PatientStorage", (base,), methods)
    return cls()  # type: ignore[no-any-return]


def _waiting_read_cheaply(cached: Any, backend: optuna.storages.RDBStorage) -> Callable[..., Any]:
    """``get_all_trials`` of Optuna's cache, but a call for the queued (WAITING) trials alone is
    answered from one indexed query where there are none.

    The cache keeps finished trials and reads every unfinished one again on each call, whatever
    ``states`` asks for; Optuna's ``ask`` asks for the queued trials every time. A search asking
    ahead for a fused group holds a running trial per configuration asked, so each ask would
    read all of them: 5 of an ask's 25 ms on SQLite at 24 trials asked, growing with each.
    """
    from optuna.storages._rdb import models
    from optuna.trial import TrialState
    from sqlalchemy import select

    trials_t = models.TrialModel.__table__

    def get_all_trials(study_id: int, deepcopy: bool = True, states: Any = None) -> list[Any]:
        if states is not None and set(states) <= {TrialState.WAITING}:
            with backend.engine.connect() as conn:
                queued = conn.execute(select(trials_t.c.trial_id).where(
                    trials_t.c.study_id == study_id, trials_t.c.state == TrialState.WAITING).limit(1)).first()
            if queued is None:
                return []
        trials: list[Any] = cached.get_all_trials(study_id, deepcopy=deepcopy, states=states)
        return trials

    return get_all_trials


def write_trial_record(
    storage: optuna.storages.BaseStorage,
    trial_id: int,
    attrs: dict[str, Any],
    intermediates: Sequence[tuple[int, float]] = (),
) -> None:
    """Set user attrs of a running trial, and ``(step, value)`` intermediate values, in one
    transaction.

    A search writes an epoch's curves, progress attrs and intermediate value together (or
    several epochs' at once, when a trial passes its reports on in batches). As one Optuna
    call each, every value would be its own transaction with its own lookup of the trial
    (1.79x raw Optuna's time for the same trials, ``benchmarks/store_writes.py``): on SQLite a
    commit costs about as much as the rows it carries. Here one statement,
    compiled once, upserts all the attrs into Optuna's own table, in Optuna's own format
    (``json.dumps``), and the search writes faster than raw Optuna's ask/report/tell of the same
    trials. Readers cannot tell the difference (``tests/service_tests/test_store.py`` reads them back
    through Optuna). A database other than SQLite or PostgreSQL, a storage other than SQL, or a
    schema version this release was not tested with (``hpsearch.study.direct_sql``) gets one
    Optuna call per value.

    Raises:
        optuna.exceptions.UpdateFinishedTrialError: the trial is finished (nothing is written).
    """

    backend = sql_store(storage)  # under Optuna's cache, writes pass through
    if backend is None or backend.engine.name not in ("sqlite", "postgresql"):
        for key, value in attrs.items():
            storage.set_trial_user_attr(trial_id, key, value)
        for step, value in intermediates:
            storage.set_trial_intermediate_value(trial_id, step, value)
        return
    state_of, upsert_attrs, upsert_value = _record_statements(backend.engine.name)
    with backend.engine.begin() as conn:
        state = conn.execute(state_of, {"trial_id": trial_id}).scalar_one_or_none()
        if state is None:
            raise KeyError(f"no trial with trial_id {trial_id}")
        backend.check_trial_is_updatable(trial_id, state)
        if attrs:
            conn.execute(upsert_attrs, [{"trial_id": trial_id, "key": k, "value_json": json.dumps(v)}
                                        for k, v in attrs.items()])
        if intermediates:
            from optuna.storages._rdb import models

            rows = []
            for step, value in intermediates:
                stored, kind = models.TrialIntermediateValueModel.intermediate_value_to_stored_repr(value)
                rows.append({"trial_id": trial_id, "step": step, "intermediate_value": stored,
                             "intermediate_value_type": kind})
            conn.execute(upsert_value, rows)


def return_to_queue(storage: optuna.storages.BaseStorage, trial_id: int) -> None:
    """Put a trial that was asked but never started back in its study's queue: Optuna's WAITING,
    the state ``Study.enqueue_trial`` leaves a trial in, so the next ``ask`` of a search of the
    study (``hpsearch resume``) takes it first, with its parameters and its number. It is not a
    failed trial: nothing ran. What its launch wrote of a fused group it never trained in is
    cleared, so no reader counts that group as fused.

    A search that stops (Ctrl-C, its budget) returns the configurations it asked ahead and the
    trials still waiting for devices; ``resume`` after ``kill -9`` returns the orphans that never
    started. With the search's patient storage the write waits out a store outage like every other.
    """
    from optuna.trial import TrialState

    stale: dict[str, Any] = {FUSED_GROUP: None, FUSED_MEMBERS: None, FUSE: None}
    writer = getattr(storage, "write_trial_record", None)  # the search's patient storage
    if writer is not None:
        writer(trial_id, stale, ())
    else:
        write_trial_record(storage, trial_id, stale)
    storage.set_trial_state_values(trial_id, TrialState.WAITING)


@functools.cache
def _record_statements(dialect: str) -> tuple[Any, Any, Any]:
    """``write_trial_record``'s three statements, built once per dialect so that SQLAlchemy
    compiles them once: building an upsert per call cost more than the commit it rode in."""
    from optuna.storages._rdb import models
    from sqlalchemy import bindparam, select
    from sqlalchemy.dialects import postgresql, sqlite

    insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
    trials = models.TrialModel.__table__
    state_of = select(trials.c.state).where(trials.c.trial_id == bindparam("trial_id"))
    attrs = models.TrialUserAttributeModel.__table__
    stmt = insert(attrs)
    upsert_attrs = stmt.on_conflict_do_update(index_elements=[attrs.c.trial_id, attrs.c.key],
                                              set_={"value_json": stmt.excluded.value_json})
    values = models.TrialIntermediateValueModel.__table__
    stmt = insert(values)
    upsert_value = stmt.on_conflict_do_update(
        index_elements=[values.c.trial_id, values.c.step],
        set_={"intermediate_value": stmt.excluded.intermediate_value,
              "intermediate_value_type": stmt.excluded.intermediate_value_type})
    return state_of, upsert_attrs, upsert_value


def _unreachable(exc: BaseException) -> bool:
    """Whether an error means the database did not answer (Optuna wraps some of these in its
    ``StorageInternalError``), rather than a bad request that a retry would not fix."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    return any(isinstance(e, (OperationalError, InterfaceError)) for e in _chain(exc))


def _first_line(exc: BaseException) -> str:
    exc = next((e for e in _chain(exc) if hasattr(e, "orig")), exc)
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in out:
        out.append(seen)
        seen = seen.__cause__ or seen.__context__
    return out


def load_study(name: str, storage: str | optuna.storages.BaseStorage) -> optuna.Study:
    """Load an existing study. An SQLite file that does not exist is not created.

    Raises:
        StudyNotFoundError: no study of that name is in the store (the message names the store
            and lists the studies it has), or there is no store at all.
    """
    import optuna

    if (missing := missing_store(storage)) is not None:
        raise StudyNotFoundError(f"no study named {name!r}: there is no store at {store_name(storage)} "
                                 f"({missing} does not exist)")
    backend = open_storage(storage)
    try:
        return optuna.load_study(study_name=name, storage=backend)
    except KeyError:
        known = ", ".join(sorted(study_names(backend))) or "none"
        raise StudyNotFoundError(f"no study named {name!r} in {store_name(storage)} (studies: {known})") from None


def study_names(storage: str | optuna.storages.BaseStorage) -> list[str]:
    """The names of the studies in a store, without reading their trials (Optuna's
    ``get_all_study_summaries`` reads every trial of every study); none for an SQLite file that
    does not exist, which is not created."""
    if missing_store(storage) is not None:
        return []
    return [s.study_name for s in open_storage(storage).get_all_studies()]


def store_name(storage: str | optuna.storages.BaseStorage) -> str:
    """How messages name a store: its URL with the password masked, or the kind of a storage
    object (its URL, for Optuna's SQL storage).

    Example:
        >>> import optuna
        >>> store_name("postgresql+psycopg://me:secret@db/hp"), store_name(optuna.storages.InMemoryStorage())
        ('postgresql+psycopg://me:***@db/hp', 'InMemoryStorage')
    """
    if isinstance(storage, str):
        return redact_url(storage)
    url = getattr(storage, "url", None)
    return redact_url(url) if isinstance(url, str) else type(storage).__name__


def space_of_study(study: optuna.Study) -> SearchSpace:
    """The space a study was started with, parsed again from the text it keeps.

    Raises:
        SpaceError: the study was not made by hpsearch, or its text no longer validates.
    """
    text = study.user_attrs.get(ATTR_SPACE_TEXT)
    if not text:
        raise SpaceError(f"study {study.study_name!r} has no space text: it was not started by hpsearch start",
                         source=f"study {study.study_name}")
    return parse_space(str(text), source=f"study {study.study_name}", default_study=study.study_name)


def study_attrs(space_text: str, objectives: list[str], n_trials: int) -> dict[str, Any]:
    """The study user attrs hpsearch writes when a search creates a study: its space text, its
    objectives, the target number of finished trials, the versions that ran it and a random id
    (``hpsearch.study_uid``: the study in a copy of the store has the same name and Optuna id,
    and its files are told apart by this id and the store, ``hpsearch.store.ownership``)."""
    return {ATTR_SPACE_TEXT: space_text, ATTR_OBJECTIVES: list(objectives), ATTR_N_TRIALS: int(n_trials),
            ATTR_VERSIONS: {p: version(p) for p in ("hpsearch", "optuna", "ray", "torch")},
            ATTR_STUDY_UID: uuid.uuid4().hex}
