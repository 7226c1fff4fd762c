"""Fixtures shared by the dashboard tests: a real, finished hpsearch study in an SQLite store."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import optuna
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver
from starlette.testclient import TestClient

from hpsearch.record import ATTR_OBJECTIVES, ATTR_SPACE_TEXT
from hpsearch.search import Search, load
from hpsearch.store import open_storage
from hpsearch.testing import synthetic_study

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


def loss_study(storage: str, name: str = "loss", n_trials: int = 150, seed: int = 1) -> Search:
    """A study whose one objective is ``val_loss`` (minimize) and whose trials record no
    ``val_accuracy`` anywhere, as a regression workload leaves it (``examples/my_workload``):
    the synthetic study's trials (``hpsearch.testing``), less their accuracy."""
    source = synthetic_study(optuna.storages.InMemoryStorage(), name, n_trials=n_trials, seed=seed)
    study = optuna.create_study(study_name=name, storage=open_storage(storage), direction="minimize")
    study.set_metric_names(["val_loss"])
    for key, value in source.study.user_attrs.items():
        study.set_user_attr(key, value)
    study.set_user_attr(ATTR_OBJECTIVES, ["val_loss"])
    space = source.study.user_attrs[ATTR_SPACE_TEXT]
    objectives = "  - {metric: val_accuracy, direction: maximize}\n  - {metric: runtime_s, direction: minimize}\n"
    assert objectives in space
    study.set_user_attr(ATTR_SPACE_TEXT, space.replace(objectives, "  - {metric: val_loss, direction: minimize}\n"))
    trials = []
    for trial in source.study.get_trials(deepcopy=True):
        attrs = {k: v for k, v in trial.user_attrs.items() if k != "val_accuracy"}
        curves = {k: v for k, v in attrs.get("curves", {}).items() if k != "val_accuracy"}
        if curves:
            attrs["curves"] = curves
        complete = trial.state == optuna.trial.TrialState.COMPLETE
        trials.append(optuna.trial.FrozenTrial(
            number=trial.number, trial_id=trial.number, state=trial.state, value=None,
            values=[attrs["val_loss"]] if complete else None,
            datetime_start=trial.datetime_start, datetime_complete=trial.datetime_complete,
            params=trial.params, distributions=trial.distributions, user_attrs=attrs, system_attrs={},
            intermediate_values=dict(zip(curves.get("samples_seen", []), curves.get("val_loss", [])))))
    study.add_trials(trials)
    return load(name, storage=storage)


@pytest.fixture
def get_json() -> Callable[[Any, str], Any]:
    """A function calling a dashboard's ASGI app (``create_app``) in process, through Starlette's
    test client, with a GET of ``url`` and returning the JSON answer (asserting 200)."""

    def get(app: Any, url: str) -> Any:
        response = TestClient(app).get(url)
        assert response.status_code == 200, response.content[:300]
        return response.json()

    return get


# ---- headless Chromium for the browser tests ----------------------------------------------------

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# Headless, and nothing of its own on the network: no updates, sync or background fetches.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=1400,1000")


@pytest.fixture(scope="session")
def chromium(unavailable: Callable[[str], NoReturn]) -> None:
    """Chromium and chromedriver, or a skip (a failure in CI); checked before any other fixture
    runs, so a skip does not first wait for the finished study."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    if missing:
        message = (f"no {' or '.join(missing)}: install chromium and chromium-driver (Debian packages) "
                   "or run `make test` as root")
        unavailable(message)


@pytest.fixture(scope="module")
def browser(chromium: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """Headless Chromium through chromedriver, both named explicitly: Selenium Manager never runs."""
    work = tmp_path_factory.mktemp("chromium")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={work / 'profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()
