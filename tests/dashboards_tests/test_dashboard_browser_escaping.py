"""Hostile store text in a real headless Chromium: study names, params, attrs and failure reasons
holding markup show as text and run nothing, and a name full of URL syntax links to its pages.

The dashboard runs with a token (from the environment), so the login URL, its cookie and the
address bar's clean-up are checked in the browser too. Chromium as in test_dashboard_browser.py
(whose fixtures this module uses): a skip without it, a failure in CI.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote

import pytest
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By

# Sibling test modules (pytest puts this folder on sys.path): the browser helpers (the Chromium
# fixtures are in conftest.py), and the hostile study the in-process tests use.
from test_dashboard_browser import _table, _wait
from test_dashboard_exposure import NAMES, SLASHY, TOKEN, XSS, add_hostile_study


@dataclass(frozen=True)
class Served:
    login: str    # http://127.0.0.1:PORT/?token=...
    origin: str   # http://127.0.0.1:PORT


@pytest.fixture(scope="module")
def served(chromium: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``hpsearch dashboard --port 0`` over a store of hostile studies, its token from the environment."""
    work = tmp_path_factory.mktemp("escaping")
    storage = f"sqlite:///{work / 'store.db'}"
    for name in NAMES:
        add_hostile_study(storage, name)
    log = work / "dashboard.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HPSEARCH_DASHBOARD_TOKEN": TOKEN}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hpsearch", "dashboard", "--storage", storage, "--port", "0"],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while not (m := re.search(r" at (http://127\.0\.0\.1:\d+)/\?token=(\S+) ", log.read_text())):
            assert proc.poll() is None, f"the dashboard exited with {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the dashboard printed no URL in 60 s:\n{log.read_text()}"
            time.sleep(0.1)
        assert m[2] == TOKEN
        yield Served(login=f"{m[1]}/?token={m[2]}", origin=m[1])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log.read_text(), log.read_text()


@pytest.fixture(scope="module")
def signed_in(browser: WebDriver, served: Served) -> Served:
    """The browser opened the login URL once; its cookie signs in every later page."""
    browser.get(f"{served.login}&refresh=0")
    _wait(browser, lambda d: (t := _table(d, "#studies table")) and len(t["rows"]) == len(NAMES), "the study list")
    return served


def _nothing_ran(driver: WebDriver) -> None:
    """No dialog opened, no element came from store text, no script but the dashboard's, and no
    console error (a script the page's policy refused would be one)."""
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert  # noqa: B018 - the property raises when no dialog is open
    assert driver.find_elements(By.CSS_SELECTOR, 'img[src="x"], img[onerror]') == []
    scripts = [s.get_attribute("src") for s in driver.find_elements(By.TAG_NAME, "script")]
    assert [s.split("/", 3)[3] for s in scripts] == ["static/plotly.min.js", "static/app.js"], scripts
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == [], severe


def _study_url(served: Served, name: str) -> str:
    return f"{served.origin}/studies/{quote(name, safe='')}"


def test_the_login_url_leaves_a_strict_httponly_cookie_and_no_token_in_the_address_bar(
        browser: WebDriver, signed_in: Served) -> None:
    assert "token" not in browser.current_url
    assert browser.current_url == f"{signed_in.origin}/?refresh=0"
    [cookie] = browser.get_cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and TOKEN not in cookie["value"]
    # Page scripts cannot read it.
    assert browser.execute_script("return document.cookie") == ""


def test_the_study_list_shows_hostile_names_as_text(browser: WebDriver, signed_in: Served) -> None:
    browser.get(f"{signed_in.origin}/?refresh=0")
    table = _wait(browser, lambda d: (t := _table(d, "#studies table")) and len(t["rows"]) == len(NAMES) and t,
                  "the study list")

    assert sorted(row[0] for row in table["rows"]) == sorted(NAMES)
    _nothing_ran(browser)


@pytest.mark.parametrize("name", XSS)
def test_the_study_page_shows_hostile_text_in_its_cells(browser: WebDriver, signed_in: Served, name: str) -> None:
    browser.get(f"{_study_url(signed_in, name)}?refresh=0")
    table = _wait(browser, lambda d: (t := _table(d, "#trials table")) and len(t["rows"]) == 2 and t, "both trials")

    assert browser.title == f"hpsearch / {name}"
    assert browser.find_element(By.CSS_SELECTOR, "main h1").text == name
    assert browser.find_element(By.ID, "crumbs").text == f"/ {name}"
    rows = [dict(zip(table["columns"], row)) for row in table["rows"]]
    assert [r["lr_rule"] for r in rows] == [XSS[0], XSS[0]]
    assert rows[1]["status_reason"] == XSS[1]
    space = browser.execute_script("return document.getElementById('space').textContent")
    assert XSS[0] in space and XSS[1] in space
    _wait(browser, lambda d: d.execute_script("""const boxes = [...document.querySelectorAll("#figures .figure")];
        return boxes.length >= 2 && boxes.every((box) => box.querySelector(".main-svg, .note"));"""), "every figure")
    _nothing_ran(browser)


def test_the_trial_page_shows_hostile_params_attrs_and_reason_as_text(browser: WebDriver, signed_in: Served) -> None:
    tables_js = """
        const out = {};
        for (const h2 of document.querySelectorAll("main h2")) {
          out[h2.textContent] = Object.fromEntries([...h2.nextElementSibling.querySelectorAll("tr")]
            .map((tr) => [tr.cells[0].textContent, tr.cells[1] ? tr.cells[1].textContent : null]));
        }
        return out;"""
    for number in (0, 1):
        browser.get(f"{_study_url(signed_in, XSS[1])}/trials/{number}?refresh=0")
        _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "main h2"), f"trial #{number}")
        tables = browser.execute_script(tables_js)
        assert tables["Parameters"][XSS[1]] == XSS[1] and tables["Parameters"]["lr_rule"] == XSS[0]
        if number == 0:
            assert tables["Measurements and attributes"][XSS[0]] == XSS[1]
        else:
            assert browser.find_element(By.ID, "reason").text == f"{XSS[1]}: {XSS[0]}"
            assert tables["Measurements and attributes"]["status_detail"] == XSS[0]
        assert browser.find_element(By.CSS_SELECTOR, "#crumbs a").text == XSS[1]
        _nothing_ran(browser)


