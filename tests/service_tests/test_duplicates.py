"""A sampler that proposes a configuration again does not train it again: with the search's one
seed, the rerun would train the very same thing (random search and TPE proposed repeats, some
diverging twice). The repeat is recorded, skipped, and not counted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna

SPACE = """\
study: repeats
workload: {name: digits_mlp, epochs: 1}
parameters:
  per_device_batch_size: 64
  world_size: 1
  lr_rule: {choices: [constant, linear]}
  base_lr: 0.01
search: {sampler: random, n_trials: 2, seed: 1}
resources: {device: cpu}
"""


def test_a_repeated_configuration_is_skipped_and_names_the_trial_that_ran_it(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    done = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

    trials = optuna.load_study(study_name="repeats", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}").trials
    trained = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    repeats = [t for t in trials if t.state == optuna.trial.TrialState.PRUNED]
    # Two trials ran, one per rule (the only two configurations); seed 1 proposes linear twice
    # first, and the repeat was skipped.
    assert sorted(t.params["lr_rule"] for t in trained) == ["constant", "linear"]
    assert len(repeats) >= 1
    first = {t.params["lr_rule"]: t.number for t in trained}
    for t in repeats:
        assert t.user_attrs["status_reason"] == "equivalent"
        assert t.user_attrs["status_detail"] == (
            f"the same configuration as trial #{first[t.params['lr_rule']]}, which ran with the same seed")


def test_a_random_search_of_a_finite_space_stops_once_it_proposed_every_configuration(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE.replace("n_trials: 2, seed: 1", "n_trials: 5, seed: 1"))
    done = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

    trials = optuna.load_study(study_name="repeats", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}").trials
    assert sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials) == 2
    assert len(trials) < 10  # not a thousand skipped repeats before giving up
