"""An hpsearch store opens in optuna-dashboard: its own server, as a subprocess, over its HTTP API.

The study is a real one that ``hpsearch start`` finished (the ``finished_study`` fixture), copied
into a fresh SQLite file, or into the PostgreSQL test server.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
import pytest

from hpsearch.record import ATTR_SPACE_TEXT
from hpsearch.store import open_storage

if TYPE_CHECKING:  # the fixture's type; the fixture itself comes from conftest.py
    from tests.dashboards_tests.conftest import FinishedStudy

OPTUNA_DASHBOARD = Path(sys.executable).with_name("optuna-dashboard")


@dataclass(frozen=True)
class Store:
    url: str
    study: str


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, finished_study: FinishedStudy, tmp_path: Path,
          unique_name: str) -> Iterator[Store]:
    """The finished study in a store of its own: an SQLite copy of hpsearch's file, or the study
    copied into PostgreSQL under a unique name (removed afterwards)."""
    if request.param == "sqlite":
        copy = tmp_path / "store.db"
        # SQLite's backup API: a consistent copy of a WAL-mode file, whatever its -wal holds.
        src, dst = sqlite3.connect(finished_study.db), sqlite3.connect(copy)
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()
        yield Store(f"sqlite:///{copy}", finished_study.name)
        return
    url = request.getfixturevalue("postgres_url")
    optuna.copy_study(from_study_name=finished_study.name, from_storage=open_storage(finished_study.storage),
                      to_storage=open_storage(url), to_study_name=unique_name)
    try:
        yield Store(url, unique_name)
    finally:
        optuna.delete_study(study_name=unique_name, storage=open_storage(url))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=30) as response:
        assert response.status == 200
        return json.loads(response.read())


@pytest.fixture
def optuna_dashboard(store: Store, tmp_path: Path) -> Iterator[str]:
    """optuna-dashboard's own server on the store; its base URL once it answers."""
    assert OPTUNA_DASHBOARD.is_file(), f"no {OPTUNA_DASHBOARD}: pip install -e '.[dev]'"
    port = _free_port()
    log = tmp_path / "optuna-dashboard.log"
    with log.open("w") as out:  # a file, not a pipe: nothing to drain, nothing left open
        proc = subprocess.Popen([str(OPTUNA_DASHBOARD), store.url, "--host", "127.0.0.1", "--port", str(port),
                                 "--server", "wsgiref"], stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"optuna-dashboard exited with {proc.returncode}:\n{log.read_text()}"
            try:
                _get(base, "/api/meta")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, f"optuna-dashboard did not answer in 60 s:\n{log.read_text()}"
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log.read_text(), log.read_text()


def _attrs(serialized: list[dict[str, str]]) -> dict[str, str]:
    return {a["key"]: a["value"] for a in serialized}


def test_optuna_dashboard_reads_an_hpsearch_study(optuna_dashboard: str, store: Store) -> None:
    study = optuna.load_study(study_name=store.study, storage=open_storage(store.url))
    trials = {t.number: t for t in study.get_trials()}
    assert len(trials) == 4

    # The study list: our study, its two directions and hpsearch's study attrs.
    listed = {s["study_name"]: s for s in _get(optuna_dashboard, "/api/studies")["study_summaries"]}
    summary = listed[store.study]
    assert summary["directions"] == ["maximize", "minimize"]
    assert _attrs(summary["user_attrs"])[ATTR_SPACE_TEXT] == study.user_attrs[ATTR_SPACE_TEXT]
    assert "per_device_batch_size" in _attrs(summary["user_attrs"])[ATTR_SPACE_TEXT]

    # The study detail: objective names, every trial's params, values, attrs and intermediate values.
    detail = _get(optuna_dashboard, f"/api/studies/{summary['study_id']}")
    assert detail["name"] == store.study
    assert detail["directions"] == ["maximize", "minimize"]
    assert detail["objective_names"] == ["val_accuracy", "runtime_s"]
    assert detail["has_intermediate_values"] is True
    assert {p["name"] for p in detail["union_search_space"]} == set(trials[0].params)
    assert {"per_device_batch_size", "world_size", "lr_rule", "base_lr"} <= {p["name"] for p in detail["union_search_space"]}
    assert {"effective_batch_size", "lr", "val_accuracy", "runtime_s", "curves"} <= {
        a["key"] for a in detail["union_user_attrs"]}
    assert sorted(t["number"] for t in detail["trials"]) == sorted(trials)
    for shown in detail["trials"]:
        trial = trials[shown["number"]]
        assert shown["state"] == "Complete"
        assert {p["name"]: p["param_external_value"] for p in shown["params"]} == {
            k: str(v) for k, v in trial.params.items()}
        assert shown["values"] == pytest.approx(trial.values)
        attrs = _attrs(shown["user_attrs"])
        assert set(attrs) == set(trial.user_attrs)
        for key in ("effective_batch_size", "lr", "val_accuracy", "runtime_s"):
            assert float(attrs[key]) == pytest.approx(trial.user_attrs[key])
        assert json.loads(attrs["curves"]) == trial.user_attrs["curves"]  # short enough not to be cut
        assert {v["step"]: v["value"] for v in shown["intermediate_values"]} == pytest.approx(
            trial.intermediate_values)
    # Its best trials are the Pareto front of the two objectives.
    front = {t.number for t in study.best_trials}
    assert {t["number"] for t in detail["best_trials"]} == front

    # Optuna's Pareto-front plot, as optuna-dashboard serves it, names the axes by our metrics.
    figure = _get(optuna_dashboard, f"/api/studies/{summary['study_id']}/plot/pareto_front")
    titles = {figure["layout"][axis]["title"]["text"] for axis in ("xaxis", "yaxis")}
    assert titles == {"val_accuracy", "runtime_s"}
