"""The web dashboard in a real headless Chromium: `hpsearch dashboard` serving a finished study.

Chromium and its driver are Debian packages (``make test`` installs them when run as root);
without them the test skips, except in CI (``CI`` set), where it fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

import hpsearch
from hpsearch.record import PHASE_NAMES

if TYPE_CHECKING:  # the fixture's type; the fixture itself comes from conftest.py
    from tests.dashboards_tests.conftest import FinishedStudy

# Chromium first (conftest.py): without it every test here skips before the finished study is made.
pytestmark = pytest.mark.usefixtures("chromium")

# The rendered table as plain data, read in one script so a redraw cannot go stale under us.
TABLE_JS = """
const table = document.querySelector(arguments[0]);
if (!table) return null;
return {
  columns: [...table.querySelectorAll("thead th")].map((th) => th.dataset.column || th.textContent),
  sorted: [...table.querySelectorAll("thead th")].map((th) => th.className),
  rows: [...table.querySelectorAll("tbody tr")].map((tr) => [...tr.cells].map((td) => td.textContent)),
};
"""
# Every URL the page loaded: the document, scripts, styles, API calls.
URLS_JS = """
return [location.href, ...performance.getEntriesByType("navigation").map((e) => e.name),
        ...performance.getEntriesByType("resource").map((e) => e.name)];
