"""The dashboard's commands only read a store: ``hpsearch dashboard`` and ``hpsearch frontier`` in a
folder without one create no ``hpsearch.db``, as every other reading command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpsearch.cli import cli


def _env() -> dict[str, str]:
    """The defaults a new user has: the store in the working folder."""
    return {k: v for k, v in os.environ.items() if not k.startswith("HPSEARCH_") and k != "RAY_ADDRESS"} | {
        "PYTHONUNBUFFERED": "1"}


def test_the_dashboard_of_a_folder_without_a_store_lists_no_study_and_creates_none(tmp_path: Path) -> None:
    work = tmp_path / "empty"
    work.mkdir()
    log = tmp_path / "dashboard.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hpsearch", "dashboard", "--port", "0"], cwd=work,
                                stdout=out, stderr=subprocess.STDOUT, env=_env())
    try:
        deadline = time.monotonic() + 60
        while not (m := re.search(r" at (http://127\.0\.0\.1:\d+/) ", log.read_text())):
            assert proc.poll() is None, f"the dashboard exited with {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the dashboard printed no URL in 60 s:\n{log.read_text()}"
            time.sleep(0.1)
        with urllib.request.urlopen(f"{m[1]}api/studies", timeout=10) as response:
            assert json.loads(response.read()) == []
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert list(work.iterdir()) == []
    assert "Traceback" not in log.read_text()


def test_the_frontier_of_a_folder_without_a_store_is_one_line_and_creates_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # CliRunner runs in this process: the default store is the working folder's
    monkeypatch.delenv("HPSEARCH_STORAGE", raising=False)
    monkeypatch.delenv("HPSEARCH_RUNS_DIR", raising=False)
    result = CliRunner().invoke(cli, ["frontier", "nope"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no study named 'nope': there is no store at sqlite:///hpsearch.db")
    assert list(tmp_path.iterdir()) == []
