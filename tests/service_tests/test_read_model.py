"""The read model (``hpsearch.study``) as the CLI shows it: the best trial of a two-objective study
is never a dominated one, trials waiting for their devices are PENDING (one word wherever a
user sees them), finished counts and the study listing, on every store."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
from click.testing import CliRunner
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from hpsearch.cli import cli
from hpsearch.store import open_storage
from hpsearch.store.locks import study_lock
from hpsearch.study import list_studies

_DISTS = {"lr_rule": CategoricalDistribution(["linear", "sqrt"])}


def _two_objective_study(url: str, name: str) -> optuna.Study:
    study = optuna.create_study(study_name=name, storage=open_storage(url), directions=["maximize", "minimize"])
    study.set_metric_names(["val_accuracy", "runtime_s"])
    return study


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout + result.stderr


def test_best_breaks_a_tie_on_the_first_objective_by_the_second(storage_url: str, unique_name: str) -> None:
    study = _two_objective_study(storage_url, unique_name)
    # Equal accuracy: the slower trial is dominated by the faster one and must not be "best".
    for runtime in (0.372, 0.046):
        study.add_trial(create_trial(params={"lr_rule": "linear"}, distributions=_DISTS, values=[0.974, runtime]))
    study.add_trial(create_trial(params={"lr_rule": "sqrt"}, distributions=_DISTS, values=[0.95, 0.01]))

    code, out = _run("best", unique_name, "--storage", storage_url, "--json")
    assert code == 0 and json.loads(out)["number"] == 1
    code, out = _run("status", unique_name, "--storage", storage_url, "--json")
    assert json.loads(out)["best_trial"]["number"] == 1
    listing = next(s for s in list_studies(open_storage(storage_url)) if s.name == unique_name)
    assert listing.best_values == (0.974, 0.046)


def test_status_tells_pending_trials_from_trials_training(storage_url: str, unique_name: str) -> None:
    study = _two_objective_study(storage_url, unique_name)
    proposed = study.ask({"lr_rule": _DISTS["lr_rule"]})  # asked by the searcher; its ranks not started
    started = study.ask({"lr_rule": _DISTS["lr_rule"]})
    study._storage.set_trial_user_attr(started._trial_id, "training_started", True)
    study.add_trial(create_trial(params={"lr_rule": "sqrt"}, distributions=_DISTS, values=[0.9, 1.0]))

    with study_lock(storage_url, unique_name):  # as the search that runs them holds it
        code, out = _run("status", unique_name, "--storage", storage_url)
        data = json.loads(_run("status", unique_name, "--storage", storage_url, "--json")[1])
    assert code == 0
    assert "pending 1" in out and "running 1" in out and "complete 1" in out
    assert f"training: trial #{started.number}" in out
    assert f"pending (waiting for its devices): trial #{proposed.number}" in out
    assert "waiting for resources" not in out  # the table's, the dashboard's and the progress line's word: PENDING
    assert data["search"]["running"] is True
    # No search holds the study any more (killed with -9, say): its RUNNING trials are not training.
    code, out = _run("status", unique_name, "--storage", storage_url)
    assert code == 0 and "the search is not running" in out and "training: trial" not in out
    assert f"hpsearch resume {unique_name}" in out
    assert data["states"] == {"COMPLETE": 1, "PENDING": 1, "RUNNING": 1}
    assert [r["number"] for r in data["running"]] == [started.number]
    assert [r["number"] for r in data["pending"]] == [proposed.number]


def test_finished_counts_skip_skipped_and_interrupted_trials(storage_url: str, unique_name: str) -> None:
    study = _two_objective_study(storage_url, unique_name)
    outcomes = [(TrialState.COMPLETE, None), (TrialState.FAIL, "diverged"), (TrialState.PRUNED, "early_stopped"),
                (TrialState.PRUNED, "equivalent"), (TrialState.PRUNED, "constraint"), (TrialState.FAIL, "interrupted")]
    for state, reason in outcomes:
        study.add_trial(create_trial(params={"lr_rule": "linear"}, distributions=_DISTS, state=state,
                                     values=[0.9, 1.0] if state == TrialState.COMPLETE else None,
                                     user_attrs={"status_reason": reason} if reason else {}))
    data = json.loads(_run("status", unique_name, "--storage", storage_url, "--json")[1])
    assert data["n_trials"] == 6 and data["finished"] == 3  # complete, diverged, stopped early


def test_export_writes_every_trial_once_as_csv_or_json(storage_url: str, unique_name: str) -> None:
    study = _two_objective_study(storage_url, unique_name)
    study.add_trial(create_trial(params={"lr_rule": "linear"}, distributions=_DISTS, values=[0.9, 1.0],
                                 user_attrs={"curves": {"samples_seen": [8, 16], "val_accuracy": [0.5, 0.9]}}))
    code, out = _run("export", unique_name, "--storage", storage_url, "--format", "csv")
    assert code == 0 and out.splitlines()[0].startswith("number,state") and '""samples_seen"": [8, 16]' in out
    code, out = _run("export", unique_name, "--storage", storage_url, "--format", "json")
    [row] = json.loads(out)
    assert row["curves"] == {"samples_seen": [8, 16], "val_accuracy": [0.5, 0.9]} and row["val_accuracy"] == 0.9


def test_one_trial_is_one_trial(storage_url: str, unique_name: str, tmp_path: Path) -> None:
    study = _two_objective_study(storage_url, unique_name)
    study.add_trial(create_trial(params={"lr_rule": "linear"}, distributions=_DISTS, values=[0.9, 1.0]))
    code, out = _run("status", unique_name, "--storage", storage_url)
    assert code == 0 and f"study {unique_name!r} in " in out and ": 1 trial (complete 1)\n" in out
    code, out = _run("export", unique_name, "--storage", storage_url, "-o", str(tmp_path / "one.csv"))
    assert code == 0 and out == f"wrote 1 trial to {tmp_path / 'one.csv'}\n"
