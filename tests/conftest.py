"""Shared fixtures: space files, stores (SQLite and PostgreSQL), process hygiene."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

#: The PostgreSQL server the store tests use; the default is a local server with trust auth.
POSTGRES_URL = os.environ.get("HPSEARCH_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _postgres_reachable(url: str) -> str | None:
    """None when the server answers, else why not."""
    try:
        import sqlalchemy
    except ImportError as exc:  # pragma: no cover
        return str(exc)
    try:
        engine = sqlalchemy.create_engine(url, connect_args={"connect_timeout": 3})
        with engine.connect() as con:
            con.execute(sqlalchemy.text("select 1"))
        engine.dispose()
    except Exception as exc:  # any driver or network failure means "not reachable"
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return None


def _unavailable(message: str) -> NoReturn:
    """Skip a test whose real component this machine lacks; fail it in CI (``CI`` set), which
    must run every test."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def unavailable() -> Callable[[str], NoReturn]:
    """The skip-here, fail-in-CI policy, for tests and fixtures whose component is missing."""
    return _unavailable


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A reachable PostgreSQL URL, or a skip that says how to enable these tests.

    In CI (``CI`` set) an unreachable server fails the test instead: CI must run them.
    """
    problem = _postgres_reachable(POSTGRES_URL)
    if problem:
        message = (f"PostgreSQL not reachable at {POSTGRES_URL} ({problem}); start a server or set "
                   "HPSEARCH_TEST_POSTGRES_URL to enable the PostgreSQL store tests")
        _unavailable(message)
    return POSTGRES_URL


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty store of each back end: an SQLite file, or a PostgreSQL schema-less
    database shared by tests (each test uses unique study names)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
    else:
        yield request.getfixturevalue("postgres_url")


@pytest.fixture
def unique_name() -> str:
    """A study name no other test uses (PostgreSQL stores are shared between runs)."""
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def live_children() -> Callable[[], list[Any]]:
    """A function listing this test process's live descendants, except the helpers that live as
    long as it does and run no rank: multiprocessing's resource tracker and the idle warm rank
    processes of this process's own pool (``hpsearch.trials.node.pool.local_pool``)."""
    import psutil

    from hpsearch.trials.node import pool

    def children() -> list[Any]:
        idle = pool._local.idle_pids() if pool._local is not None else set()
        out = []
        for p in psutil.Process().children(recursive=True):
            try:
                command = " ".join(p.cmdline())
                if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in command and p.pid not in idle:
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        return out

    return children
