"""Which store's study owns a runs folder, so that deleting one study never deletes another's files.

A study's files on disk (its runs folder ``hpsearch_runs/STUDY``: Tune's state, trial logs,
saved weights; and its frontier page ``STUDY-frontier.html``) are found by the study's name
beside its store. A copy of the store (``cp hpsearch.db backup.db``) holds a study of the same
name, and the same Optuna ``study_id``, whose files are found at the same paths: ``hpsearch
delete S --storage sqlite:///backup.db --files`` once deleted the runs folder and the frontier
page that the study in ``hpsearch.db`` still used.

So every search writes an owner marker, ``.hpsearch-owners.json``, into its runs folder: the
store (``store_identity``: an SQLite file's path relative to the folder, another database's
URL without its password) and the study's name and random uid (``hpsearch.study_uid``, written into the study when
it is created). A search resumed from a copy adds itself: the folder then has two owners.
``delete --files`` deletes the folder and the frontier page only when this store's study is the
folder's only owner; it keeps them, and says why and how to remove them, when another study
owns the folder too, when the marker names another store or study, or when there is no marker
at all (a folder written by a release before markers: which store wrote it cannot be known, and
a kept folder costs disk space where a deleted one costs results). A frontier page without a
runs folder is kept for the same reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch.record import ATTR_STUDY_UID
from hpsearch.store import redact_url, sqlite_file

if TYPE_CHECKING:
    import optuna

__all__ = ["MARKER", "FileVerdict", "Owner", "claim_runs_dir", "judge_files", "read_owners", "release_runs_dir",
           "store_identity", "study_uid"]

#: The owner marker's file name, in a study's runs folder.
MARKER = ".hpsearch-owners.json"


@dataclass(frozen=True)
class Owner:
    """A study in a store, as an owner marker names it.

    Attributes:
        storage: The store (``store_identity``).
        study: The study's name.
        study_uid: The study's random id (``study_uid``).
    """

    storage: str
    study: str
    study_uid: str

    def describe(self, runs_dir: Path) -> str:
        """``study 'S' in sqlite:////data/hpsearch.db``, as the marker of ``runs_dir`` names it."""
        return f"study {self.study!r} in {_shown(self.storage, runs_dir)}"


@dataclass(frozen=True)
class FileVerdict:
    """What ``delete --files`` may delete of a study's files, and what it keeps.

    Attributes:
        delete: The files this store's study alone owns.
        kept: ``(path, why)`` for each file it keeps; ``why`` says how to remove it by hand.
    """

    delete: tuple[Path, ...]
    kept: tuple[tuple[Path, str], ...]


def store_identity(storage: str, runs_dir: Path) -> str:
    """The store as the owner marker of ``runs_dir`` names it: an SQLite file by its path
    relative to that folder (a relative URL and a symlink name the same file, and a project
    folder moved or copied whole keeps its folders' owners), another database by its URL with
    the password masked.

    Example:
        >>> store_identity("sqlite:////data/./hp.db", Path("/data/hpsearch_runs/S"))
        'sqlite:///../../hp.db'
        >>> store_identity("postgresql+psycopg://me:secret@db/hp", Path("/data/hpsearch_runs/S"))
        'postgresql+psycopg://me:***@db/hp'
    """
    db = sqlite_file(storage)
    if db is None:
        return redact_url(storage)
    return f"sqlite:///{Path(os.path.relpath(db, runs_dir.resolve())).as_posix()}"


def _shown(storage: str, runs_dir: Path) -> str:
    """A marker's store as messages name it: an SQLite file by its absolute path."""
    if storage.startswith("sqlite:///") and not storage.startswith("sqlite:////"):
        return f"sqlite:///{(runs_dir.resolve() / storage.removeprefix('sqlite:///')).resolve().as_posix()}"
    return storage


def study_uid(study: optuna.Study) -> str:
    """The study's random id, written into it first if it has none (a study created by a release
    before ids, or by Optuna itself)."""
    uid = study.user_attrs.get(ATTR_STUDY_UID)
    if not isinstance(uid, str) or not uid:
        uid = uuid.uuid4().hex
        study.set_user_attr(ATTR_STUDY_UID, uid)
    return uid


def read_owners(runs_dir: Path) -> list[Owner] | None:
    """The owners a runs folder's marker names; ``None`` when it has no readable marker."""
    try:
        data = json.loads((runs_dir / MARKER).read_text())
        return [Owner(str(o["storage"]), str(o["study"]), str(o["study_uid"])) for o in data["owners"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def claim_runs_dir(runs_dir: Path, owner: Owner) -> None:
    """Make ``owner`` one of the owners of ``runs_dir`` (created if need be). A search calls this
    when it creates or resumes its study."""
    with _marker(runs_dir) as owners:
        if owner not in owners:
            owners.append(owner)


def release_runs_dir(runs_dir: Path, owner: Owner) -> None:
    """Strike ``owner`` off the owners of ``runs_dir`` (its study was deleted, its files kept
    for the others)."""
    if not (runs_dir / MARKER).exists():
        return
    with _marker(runs_dir) as owners:
        owners[:] = [o for o in owners if o != owner]


def judge_files(runs_dir: Path, frontier_page: Path, owner: Owner) -> FileVerdict:
    """Which of the study's files that exist (``runs_dir``, ``frontier_page``) ``owner`` may
    delete: only when the runs folder's marker names ``owner`` and no other study (see the
    module)."""
    existing = [p for p in (runs_dir, frontier_page) if p.exists()]
    if not existing:
        return FileVerdict((), ())
    owners = read_owners(runs_dir) if runs_dir.is_dir() else None
    by_hand = "; remove it yourself if nothing needs it"
    if not runs_dir.exists():
        why = f"no runs folder {runs_dir} says which store's study wrote it{by_hand}"
    elif owners is None:
        why = (f"{runs_dir} has no owner marker ({MARKER}; an older release wrote it), so which store's study "
               f"it belongs to is unknown{by_hand}")
    elif owner not in owners:
        others = ", ".join(o.describe(runs_dir) for o in owners) or "no study"
        why = (f"it belongs to {others}, not to {owner.describe(runs_dir)} (a copy of a store finds the same files); "
               f"delete it from that store with --files{by_hand}")
    elif len(owners) > 1:
        others = ", ".join(o.describe(runs_dir) for o in owners if o != owner)
        why = f"it is also used by {others}; deleting that study with --files deletes it{by_hand}"
    else:
        return FileVerdict(tuple(existing), ())
    return FileVerdict((), tuple((p, why) for p in existing))


@contextlib.contextmanager
def _marker(runs_dir: Path) -> Iterator[list[Owner]]:
    """The marker's owners, to change in the ``with`` block; read and written back under an
    ``flock`` of the marker, so that two searches sharing the folder do not lose each other. A
    marker cut short by a crash reads as none: its files are then kept, never deleted."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(runs_dir / MARKER, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        owners = read_owners(runs_dir) or []
        yield owners
        data: dict[str, Any] = {"owners": [asdict(o) for o in owners]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(data, indent=1) + "\n").encode(), 0)
    finally:
        os.close(fd)  # releases the flock
