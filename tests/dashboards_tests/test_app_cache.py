"""What the dashboard keeps between requests never hides a change, and what it leaves out of
its table (the per-epoch curves) or its scatter figures (trials beyond a few thousand) still
shows where the user looks for it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from hpsearch.dashboards import frontier_info, plot_learning_curves
from hpsearch.dashboards.app import create_app
from hpsearch.search import Search
from hpsearch.store import open_storage
from hpsearch.testing import synthetic_study


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Search]:
    """A study of 3,000 trials: more completed ones than a scatter figure draws."""
    url = f"sqlite:///{tmp_path_factory.mktemp('big') / 'big.db'}"
    return url, synthetic_study(url, "big", n_trials=3000, seed=2)


def _scatter_numbers(fig: dict[str, Any]) -> set[int]:
    return {n for trace in fig["data"] if trace.get("mode") == "markers" for n in trace["customdata"]}


@pytest.mark.parametrize(("kind", "x"), [("frontier", "runtime_s"), ("device_frontier", "device_seconds")])
def test_a_large_frontier_draws_every_front_trial_and_says_it_thinned_the_rest(
    big: tuple[str, Search], kind: str, x: str, get_json: Callable[[Any, str], Any]
) -> None:
    url, search = big
    app = create_app(url)
    frame = search.trials_dataframe()
    everything = frontier_info(frame, x=x, y="val_accuracy")
    assert everything.n_complete > 2000

    fig = get_json(app, f"/api/studies/big/figures/{kind}")
    drawn = _scatter_numbers(fig)
    assert set(everything.front) <= drawn
    front = next(t for t in fig["data"] if t["name"] == "Pareto front")
    assert front["customdata"] == list(everything.front)
    assert len(drawn) <= 2000
    assert f"of {everything.n_complete:,} completed trials" in fig["layout"]["title"]["text"]
    assert f"all {len(everything.front)} on the Pareto front" in fig["layout"]["title"]["text"]
    # The axes span what every trial spans.
    xs = [v for t in fig["data"] if t.get("mode") == "markers" for v in t["x"]]
    ys = [v for t in fig["data"] if t.get("mode") == "markers" for v in t["y"]]
    all_points = [p for g in everything.groups for p in g.points]
    assert min(xs) == min(p.x for p in all_points) and max(xs) == max(p.x for p in all_points)
    assert min(ys) == min(p.y for p in all_points) and max(ys) == max(p.y for p in all_points)
    # Every rule keeps its trace, and the same study draws the same points.
    assert {t["name"] for t in fig["data"]} == {g.name for g in everything.groups} | {"Pareto front"}
    assert get_json(create_app(url), f"/api/studies/big/figures/{kind}") == fig

    every = get_json(app, f"/api/studies/big/figures/{kind}?max_points=0")
    assert len(_scatter_numbers(every)) == everything.n_complete
    assert "showing" not in every["layout"]["title"]["text"]


def test_a_large_noise_scale_figure_is_thinned_and_says_so(
    big: tuple[str, Search], get_json: Callable[[Any, str], Any]
) -> None:
    url, _ = big
    app = create_app(url)
    fig = get_json(app, "/api/studies/big/figures/noise_scale")
    every = get_json(app, "/api/studies/big/figures/noise_scale?max_points=0")
    assert len(_scatter_numbers(fig)) <= 2000 < len(_scatter_numbers(every))
    assert "showing" in fig["layout"]["title"]["text"]
    assert _scatter_numbers(fig) <= _scatter_numbers(every)


def test_learning_curves_read_lazily_draw_what_the_whole_table_draws(
    big: tuple[str, Search], get_json: Callable[[Any, str], Any]
) -> None:
    url, search = big
    app = create_app(url)
    best = json.loads(plot_learning_curves(search).to_json())
    assert get_json(app, "/api/studies/big/figures/learning_curves") == best
    chosen = json.loads(plot_learning_curves(search, trials=[5, 17, 2999], metric="val_loss").to_json())
    assert get_json(app, "/api/studies/big/figures/learning_curves?trials=5,17,2999&metric=val_loss") == chosen
    # The table leaves curves out; the trial page has them.
    study = get_json(app, "/api/studies/big")
    assert "curves" not in study["columns"]
    trial = get_json(app, "/api/studies/big/trials/17")
    assert trial["curves"] == search.study.trials[17].user_attrs["curves"]


def _running_study(url: str) -> tuple[optuna.Study, int]:
    study = optuna.create_study(study_name="live", storage=open_storage(url), directions=["maximize", "minimize"])
    study.set_metric_names(["val_accuracy", "runtime_s"])
    dists = {"lr_rule": CategoricalDistribution(["linear", "sqrt"])}
    for n, rule in enumerate(["linear", "sqrt"]):
        study.add_trial(create_trial(params={"lr_rule": rule}, distributions=dists, values=[0.5 + n / 10, 10.0 + n],
                                     user_attrs={"val_accuracy": 0.5 + n / 10, "runtime_s": 10.0 + n,
                                                 "curves": {"samples_seen": [8], "val_accuracy": [0.5 + n / 10]}}))
    trial = study.ask()
    return study, trial._trial_id


def test_every_change_of_a_trial_moves_the_revision_and_reaches_the_answers(
    tmp_path: Path, get_json: Callable[[Any, str], Any]
) -> None:
    url = f"sqlite:///{tmp_path / 'live.db'}"
    study, running = _running_study(url)
    storage = open_storage(url)
    app = create_app(url)
    seen = [get_json(app, "/api/studies/live")["revision"]]
    figure = get_json(app, "/api/studies/live/figures/frontier")
    assert get_json(app, "/api/studies/live")["revision"] == seen[-1]  # nothing changed

    def moved() -> None:
        revision = get_json(app, "/api/studies/live")["revision"]
        assert revision not in seen
        seen.append(revision)

    storage.set_trial_intermediate_value(running, 8, 0.3)  # an epoch of the running trial
    moved()
    storage.set_trial_user_attr(running, "curves", {"samples_seen": [8], "val_accuracy": [0.3]})
    moved()
    storage.set_trial_user_attr(running, "lr_rule_note", "x")  # a new attr
    moved()
    storage.set_trial_user_attr(running, "lr_rule_note", "y")  # the same key written again
    moved()
    assert get_json(app, "/api/studies/live/trials?sort=number")["rows"][2]["lr_rule_note"] == "y"
    storage.set_trial_user_attr(running, "curves", {"samples_seen": [8, 16], "val_accuracy": [0.3, 0.99]})
    storage.set_trial_user_attr(running, "val_accuracy", 0.99)
    storage.set_trial_user_attr(running, "runtime_s", 1.0)
    storage.set_trial_state_values(running, TrialState.COMPLETE, [0.99, 1.0])  # it finishes
    moved()
    after = get_json(app, "/api/studies/live/figures/frontier")
    assert after != figure and 2 in _scatter_numbers(after)
    summary = get_json(app, "/api/studies/live")
    assert summary["states"] == {"COMPLETE": 3} and summary["best_trial"]["number"] == 2
    curves = get_json(app, "/api/studies/live/figures/learning_curves")
    assert curves["data"][0]["name"] == "trial 2"
    study.ask()  # a new trial
    moved()
    assert get_json(app, "/api/studies/live")["n_trials"] == 4


def test_thinning_keeps_what_it_must_within_its_budget_and_is_deterministic() -> None:
    import numpy as np

    from hpsearch.dashboards import pareto_front
    from hpsearch.dashboards.points import thin_points

    rng = np.random.default_rng(0)
    xs, ys = rng.lognormal(3, 1, 20_000), rng.normal(0.9, 0.03, 20_000)
    groups = rng.choice(["constant", "linear", "sqrt"], 20_000)
    front = pareto_front(xs, ys)
    kept = thin_points(xs, ys, max_points=1500, groups=groups, keep=front, log_x=True)
    assert len(kept) <= 1500 and set(front) <= set(kept.tolist())
    assert {xs.argmin(), xs.argmax(), ys.argmin(), ys.argmax()} <= set(kept.tolist())
    assert set(groups[kept]) == {"constant", "linear", "sqrt"}
    assert kept.tolist() == thin_points(xs, ys, max_points=1500, groups=groups, keep=front, log_x=True).tolist()
    assert thin_points(xs[:100], ys[:100], max_points=1500).tolist() == list(range(100))



@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The study names whose trials table the dashboard read from the store, in order."""
    from hpsearch.dashboards import api

    names: list[str] = []
    real_read = api._read_table
    monkeypatch.setattr(api, "_read_table", lambda search: (names.append(search.study_name), real_read(search))[1])
    return names


