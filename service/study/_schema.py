"""The guard in front of Optuna's private tables.

hpsearch reads a study's tables with plain SQL (``hpsearch.study.read_trials``: ten times faster
than Optuna's ORM at 10,000 trials) and writes a trial's epoch record in one statement
(``hpsearch.store.write_trial_record``). Both depend on the layout of Optuna's schema, which
Optuna versions with Alembic. Before any of that SQL runs, the store's schema version is
checked against the versions this release was tested with: on a known one the fast path runs;
on any other the caller falls back to Optuna's public API (slower, never wrong) and a warning
names both versions. A schema change therefore costs speed, never a misread table or a
corrupted write.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import optuna

__all__ = ["TESTED_SCHEMA_VERSIONS", "direct_sql", "sql_store"]

log = logging.getLogger("hpsearch")

#: Optuna schema versions (Alembic revisions) the direct SQL was tested with: Optuna 3.2 to
#: 5.0 all use this one (tests/service_tests/test_table.py checks the reads against Optuna's).
TESTED_SCHEMA_VERSIONS = frozenset({"v3.2.0.a"})

#: Storage object -> whether its schema is known, asked once per storage: a schema changes only
#: when someone runs ``optuna storage upgrade``.
_KNOWN: weakref.WeakKeyDictionary[object, bool] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def direct_sql(storage: optuna.storages.BaseStorage) -> bool:
    """Whether hpsearch may read and write this store's tables directly: an SQL store whose
    schema version is one of ``TESTED_SCHEMA_VERSIONS``.

    An SQL store of another version answers ``False`` and logs, once per store, a warning that
    names its version and the tested ones; the callers then use Optuna's public API.

    Example:
        >>> import optuna
        >>> direct_sql(optuna.storages.InMemoryStorage())
        False
    """
    import optuna

    if not isinstance(storage, optuna.storages.RDBStorage):
        return False
    with _LOCK:
        known = _KNOWN.get(storage)
    if known is None:
        version = storage.get_current_version()
        known = version in TESTED_SCHEMA_VERSIONS
        if not known:
            log.warning(
                "the store's Optuna schema is version %s; this hpsearch release was tested with %s. Reading and "
                "writing through Optuna's own API instead (correct, but slower on large studies).",
                version, ", ".join(sorted(TESTED_SCHEMA_VERSIONS)))
        with _LOCK:
            _KNOWN[storage] = known
    return known


def sql_store(storage: optuna.storages.BaseStorage) -> optuna.storages.RDBStorage | None:
    """The SQL store under ``storage`` (itself, or under Optuna's trial cache or the search's
    patient storage) where hpsearch may read and write its tables directly (``direct_sql``);
    ``None`` for any other store."""
    backend = getattr(storage, "_backend", storage)
    return cast("optuna.storages.RDBStorage", backend) if direct_sql(backend) else None
