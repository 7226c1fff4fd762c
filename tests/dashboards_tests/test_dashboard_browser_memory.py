"""Memory on the dashboard in a real headless Chromium: the memory figure beside throughput, the
peak in the trial table in a human unit, the reasons of trials that ran out of memory or were not
started in the table's legend, and the trial page's memory line, on a synthetic study whose
trials run out of memory above a known ceiling."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from test_dashboard_browser import Dashboard, _check_page, _table, _wait, serve_dashboard

import hpsearch
from hpsearch.study import format_bytes
from hpsearch.testing import GIB, MIB, SyntheticDevice, SyntheticTruth, synthetic_study

CPU = SyntheticDevice("cpu", memory_bytes=3 * GIB, fixed_bytes=1 * GIB, per_sample_bytes=20 * MIB)


@pytest.fixture(scope="module")
def served(chromium: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Dashboard, str]]:
    work = tmp_path_factory.mktemp("memory")
    url = f"sqlite:///{work / 'store.db'}"
    synthetic_study(url, "mem", n_trials=60, seed=1,
                    truth=SyntheticTruth(devices=(CPU,), evals_per_epoch=2, world_sizes=(1, 2), accum_steps=(1,)))
    log = work / "dashboard.log"
    with serve_dashboard(url, log) as served:
        yield served, url


def test_the_study_page_shows_memory_beside_throughput_and_the_reasons_in_words(
        browser: WebDriver, served: tuple[Dashboard, str], tmp_path: Path) -> None:
    dashboard, url = served
    df = hpsearch.load("mem", storage=url).trials_dataframe()
    browser.get(f"{dashboard.url}studies/mem?refresh=0")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#figure-memory .main-svg .point"),
          "the memory figure's points")
    boxes = browser.execute_script("return [...document.querySelectorAll('#figures .figure')].map((b) => b.id)")
    assert boxes.index("figure-memory") == boxes.index("figure-throughput") + 1
    traces = browser.execute_script("return document.getElementById('figure-memory').data.map((t) => t.name)")
    assert traces == ["cpu", "cpu: fitted line", "cpu: ran out of memory", "cpu may hold 3 GiB"]

    table = _wait(browser, lambda d: (t := _table(d, "#trials table")) and len(t["rows"]) == min(len(df), 50) and t,
                  "the trial table")
    assert "peak_memory_bytes" in table["columns"]
    peak = table["columns"].index("peak_memory_bytes")
    state = table["columns"].index("state")
    shown = {int(r[0]): r[peak] for r in table["rows"] if r[state] == "COMPLETE"}
    expected = dict(zip(df["number"], df["peak_memory_bytes"]))
    assert shown and all(text == format_bytes(expected[n]) and text.endswith(" GiB") for n, text in shown.items())

    legend = browser.find_element(By.ID, "reasons").text
    assert re.search(r"exceeds_memory \(\d+\): not started: the same configuration ran out of memory", legend), legend
    assert re.search(r"out_of_memory \(\d+\): a rank ran out of memory", legend), legend
    assert "not run (skipped)" in browser.find_element(By.ID, "states-legend").text

    # A trial the search did not start reads apart from the ones that ran, its reason in words on hover.
    browser.find_element(By.ID, "filter").send_keys("exceeds_memory")
    _wait(browser, lambda d: (t := _table(d, "#trials table")) and t["rows"]
          and all("exceeds_memory" in r for r in t["rows"]), "the trials not started")
    cells = browser.execute_script("""const row = document.querySelector("#trials tbody tr");
        const col = (name) => [...document.querySelectorAll("#trials thead th")].findIndex((th) => th.dataset.column === name);
        return {state: row.cells[col("state")].className, reason: row.cells[col("status_reason")].title,
                color: getComputedStyle(row.cells[col("state")]).fontStyle};""")
    assert "not-run" in cells["state"] and cells["color"] == "italic"
    assert cells["reason"].startswith("not started: the same configuration ran out of memory")
    # The answer for the devices picked keeps its per-device batch within what fit, and says so.
    answer = _wait(browser, lambda d: (e := d.find_elements(By.ID, "answer-memory")) and e[0].text, "the answer's memory")
    assert re.fullmatch(r"memory [\d.]+ GiB per rank (predicted|measured), per-device batch at most 64 on cpu", answer), answer
    run = browser.find_element(By.ID, "recommendation").text
    assert int(re.search(r"run b (\d+) x W", run)[1]) <= 64, run  # type: ignore[index]
    notes = browser.find_element(By.ID, "analysis-notes").text
    assert "memory per rank on cpu: " in notes and "smallest that ran out 128" in notes
    _check_page(browser, dashboard, tmp_path / "memory-study.png")


def test_the_trial_page_shows_its_memory_and_why_it_ran_out(browser: WebDriver, served: tuple[Dashboard, str],
                                                            tmp_path: Path) -> None:
    dashboard, url = served
    df = hpsearch.load("mem", storage=url).trials_dataframe()
    done = df[df["state"] == "COMPLETE"].iloc[0]
    browser.get(f"{dashboard.url}studies/mem/trials/{done['number']}?refresh=0")
    memory = _wait(browser, lambda d: (e := d.find_elements(By.ID, "memory")) and e[0].text, "the memory line")
    assert memory == f"memory peak {format_bytes(done['peak_memory_bytes'])} per rank on cpu"
    attrs = browser.execute_script("""const h2 = [...document.querySelectorAll("main h2")]
            .find((h) => h.textContent === "Measurements and attributes");
        return Object.fromEntries([...h2.nextElementSibling.querySelectorAll("tr")]
            .map((tr) => [tr.cells[0].textContent, tr.cells[1].textContent]));""")
    assert attrs["peak_memory_bytes"] == format_bytes(done["peak_memory_bytes"])
    _check_page(browser, dashboard, tmp_path / "memory-trial.png")

    out = df[df["status_reason"] == "out_of_memory"].iloc[0]
    browser.get(f"{dashboard.url}studies/mem/trials/{out['number']}?refresh=0")
    reason = _wait(browser, lambda d: (e := d.find_elements(By.ID, "reason")) and e[0].text, "the reason")
    assert reason.startswith("out_of_memory: out of memory at per-device batch ")
    _check_page(browser, dashboard, tmp_path / "memory-out.png")
