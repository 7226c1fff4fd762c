"""What a newcomer's first studies show in a real headless Chromium: a study of ``val_loss`` (a
regression workload) drawn on its own objective, a loss axis over decades labelled at round
values, a refused LR-law fit whose reason stays inside its figure and off its points, a trial
table with the optimizer each trial searched, and the frontier page ``hpsearch start`` writes,
opened offline from disk."""

from __future__ import annotations

import itertools
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from conftest import loss_study
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from test_dashboard_browser import Dashboard, _check_page, _table, _wait, serve_dashboard

from hpsearch import load
from hpsearch.dashboards import plot_frontier, write_figure_html
from hpsearch.dashboards.frontier import frontier_figure
from hpsearch.testing import SyntheticTruth, searched_study, synthetic_study

pytestmark = pytest.mark.usefixtures("chromium")

# The figure box and each note across it, in page pixels.
NOTES_JS = """
const box = document.getElementById(arguments[0]).getBoundingClientRect();
return [...document.querySelectorAll(`#${arguments[0]} .annotation-text`)].map((note) => {
  const r = note.getBoundingClientRect();
  return {text: note.textContent, inside: r.left >= box.left && r.right <= box.right, left: r.left,
          right: r.right, box: [box.left, box.right]};
});
"""

# The figure's title (with its subtitle lines), the figure box and the top of its plot area.
TITLE_JS = """
const figure = document.getElementById(arguments[0]);
const gtitle = figure.querySelector(".gtitle"), lines = [...gtitle.querySelectorAll("tspan.line")];
const box = figure.getBoundingClientRect(), title = gtitle.getBoundingClientRect();
return {text: lines.length ? lines.map((line) => line.textContent).join(" ") : gtitle.textContent, bottom: title.bottom,
        plot_top: figure.querySelector(".nsewdrag").getBoundingClientRect().top,
        inside: title.left >= box.left && title.right <= box.right};
"""

# The y axis's tick labels drawn, bottom to top, with their boxes.
TICKS_JS = """
return [...document.querySelectorAll(".yaxislayer-above .ytick text")].map((t) => {
  const r = t.getBoundingClientRect();
  return {text: t.textContent, top: r.top, bottom: r.bottom};
}).sort((a, b) => b.bottom - a.bottom);
"""


@pytest.fixture(scope="module")
def store(chromium: None, tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('pages') / 'store.db'}"
    loss_study(url, "loss", n_trials=80)
    # Two batch sizes: too few for an LR law, whose refusal is a long sentence.
    two = SyntheticTruth(per_device_batches=(32, 64), world_sizes=(1,), accum_steps=(1,))
    synthetic_study(url, "two-batches", n_trials=60, seed=3, truth=two)
    searched_study(url, "searched")  # the optimizer and the workload's width searched
    return url


