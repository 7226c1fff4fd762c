"""The store as a user names it on the command line: a mistyped URL is one line quoting what was
typed and the URL it was meant to be (exit 2); ``postgres://`` is PostgreSQL; the commands that
only read a store never create one, and name the store they looked in."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import hpsearch
from hpsearch.cli import cli
from hpsearch.testing import synthetic_study


def _run(*args: str, input: str | None = None) -> tuple[int, str, str]:
    # The default store, as in a fresh shell: nothing from the environment.
    result = CliRunner(env={"HPSEARCH_STORAGE": None, "HPSEARCH_RUNS_DIR": None}).invoke(cli, list(args), input=input)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(("typed", "quoted", "meant"), [
    ("postgresl+psycopg://me:secret@db.example/hp", "postgresl+psycopg://me:***@db.example/hp",
     "did you mean 'postgresql+psycopg://me:***@db.example/hp'?"),
    ("sqllite:///hp.db", "sqllite:///hp.db", "did you mean 'sqlite:///hp.db'?"),
    ("sqlite:/hp.db", "sqlite:/hp.db", "did you mean 'sqlite:///hp.db' (hp.db in the working folder) or "
                                       "'sqlite:////hp.db' (/hp.db)?"),
    ("sqlite:hp.db", "sqlite:hp.db", "did you mean 'sqlite:///hp.db'?"),
    ("sqlite://hp.db", "sqlite://hp.db", "did you mean 'sqlite:///hp.db'?"),  # an in-memory database named hp.db
    ("hp.db", "hp.db", "for an SQLite file write 'sqlite:///hp.db'"),
])
def test_a_mistyped_storage_url_is_one_line_with_what_was_typed_and_the_url_meant(
        typed: str, quoted: str, meant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for command in (["ls"], ["status", "demo"], ["delete", "demo", "--yes"]):
        code, out, err = _run(*command, "--storage", typed)
        assert code == 2, out + err
        [line] = err.splitlines()
        assert line.startswith(f"error: storage {quoted!r} ") and line.endswith(meant), line
        assert "secret" not in line and "unparseable" not in line
        assert "sqlalchemy" not in line.lower() and "plugin" not in line  # no library internals
    assert list(tmp_path.iterdir()) == []


def test_postgres_urls_are_postgresql_with_the_installed_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # SQLAlchemy refuses the scheme libpq and hosting services write ("Can't load plugin:
    # sqlalchemy.dialects:postgres"). Nothing answers on port 1: the error is the connection's.
    monkeypatch.chdir(tmp_path)
    code, _, err = _run("ls", "--storage", "postgres://me@127.0.0.1:1/hp")
    assert code == 2
    assert "cannot open storage postgresql+psycopg://me@127.0.0.1:1/hp" in err and "plugin" not in err


@pytest.mark.postgres
def test_a_postgres_url_lists_the_studies_of_the_server(postgres_url: str, unique_name: str) -> None:
    synthetic_study(postgres_url, unique_name, n_trials=3)
    typed = postgres_url.replace("postgresql+psycopg://", "postgres://")
    code, out, err = _run("ls", "--storage", typed, "--json")
    assert code == 0, err
    assert unique_name in out


@pytest.mark.parametrize("command", [
    ["ls"], ["ls", "--json"], ["status", "demo"], ["best", "demo"], ["export", "demo"], ["resume", "demo"],
    ["recommend", "demo", "-n", "2"], ["export-trial", "demo", "0", "-o", "job"], ["delete", "demo", "--yes"],
])
def test_commands_in_an_empty_folder_create_no_store_and_name_the_one_they_looked_for(
        command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(*command)
    assert list(tmp_path.iterdir()) == []  # no hpsearch.db, no lock, no job folder
    if command == ["ls"]:
        assert (code, out) == (0, "no studies in sqlite:///hpsearch.db\n")
    elif command == ["ls", "--json"]:
        assert (code, out) == (0, "[]\n")
    else:
        assert code == 2 and "Traceback" not in err
        assert err == (f"error: no study named 'demo': there is no store at sqlite:///hpsearch.db "
                       f"({tmp_path / 'hpsearch.db'} does not exist)\n")


def test_a_study_missing_from_a_store_is_named_with_the_store_and_its_studies(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hp.db'}"
    synthetic_study(url, "demo", n_trials=3)
    code, _, err = _run("status", "nope", "--storage", url)
    assert code == 2
    assert err == f"error: no study named 'nope' in {url} (studies: demo)\n"


def test_the_python_api_reads_without_creating_a_store_either(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hp.db'}"
    assert hpsearch.list_studies(url) == []
    with pytest.raises(hpsearch.StudyNotFoundError, match="there is no store at"):
        hpsearch.load("demo", storage=url)
    with pytest.raises(hpsearch.StoreError, match="there is no store at"):
        hpsearch.Search("demo", url).trials_dataframe()
    assert list(tmp_path.iterdir()) == []
