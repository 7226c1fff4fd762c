"""Fused trials where users look: ``hpsearch status`` says how many trials trained fused, in which
groups, and why others ran on their own; the end-of-search trial table shows each trial's group
and marks a member's runtime as a solo estimate, with a legend; ``status --trial N`` and the
dashboard's trial endpoint name a member's group, its members, what its runtime means and the
step times; ``trials_dataframe`` holds the attrs as columns. A study that never fused shows none
of it.

The study is written as a search with ``search.fuse`` leaves one (``hpsearch.record``'s fused
attrs, as the searcher and the fused trial engine write them) into a real SQLite store."""

from __future__ import annotations

import csv
import doctest
import io
import json
import re
from typing import Any

import optuna
import pytest
from click.testing import CliRunner
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial
from starlette.testclient import TestClient

import hpsearch
import hpsearch.study._fused
from hpsearch import record as r
from hpsearch.cli import cli
from hpsearch.dashboards.app import create_app
from hpsearch.store import open_storage, study_attrs
from hpsearch.testing import searched_study

SPACE = """\
study: fused
workload: {name: digits_cnn, epochs: 2}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: {choices: [32, 128]}
  world_size: 1
  lr_rule: {choices: [constant, linear, sqrt]}
  base_lr: {choices: [0.01, 0.03]}
objectives:
  - {metric: val_accuracy, direction: maximize}
  - {metric: runtime_s, direction: minimize}
search: {sampler: grid, n_trials: 10, seed: 0, fuse: auto}
resources: {device: cpu}
"""
OBJECTIVES = [r.VAL_ACCURACY, r.RUNTIME_S]
#: Why trials #7 and #8 ran on their own, as the fused engine writes it, and why #9 did.
DID_NOT_PAY = ("fusing did not pay on cpu: a step of 3 members fused took 40.2 ms (13.4 ms a member), "
               "one member alone 9.1 ms")
NO_PARTNER = "no partner of its shape among the 2 other configurations waiting to start"


def _trial(b: int, rule: str, base_lr: float, accuracy: float, runtime: float, **attrs: Any) -> Any:
    dists = {r.PER_DEVICE_BATCH_SIZE: CategoricalDistribution([32, 128]), r.WORLD_SIZE: CategoricalDistribution([1]),
             r.LR_RULE: CategoricalDistribution(["constant", "linear", "sqrt"]),
             r.BASE_LR: CategoricalDistribution([0.01, 0.03])}
    params = {r.PER_DEVICE_BATCH_SIZE: b, r.WORLD_SIZE: 1, r.LR_RULE: rule, r.BASE_LR: base_lr}
    return create_trial(params=params, distributions=dists, values=[accuracy, runtime], user_attrs={
        r.EFFECTIVE_BATCH_SIZE: b, r.BASE_BATCH_SIZE: 8, r.VAL_ACCURACY: accuracy, r.RUNTIME_S: runtime,
        r.DEVICE_SECONDS: runtime, r.EPOCHS_COMPLETED: 2, r.DEVICE: "cpu", **attrs})