@pytest.fixture(scope="module")
def dashboard(store: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    log = tmp_path_factory.mktemp("dashboard") / "dashboard.log"
    with serve_dashboard(store, log) as served:
        yield served


def test_a_study_of_val_loss_draws_every_figure_on_val_loss(browser: WebDriver, dashboard: Dashboard,
                                                            tmp_path: Path) -> None:
    browser.get(f"{dashboard.url}studies/loss?refresh=0")
    figures = ("frontier", "device_frontier", "accuracy_vs_batch", "learning_curves", "throughput", "memory",
               "noise_scale")
    for figure in figures:
        _wait(browser, lambda d, f=figure: d.find_elements(By.CSS_SELECTOR, f"#figure-{f} .main-svg"),
              f"the {figure} figure")
    # No box says "no column 'val_accuracy'": each is a figure, and the quality ones are of val_loss.
    assert browser.find_elements(By.CSS_SELECTOR, ".figure p.note") == []
    for figure in ("frontier", "device_frontier", "accuracy_vs_batch", "learning_curves"):
        title = browser.execute_script(f"return document.getElementById('figure-{figure}').layout.yaxis.title.text")
        assert title == "validation loss", figure
        assert browser.execute_script(f"return document.getElementById('figure-{figure}').data.length") > 0, figure
    assert "val_loss=" in browser.find_element(By.ID, "target").get_attribute("placeholder")
    _check_page(browser, dashboard, tmp_path / "loss.png")

    # A trial's own curves: its losses, with no empty accuracy series.
    browser.get(f"{dashboard.url}studies/loss/trials/0?refresh=0")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#curves .main-svg"), "the trial's curves")
    names = browser.execute_script("return document.getElementById('curves').data.map((t) => t.name)")
    assert names == ["val_loss", "train_loss"]
    _check_page(browser, dashboard, tmp_path / "loss-trial.png")


def test_a_refused_lr_law_says_why_inside_its_figure_and_above_its_points(browser: WebDriver, dashboard: Dashboard,
                                                                          tmp_path: Path) -> None:
    browser.get(f"{dashboard.url}studies/two-batches?refresh=0")
    for figure, refusal in (("lr_law", "the best LR at 3 batch sizes or more"),
                            ("tradeoff", "needs at least 3 batch sizes that reached the target")):
        _wait(browser, lambda d, f=figure: d.find_elements(By.CSS_SELECTOR, f"#figure-{f} .main-svg .point"),
              f"the {figure} figure's points")
        title = browser.execute_script(TITLE_JS, f"figure-{figure}")
        assert refusal in title["text"], title
        assert title["inside"], title
        # Centred across the plot, the refusal lay over the very points it explained.
        assert title["bottom"] <= title["plot_top"], title
        assert browser.execute_script(NOTES_JS, f"figure-{figure}") == []
    _check_page(browser, dashboard, tmp_path / "refused.png")


def test_a_loss_axis_over_decades_reads_at_round_values(browser: WebDriver, tmp_path: Path) -> None:
    losses = [0.004 * 1.2**k for k in range(36)]  # 0.004 to about 2.4: a log axis
    df = pd.DataFrame({"number": range(36), "state": ["COMPLETE"] * 36, "lr_rule": ["linear", "sqrt"] * 18,
                       "runtime_s": [10.0 + k for k in range(36)], "val_loss": losses})
    page = write_figure_html(frontier_figure(df, y="val_loss", y_direction="minimize"), tmp_path / "loss.html",
                             self_contained=True)
    browser.get(page.as_uri())
    ticks = _wait(browser, lambda d: d.execute_script(TICKS_JS), "the loss axis's ticks")
    # plotly's own read "0.01, 2, 5, 0.1, 2, 5, 1, 2": bare digits, as though some trials lost 2 and 5.
    assert [t["text"] for t in ticks] == ["0.005", "0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1", "2"]
    for below, above in itertools.pairwise(ticks):
        assert above["bottom"] <= below["top"], (below, above)  # no label over the next


def test_the_trial_table_shows_the_optimizer_each_trial_searched(browser: WebDriver, dashboard: Dashboard,
                                                                store: str, tmp_path: Path) -> None:
    trials = {t.number: t.params for t in load("searched", storage=store).study.get_trials()}
    browser.get(f"{dashboard.url}studies/searched?refresh=0")
    table = _wait(browser, lambda d: (t := _table(d, "#trials table")) and len(t["rows"]) == len(trials) and t,
                  "a row per trial")

    columns = table["columns"]
    # After the LR, the params searched besides the core ones; the fixed momentum folds away.
    assert columns.index("lr") + 1 == columns.index("optimizer") < columns.index("hidden")
    assert "momentum" not in columns
    header = browser.find_element(By.CSS_SELECTOR, '#trials th[data-column="optimizer"]')
    assert header.text == "optimizer"
    for row in table["rows"]:
        params = trials[int(row[0])]
        assert row[columns.index("optimizer")] == params["optimizer"]
        assert row[columns.index("hidden")] == str(params["hidden"])
    assert {row[columns.index("optimizer")] for row in table["rows"]} == {"sgd", "adamw"}
    _check_page(browser, dashboard, tmp_path / "searched.png")


def _draws_then_mailed_alone(browser: WebDriver, page: Path, mailed: Path) -> str:
    """Opens the frontier ``page`` from disk, where it must draw its points with no error; then a
    copy of the page alone in ``mailed``, and returns the note it shows instead."""
    browser.get(page.as_uri())
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".main-svg .point"), "the frontier's points")
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == [], severe
    mailed.mkdir()
    alone = Path(shutil.copy(page, mailed / page.name))
    browser.get(alone.as_uri())
    note: str = _wait(browser, lambda d: (p := d.find_elements(By.TAG_NAME, "p")) and p[0].text,
                      "the missing-bundle note")
    browser.get_log("browser")  # the failed script load is expected here
    return note


def test_the_frontier_page_opens_offline_and_says_so_when_moved_without_plotly(
        browser: WebDriver, store: str, tmp_path: Path) -> None:
    page = write_figure_html(plot_frontier(load("loss", storage=store)), tmp_path / "written" / "loss-frontier.html")
    note = _draws_then_mailed_alone(browser, page, tmp_path / "mailed")
    assert re.search(r"plotly-[\d.]+\.min\.js, which must sit in the same folder", note), note
    assert "--self-contained" in note


def test_a_frontier_page_draws_with_the_bundle_in_the_runs_folder_and_says_where_it_belongs(
        browser: WebDriver, store: str, tmp_path: Path) -> None:
    # As `hpsearch start` writes it: the page in the working folder, the bundle in hpsearch_runs/.
    runs = tmp_path / "work" / "hpsearch_runs"
    page = write_figure_html(plot_frontier(load("loss", storage=store)), tmp_path / "work" / "loss-frontier.html",
                             bundle_dir=runs)
    assert sorted(p.name for p in page.parent.iterdir()) == ["hpsearch_runs", "loss-frontier.html"]
    note = _draws_then_mailed_alone(browser, page, tmp_path / "mailed")
    assert re.search(r"plotly-[\d.]+\.min\.js, which it expects at hpsearch_runs/plotly-[\d.]+\.min\.js, "
                     r"relative to the page", note), note
    assert "--self-contained" in note
