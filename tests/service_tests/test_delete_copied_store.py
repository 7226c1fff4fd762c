"""``hpsearch delete --files`` deletes only the files of the study it deletes: a copy of the store
(``cp hpsearch.db backup.db``) holds a study of the same name whose files are found at the same
paths, and deleting it from the copy must not delete what the original study uses.

Real SQLite files, copied as a user copies them; the files are the ones a real search wrote.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import hpsearch
from hpsearch.cli import cli
from hpsearch.testing import synthetic_study

SPACE = """\
study: S
workload: {name: digits_mlp, epochs: 1}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: 64
  world_size: 1
  lr_rule: linear
  base_lr: {choices: [0.01, 0.02]}  # a second point for the resume of the copy
objectives:
  - {metric: val_accuracy, direction: maximize}
  - {metric: runtime_s, direction: minimize}
search: {sampler: grid, n_trials: 1, seed: 0}
resources: {device: cpu}
"""


def _delete(*args: str) -> tuple[int, str, str]:
    result = CliRunner(env={"HPSEARCH_RUNS_DIR": None}).invoke(cli, ["delete", *args, "--files", "--yes"])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with ``hpsearch.db``, in which ``hpsearch start`` ran study S to the end."""
    work = tmp_path_factory.mktemp("copied")
    (work / "space.yaml").write_text(SPACE)
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                            capture_output=True, text=True, cwd=work, timeout=300, env={**_env(), "HPSEARCH_RUNS_DIR": ""})
    assert result.returncode == 0, result.stdout + result.stderr
    return work


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "HPSEARCH_STORAGE"}


def test_delete_files_from_a_copy_of_the_store_keeps_the_original_studys_files(
    searched: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    shutil.copytree(searched, work)
    runs, page = work / "hpsearch_runs" / "S", work / "S-frontier.html"
    assert runs.is_dir() and page.is_file()
    original, copy = f"sqlite:///{work / 'hpsearch.db'}", f"sqlite:///{work / 'backup.db'}"
    shutil.copy(work / "hpsearch.db", work / "backup.db")

    code, out, err = _delete("S", "--storage", copy)
    assert code == 0, err
    assert f"deleted study 'S' (1 trial) from {copy}\n" in out
    # Kept, and said why: the folder is the study's in hpsearch.db.
    assert f"  kept {runs}: it belongs to study 'S' in sqlite:///{work / 'hpsearch.db'}" in out
    assert f"  kept {page}: it belongs to study 'S' in sqlite:///{work / 'hpsearch.db'}" in out
    assert runs.is_dir() and page.is_file() and list(runs.glob("**/metrics.jsonl"))
    assert [s.name for s in hpsearch.list_studies(copy)] == []

    # The original study still has its files, and deleting it with --files deletes them.
    assert hpsearch.load("S", storage=original).files() == [runs, page]
    code, out, err = _delete("S", "--storage", original)
    assert code == 0, err
    assert f"  deleted {runs}\n  deleted {page}\n" in out
    assert not runs.exists() and not page.exists()


def test_a_folder_both_stores_searched_is_deleted_with_the_last_of_them(searched: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    shutil.copytree(searched, work)
    runs = work / "hpsearch_runs" / "S"
    original, copy = f"sqlite:///{work / 'hpsearch.db'}", f"sqlite:///{work / 'backup.db'}"
    shutil.copy(work / "hpsearch.db", work / "backup.db")
    # The copy's study is resumed (asked for one more trial): its search writes into the same folder.
    result = subprocess.run([sys.executable, "-m", "hpsearch", "resume", "S", "--no-progress", "--storage", copy,
                             "--n-trials", "2"], capture_output=True, text=True, cwd=work, timeout=300,
                            env={**_env(), "HPSEARCH_RUNS_DIR": ""})
    assert result.returncode == 0, result.stdout + result.stderr

    code, out, _ = _delete("S", "--storage", original)
    assert code == 0 and f"  kept {runs}: it is also used by study 'S' in sqlite:///{work / 'backup.db'}" in out
    assert runs.is_dir()
    code, out, _ = _delete("S", "--storage", copy)
    assert code == 0 and f"  deleted {runs}\n" in out
    assert not runs.exists()


def test_a_runs_folder_without_an_owner_marker_is_kept_and_named(tmp_path: Path) -> None:
    # Written by a release before owner markers: whose it is cannot be known.
    url = f"sqlite:///{tmp_path / 'hp.db'}"
    synthetic_study(url, "demo", n_trials=2)
    runs = tmp_path / "hpsearch_runs" / "demo"
    (runs / "trial-00000").mkdir(parents=True)
    code, out, err = _delete("demo", "--storage", url)
    assert code == 0, err
    assert f"  kept {runs}: {runs} has no owner marker" in out and "remove it yourself" in out
    assert (runs / "trial-00000").is_dir()