def _member(group: int, k: int, fused_runtime: float, fused_step: float, solo_step: float) -> dict[str, Any]:
    return {r.FUSED_GROUP: group, r.FUSED_MEMBERS: k, r.FUSE: "on", r.RUNTIME_BASIS: "solo_estimate",
            r.FUSED_RUNTIME_S: fused_runtime, r.FUSED_STEP_S: fused_step, r.SOLO_STEP_S: solo_step}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Trials #0-#3 trained fused as group 0 (b 32), #4-#6 as group 4 (b 128); #7 and #8 ran on
    their own after their group declined (fusing did not pay), #9 found no partner."""
    url = f"sqlite:///{tmp_path_factory.mktemp('fused') / 'store.db'}"
    study = optuna.create_study(study_name="fused", storage=open_storage(url), directions=["maximize", "minimize"])
    study.set_metric_names(OBJECTIVES)
    for key, value in study_attrs(SPACE, OBJECTIVES, 10).items():
        study.set_user_attr(key, value)
    for rule, lr, accuracy in (("constant", 0.01, 0.91), ("linear", 0.01, 0.97), ("sqrt", 0.01, 0.95),
                               ("linear", 0.03, 0.90)):
        study.add_trial(_trial(32, rule, lr, accuracy, 2.1, **_member(0, 4, 3.4, 0.012, 0.005)))
    for rule, lr, accuracy in (("constant", 0.01, 0.88), ("linear", 0.01, 0.93), ("sqrt", 0.01, 0.92)):
        study.add_trial(_trial(128, rule, lr, accuracy, 1.2, **_member(4, 3, 2.0, 0.0402, 0.0091)))
    declined = {r.FUSE: f"off: {DID_NOT_PAY}", r.FUSED_GROUP: None, r.FUSED_MEMBERS: None,
                r.FUSED_STEP_S: 0.0402, r.SOLO_STEP_S: 0.0091}
    study.add_trial(_trial(128, "constant", 0.03, 0.87, 1.3, **declined))
    study.add_trial(_trial(128, "linear", 0.03, 0.89, 1.25, **declined))
    study.add_trial(_trial(128, "sqrt", 0.03, 0.90, 1.28, **{r.FUSE: f"off: {NO_PARTNER}"}))
    return url


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A study that never fused (``search.fuse: false``, or written before fusing existed)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('plain') / 'store.db'}"
    searched_study(url, "plain")
    return url


def _run(*args: str) -> str:
    result = CliRunner(env={"HPSEARCH_RUNS_DIR": None}).invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _end_of_search(study: str, store: str, monkeypatch: pytest.MonkeyPatch, columns: int = 160) -> str:
    """What ``hpsearch resume`` prints at its end for the study as it stands: the search itself
    (Ray, the workload) is left out, the end-of-search report is the command's own."""
    monkeypatch.setattr(hpsearch, "resume", lambda study, storage, **_: hpsearch.load(study, storage=storage))
    result = CliRunner(env={"COLUMNS": str(columns), "HPSEARCH_RUNS_DIR": None}).invoke(
        cli, ["resume", study, "--storage", store, "--no-progress"])
    assert result.exit_code == 0, result.output
    return result.stdout


def _trials_table(out: str) -> tuple[list[str], dict[int, dict[str, str]]]:
    """The header of the first table printed (the trials) and its rows by trial number."""
    lines = out.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    end = next(i for i, line in enumerate(lines) if i > top and line.startswith("└"))
    header = [c.strip() for c in next(line for line in lines[top:end] if line.startswith("┃")).strip("┃").split("┃")]
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in lines[top:end] if line.startswith("│")]
    return header, {int(row[header.index("#")]): dict(zip(header, row)) for row in rows}


# ---- hpsearch status ---------------------------------------------------------------------------------


def test_status_says_how_many_trials_trained_fused_in_which_groups_and_why_others_ran_alone(store: str) -> None:
    lines = _run("status", "fused", "--storage", store).splitlines()
    assert ("fused: 7 trials in 2 groups (4 + 3); their runtimes are solo estimates "
            "(runtime_basis: solo_estimate)") in lines
    # The reason without each trial's own numbers, so that trials that ran alone for one reason count together.
    assert "not fused: 3 trials on their own, 2 because fusing did not pay, 1 because no partner of its shape" in lines


def test_status_json_has_the_groups_their_members_and_the_reasons_trials_ran_alone(store: str) -> None:
    fused = json.loads(_run("status", "fused", "--storage", store, "--json"))["fused"]
    assert fused == {"groups": 2, "members": 7, "group_sizes": {"0": 4, "4": 3},
                     "off": {"fusing did not pay": 2, "no partner of its shape": 1}}


