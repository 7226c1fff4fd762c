"""Confirmation end to end (the real CLI, a real local Ray, real DDP ranks, SQLite): a search runs
its own answer as new trials with new seeds, judges it against the interval it stated before,
counts the runs apart from n_trials and says so where users look; ``start --no-confirm`` runs
none, and ``hpsearch confirm`` confirms a study that has no round yet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from hpsearch.study import HELD, MISSED, confirmation_rounds, trial_params

SPACE = """\
study: {study}
workload: {{name: digits_mlp, epochs: 4, eval_every_samples: 360}}
scaling: {{base_batch_size: 16}}
parameters:
  per_device_batch_size: {{choices: [16, 64, 256]}}
  world_size: 1
  lr_rule: constant
  base_lr: {{choices: [0.05, 0.2]}}
  momentum: 0.9
objectives:
  - {{metric: val_accuracy, direction: maximize}}
  - {{metric: runtime_s, direction: minimize}}
search: {{sampler: grid, n_trials: 6, seed: 0, max_concurrent: 2}}
resources: {{device: cpu}}
analysis:
  target: {{val_accuracy: 0.85}}
  confirm: 1
  confirm_budget: {{rounds: 1, share: 1.0}}
"""
SEARCHED = 6


def _hpsearch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=400)


def _study(work: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{work / 'hpsearch.db'}")


def _confirmation_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials() if t.user_attrs.get("role") == "confirmation"]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("confirm")
    for name in ("confirmed", "unconfirmed"):
        (work / f"{name}.yaml").write_text(SPACE.format(study=name))
    return work


@pytest.fixture(scope="module")
def confirmed(work: Path) -> subprocess.CompletedProcess[str]:
    result = _hpsearch("start", "confirmed.yaml", "--no-progress", cwd=work)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_the_search_runs_its_answer_with_a_new_seed_and_judges_it_against_what_it_stated(
        work: Path, confirmed: subprocess.CompletedProcess[str]) -> None:
    study = _study(work, "confirmed")
    runs = _confirmation_trials(study)
    rounds = confirmation_rounds(study.user_attrs)

    assert len(study.get_trials()) == SEARCHED + 1 and len(runs) == 1 and len(rounds) == 1
    (run,), (first,) = runs, rounds
    assert run.number in first.trials and first.verdict in (HELD, MISSED)
    # Its exact configuration, a seed no other run of it used, stated before it ran.
    assert trial_params(run) == {k: v for k, v in first.params.items() if k in trial_params(run)}
    assert run.user_attrs["seed"] != 0 and run.user_attrs["confirmation"]["round"] == 1
    lo, est, hi = first.predicted_samples
    assert 0 < lo <= est <= hi
    measured = first.measured_samples
    if first.verdict == HELD:
        assert measured is not None and lo <= measured <= hi
    # Said where users look: counted apart, the round and its verdict, the answer's status.
    out = confirmed.stdout
    assert f"{SEARCHED} of {SEARCHED} trials finished, 1 confirmation run" in out
    assert f"confirmation round 1 (#{run.number})" in out and first.verdict in out
    assert f"confirmed by trial #{run.number}" in out or "unconfirmed:" in out


def test_recommend_and_status_carry_the_confirmation(work: Path, confirmed: subprocess.CompletedProcess[str]) -> None:
    (first,) = confirmation_rounds(_study(work, "confirmed").user_attrs)
    answer = json.loads(_hpsearch("recommend", "confirmed", "--devices", str(first.devices), "--json",
                                  cwd=work).stdout)["recommendation"]
    status = _hpsearch("status", "confirmed", cwd=work)

    # The answer given again, with the round's run in its fits: confirmed where it is still the
    # configuration that held; otherwise it says which round ran what instead.
    same = all(answer[k] == first.params[k] for k in ("per_device_batch_size", "world_size", "grad_accum_steps"))
    held = first.verdict == HELD and same and answer["lr"] == pytest.approx(first.lr, rel=0.1)
    assert answer["confirmation"]["confirmed"] == held
    assert answer["confirmation"]["text"].startswith("confirmed by trial" if held else "unconfirmed:")
    assert status.returncode == 0 and f"confirmation round 1 (#{first.trials[0]})" in status.stdout


def test_confirmation_runs_are_on_no_frontier(work: Path, confirmed: subprocess.CompletedProcess[str]) -> None:
    import hpsearch

    search = hpsearch.load("confirmed", storage=f"sqlite:///{work / 'hpsearch.db'}")
    runs = {t.number for t in _confirmation_trials(search.study)}

    assert runs and not runs & set(search.frontier()["number"])
    assert search.summary()["n_trials"] == SEARCHED + len(runs)


def test_no_confirm_runs_none_and_hpsearch_confirm_runs_a_round_later(work: Path) -> None:
    started = _hpsearch("start", "unconfirmed.yaml", "--no-progress", "--no-confirm", cwd=work)
    assert started.returncode == 0, started.stdout + started.stderr
    assert not _confirmation_trials(_study(work, "unconfirmed"))
    assert "unconfirmed: no confirmation round has run" in started.stdout

    confirm = _hpsearch("confirm", "unconfirmed", "--runs", "1", "--json", cwd=work)
    assert confirm.returncode == 0, confirm.stdout + confirm.stderr
    study = _study(work, "unconfirmed")
    (run,) = _confirmation_trials(study)
    (first,) = confirmation_rounds(study.user_attrs)
    assert first.trials == (run.number,) and first.verdict in (HELD, MISSED)
    assert len([t for t in study.get_trials() if t.user_attrs.get("role") != "confirmation"]) == SEARCHED
