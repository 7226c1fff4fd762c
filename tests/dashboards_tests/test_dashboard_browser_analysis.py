"""The study page's analysis section in a real headless Chromium: the answer for a device count
the user picks, and the two figures of the fitted laws, on a synthetic study drawn from known
laws (real trials would take minutes; the section draws what any study records)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from test_dashboard_browser import Dashboard, _check_page, _wait, serve_dashboard

from hpsearch.testing import SyntheticTruth, synthetic_study


@pytest.fixture(scope="module")
def analysed(chromium: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    work = tmp_path_factory.mktemp("analysed")
    url = f"sqlite:///{work / 'store.db'}"
    synthetic_study(url, "laws", n_trials=500, seed=2, truth=SyntheticTruth(evals_per_epoch=2))
    log = work / "dashboard.log"
    with serve_dashboard(url, log) as served:
        yield served


def test_the_analysis_section_answers_for_the_devices_picked_and_draws_the_laws(
        browser: WebDriver, analysed: Dashboard, tmp_path: Path) -> None:
    browser.get(f"{analysed.url}studies/laws?refresh=0")
    answer = _wait(browser, lambda d: (t := d.find_element(By.ID, "recommendation").text) and " x W " in t and t,
                   "the recommendation")
    # By default, for the largest world size the study ran (8), with its cost and interval.
    assert re.search(r"b \d+ x W [1-8] x A \d+ = B \d+, lr ", answer), answer
    assert "device-hours" in answer and "fitted laws" in answer
    # How the trials ran the LR (this study: no warmup, no schedule), as the CLI says it.
    assert re.search(r"schedule lr [\d.e-]+ from the first step, then held \(as the trials ran\)", answer), answer
    assert browser.find_element(By.ID, "devices").get_attribute("value") == "8"
    for figure in ("tradeoff", "lr_law"):
        _wait(browser, lambda d, f=figure: d.find_elements(By.CSS_SELECTOR, f"#figure-{f} .main-svg .point"),
              f"the {figure} figure's points")
    traces = browser.execute_script("return document.getElementById('figure-tradeoff').data.map((t) => t.name)")
    assert "fit" in traces and "B_crit 90% interval" in traces
    traces = browser.execute_script("return document.getElementById('figure-lr_law').data.map((t) => t.name)")
    assert {"fitted law", "constant", "linear", "sqrt"} <= set(traces)
    notes = browser.find_element(By.ID, "analysis-notes").text
    assert "critical batch B_crit" in notes and "linear:" in notes
    _check_page(browser, analysed, tmp_path / "analysis.png")

    # Two devices: the answer follows.
    # A number field's own clear() leaves its text in Chromium: set the value as a user's edit does.
    browser.execute_script("""const field = document.getElementById('devices');
        field.value = '2'; field.dispatchEvent(new Event('change'));""")
    _wait(browser, lambda d: re.search(r"x W [12] x A", d.find_element(By.ID, "recommendation").text),
          "an answer for two devices")

    # A target nobody reached: the section says so instead of failing.
    target = browser.find_element(By.ID, "target")
    target.send_keys("val_accuracy=0.9999")
    _wait(browser, lambda d: "no recommendation" in d.find_element(By.ID, "recommendation").text,
          "the refusal for an unreachable target")
    _check_page(browser, analysed, tmp_path / "analysis-unreachable.png")
