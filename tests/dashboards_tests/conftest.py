"""Fixtures shared by the dashboard tests: a real, finished hpsearch study in an SQLite store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest

#: A 2 x 2 grid of a small MLP on the digits, 2 epochs each, one rank per trial, on the CPU:
#: real trials with real curves in about half a minute.
FINISHED_SPACE = """\
study: dash-e2e
workload: {name: digits_mlp, epochs: 2}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: {choices: [16, 64]}
  world_size: 1
  lr_rule: {choices: [constant, linear]}
  base_lr: 0.01
  momentum: 0.9
objectives:
  - {metric: val_accuracy, direction: maximize}
  - {metric: runtime_s, direction: minimize}
search: {sampler: grid, n_trials: 4, seed: 0}
resources: {device: cpu}
"""


@dataclass(frozen=True)
class FinishedStudy:
    """A study that ``hpsearch start`` ran to the end. Tests must not change it (copy it first)."""

    storage: str   # sqlite:///... URL
    db: Path       # the SQLite file
    name: str
    n_trials: int


@pytest.fixture(scope="session")
def finished_study(tmp_path_factory: pytest.TempPathFactory) -> FinishedStudy:
    """``hpsearch start`` on a tiny space, as a subprocess: a local Ray, real trials, a real store."""
    work = tmp_path_factory.mktemp("finished-study")
    (work / "space.yaml").write_text(FINISHED_SPACE)
    db = work / "hpsearch.db"
    storage = f"sqlite:///{db}"
    # Only this study's settings: no cluster or store from the caller's environment.
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "HPSEARCH_STORAGE", "HPSEARCH_RUNS_DIR")}
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--storage", storage,
                             "--no-progress"], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return FinishedStudy(storage=storage, db=db, name="dash-e2e", n_trials=4)


@pytest.fixture
def get_json() -> Callable[[Any, str], Any]:
    """A function calling a dashboard's WSGI app in process with a GET of ``url`` and returning
    the JSON answer (asserting 200)."""

    def get(app: Any, url: str) -> Any:
        path, _, query = url.partition("?")
        environ: dict[str, Any] = {"PATH_INFO": path, "QUERY_STRING": query}
        setup_testing_defaults(environ)
        status: list[str] = []
        body = b"".join(app(environ, lambda s, h: status.append(s)))
        assert status == ["200 OK"], body[:300]
        return json.loads(body)

    return get
