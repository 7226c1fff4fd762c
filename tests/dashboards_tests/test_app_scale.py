"""A 10,000-trial study opens in the dashboard: summary, a sorted page, the frontier."""

from __future__ import annotations

import json
from pathlib import Path
from wsgiref.util import setup_testing_defaults

from hpsearch.dashboards.app import DashboardApp
from hpsearch.dashboards.synthetic import synthetic_study

N = 10_000


def _get_json(app: DashboardApp, url: str) -> object:
    path, _, query = url.partition("?")
    environ = {"PATH_INFO": path, "QUERY_STRING": query}
    setup_testing_defaults(environ)
    status: list[str] = []
    body = b"".join(app(environ, lambda s, h: status.append(s)))
    assert status == ["200 OK"], body[:300]
    return json.loads(body)


def test_a_study_of_ten_thousand_trials_opens(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'big.db'}"
    synthetic_study(url, "big", n_trials=N, seed=1)
    app = DashboardApp(url)

    [listed] = _get_json(app, "/api/studies")
    assert listed["n_trials"] == N
    study = _get_json(app, "/api/studies/big")
    assert study["n_trials"] == N and study["best_trial"] is not None
    page = _get_json(app, "/api/studies/big/trials?sort=-val_accuracy&limit=50&state=COMPLETE")
    assert len(page["rows"]) == 50 and page["total"] > N // 2
    accuracies = [r["val_accuracy"] for r in page["rows"]]
    assert accuracies == sorted(accuracies, reverse=True)
    assert page["rows"][0]["number"] == study["best_trial"]["number"]
    fig = _get_json(app, "/api/studies/big/figures/frontier")
    assert fig["data"]
    # A poll while nothing changed keeps the same revision (the page then redraws nothing).
    assert _get_json(app, "/api/studies/big")["revision"] == study["revision"]
