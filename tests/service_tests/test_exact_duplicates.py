"""Exact duplicates are not trained twice (``constraints.skip_duplicates``, on by default).

At B = B0 every scaling rule gives ``base_lr``, so a rules grid holds three configurations that
train the very same thing; the quickstart trained each of them three times. The duplicate is
recorded as the trial that trained it ended (COMPLETE with its values, or its failure), with
``duplicate_of`` naming it, so every per-rule reader still has its B0 point. Anything else the
trial sees (seed, epochs, warmup, weight decay, workload options, how B splits into b x W x A)
makes two configurations different.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch import record
from hpsearch.planner.budget import spent_of
from hpsearch.search_spaces import parse_space
from hpsearch.study import duplicate_counts, duplicates_line
from hpsearch.trials.spec import duplicate_key, trial_spec

RULES_AT_B0 = """\
study: rules-at-b0
workload: {name: digits_mlp, epochs: 1}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: {choices: [8, 16]}
  world_size: 1
  lr_rule: {choices: [constant, linear, sqrt]}
  base_lr: 0.01
  momentum: 0.9
search: {sampler: grid, seed: 0, fuse: false}
resources: {device: cpu}
"""


def _key(text: str = RULES_AT_B0, **params: Any) -> Any:
    space = parse_space(text)
    point = {"per_device_batch_size": 8, "world_size": 1, "lr_rule": "linear", "base_lr": 0.01, "momentum": 0.9,
             **params}
    return duplicate_key(trial_spec(space, point))


# ---- the key, as plain Python ----

def test_every_rule_at_the_base_batch_is_one_trial() -> None:
    assert _key(lr_rule="constant") == _key(lr_rule="linear") == _key(lr_rule="sqrt")


def test_rules_that_give_different_lrs_are_different_trials() -> None:
    assert len({_key(per_device_batch_size=16, lr_rule=rule) for rule in ("constant", "linear", "sqrt")}) == 3


def test_another_base_lr_giving_the_same_lr_is_the_same_trial_only_without_warmup() -> None:
    # linear from 0.01 at B = 2 B0 and constant 0.02 both train at lr 0.02 from the first step...
    assert _key(per_device_batch_size=16, base_lr=0.01) == _key(per_device_batch_size=16, base_lr=0.02,
                                                                 lr_rule="constant")
    # ...but a warmup starts from base_lr, so there they differ.
    warm = RULES_AT_B0.replace("scaling: {base_batch_size: 8}", "scaling: {base_batch_size: 8, warmup_epochs: 1}")
    assert _key(warm, per_device_batch_size=16, base_lr=0.01) != _key(warm, per_device_batch_size=16, base_lr=0.02,
                                                                       lr_rule="constant")
    # At B0 with a warmup every rule still gives base_lr, and the warmup is flat: one trial.
    assert _key(warm, lr_rule="constant") == _key(warm, lr_rule="sqrt")


@pytest.mark.parametrize("change", [
    {"momentum": 0.5}, {"weight_decay": 1e-4}, {"hidden": 64}, {"per_device_batch_size": 4, "world_size": 2},
])
def test_any_other_setting_the_trial_sees_makes_another_trial(change: dict[str, Any]) -> None:
    text = RULES_AT_B0.replace("world_size: 1", "world_size: {choices: [1, 2]}")
    assert _key(text, lr_rule="constant", **change) != _key(text, lr_rule="linear")


@pytest.mark.parametrize("edit", [
    ("epochs: 1", "epochs: 2"),
    ("seed: 0", "seed: 1"),
    ("scaling: {base_batch_size: 8}", "scaling: {base_batch_size: 8, warmup_epochs: 0.5}"),
    ("scaling: {base_batch_size: 8}", "scaling: {base_batch_size: 8, schedule: cosine}"),
    ("{name: digits_mlp, epochs: 1}", "{name: digits_mlp, epochs: 1, options: {hidden: 16}}"),
])
def test_settings_of_the_space_are_part_of_the_trial(edit: tuple[str, str]) -> None:
    assert _key(RULES_AT_B0.replace(*edit)) != _key(RULES_AT_B0)


def test_the_key_compares_values_not_their_spelling() -> None:
    spec = trial_spec(parse_space(RULES_AT_B0), {"per_device_batch_size": 8, "lr_rule": "linear", "base_lr": 0.01,
                                                 "momentum": 0.9})
    assert duplicate_key(spec) == duplicate_key(replace(spec, hyperparameters={"momentum": 0.9}, epochs=1.0))
    assert duplicate_key(spec) != duplicate_key(replace(spec, lr_rule="sqrt", base_lr=0.010000000000000002))


def test_skip_duplicates_is_on_unless_the_space_turns_it_off() -> None:
    assert parse_space(RULES_AT_B0).constraints.skip_duplicates is True
    off = parse_space(RULES_AT_B0 + "constraints: {skip_duplicates: false}\n")
    assert off.constraints.skip_duplicates is False and not off.constraints.any


def test_the_report_line_names_each_duplicate_and_the_trial_that_ran() -> None:
    import pandas as pd

    frame = pd.DataFrame({"number": [0, 1, 2, 3, 4], record.DUPLICATE_OF: [None, 0, None, 0, 2]})
    assert duplicate_counts(frame) == {1: 0, 3: 0, 4: 2}
    assert duplicates_line(duplicate_counts(frame)) == (
        "3 exact duplicates not run, each recorded as the trial that trained the very same thing (duplicate_of): "
        "#1 and #3 as #0, #4 as #2")
    assert duplicates_line({}) is None


# ---- the searcher (Tune's side of it driven by hand: no trial runs) ----

def _searcher(tmp_path: Path, text: str = RULES_AT_B0) -> tuple[optuna.Study, Any]:
    from hpsearch.tune.orchestrator import _create_study
    from hpsearch.tune.searcher import StudySearcher

    space = parse_space(text.replace("per_device_batch_size: {choices: [8, 16]}", "per_device_batch_size: 8"))
    study = _create_study(optuna.storages.InMemoryStorage(), "dups", space)
    return study, StudySearcher(study, space, 3, "cpu", tmp_path, slots=1)


def _trial_of(config: Any) -> int:
    assert isinstance(config, dict), config
    return int(config["trial"].number)


def test_a_duplicate_asked_while_its_run_trains_waits_and_takes_on_its_values(tmp_path: Path) -> None:
    from hpsearch.planner.report import FINAL_KEY

    study, searcher = _searcher(tmp_path)
    run = _trial_of(searcher.suggest("t0"))
    # The other two rules at B0 are asked while the first trains: recorded, not started, open.
    assert searcher.suggest("t1") == "FINISHED"
    waiting = [t for t in study.trials if t.number != run]
    assert [(t.state, t.user_attrs[record.DUPLICATE_OF]) for t in waiting] == [(TrialState.RUNNING, run)] * 2
    searcher.on_trial_complete("t0", {FINAL_KEY: True, record.VAL_ACCURACY: 0.9, record.RUNTIME_S: 2.0,
                                      record.DEVICE_SECONDS: 2.0, record.SAMPLES_SEEN: 1000})
    trials = study.trials
    assert all(t.state == TrialState.COMPLETE and t.values == [0.9] for t in trials)
    for t in trials:
        if t.number != run:
            assert t.user_attrs[record.DUPLICATE_OF] == run and t.user_attrs[record.SAMPLES_SEEN] == 1000
            assert record.PHASES not in t.user_attrs  # it never ran
    assert {t.params["lr_rule"] for t in trials} == {"constant", "linear", "sqrt"}  # each rule has its B0 point
    assert spent_of(study).device_s == 2.0  # trained once, counted once


def test_a_duplicate_of_a_run_that_diverged_records_the_same_failure(tmp_path: Path) -> None:
    from hpsearch.planner.report import FAILED_KEY

    study, searcher = _searcher(tmp_path)
    run = _trial_of(searcher.suggest("t0"))
    searcher.suggest("t1")
    searcher.on_trial_complete("t0", {FAILED_KEY: True, record.STATUS_REASON: record.REASON_DIVERGED,
                                      record.STATUS_DETAIL: "loss nan at step 3"})
    duplicates = [t for t in study.trials if t.number != run]
    assert [(t.state, t.user_attrs[record.STATUS_REASON]) for t in duplicates] == [
        (TrialState.FAIL, record.REASON_DIVERGED)] * 2
    assert all(t.user_attrs[record.STATUS_DETAIL] == f"not trained: the exact duplicate of trial #{run}, which "
               "ended FAIL (diverged): loss nan at step 3" for t in duplicates)


def test_duplicates_of_a_run_the_search_cut_short_are_cut_short_too(tmp_path: Path) -> None:
    study, searcher = _searcher(tmp_path)
    searcher.suggest("t0")
    searcher.suggest("t1")
    searcher.interrupted = True
    searcher.end_run()
    # The run never started, so it and its duplicates go back to the queue: resume runs one of
    # them and records the others again.
    assert [t.state for t in study.trials] == [TrialState.WAITING] * 3
    assert not any(record.STATUS_REASON in t.user_attrs for t in study.trials)


def test_a_resumed_search_records_a_duplicate_of_a_trial_an_earlier_run_trained(tmp_path: Path) -> None:
    from hpsearch.planner.report import FINAL_KEY
    from hpsearch.tune.searcher import StudySearcher

    study, searcher = _searcher(tmp_path)
    run = _trial_of(searcher.suggest("t0"))
    searcher.on_trial_complete("t0", {FINAL_KEY: True, record.VAL_ACCURACY: 0.9, record.RUNTIME_S: 2.0})
    resumed = StudySearcher(study, searcher.space, 3, "cpu", tmp_path, slots=1)
    assert resumed.suggest("t1") == "FINISHED"
    assert [(t.state, t.user_attrs.get(record.DUPLICATE_OF)) for t in study.trials if t.number != run] == [
        (TrialState.COMPLETE, run)] * 2


def test_with_skip_duplicates_false_every_rule_trains(tmp_path: Path) -> None:
    study, searcher = _searcher(tmp_path, RULES_AT_B0 + "constraints: {skip_duplicates: false}\n")
    numbers = {_trial_of(searcher.suggest(f"t{k}")) for k in range(3)}
    assert len(numbers) == 3 and all(record.DUPLICATE_OF not in t.user_attrs for t in study.trials)


# ---- a real search ----

def test_a_rules_grid_trains_each_base_batch_trial_once_and_records_the_others(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(RULES_AT_B0.replace("fuse: false", "max_concurrent: 2"))
    done = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr

    study = optuna.load_study(study_name="rules-at-b0", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}")
    trials = study.trials
    assert len(trials) == 6 and all(t.state == TrialState.COMPLETE for t in trials)
    at_b0 = [t for t in trials if t.params["per_device_batch_size"] == 8]
    ran = [t for t in at_b0 if record.DUPLICATE_OF not in t.user_attrs]
    assert len(ran) == 1, "one trial at B0 trained"
    duplicates = [t for t in at_b0 if t not in ran]
    for t in duplicates:
        assert t.user_attrs[record.DUPLICATE_OF] == ran[0].number
        assert t.values == ran[0].values and t.user_attrs[record.CURVES] == ran[0].user_attrs[record.CURVES]
        assert t.intermediate_values == ran[0].intermediate_values
        assert record.TRAINING_STARTED not in t.user_attrs  # its devices were never reserved
    assert {t.params["lr_rule"] for t in at_b0} == {"constant", "linear", "sqrt"}
    numbers = sorted(t.number for t in duplicates)
    assert f"2 exact duplicates not run, each recorded as the trial that trained the very same thing " \
           f"(duplicate_of): #{numbers[0]} and #{numbers[1]} as #{ran[0].number}" in done.stdout

    status = subprocess.run([sys.executable, "-m", "hpsearch", "status", "rules-at-b0", "--json"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    summary = json.loads(status.stdout)
    assert summary["finished"] == 6
    assert summary["duplicates"] == [{"number": n, "duplicate_of": ran[0].number} for n in numbers]

    one = subprocess.run([sys.executable, "-m", "hpsearch", "status", "rules-at-b0", "--trial", str(numbers[0])],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert f"not trained: an exact duplicate of trial #{ran[0].number}" in one.stdout
    assert "no phases recorded (it never ran)" in one.stdout
