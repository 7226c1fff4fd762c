"""A 10,000-trial study opens in the dashboard: summary, a sorted page, the frontier."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpsearch.dashboards.app import create_app
from hpsearch.testing import synthetic_study

N = 10_000


def test_a_study_of_ten_thousand_trials_opens(tmp_path: Path, get_json: Callable[[Any, str], Any]) -> None:
    url = f"sqlite:///{tmp_path / 'big.db'}"
    synthetic_study(url, "big", n_trials=N, seed=1)
    app = create_app(url)

    [listed] = get_json(app, "/api/studies")
    assert listed["n_trials"] == N
    study = get_json(app, "/api/studies/big")
    assert study["n_trials"] == N and study["best_trial"] is not None
    page = get_json(app, "/api/studies/big/trials?sort=-val_accuracy&limit=50&state=COMPLETE")
    assert len(page["rows"]) == 50 and page["total"] > N // 2
    accuracies = [r["val_accuracy"] for r in page["rows"]]
    assert accuracies == sorted(accuracies, reverse=True)
    assert page["rows"][0]["number"] == study["best_trial"]["number"]
    fig = get_json(app, "/api/studies/big/figures/frontier")
    assert fig["data"]
    # A poll while nothing changed keeps the same revision (the page then redraws nothing).
    assert get_json(app, "/api/studies/big")["revision"] == study["revision"]
