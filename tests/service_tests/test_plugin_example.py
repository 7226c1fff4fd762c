"""The documented plugin example runs through `hpsearch start` like a built-in workload."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import optuna
import torch

import hpsearch

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

    # The searched `hidden` reached the factory: per batch size, the two widths trained
    # different models (shapes and losses), each trial's weights kept (save_model: all).
    search = hpsearch.load("my-workload-example", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}")
    by_config = {(t.params["per_device_batch_size"], t.params["hidden"]): t for t in trials}
    assert set(by_config) == {(16, 0), (16, 16), (64, 0), (64, 16)}
    for b in (16, 64):
        assert by_config[b, 0].user_attrs["val_loss"] != by_config[b, 16].user_attrs["val_loss"]
    sys.path.insert(0, str(EXAMPLE))
    try:
        from my_workload import make_workload
    finally:
        sys.path.remove(str(EXAMPLE))
    for (_, hidden), t in by_config.items():
        path = search.model_path(t.number)
        assert path == t.user_attrs["model_path"] and Path(path).is_file()
        model = make_workload({"hidden": hidden}).model
        model.load_state_dict(torch.load(path, weights_only=True))  # refuses a state dict of another shape
    exported = subprocess.run([sys.executable, "-m", "hpsearch", "export", "my-workload-example", "--format", "csv"],
                              capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert {r["model_path"] for r in rows} == {search.model_path(t.number) for t in trials}
