"""One orchestrator per study: the SQLite file lock and the PostgreSQL advisory lock."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from hpsearch.errors import StudyBusyError
from hpsearch.record import ATTR_SPACE_TEXT
from hpsearch.store import open_storage
from hpsearch.store.locks import study_lock

HOLD = """
import sys, time
from hpsearch.store.locks import study_lock
with study_lock(sys.argv[1], sys.argv[2]):
    print("locked", flush=True)
    time.sleep(600)
"""


def _holder(storage: str, study: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, storage, study], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def _assert_free(storage: str, study: str) -> None:
    deadline = time.monotonic() + 10  # the server notices a dropped connection in a moment
    while True:
        try:
            with study_lock(storage, study):
                return
        except StudyBusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_a_second_writer_of_one_sqlite_file_is_refused_until_the_first_dies(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hp.db'}"
    holder = _holder(url, "first")
    try:
        with pytest.raises(StudyBusyError) as caught, study_lock(url, "second"):
            pass
        message = str(caught.value)
        assert f"{url} is being written by another hpsearch search (study 'first', pid {holder.pid}" in message
        assert "PostgreSQL" in message
        assert caught.value.exit_code == 3
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate()
    _assert_free(url, "second")  # kill -9 released it: resume never waits on a dead owner


def test_a_released_lock_leaves_no_file_beside_the_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hp.db'}"
    for study in ("first", "second"):  # each search takes the lock anew
        with study_lock(url, study):
            assert (tmp_path / "hp.db.lock").is_file()
        assert list(tmp_path.iterdir()) == []


@pytest.mark.postgres
def test_postgres_locks_one_study_and_lets_others_run(postgres_url: str, unique_name: str, tmp_path: Path) -> None:
    study = optuna.create_study(study_name=unique_name, storage=open_storage(postgres_url))
    study.set_user_attr(ATTR_SPACE_TEXT, "parameters: {per_device_batch_size: 8, base_lr: 0.1}\n")
    holder = _holder(postgres_url, unique_name)
    try:
        with study_lock(postgres_url, unique_name + "-other"):  # another study: no conflict
            pass
        result = subprocess.run([sys.executable, "-m", "hpsearch", "resume", unique_name, "--storage", postgres_url,
                                 "--no-progress"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert result.returncode == 3, result.stdout + result.stderr
        assert f"study {unique_name!r}" in result.stderr
        assert "is being written by another hpsearch search" in result.stderr
        assert "Traceback" not in result.stderr
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate()
    _assert_free(postgres_url, unique_name)
