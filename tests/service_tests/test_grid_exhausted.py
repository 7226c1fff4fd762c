"""A grid has as many trials as configurations: ``n_trials`` above that is said by ``validate``
and ``start`` and the search runs each configuration once; ``status`` reads the grid's own count
("finished 4 of 4", "grid exhausted"); ``resume`` of an exhausted grid, ``--n-trials`` or not,
says so and ends without starting Ray (docs/search.md, "A grid's size")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner
from optuna.trial import TrialState, create_trial

from hpsearch.cli import cli
from hpsearch.planner.sampler import distributions
from hpsearch.record import ATTR_N_TRIALS
from hpsearch.search_spaces import parse_space
from hpsearch.store import open_storage, study_attrs

SPACE = """\
study: grid4
workload: {{name: digits_mlp, epochs: 1}}
parameters:
  per_device_batch_size: {{choices: [16, 32]}}
  lr_rule: {{choices: [linear, sqrt]}}
  base_lr: 0.05
search: {{sampler: grid, n_trials: {n_trials}}}
resources: {{device: cpu}}
"""


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _grid_study(url: str, *, done: int, n_trials: int = 8) -> None:
    """A study of SPACE as a search writes it, its first ``done`` configurations COMPLETE; the
    study's total is ``n_trials`` (8: what a release before the grid's count recorded)."""
    text = SPACE.format(n_trials=n_trials)
    space = parse_space(text)
    study = optuna.create_study(study_name="grid4", storage=open_storage(url), direction="maximize")
    study.set_metric_names(["val_accuracy"])
    for key, value in study_attrs(text, ["val_accuracy"], n_trials).items():
        study.set_user_attr(key, value)
    points = [(b, rule) for b in (16, 32) for rule in ("linear", "sqrt")][:done]
    for b, rule in points:
        params = {**{n: getattr(p, "value", None) for n, p in space.parameters.items()},
                  "per_device_batch_size": b, "lr_rule": rule}
        study.add_trial(create_trial(params=params, state=TrialState.COMPLETE, values=[0.9],
                                     distributions=distributions(space),
                                     user_attrs={"device": "cpu", "val_accuracy": 0.9, "runtime_s": 1.0}))


def test_validate_says_the_grid_has_fewer_configurations_than_n_trials(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE.format(n_trials=8))
    code, out, err = _run("validate", str(tmp_path / "space.yaml"))
    assert code == 0, err
    assert "warning: search.n_trials is 8 but the grid has 4 configurations: the search runs each once, 4 trials" \
        in err
    assert "sampler grid, 4 trials" in out


def test_validate_says_nothing_of_a_grid_that_n_trials_fits(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE.format(n_trials=4))
    code, _, err = _run("validate", str(tmp_path / "space.yaml"))
    assert code == 0 and "configurations: the search runs" not in err


def test_status_of_an_exhausted_grid_counts_its_configurations(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    _grid_study(url, done=4)
    code, out, err = _run("status", "grid4", "--storage", url)
    assert code == 0, err
    assert "finished 4 of 4" in out and "of 8" not in out
    assert "grid exhausted: all 4 configurations ran" in out


def test_status_of_a_grid_under_way_says_how_many_configurations_are_left(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    _grid_study(url, done=3, n_trials=4)
    code, out, _ = _run("status", "grid4", "--storage", url)
    assert code == 0
    assert "finished 3 of 4" in out and "grid: 3 of 4 configurations ran, 1 left" in out


@pytest.mark.parametrize("extra", [["--n-trials", "20"], []])
def test_resume_of_an_exhausted_grid_runs_nothing_and_starts_no_ray(tmp_path: Path, extra: list[str]) -> None:
    url = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    _grid_study(url, done=4)
    ray_tmp = tmp_path / "ray"
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp)}
    env.pop("RAY_ADDRESS", None)
    result = subprocess.run([sys.executable, "-m", "hpsearch", "resume", "grid4", "--storage", url, "--no-progress",
                             *extra], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "grid exhausted: all 4 configurations ran; nothing to run" in result.stderr
    if extra:
        assert "--n-trials 20 is more than the grid's 4 configurations" in result.stderr
    assert not ray_tmp.exists()  # Ray never started
    study = optuna.load_study(study_name="grid4", storage=open_storage(url))
    assert len(study.trials) == 4 and study.user_attrs[ATTR_N_TRIALS] == 4
