"""One orchestrator per study: a lock held for the whole of a search.

SQLite takes one writer (docs/design.md: four writers gave "database is locked", trials stuck
RUNNING and one queued trial taken twice), so a search locks the database file, with an
``flock`` on ``<db>.lock``. PostgreSQL serves concurrent studies, so a search takes a session
advisory lock on its study's name. Both are released by the operating system or the server
when the process dies, even by ``kill -9``, so ``hpsearch resume`` never waits on a dead owner.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from hpsearch.errors import StudyBusyError
from hpsearch.store import open_storage, parse_storage_url, redact_url, sqlite_file

__all__ = ["study_lock"]


@contextmanager
def study_lock(storage: str, study: str) -> Iterator[None]:
    """Hold the write lock of ``study`` in ``storage`` for the ``with`` block.

    Raises:
        StudyBusyError: another live process holds it; the message says which.
        StoreError: ``storage`` is not a store URL (``hpsearch.store.parse_storage_url``).
    """
    storage = parse_storage_url(storage)  # postgres://... is PostgreSQL too
    db = sqlite_file(storage)
    if db is not None:
        with _file_lock(db, study, storage):
            yield
    elif storage.startswith("postgresql"):
        with _advisory_lock(storage, study):
            yield
    else:  # other back ends (MySQL...) and in-memory SQLite: no guard
        yield


@contextmanager
def _file_lock(db: Path, study: str, storage: str) -> Iterator[None]:
    """An ``flock`` on ``<db>.lock``, whose file is removed when the lock is released (a
    finished search left it beside the user's store). A ``kill -9`` leaves it; the next search
    takes it over."""
    path = db.with_name(db.name + ".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _locked(path, storage)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(_holder_info(study)).encode())
        yield
    finally:
        # Removed while still locked: a process that opened the file before this and locks it
        # once it is closed finds it is no longer the file at that path, and starts over.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)  # closing the descriptor releases the flock


def _locked(path: Path, storage: str) -> int:
    """A descriptor of the file at ``path`` (created if need be), holding its ``flock``.

    Raises:
        StudyBusyError: another process holds it.
    """
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise StudyBusyError(
                f"{redact_url(storage)} is being written by another hpsearch search ({holder}); "
                "SQLite takes one writer at a time: wait for that search to end, or use a "
                "PostgreSQL store for studies that run at once"
            ) from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # the last holder removed this file after it was opened: lock the one there now


@contextmanager
def _advisory_lock(storage: str, study: str) -> Iterator[None]:
    from sqlalchemy import text  # heavy (a tenth of a second): only PostgreSQL stores need it
    from sqlalchemy.exc import SQLAlchemyError

    engine = open_storage(storage).engine  # type: ignore[attr-defined]
    # A signed 64-bit key from the study's name: one lock per study, shared by every client.
    key = int.from_bytes(hashlib.blake2b(f"hpsearch:{study}".encode(), digest_size=8).digest(), "big", signed=True)
    with engine.connect() as conn:
        if not conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar():
            raise StudyBusyError(
                f"study {study!r} in {redact_url(storage)} is being written by another hpsearch "
                "search; wait for it to end (hpsearch status shows its progress)"
            )
        conn.commit()
        try:
            yield
        finally:
            try:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                conn.commit()
            except SQLAlchemyError:
                pass  # the connection died (a server restart): the server dropped the lock with it


def _holder_info(study: str) -> dict[str, object]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "study": study,
            "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"study {info['study']!r}, pid {info['pid']} on {info['host']}, since {info['since']}"
    except (ValueError, KeyError, OSError):
        return "holder unknown"
