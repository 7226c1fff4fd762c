"""The documented plugin example runs through `hpsearch start` like a built-in workload."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "my_workload"


def test_plugin_example_space_runs_through_hpsearch_start(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLE), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", str(EXAMPLE / "space.yaml"), "--no-progress"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr

    study = optuna.load_study(study_name="my-workload-example", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}")
    trials = study.get_trials()
    assert len(trials) == 4
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    # A regression workload: the objective is the validation loss, and no accuracy is invented.
    assert all(t.values[0] == t.user_attrs["val_loss"] for t in trials)
    assert all("val_accuracy" not in t.user_attrs for t in trials)
    assert (tmp_path / "my-workload-example-frontier.html").exists()
