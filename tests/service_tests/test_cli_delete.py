"""``hpsearch delete STUDY``: asks first, frees the study's name, keeps (and names) or deletes its
files on request, and is refused while a search writes the study."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

import hpsearch
from hpsearch.cli import cli
from hpsearch.store.ownership import Owner, claim_runs_dir, store_identity, study_uid
from hpsearch.testing import synthetic_study

HOLD = """
import sys, time
from hpsearch.store.locks import study_lock
with study_lock(sys.argv[1], sys.argv[2]):
    print("locked", flush=True)
    time.sleep(600)
"""


def _run(*args: str, input: str | None = None) -> tuple[int, str, str]:
    result = CliRunner(env={"HPSEARCH_RUNS_DIR": None}).invoke(cli, list(args), input=input)
    return result.exit_code, result.stdout, result.stderr


def _names(url: str) -> list[str]:
    return [s.name for s in hpsearch.list_studies(url)]


def test_delete_asks_first_and_frees_the_name_only_on_yes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hp.db'}"
    synthetic_study(url, "demo", n_trials=5)
    synthetic_study(url, "other", n_trials=2)

    for answer in ("n\n", "\n", ""):  # no, the default, no answer at all
        code, out, err = _run("delete", "demo", "--storage", url, input=answer)
        assert code == 1 and out == ""
        assert f"delete study 'demo' (5 trials) from {url}? [y/N]:" in err and err.endswith("nothing deleted\n")
        assert _names(url) == ["demo", "other"]

    code, out, err = _run("delete", "demo", "--storage", url, input="y\n")
    assert code == 0, err
    assert out == f"deleted study 'demo' (5 trials) from {url}\n"
    assert _names(url) == ["other"]
    # The name can be used again; the other study is untouched.
    assert synthetic_study(url, "demo", n_trials=1).summary()["n_trials"] == 1
    assert hpsearch.load("other", storage=url).summary()["n_trials"] == 2


def test_delete_keeps_and_names_the_runs_folder_unless_asked_to_delete_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hp.db'}"
    runs = tmp_path / "hpsearch_runs" / "demo"
    page = tmp_path / "demo-frontier.html"
    for files in (False, True):
        search = synthetic_study(url, "demo", n_trials=3)
        # What a search of the study writes into its runs folder: that it is this study's.
        claim_runs_dir(runs, Owner(store_identity(url, runs), "demo", study_uid(search.study)))
        (runs / "trial-00000").mkdir(parents=True, exist_ok=True)
        (runs / "trial-00000" / "metrics.jsonl").write_text("{}\n")
        page.write_text("<html></html>")

        code, out, err = _run("delete", "demo", "--storage", url, "--yes", *(["--files"] if files else []))
        assert code == 0, err
        if files:
            assert f"  deleted {runs}\n  deleted {page}\n" in out
            assert not runs.exists() and not page.exists()
        else:
            assert f"  kept {runs} (--files deletes it)\n  kept {page} (--files deletes it)\n" in out
            assert runs.is_dir() and page.is_file()
        assert _names(url) == []
    assert not (tmp_path / "hp.db.lock").exists()  # the lock it took is gone with it


def test_delete_is_refused_while_a_search_writes_the_study(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hp.db'}"
    synthetic_study(url, "demo", n_trials=3)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, url, "demo"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        code, _, err = _run("delete", "demo", "--storage", url, "--yes")
        assert code == 3
        assert f"error: {url} is being written by another hpsearch search (study 'demo', pid {holder.pid}" in err
        assert _names(url) == ["demo"]
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate()
    assert _run("delete", "demo", "--storage", url, "--yes")[0] == 0


def test_delete_study_from_python_says_what_it_did() -> None:
    storage = optuna.storages.InMemoryStorage()
    synthetic_study(storage, "demo", n_trials=4)
    deleted = hpsearch.delete_study("demo", storage)
    assert (deleted.study, deleted.n_trials, deleted.files_deleted) == ("demo", 4, False)
    assert hpsearch.list_studies(storage) == []
    with pytest.raises(hpsearch.StudyNotFoundError, match="no study named 'demo' in InMemoryStorage"):
        hpsearch.delete_study("demo", storage)