def test_a_study_that_never_fused_says_nothing_of_fusing(plain: str, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _run("status", "plain", "--storage", plain)
    assert "fused" not in out and "on their own" not in out
    assert json.loads(_run("status", "plain", "--storage", plain, "--json"))["fused"] == {
        "groups": 0, "members": 0, "group_sizes": {}, "off": {}}
    report = _end_of_search("plain", plain, monkeypatch)
    header, rows = _trials_table(report)
    assert "group" not in header and not any(row["runtime_s"].endswith("~") for row in rows.values())
    assert "solo estimate" not in report and "gN/K" not in report
    assert "fused" not in _run("status", "plain", "--storage", plain, "--trial", "0")


# ---- the trial table ---------------------------------------------------------------------------------


def test_the_trial_table_shows_each_trials_group_and_marks_solo_estimates(store: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    out = _end_of_search("fused", store, monkeypatch)
    header, rows = _trials_table(out)
    assert header[:3] == ["#", "state", "group"]
    assert [rows[n]["group"] for n in range(10)] == ["g0/4"] * 4 + ["g4/3"] * 3 + ["-"] * 3
    # A member's runtime is what it would take alone: marked; a trial of its own: its wall time.
    assert [rows[n]["runtime_s"] for n in (0, 4, 7, 9)] == ["2.1~", "1.2~", "1.3", "1.28"]
    legend = [line for line in out.splitlines() if line.startswith(("group gN/K", "~ after"))]
    assert legend == [
        "group gN/K: trained fused, as one model, with the other trials of group N (K members at its start); "
        "'-' trained on its own",
        "~ after a runtime: a fused member's solo estimate, what it would take alone on its devices "
        "(runtime_basis: solo_estimate; the group's wall time is fused_runtime_s)"]


def test_the_end_of_search_says_why_trials_were_not_fused_by_kind_as_status_does(
        store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _end_of_search("fused", store, monkeypatch).splitlines()
    assert "not fused: 3 trials on their own, 2 because fusing did not pay, 1 because no partner of its shape" in lines


def test_the_frontier_table_keeps_the_group_column_and_marks(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _end_of_search("fused", store, monkeypatch)
    lines = out.splitlines()
    second = [i for i, line in enumerate(lines) if line.startswith("┏")][1]
    _, front = _trials_table("\n".join(lines[second:]))
    assert front and all(row["group"] in ("g0/4", "g4/3", "-") for row in front.values())
    assert all(row["runtime_s"].endswith("~") == (row["group"] != "-") for row in front.values())


def test_best_says_a_fused_members_runtime_is_a_solo_estimate(store: str) -> None:
    out = _run("best", "fused", "--storage", store)
    assert out.startswith("best trial #1 of 'fused'")
    lines = dict(re.findall(r"^  (\w+): (.*)$", out, re.M))
    assert lines["runtime_s"] == "2.1 (a solo estimate: it trained fused in group g0/4)"
    assert (lines["fused_group"], lines["fused_members"], lines["fuse"]) == ("0", "4", "on")


# ---- one trial -------------------------------------------------------------------------------------


def test_status_trial_names_a_members_group_its_members_and_its_step_times(store: str) -> None:
    out = _run("status", "fused", "--storage", store, "--trial", "5")
    assert "  fused: group g4/3, trained as one model with trials #4-#6\n" in out
    assert ("  runtime_s 1.200 s is a solo estimate (runtime_basis: solo_estimate): what it would take alone "
            "on its devices; the group took 2.000 s (fused_runtime_s)\n") in out
    assert ("  one optimizer step: 40.2 ms for the group fused, 9.1 ms for one member alone "
            "(fused_step_s, solo_step_s)\n") in out
    fused = json.loads(_run("status", "fused", "--storage", store, "--trial", "5", "--json"))["fused"]
    assert fused["members"] == [4, 5, 6] and fused["group_label"] == "g4/3"
    assert (fused["fused_group"], fused["fused_members"], fused["runtime_basis"]) == (4, 3, "solo_estimate")
    assert (fused["fused_runtime_s"], fused["fused_step_s"], fused["solo_step_s"]) == (2.0, 0.0402, 0.0091)


def test_status_trial_says_why_a_trial_ran_on_its_own(store: str) -> None:
    out = _run("status", "fused", "--storage", store, "--trial", "7")
    assert f"  fuse: off: {DID_NOT_PAY}\n" in out
    # The step times its group measured before it declined: what decided it.
    assert "  one optimizer step: 40.2 ms for the group fused, 9.1 ms for one member alone" in out
    assert "solo estimate" not in out and "fused: group" not in out
    fused = hpsearch.load("fused", storage=store).trial_phases(9).fused
    assert fused is not None and fused.group is None and fused.members == ()
    assert fused.lines() == [f"fuse: off: {NO_PARTNER}"]


def test_trials_dataframe_has_the_fused_attrs_as_columns(store: str) -> None:
    df = hpsearch.load("fused", storage=store).trials_dataframe().set_index("number")
    assert {r.FUSED_GROUP, r.FUSED_MEMBERS, r.FUSE, r.RUNTIME_BASIS, r.FUSED_RUNTIME_S, r.FUSED_STEP_S,
            r.SOLO_STEP_S} <= set(df.columns)
    assert df.loc[2, r.FUSED_GROUP] == 0 and df.loc[2, r.FUSED_MEMBERS] == 4 and df.loc[2, r.FUSED_RUNTIME_S] == 3.4
    assert df.loc[4, r.RUNTIME_BASIS] == "solo_estimate" and df.loc[8, r.FUSE] == f"off: {DID_NOT_PAY}"
    assert df[r.FUSED_GROUP].isna().tolist() == [False] * 7 + [True] * 3


# ---- the dashboard's API -------------------------------------------------------------------------


def test_export_writes_a_members_group_as_the_whole_number_it_is(store: str) -> None:
    # Trials of their own are in no group: pandas made the column floats, and group 4 read "4.0".
    rows = list(csv.DictReader(io.StringIO(_run("export", "fused", "--storage", store, "--format", "csv"))))
    assert [row[r.FUSED_GROUP] for row in rows] == ["0"] * 4 + ["4"] * 3 + [""] * 3
    assert [row[r.FUSED_MEMBERS] for row in rows] == ["4"] * 4 + ["3"] * 3 + [""] * 3
    assert {row[r.PER_DEVICE_BATCH_SIZE] for row in rows} == {"32", "128"}
    exported = json.loads(_run("export", "fused", "--storage", store, "--format", "json"))
    assert [t[r.FUSED_GROUP] for t in exported] == [0] * 4 + [4] * 3 + [None] * 3


def test_the_dashboard_trial_endpoint_has_the_group_its_members_and_the_step_times(store: str) -> None:
    app = TestClient(create_app(store))
    fused = _json(app, "/api/studies/fused/trials/2")["fused"]
    assert (fused["group_label"], fused["members"], fused["runtime_basis"]) == ("g0/4", [0, 1, 2, 3], "solo_estimate")
    assert (fused["runtime_s"], fused["fused_runtime_s"], fused["fused_step_s"], fused["solo_step_s"]) == (
        2.1, 3.4, 0.012, 0.005)
    alone = _json(app, "/api/studies/fused/trials/8")["fused"]
    assert (alone["fuse"], alone["fused_group"], alone["members"]) == (f"off: {DID_NOT_PAY}", None, [])


def test_the_dashboard_study_and_table_give_what_the_group_column_and_marks_read(store: str, plain: str) -> None:
    app = TestClient(create_app(store))
    study = _json(app, "/api/studies/fused")
    assert study["fused"]["groups"] == 2 and study["fused"]["members"] == 7
    page = _json(app, "/api/studies/fused/trials?columns=state,fused_group,fused_members,runtime_basis,runtime_s")
    rows = {row["number"]: row for row in page["rows"]}
    assert (rows[5]["fused_group"], rows[5]["fused_members"], rows[5]["runtime_basis"]) == (4, 3, "solo_estimate")
    assert (rows[9]["fused_group"], rows[9]["runtime_basis"]) == (None, None)
    plain_app = TestClient(create_app(plain))
    assert _json(plain_app, "/api/studies/plain")["fused"]["groups"] == 0
    assert _json(plain_app, "/api/studies/plain/trials/0")["fused"] is None


def _json(app: TestClient, url: str) -> Any:
    response = app.get(url)
    assert response.status_code == 200, response.content[:300]
    return response.json()


def test_the_fused_read_models_docstring_examples_pass() -> None:
    results = doctest.testmod(hpsearch.study._fused, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert results.attempted > 0 and results.failed == 0