def test_a_started_dashboard_reads_its_studies_ahead_so_the_first_page_is_answered_from_memory(
        big: tuple[str, Search], reads: list[str]) -> None:
    import threading
    import time

    from starlette.testclient import TestClient

    url, _ = big
    with TestClient(create_app(url)) as client:  # as a server runs it: its start-up runs first
        deadline = time.monotonic() + 120
        while any(t.name == "hpsearch-dashboard-prefetch" for t in threading.enumerate()):
            assert time.monotonic() < deadline, "the read-ahead did not end"
            time.sleep(0.05)
        assert reads == ["big"]  # read once, in the background, before any page asked
        summary = client.get("/api/studies/big").json()
        figures = [client.get(f"/api/studies/big/figures/{kind}") for kind in summary["figures"]]
    assert all(f.status_code == 200 for f in figures) and len(figures) >= 5
    assert reads == ["big"]  # the page's summary and figures came from memory


def test_a_dashboard_told_not_to_read_ahead_reads_when_asked(big: tuple[str, Search], reads: list[str]) -> None:
    from starlette.testclient import TestClient

    url, _ = big
    with TestClient(create_app(url, prefetch=False)) as client:
        assert reads == []
        assert client.get("/api/studies/big").status_code == 200
    assert reads == ["big"]
