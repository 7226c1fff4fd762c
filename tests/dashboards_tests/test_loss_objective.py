"""A study that optimises ``val_loss``, not ``val_accuracy`` (a regression workload, as the bundled
``examples/my_workload``): every figure, through ``plot_*(search)`` and the dashboard's JSON
API, shows the study's own objective, lower being better, instead of refusing a
``val_accuracy`` column its trials never recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import pytest
from click.testing import CliRunner
from conftest import loss_study
from starlette.testclient import TestClient

from hpsearch import ColumnError, Search
from hpsearch.cli import cli
from hpsearch.dashboards import (
    plot_accuracy_vs_batch,
    plot_device_seconds_frontier,
    plot_frontier,
    plot_learning_curves,
)
from hpsearch.dashboards.app import create_app
from hpsearch.study import frontier_numbers


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Search]:
    url = f"sqlite:///{tmp_path_factory.mktemp('loss') / 'hpsearch.db'}"
    return url, loss_study(url, "loss")


@pytest.fixture(scope="module")
def search(store: tuple[str, Search]) -> Search:
    return store[1]


@pytest.fixture(scope="module")
def app(store: tuple[str, Search]) -> TestClient:
    return TestClient(create_app(store[0]))


def _completed(search: Search) -> pd.DataFrame:
    df = search.trials_dataframe()
    assert "val_accuracy" not in df.columns
    return df[df["state"] == "COMPLETE"]


def _front(fig: go.Figure | dict[str, Any]) -> tuple[list[int], list[float]]:
    data = fig.data if isinstance(fig, go.Figure) else fig["data"]
    [front] = [t for t in data if t["name"] == "Pareto front"]
    return list(front["customdata"]), list(front["y"])


def _y_title(fig: go.Figure | dict[str, Any]) -> str:
    layout = fig.layout if isinstance(fig, go.Figure) else fig["layout"]
    return str(layout["yaxis"]["title"]["text"])


def test_the_frontiers_draw_val_loss_with_lower_being_better(search: Search) -> None:
    df = _completed(search)
    for fig, x in ((plot_frontier(search), "runtime_s"), (plot_device_seconds_frontier(search), "device_seconds")):
        assert _y_title(fig) == "validation loss"
        numbers, losses = _front(fig)
        # The non-dominated trials for a cost that is minimised and a loss that is minimised too.
        assert numbers == frontier_numbers(df, x, "val_loss", x_direction="minimize", y_direction="minimize")
        assert losses == sorted(losses, reverse=True)  # each step buys a lower loss
        assert losses[-1] == df["val_loss"].min()


def test_accuracy_vs_batch_draws_the_lowest_val_loss_per_rule_and_batch(search: Search) -> None:
    fig = plot_accuracy_vs_batch(search)
    assert _y_title(fig) == "validation loss"
    lowest = _completed(search).groupby(["lr_rule", "effective_batch_size"])["val_loss"].min()
    drawn = {(t.name, float(b)): v for t in fig.data for b, v in zip(t.x, t.y)}
    assert drawn == pytest.approx({(rule, float(b)): v for (rule, b), v in lowest.items()})


def test_learning_curves_draw_the_val_loss_of_the_lowest_loss_trials(search: Search) -> None:
    fig = plot_learning_curves(search, limit=5)
    assert _y_title(fig) == "validation loss"
    best = _completed(search).sort_values(["val_loss", "number"])["number"].head(5).tolist()
    assert [t.name for t in fig.data] == [f"trial {n}" for n in best]


def test_asking_for_the_missing_accuracy_is_still_a_column_error(search: Search) -> None:
    with pytest.raises(ColumnError, match="'val_accuracy'"):
        plot_frontier(search, y="val_accuracy")
    with pytest.raises(ColumnError, match="'val_accuracy'"):
        plot_learning_curves(search, metric="val_accuracy")


def test_every_figure_of_the_dashboard_draws_the_loss_study(app: TestClient, search: Search) -> None:
    summary = app.get("/api/studies/loss").json()
    assert summary["objectives"] == ["val_loss"]
    for kind in summary["figures"]:
        response = app.get(f"/api/studies/loss/figures/{kind}")
        assert response.status_code == 200, (kind, response.text)
        fig = response.json()
        assert fig["data"], kind
        assert "annotations" not in fig["layout"], (kind, fig["layout"].get("annotations"))
    frontier = app.get("/api/studies/loss/figures/frontier").json()
    assert _y_title(frontier) == "validation loss"
    assert _front(frontier) == _front(plot_frontier(search))
    curves = app.get("/api/studies/loss/figures/learning_curves?limit=5").json()
    assert [t["name"] for t in curves["data"]] == [t.name for t in plot_learning_curves(search, limit=5).data]
    batch = app.get("/api/studies/loss/figures/accuracy_vs_batch").json()
    assert [t["y"] for t in batch["data"]] == [list(t.y) for t in plot_accuracy_vs_batch(search).data]


def test_the_dashboard_refuses_the_missing_accuracy_when_asked_for_it(app: TestClient) -> None:
    response = app.get("/api/studies/loss/figures/accuracy_vs_batch?metric=val_accuracy")
    assert response.status_code == 400
    assert "'val_accuracy'" in response.json()["error"]


def test_hpsearch_frontier_writes_the_loss_frontier_small_or_self_contained(store: tuple[str, Search],
                                                                           tmp_path: Path) -> None:
    url = store[0]
    folder = Path(url.removeprefix("sqlite:///")).parent  # the store's, which holds its runs folder
    result = CliRunner().invoke(cli, ["frontier", "loss", "--storage", url, "-o", str(folder / "small.html")])
    assert result.exit_code == 0, result.output
    page = (folder / "small.html").read_text()
    assert len(page) < 100_000 and "validation loss" in page
    # Beside the store, the page refers to the one bundle in the store's runs folder, by a path relative to it.
    runs = folder / "hpsearch_runs"
    [bundle] = runs.glob("plotly-*.min.js")
    assert f'src="hpsearch_runs/{bundle.name}"' in page

    # Anywhere the runs folder would not move with it, the page holds plotly.js, and says so:
    # referring to the runs folder by "../..", it drew nothing once moved.
    for elsewhere in (tmp_path / "elsewhere" / "f.html", folder / "pages" / "f.html"):
        result = CliRunner().invoke(cli, ["frontier", "loss", "--storage", url, "-o", str(elsewhere)])
        assert result.exit_code == 0, result.output
        assert [p.name for p in elsewhere.parent.iterdir()] == [elsewhere.name]
        assert elsewhere.stat().st_size > 1_000_000 and "src=" not in elsewhere.read_text()[:2000]
        assert f"wrote {elsewhere} (plotly.js inside it: its folder does not hold {runs}" in result.stderr

    alone = tmp_path / "alone"
    result = CliRunner().invoke(cli, ["frontier", "loss", "--storage", url, "-o", str(alone / "big.html"),
                                      "--self-contained"])
    assert result.exit_code == 0, result.output
    assert [p.name for p in alone.iterdir()] == ["big.html"]
    assert (alone / "big.html").stat().st_size > 1_000_000
