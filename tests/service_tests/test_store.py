"""The study store against every back end: SQLite and PostgreSQL."""

from __future__ import annotations

import math
import multiprocessing
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

from hpsearch.errors import StoreError, StudyNotFoundError
from hpsearch.store import load_study, open_storage, parse_storage_url, redact_url, write_trial_record
from hpsearch.study import list_studies


def test_listed_study_shows_its_states_and_best_value(storage_url: str, unique_name: str) -> None:
    study = optuna.create_study(study_name=unique_name, storage=open_storage(storage_url), direction="maximize")
    study.set_metric_names(["val_accuracy"])
    for value in (0.5, 0.9):
        trial = study.ask()
        study.tell(trial, value)
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)

    summary = next(s for s in list_studies(open_storage(storage_url)) if s.name == unique_name)
    assert summary.states == {"COMPLETE": 2, "FAIL": 1}
    assert summary.best_values == (0.9,)
    assert summary.objectives == ("val_accuracy",)


def test_loading_a_missing_study_names_it(storage_url: str, unique_name: str) -> None:
    with pytest.raises(StudyNotFoundError, match=unique_name):
        load_study(unique_name, storage_url)


def test_malformed_url_is_a_store_error_with_exit_code_2() -> None:
    with pytest.raises(StoreError) as info:
        open_storage("not a url")
    assert info.value.exit_code == 2


def test_passwords_never_appear_in_redacted_urls() -> None:
    assert "secret" not in redact_url("postgresql+psycopg://me:secret@db.example/hp")
    # Text SQLAlchemy cannot parse comes back as typed, its password masked all the same.
    assert redact_url("postgresql+psycopg://me:secret@db:port/hp") == "postgresql+psycopg://me:***@db:port/hp"
    assert redact_url("sqlite:/hp.db") == "sqlite:/hp.db"


def test_a_url_with_a_port_that_is_no_number_is_a_store_error_quoting_it() -> None:
    with pytest.raises(StoreError, match=r"storage 'postgresql\+psycopg://me:\*\*\*@db:port/hp' is not a database URL"):
        open_storage("postgresql+psycopg://me:secret@db:port/hp")


@pytest.mark.parametrize(("typed", "opened"), [
    ("sqlite:///hp.db", "sqlite:///hp.db"),
    ("sqlite:////abs/hp.db", "sqlite:////abs/hp.db"),
    ("sqlite://", "sqlite://"),  # in-memory, asked for as such
    ("  sqlite:///hp.db ", "sqlite:///hp.db"),
    ("postgres://me@db/hp", "postgresql+psycopg://me@db/hp"),
    ("postgresql://me@db/hp", "postgresql+psycopg://me@db/hp"),
    ("postgres+psycopg://me@db/hp", "postgresql+psycopg://me@db/hp"),
    ("postgresql+psycopg2://me@db/hp", "postgresql+psycopg2://me@db/hp"),  # a driver named is kept
    ("mysql+pymysql://me@db/hp", "mysql+pymysql://me@db/hp"),
])
def test_storage_urls_open_as_written_or_with_the_installed_postgresql_driver(typed: str, opened: str) -> None:
    assert parse_storage_url(typed) == opened


@pytest.mark.postgres
def test_the_same_store_under_another_spelling_is_the_same_storage(postgres_url: str) -> None:
    typed = postgres_url.replace("postgresql+psycopg://", "postgres://")
    assert open_storage(typed) is open_storage(postgres_url)


def test_a_trial_record_reads_back_through_optuna_as_if_optuna_wrote_it(storage_url: str, unique_name: str) -> None:
    study = optuna.create_study(study_name=unique_name, storage=open_storage(storage_url),
                                directions=["maximize", "minimize"])
    trial = study.ask()
    write_trial_record(study._storage, trial._trial_id, {"curves": {"val_accuracy": [0.5, None]}, "samples_seen": 100})
    # A second record updates an attr in place and adds another intermediate value.
    write_trial_record(study._storage, trial._trial_id, {"samples_seen": 200, "device": "cpu"}, [(200, 0.75)])
    write_trial_record(study._storage, trial._trial_id, {}, [(300, float("nan")), (400, 0.8)])  # two epochs at once
    study.tell(trial, [0.8, 1.5])

    frozen = load_study(unique_name, storage_url).trials[0]
    assert frozen.user_attrs == {"curves": {"val_accuracy": [0.5, None]}, "samples_seen": 200, "device": "cpu"}
    assert frozen.intermediate_values[200] == 0.75
    assert math.isnan(frozen.intermediate_values[300]) and frozen.intermediate_values[400] == 0.8
    assert frozen.values == [0.8, 1.5]


def test_a_finished_trial_refuses_a_record_and_keeps_its_attrs(storage_url: str, unique_name: str) -> None:
    study = optuna.create_study(study_name=unique_name, storage=open_storage(storage_url))
    trial = study.ask()
    trial.set_user_attr("samples_seen", 100)
    study.tell(trial, 0.5)
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        write_trial_record(study._storage, trial._trial_id, {"samples_seen": 999, "extra": 1}, [(999, 0.9)])
    frozen = load_study(unique_name, storage_url).trials[0]
    assert frozen.user_attrs == {"samples_seen": 100}
    assert frozen.intermediate_values == {}


def _open_at(url: str, at: float, results: Any) -> None:
    while time.time() < at:  # every process opens in the same instant
        pass
    try:
        open_storage(url)
        results.put("ok")
    except StoreError as exc:
        results.put(str(exc))


def test_processes_opening_a_new_sqlite_file_at_once_all_get_the_store(tmp_path: Path) -> None:
    # A dashboard opened on the file just as the first search starts: both create Optuna's
    # schema, and one of them used to fail ("table studies already exists", or the schema's
    # version row inserted twice).
    context = multiprocessing.get_context("spawn")
    for round_ in range(3):
        url = f"sqlite:///{tmp_path / f'new-{round_}.db'}"
        results = context.Queue()
        at = time.time() + 3  # past the processes' start-up
        openers = [context.Process(target=_open_at, args=(url, at, results)) for _ in range(4)]
        for p in openers:
            p.start()
        for p in openers:
            p.join(timeout=60)
        assert [results.get(timeout=10) for _ in openers] == ["ok"] * 4


def test_a_new_sqlite_file_locked_for_longer_than_sqlites_default_wait_still_opens(tmp_path: Path) -> None:
    # Another process holds the new file while it creates the schema on a loaded machine: the
    # journal switch used to wait SQLite's default 5 s and fail with "database is locked".
    db_file = tmp_path / "busy.db"
    holder = sqlite3.connect(db_file, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("CREATE TABLE other_writer (x)")
    release = threading.Timer(6.0, holder.execute, args=("COMMIT",))
    release.start()
    try:
        storage = open_storage(f"sqlite:///{db_file}")
    finally:
        release.join()
        holder.close()
    assert optuna.create_study(storage=storage).trials == []
    with sqlite3.connect(db_file) as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
