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
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from hpsearch.errors import StudyBusyError
from hpsearch.store import open_storage, parse_storage_url, redact_url, sqlite_file

__all__ = ["SearchProcess", "search_process", "study_lock"]


@dataclass(frozen=True)
class SearchProcess:
    """Whether a search writes a study now, as the study's lock says (``search_process``).

    Attributes:
        running: ``True`` while a live process holds the study's lock; ``False`` when none
            does (the search ended, or died: ``kill -9``, a crash, a lost machine); ``None``
            for a store with no lock (in-memory, MySQL...), where it cannot be told.
        pid, host, since: The process that holds the lock, or last held it (``kill -9``
            leaves its lock file behind), when the lock file says so (SQLite stores).
    """

    running: bool | None
    pid: int | None = None
    host: str | None = None
    since: str | None = None

    def describe(self) -> str:
        """Why the search is not running, for ``hpsearch status``: ``the process 1234 on box is
        gone``, or ``no search holds the study's lock``."""
        if self.pid is None:
            return "no search holds the study's lock"
        where = f" on {self.host}" if self.host and self.host != socket.gethostname() else ""
        return f"the process {self.pid}{where} that ran it is gone"

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready data (``hpsearch status --json``)."""
        return {"running": self.running, "pid": self.pid, "host": self.host, "since": self.since}


def search_process(storage: str, study: str) -> SearchProcess:
    """Whether a search holds ``study``'s write lock now (``study_lock``), without taking it
    where that can be avoided. A study whose trials are RUNNING while no process holds its lock
    was left so by a search that died: ``hpsearch resume`` finishes it.

    Raises:
        StoreError: ``storage`` is not a store URL.
    """
    storage = parse_storage_url(storage)
    db = sqlite_file(storage)
    if db is not None:
        return _file_lock_holder(db.with_name(db.name + ".lock"), study)
    if storage.startswith("postgresql"):
        return _advisory_lock_holder(storage, study)
    return SearchProcess(running=None)


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


def _file_lock_holder(path: Path, study: str) -> SearchProcess:
    """Who holds the ``flock`` of ``path`` for ``study``. A finished search removed the file; a
    dead one left it, naming its process. A process of this host that is gone held nothing;
    otherwise the lock is tested with a shared ``flock``, which the search's exclusive one
    refuses (an SQLite file has one lock for all its studies: another study's search holding
    it does not run this one)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return SearchProcess(running=False)
    try:
        info = _holder(fd)
        pid, host = info.get("pid"), info.get("host")
        pid = pid if isinstance(pid, int) else None
        host = host if isinstance(host, str) else None
        if info.get("study") not in (None, study):  # another study's search: it says nothing of this one
            pid = host = None
        last = SearchProcess(running=False, pid=pid, host=host, since=str(info.get("since") or "") or None)
        if pid is not None and host == socket.gethostname() and not _alive(pid):
            return last
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held; a file that names no study yet: a search starting
            return replace(last, running=True) if info.get("study") in (None, study) else last
        return last  # free: closing the descriptor drops the shared lock at once
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _advisory_lock_holder(storage: str, study: str) -> SearchProcess:
    """Whether a session holds ``study``'s advisory lock, read from ``pg_locks`` (the lock is not
    taken: a search starting at that moment would be refused)."""
    from sqlalchemy import text

    key = _advisory_key(study) & 0xFFFFFFFFFFFFFFFF
    engine = open_storage(storage).engine  # type: ignore[attr-defined]
    with engine.connect() as conn:
        held = conn.execute(text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                                 "AND classid = :hi AND objid = :lo AND objsubid = 1"),
                            {"hi": key >> 32, "lo": key & 0xFFFFFFFF}).scalar()
    return SearchProcess(running=bool(held))


def _advisory_key(study: str) -> int:
    """A signed 64-bit key from the study's name: one lock per study, shared by every client."""
    return int.from_bytes(hashlib.blake2b(f"hpsearch:{study}".encode(), digest_size=8).digest(), "big", signed=True)


@contextmanager
def _advisory_lock(storage: str, study: str) -> Iterator[None]:
    from sqlalchemy import text  # heavy (a tenth of a second): only PostgreSQL stores need it
    from sqlalchemy.exc import SQLAlchemyError

    engine = open_storage(storage).engine  # type: ignore[attr-defined]
    key = _advisory_key(study)
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


def _holder(fd: int) -> dict[str, object]:
    """What the lock file says of its holder (``_holder_info``); empty when it says nothing."""
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (ValueError, OSError):
        return {}
    return info if isinstance(info, dict) else {}


def _read_holder(fd: int) -> str:
    info = _holder(fd)
    try:
        return f"study {info['study']!r}, pid {info['pid']} on {info['host']}, since {info['since']}"
    except KeyError:
        return "holder unknown"