def test_a_name_with_url_syntax_links_to_its_pages(browser: WebDriver, signed_in: Served) -> None:
    browser.get(f"{signed_in.origin}/?refresh=0")
    _wait(browser, lambda d: (t := _table(d, "#studies table")) and len(t["rows"]) == len(NAMES), "the study list")
    [link] = [a for a in browser.find_elements(By.CSS_SELECTOR, "#studies tbody a") if a.text == SLASHY]
    link.click()

    _wait(browser, lambda d: (t := _table(d, "#trials table")) and len(t["rows"]) == 2, "the study's trials")
    assert browser.current_url == f"{_study_url(signed_in, SLASHY)}"
    assert browser.find_element(By.CSS_SELECTOR, "main h1").text == SLASHY
    # The CSV link reaches the study too (the cookie goes with it).
    csv = browser.execute_script("""const a = [...document.querySelectorAll("a")].find((a) => a.textContent === "download CSV");
        return fetch(a.href).then(async (r) => [r.status, (await r.text()).split("\\n").length]);""")
    assert csv == [200, 4]  # a header, two trials, the final newline
    browser.find_element(By.CSS_SELECTOR, "#trials tbody tr").click()

    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "main h2"), "the trial page")
    assert browser.current_url == f"{_study_url(signed_in, SLASHY)}/trials/0"
    assert browser.find_element(By.CSS_SELECTOR, "main h1").text == "trial #0 COMPLETE"
    browser.find_element(By.CSS_SELECTOR, "#crumbs a").click()
    _wait(browser, lambda d: d.current_url == _study_url(signed_in, SLASHY), "back on the study page")
    _nothing_ran(browser)
