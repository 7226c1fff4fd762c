"""Every dashboard endpoint, in process: the ASGI app called through Starlette's test client."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial
from starlette.testclient import TestClient

from hpsearch.dashboards.app import create_app
from hpsearch.record import ATTR_N_TRIALS, ATTR_SPACE_TEXT, PHASE_NAMES
from hpsearch.store import open_storage
from hpsearch.testing import searched_study

SPACE_TEXT = "parameters:\n  per_device_batch_size: {choices: [8, 64]}\n  base_lr: 0.01\n"


def _get(app: TestClient, url: str, method: str = "GET") -> tuple[int, Mapping[str, str], bytes]:
    response = app.request(method, url)
    return response.status_code, response.headers, response.content


def _json(app: TestClient, url: str, status: int = 200) -> Any:
    code, headers, body = _get(app, url)
    assert code == status, body
    assert headers["Content-Type"] == "application/json"
    return json.loads(body)


def _trial(number: int, b: int, rule: str, state: TrialState, accuracy: float | None, **attrs: Any) -> Any:
    params = {"per_device_batch_size": b, "lr_rule": rule}
    dists = {"per_device_batch_size": CategoricalDistribution([8, 16, 32, 64]),
             "lr_rule": CategoricalDistribution(["constant", "linear", "sqrt"])}
    user_attrs = {"effective_batch_size": b, "lr": 0.01 * (b / 8 if rule == "linear" else 1), **attrs}
    if accuracy is not None:
        user_attrs.update(val_accuracy=accuracy, runtime_s=100.0 / b, device_seconds=100.0 / b,
                          curves={"samples_seen": [100, 200], "val_accuracy": [accuracy / 2, accuracy],
                                  "val_loss": [2.0, 1.0], "train_loss": [2.1, 1.1]})
    values = [accuracy, 100.0 / b] if state == TrialState.COMPLETE else None
    return create_trial(params=params, distributions=dists, state=state, values=values, user_attrs=user_attrs,
                        intermediate_values={100: accuracy / 2, 200: accuracy} if accuracy is not None else None)


@pytest.fixture
def app(tmp_path: Path) -> TestClient:
    url = f"sqlite:///{tmp_path / 'dash.db'}"
    study = optuna.create_study(study_name="demo", storage=open_storage(url), directions=["maximize", "minimize"])
    study.set_metric_names(["val_accuracy", "runtime_s"])
    study.set_user_attr(ATTR_SPACE_TEXT, SPACE_TEXT)
    study.set_user_attr(ATTR_N_TRIALS, 6)
    study.add_trial(_trial(0, 8, "constant", TrialState.COMPLETE, 0.97))
    study.add_trial(_trial(1, 64, "constant", TrialState.COMPLETE, 0.60))
    study.add_trial(_trial(2, 64, "linear", TrialState.COMPLETE, 0.95))
    study.add_trial(_trial(3, 64, "sqrt", TrialState.FAIL, None, status_reason="diverged",
                           status_detail="non-finite loss at step 3"))
    study.add_trial(_trial(4, 16, "sqrt", TrialState.PRUNED, 0.5, status_reason="early_stopped"))
    optuna.create_study(study_name="empty", storage=open_storage(url))
    return TestClient(create_app(url))


def test_the_study_list_has_counts_best_values_and_last_activity(app: TestClient) -> None:
    studies = {s["name"]: s for s in _json(app, "/api/studies")}

    assert set(studies) == {"demo", "empty"}
    demo = studies["demo"]
    assert demo["states"] == {"COMPLETE": 3, "FAIL": 1, "PRUNED": 1}
    assert demo["objectives"] == ["val_accuracy", "runtime_s"]
    assert demo["best_values"][0] == pytest.approx(0.97)
    assert demo["last_activity"] is not None
    assert studies["empty"]["n_trials"] == 0 and studies["empty"]["best_values"] is None


def test_the_study_endpoint_has_the_summary_space_columns_and_a_revision(app: TestClient) -> None:
    study = _json(app, "/api/studies/demo")

    assert study["finished"] == 5 and study["target"] == 6
    assert study["best_trial"]["number"] == 0
    assert study["space_text"] == SPACE_TEXT
    assert {"per_device_batch_size", "lr_rule", "val_accuracy", "status_reason"} <= set(study["columns"])
    assert "val_accuracy" in study["numeric_columns"] and "lr_rule" not in study["numeric_columns"]
    assert "frontier" in study["figures"]
    assert study["revision"] == _json(app, "/api/studies/demo")["revision"]


def test_the_trial_table_sorts_filters_and_pages(app: TestClient) -> None:
    page = _json(app, "/api/studies/demo/trials?sort=-val_accuracy&limit=2")
    assert page["total"] == 5 and page["limit"] == 2
    assert [r["number"] for r in page["rows"]] == [0, 2]
    nxt = _json(app, "/api/studies/demo/trials?sort=-val_accuracy&limit=2&offset=2")
    # Missing values sort last, whatever the direction.
    assert [r["number"] for r in nxt["rows"]] == [1, 4]
    assert _json(app, "/api/studies/demo/trials?sort=-val_accuracy&offset=4")["rows"][0]["number"] == 3

    failed = _json(app, "/api/studies/demo/trials?state=FAIL")
    assert [r["number"] for r in failed["rows"]] == [3]
    assert failed["rows"][0]["status_reason"] == "diverged"
    linear = _json(app, "/api/studies/demo/trials?q=LINEAR")
    assert [r["number"] for r in linear["rows"]] == [2]
    narrow = _json(app, "/api/studies/demo/trials?columns=lr_rule,val_accuracy")
    assert narrow["columns"] == ["number", "lr_rule", "val_accuracy"]
    # NaN (a failed trial's accuracy) is JSON null, never the invalid token NaN.
    assert _json(app, "/api/studies/demo/trials?state=FAIL")["rows"][0]["val_accuracy"] is None


def test_the_summary_lists_the_searched_params_and_the_trial_table_returns_them(app: TestClient,
                                                                                tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'searched.db'}"
    trials = {t.number: t.params for t in searched_study(url).study.get_trials()}
    searched = TestClient(create_app(url))

    # The params searched besides the core ones, in the order the study first saw them; the
    # momentum, fixed for every trial, folds away.
    study = _json(searched, "/api/studies/searched")
    assert study["searched"] == ["optimizer", "hidden"]
    assert {"optimizer", "hidden", "momentum"} <= set(study["columns"])
    # A study that searched only the core params (the batch, the LR rule) lists none.
    assert _json(app, "/api/studies/demo")["searched"] == []

    # The trial table's page has them, each trial's own, as the page asks for them.
    page = _json(searched, "/api/studies/searched/trials?columns=lr,optimizer,hidden,val_accuracy")
    assert page["columns"] == ["number", "lr", "optimizer", "hidden", "val_accuracy"]
    assert len(page["rows"]) == len(trials)
    for row in page["rows"]:
        assert (row["optimizer"], row["hidden"]) == (trials[row["number"]]["optimizer"],
                                                     trials[row["number"]]["hidden"])
    # Sorted and filtered on like any column.
    best = _json(searched, "/api/studies/searched/trials?sort=-val_accuracy&q=adamw")
    assert {row["optimizer"] for row in best["rows"]} == {"adamw"} and best["total"] == 4


@pytest.mark.parametrize(("query", "fragment"), [
    ("limit=abc", "limit must be a whole number, got 'abc'"),
    ("limit=0", "limit must be between 1 and 1000, got 0"),
    ("limit=5000", "limit must be between 1 and 1000, got 5000"),
    ("offset=-1", "offset must be >= 0, got -1"),
    ("sort=nope", "cannot sort by 'nope': no such column"),
    ("columns=lr_rule,nope", "unknown columns ['nope']"),
])
def test_bad_table_parameters_are_400_with_a_reason(app: TestClient, query: str, fragment: str) -> None:
    assert fragment in _json(app, f"/api/studies/demo/trials?{query}", status=400)["error"]


def test_the_csv_download_has_every_trial_param_and_attr(app: TestClient) -> None:
    status, headers, body = _get(app, "/api/studies/demo/trials.csv")

    assert status == 200
    assert headers["Content-Type"].startswith("text/csv")
    assert 'filename="demo-trials.csv"' in headers["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert [int(r["number"]) for r in rows] == [0, 1, 2, 3, 4]
    assert {"per_device_batch_size", "lr_rule", "effective_batch_size", "lr", "curves", "status_detail"} <= set(rows[0])
    assert json.loads(rows[0]["curves"])["val_accuracy"] == [0.485, 0.97]


def test_the_trial_endpoint_has_params_values_attrs_curves_and_reason(app: TestClient) -> None:
    trial = _json(app, "/api/studies/demo/trials/2")
    assert trial["state"] == "COMPLETE"
    assert trial["params"] == {"per_device_batch_size": 64, "lr_rule": "linear"}
    assert trial["values"] == {"val_accuracy": 0.95, "runtime_s": 100.0 / 64}
    assert trial["user_attrs"]["lr"] == pytest.approx(0.08)
    assert trial["curves"]["val_accuracy"] == [0.475, 0.95]
    assert trial["intermediate_values"] == {"100": 0.475, "200": 0.95}

    failed = _json(app, "/api/studies/demo/trials/3")
    assert (failed["status_reason"], failed["status_detail"]) == ("diverged", "non-finite loss at step 3")
    assert failed["values"] is None


def test_the_trial_endpoint_says_where_the_time_went(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'phases.db'}"
    study = optuna.create_study(study_name="timed", storage=open_storage(url), directions=["maximize", "minimize"])
    study.set_metric_names(["val_accuracy", "runtime_s"])
    # 1.5 s of start-up, then 0.4 s waiting for a running trial's devices.
    trained = {"asked_at": 1_790_000_000.0, "asked": 0.0, "launched": 1.5, "devices_free": 1.9, "reserved": 2.0,
               "handed": 2.01, "ready": 2.2, "training_started": 2.25, "training_ended": 7.25, "last_report": 7.3,
               "told": 7.5}
    study.add_trial(_trial(0, 8, "constant", TrialState.COMPLETE, 0.97, phases=trained))
    study.add_trial(_trial(1, 64, "sqrt", TrialState.FAIL, None, status_reason="constraint",
                           phases={"asked_at": 1_790_000_001.0, "asked": 0.0, "told": 0.004}))
    study.add_trial(_trial(2, 16, "linear", TrialState.COMPLETE, 0.9))  # recorded before phases were
    app = TestClient(create_app(url))

    trial = _json(app, "/api/studies/timed/trials/0")
    phases = trial["phases"]
    assert [(p["phase"], p["at_s"]) for p in phases["phases"]] == [(n, trained[n]) for n in PHASE_NAMES]
    assert [(p["gap_s"], p["span"]) for p in phases["phases"]][:5] == [
        (None, None), (1.5, "startup"), (0.4, "wait"), (0.1, "startup"), (0.01, "rest")]
    assert (phases["startup_s"], phases["waited_s"], phases["training_s"], phases["rest_s"]) == (1.6, 0.4, 5.0, 0.5)
    assert phases["summary"] == ("start-up 1.600 s, waiting for devices 0.400 s; after its devices were reserved: "
                                 "training 5.000 s, the rest 0.500 s")
    assert [s["label"] for s in phases["spans"]] == ["start-up", "waiting for devices", "training", "the rest"]
    assert "phases" not in trial["user_attrs"]  # shown once, as a timeline

    skipped = _json(app, "/api/studies/timed/trials/1")["phases"]
    assert [p["phase"] for p in skipped["phases"]] == ["asked", "told"]
    assert skipped["missing"] == list(PHASE_NAMES[1:-1]) and skipped["waited_s"] is None
    assert skipped["summary"] == "never reserved devices; told 0.004 s after it was asked"
    assert _json(app, "/api/studies/timed/trials/2")["phases"] is None


def test_the_frontier_figure_is_plotly_json_with_the_non_dominated_trials(app: TestClient) -> None:
    fig = _json(app, "/api/studies/demo/figures/frontier")
    assert fig["data"] and "layout" in fig
    text = json.dumps(fig)
    assert "runtime" in text.lower() and "val" in text.lower()
    device = _json(app, "/api/studies/demo/figures/device_frontier?y=val_accuracy")
    assert "device" in json.dumps(device["layout"]).lower()
    assert _json(app, "/api/studies/empty/figures/frontier")["data"] is not None


@pytest.mark.parametrize(("url", "status", "fragment"), [
    ("/api/studies/nope", 404, "no study named 'nope'"),
    ("/api/studies/nope/trials", 404, "no study named 'nope'"),
    ("/api/studies/demo/trials/99", 404, "has no trial #99 (it has 5 trials)"),
    ("/api/studies/demo/trials/x1", 400, "a trial number is a whole number"),
    ("/api/studies/demo/figures/nope", 404, "no figure 'nope'"),
    ("/api/studies/demo/figures/frontier?x=nope", 400, "no column 'nope'"),
    ("/api/nothing", 404, "no page or endpoint at /api/nothing"),
    ("/static/nope.js", 404, "no page or endpoint"),
])
def test_unknown_things_are_404_and_bad_ones_400(app: TestClient, url: str, status: int, fragment: str) -> None:
    assert fragment in _json(app, url, status=status)["error"]


def test_the_dashboard_is_read_only(app: TestClient) -> None:
    status, _, body = _get(app, "/api/studies", method="POST")
    assert status == 405 and b"read-only" in body


def test_pages_are_html_shells_with_their_arguments_escaped(app: TestClient) -> None:
    for url, page in [("/", "studies"), ("/studies/demo", "study"), ("/studies/demo/trials/3", "trial")]:
        status, headers, body = _get(app, url)
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        text = body.decode()
        assert f'data-page="{page}"' in text
        assert '<script src="/static/plotly.min.js">' in text  # served locally: no CDN
        assert "cdn" not in text.lower()
    assert 'data-args="{&quot;name&quot;: &quot;demo&quot;, &quot;number&quot;: &quot;3&quot;}"' in _get(
        app, "/studies/demo/trials/3")[2].decode()


def test_static_files_and_plotly_js_are_served_from_the_package(app: TestClient) -> None:
    status, headers, body = _get(app, "/static/plotly.min.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    assert len(body) > 1_000_000 and b"plotly" in body[:2000].lower()
    for name in ("app.js", "app.css"):
        status, _, body = _get(app, f"/static/{name}")
        assert status == 200 and body


@pytest.mark.parametrize("kind", ["accuracy_vs_batch", "learning_curves", "throughput", "memory", "noise_scale"])
def test_every_figure_of_the_study_page_answers(app: TestClient, kind: str) -> None:
    assert kind in _json(app, "/api/studies/demo")["figures"]
    fig = _json(app, f"/api/studies/demo/figures/{kind}")
    assert "data" in fig and "layout" in fig
    assert "data" in _json(app, f"/api/studies/empty/figures/{kind}")


def test_learning_curves_take_trial_numbers_and_refuse_bad_ones(app: TestClient) -> None:
    fig = _json(app, "/api/studies/demo/figures/learning_curves?trials=0,2")
    names = json.dumps([t.get("name") for t in fig["data"]])
    assert "0" in names and "2" in names
    assert "trial numbers separated by commas" in _json(
        app, "/api/studies/demo/figures/learning_curves?trials=a,b", status=400)["error"]
    assert _json(app, "/api/studies/demo/figures/learning_curves?trials=42", status=400)["error"]


@pytest.mark.parametrize(("url", "fragment"), [
    ("/studies/nope", "no study named &#x27;nope&#x27;"),
    ("/elsewhere", "no page or endpoint at /elsewhere"),
])
def test_a_page_that_does_not_exist_is_a_readable_404_page(app: TestClient, url: str, fragment: str) -> None:
    status, headers, body = _get(app, url)
    assert status == 404 and headers["Content-Type"].startswith("text/html")
    assert fragment in body.decode()


def test_a_study_without_trials_has_an_empty_table(app: TestClient) -> None:
    page = _json(app, "/api/studies/empty/trials?sort=-val_accuracy")
    assert (page["total"], page["rows"]) == (0, [])
    assert _json(app, "/api/studies/empty")["n_trials"] == 0
