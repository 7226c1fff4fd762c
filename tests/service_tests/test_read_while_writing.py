"""The dashboard and the study API read a study while a search writes it: no lost trials and no
"database is locked", on SQLite (one writer, WAL) and on PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from hpsearch.dashboards.app import create_app
from hpsearch.search import Search

SPACE = """\
workload: {name: digits_mlp, epochs: 5}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: {choices: [16, 32]}
  world_size: 1
  lr_rule: {choices: [linear, sqrt]}
  base_lr: 0.01
search: {sampler: grid, seed: 0}
resources: {device: cpu}
"""


def _get(app: TestClient, url: str) -> tuple[int, dict]:
    response = app.get(url)
    return response.status_code, response.json()


@pytest.mark.slow
def test_reading_while_a_search_writes_loses_nothing(storage_url: str, unique_name: str, tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    search = subprocess.Popen([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--study", unique_name,
                               "--storage", storage_url, "--no-progress"],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:  # a failed read stops the search: left running, it would outlive the test
        app = TestClient(create_app(storage_url))
        seen: list[int] = []  # trials the dashboard counted, poll after poll
        epochs: list[int] = []
        while search.poll() is None:
            time.sleep(0.5)  # ten times a page's pace: reads overlap writes, the trials still run
            status, body = _get(app, f"/api/studies/{unique_name}/trials?limit=1000")
            if status == 404:  # the search has not created the study yet
                continue
            assert status == 200, body
            seen.append(body["total"])
            epochs.append(sum(r.get("epochs_completed") or 0 for r in body["rows"]))
            status, body = _get(app, f"/api/studies/{unique_name}")
            assert status == 200, body
            Search(unique_name, storage_url).trials_dataframe()  # a second reader, as a notebook would be
    finally:
        if search.poll() is None:
            search.terminate()  # the search stops its trials and Ray on SIGTERM
        try:
            out, err = search.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            search.kill()
            out, err = search.communicate()

    assert search.returncode == 0, out + err
    assert "locked" not in err
    assert len(seen) > 3, "the search ended before the dashboard could read it while it ran"
    assert seen == sorted(seen) and epochs == sorted(epochs)  # trials and epochs only ever grow
    status, body = _get(app, f"/api/studies/{unique_name}")
    assert body["states"] == {"COMPLETE": 4}
    status, body = _get(app, f"/api/studies/{unique_name}/trials?limit=1000")
    assert [r["epochs_completed"] for r in body["rows"]] == [5, 5, 5, 5]