"""


@dataclass(frozen=True)
class Dashboard:
    url: str      # http://127.0.0.1:PORT/
    origin: str   # http://127.0.0.1:PORT
    log: Path     # the server's stdout and stderr


@contextmanager
def serve_dashboard(storage: str, log: Path) -> Iterator[Dashboard]:
    """`hpsearch dashboard --port 0` on ``storage`` as a subprocess, its output in ``log``; its
    URL read from what it prints. Stopped on the way out, where its log must hold no traceback."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("w") as out:  # a file, not a pipe: nothing to drain, nothing left open
        proc = subprocess.Popen([sys.executable, "-m", "hpsearch", "dashboard", "--storage", storage,
                                 "--host", "127.0.0.1", "--port", "0"], stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while not (m := re.search(r" at (http://127\.0\.0\.1:\d+/) ", log.read_text())):
            assert proc.poll() is None, f"the dashboard exited with {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the dashboard printed no URL in 60 s:\n{log.read_text()}"
            time.sleep(0.1)
        url = m[1]
        yield Dashboard(url=url, origin=url.rstrip("/"), log=log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log.read_text(), log.read_text()


@pytest.fixture(scope="module")
def dashboard(chromium: None, finished_study: FinishedStudy,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """The dashboard on the finished study."""
    with serve_dashboard(finished_study.storage, tmp_path_factory.mktemp("dashboard") / "dashboard.log") as served:
        yield served


#: How long a page may take to draw what a test waits for.
WAIT_S = 30


def _wait(driver: WebDriver, condition: Any, what: str) -> Any:
    return WebDriverWait(driver, WAIT_S, ignored_exceptions=[StaleElementReferenceException]).until(
        condition, f"waited {WAIT_S} s for {what}")


def _table(driver: WebDriver, selector: str) -> dict[str, Any] | None:
    return driver.execute_script(TABLE_JS, selector)  # type: ignore[no-any-return]


def _check_page(driver: WebDriver, dashboard: Dashboard, screenshot: Path) -> None:
    """No console errors, no request outside the dashboard, no error note; and a screenshot."""
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == [], severe
    outside = [u for u in driver.execute_script(URLS_JS) if not u.startswith(dashboard.origin + "/")]
    assert outside == [], f"requests outside {dashboard.origin}: {outside}"
    assert driver.find_elements(By.CSS_SELECTOR, "p.error") == []
    assert driver.save_screenshot(str(screenshot))
    png = screenshot.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 1000


@pytest.fixture(scope="module")
def trials(finished_study: FinishedStudy) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=finished_study.name, storage=finished_study.storage).get_trials()


def test_the_study_list_shows_the_study(browser: WebDriver, dashboard: Dashboard, finished_study: FinishedStudy,
                                        tmp_path: Path) -> None:
    # refresh=0: each page draws once, so nothing redraws while the test reads it.
    browser.get(f"{dashboard.url}?refresh=0")
    table = _wait(browser, lambda d: (t := _table(d, "#studies table")) and t["rows"] and t, "the study list")

    [row] = table["rows"]
    assert row[0] == finished_study.name
    assert row[1] == str(finished_study.n_trials)
    assert row[2] == f"complete {finished_study.n_trials}"
    assert row[3].startswith("val_accuracy ")
    link = browser.find_element(By.CSS_SELECTOR, "#studies tbody a")
    assert link.get_attribute("href") == f"{dashboard.url}studies/{finished_study.name}"
    _check_page(browser, dashboard, tmp_path / "studies.png")


def test_the_study_page_draws_the_frontier_and_a_table_that_sorts_and_filters(
        browser: WebDriver, dashboard: Dashboard, finished_study: FinishedStudy,
        trials: list[optuna.trial.FrozenTrial], tmp_path: Path) -> None:
    browser.get(f"{dashboard.url}studies/{finished_study.name}?refresh=0")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#figure-frontier .main-svg"), "the frontier figure")
    # The other figures draw one after another: wait for each to be drawn (or to say why not).
    _wait(browser, lambda d: d.execute_script("""const boxes = [...document.querySelectorAll("#figures .figure")];
        return boxes.length >= 2 && boxes.every((box) => box.querySelector(".main-svg, .note"));"""), "every figure")
    notes = [n.text for n in browser.find_elements(By.CSS_SELECTOR, "#figures .note")]
    assert notes == [], notes
    _wait(browser, lambda d: len(_table(d, "#trials table")["rows"]) == len(trials), "a row per trial")  # type: ignore[index]
    # Plotly drew the points: the frontier figure holds data, its SVG has markers.
    assert browser.execute_script("return document.getElementById('figure-frontier').data.length") > 0
    assert browser.find_elements(By.CSS_SELECTOR, "#figure-frontier .main-svg .point")
    # Every figure fits its box: none drawn wider than the grid cell it ends up in (and clipped).
    widths = browser.execute_script("""return [...document.querySelectorAll("#figures .figure")].map((box) =>
        [box.id, box.getBoundingClientRect().width, Number(box.querySelector(".main-svg")?.getAttribute("width"))]);""")
    assert len(widths) >= 2 and all(0 < svg <= box for _, box, svg in widths), widths
    _check_page(browser, dashboard, tmp_path / "study.png")

    def numbers() -> list[int]:
        table = _table(browser, "#trials table")
        assert table is not None and table["columns"][0] == "number"
        return [int(r[0]) for r in table["rows"]]

    assert numbers() == sorted(t.number for t in trials)
    # Sorted by number: a click on its header sorts descending.
    browser.find_element(By.CSS_SELECTOR, '#trials th[data-column="number"]').click()
    _wait(browser, lambda d: numbers() == sorted((t.number for t in trials), reverse=True), "a descending sort")
    assert "sorted-desc" in browser.find_element(By.CSS_SELECTOR, '#trials th[data-column="number"]').get_attribute(
        "class")

    # Another header sorts by that column, ascending.
    browser.find_element(By.CSS_SELECTOR, '#trials th[data-column="val_accuracy"]').click()
    _wait(browser, lambda d: "sorted-asc" in d.find_element(
        By.CSS_SELECTOR, '#trials th[data-column="val_accuracy"]').get_attribute("class"), "a sort by val_accuracy")
    table = _table(browser, "#trials table")
    assert table is not None
    shown = [float(r[table["columns"].index("val_accuracy")]) for r in table["rows"]]
    assert shown == sorted(shown) and len(shown) == len(trials)
    by_accuracy = sorted(trials, key=lambda t: (t.user_attrs["val_accuracy"], t.number))
    assert [int(r[0]) for r in table["rows"]] == [t.number for t in by_accuracy]

    # The filter box keeps the rows that mention its text.
    linear = sorted(t.number for t in trials if t.params["lr_rule"] == "linear")
    assert 0 < len(linear) < len(trials)
    box = browser.find_element(By.ID, "filter")
    box.send_keys("linear")
    _wait(browser, lambda d: sorted(numbers()) == linear, "the filtered rows")
    rule = table["columns"].index("lr_rule")
    assert {r[rule] for r in _table(browser, "#trials table")["rows"]} == {"linear"}  # type: ignore[index]
    assert browser.find_element(By.ID, "pager").text == f"1-{len(linear)} of {len(linear)}"
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.BACKSPACE)
    _wait(browser, lambda d: len(numbers()) == len(trials), "every row back")
    _check_page(browser, dashboard, tmp_path / "study-sorted-filtered.png")

    # A row opens its trial's page.
    first = numbers()[0]
    browser.find_element(By.CSS_SELECTOR, "#trials tbody tr").click()
    _wait(browser, lambda d: d.current_url == f"{dashboard.url}studies/{finished_study.name}/trials/{first}",
          "the trial page of the clicked row")


def test_the_trial_page_shows_params_values_and_curves(browser: WebDriver, dashboard: Dashboard,
                                                       finished_study: FinishedStudy,
                                                       trials: list[optuna.trial.FrozenTrial], tmp_path: Path) -> None:
    trial = max(trials, key=lambda t: t.user_attrs["val_accuracy"])
    browser.get(f"{dashboard.url}studies/{finished_study.name}/trials/{trial.number}?refresh=0")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#curves .main-svg"), "the learning-curve plot")

    assert browser.find_element(By.CSS_SELECTOR, "main h1").text == f"trial #{trial.number} COMPLETE"
    tables = browser.execute_script("""
        const out = {};
        for (const h2 of document.querySelectorAll("main h2")) {
          out[h2.textContent] = Object.fromEntries([...h2.nextElementSibling.querySelectorAll("tr")]
            .map((tr) => [tr.cells[0].textContent, tr.cells[1] ? tr.cells[1].textContent : null]));
        }
        return out;""")
    params = tables["Parameters"]
    assert set(params) == set(trial.params)
    for name, value in trial.params.items():
        if isinstance(value, float):
            assert float(params[name]) == pytest.approx(value, rel=1e-2)
        else:
            assert params[name] == str(value)
    assert set(tables["Values"]) == {"val_accuracy", "runtime_s"}
    assert float(tables["Values"]["val_accuracy"]) == pytest.approx(trial.values[0], rel=1e-2)
    # Every attr but the curves, which the plot shows, and the phases, which their panel shows.
    assert set(tables["Measurements and attributes"]) == set(trial.user_attrs) - {"curves", "phases"}
    assert tables["Measurements and attributes"]["effective_batch_size"] == str(trial.user_attrs["effective_batch_size"])

    # The plot holds the trial's curves on its samples-seen axis.
    curves = trial.user_attrs["curves"]
    drawn = browser.execute_script(
        "return document.getElementById('curves').data.map((t) => ({name: t.name, x: t.x, y: t.y}))")
    assert [t["name"] for t in drawn] == ["val_accuracy", "val_loss", "train_loss"]
    for t in drawn:
        assert t["x"] == curves["samples_seen"]
        assert t["y"] == pytest.approx(curves[t["name"]])

    # Where the time went: a bar of the spans between its phases, the phases in the order they
    # happened with their seconds, and the line the CLI prints (`hpsearch status --trial N`).
    phases = trial.user_attrs["phases"]
    panel = browser.execute_script("""
        const rows = [...document.querySelectorAll("#phase-table tbody tr")];
        return {heading: document.querySelector("#phases h2").textContent,
                rows: rows.map((tr) => [...tr.cells].map((td) => td.textContent)),
                spans: [...document.querySelectorAll("#phase-bar .span")].map((s) => ({
                  kind: s.className, width: s.getBoundingClientRect().width, title: s.title})),
                bar: document.getElementById("phase-bar").getBoundingClientRect().width,
                summary: document.getElementById("phase-summary").textContent};""")
    assert panel["heading"] == "Where the time went"
    recorded = [name for name in PHASE_NAMES if name in phases]
    assert [r[0] for r in panel["rows"]] == recorded == list(PHASE_NAMES)
    assert [float(r[1].removesuffix(" s")) for r in panel["rows"]] == pytest.approx(
        [phases[name] for name in recorded], abs=1e-3)
    assert len(panel["spans"]) == len(recorded) - 1
    # Each span named as the CLI names it: Ray and Tune starting the trial is start-up.
    assert panel["spans"][0]["kind"] == "span span-startup"
    assert panel["spans"][0]["title"].startswith("asked -> launched") and panel["spans"][0]["title"].endswith("(start-up)")
    assert panel["spans"][1]["kind"] == "span span-wait"
    assert [r[3] for r in panel["rows"]][:3] == ["", "start-up", "waiting for devices"]
    train = [s for s in panel["spans"] if s["kind"] == "span span-train"]
    assert len(train) == 1 and train[0]["title"].startswith("training_started -> training_ended")
    # Drawn to scale: the spans fill the bar (less its border), each as wide as its share of the time.
    assert sum(s["width"] for s in panel["spans"]) == pytest.approx(panel["bar"] - 2, abs=2)
    started = phases["launched"] - phases["asked"]
    assert panel["spans"][0]["width"] == pytest.approx(started / phases["told"] * (panel["bar"] - 2), abs=2)
    assert panel["summary"] == hpsearch.load(finished_study.name, finished_study.storage).trial_phases(
        trial.number).timeline.describe()  # type: ignore[union-attr]
    assert panel["summary"].startswith("start-up ")
    _check_page(browser, dashboard, tmp_path / "trial.png")
