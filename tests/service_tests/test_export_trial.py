"""From the search to the real run: a quickstart trial exported with ``hpsearch export-trial``
and launched with torchrun (gloo on CPU, no Ray, no store) ends where the trial ended, trains
at the LR its rule gives at a doubled world size, and leaves weights the workload's model loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import hpsearch
from hpsearch.search_spaces import example_path
from hpsearch.trials.scaling import scaled_lr
from hpsearch.trials.workloads.base import build_workload


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # torchrun comes from the environment hpsearch is installed in, as on a user's PATH.
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env, timeout=400)


@pytest.mark.slow  # a Ray search, then two torchrun jobs: about a minute on 2 cores
def test_an_exported_quickstart_trial_runs_under_torchrun_as_it_ran_in_the_search(tmp_path: Path) -> None:
    # One configuration of the quickstart's grid: b 32 x W 2, linear rule, its 10 epochs.
    space = yaml.safe_load(example_path("quickstart").read_text())
    space["study"] = "quickstart-trial"
    space["parameters"].update(per_device_batch_size=32, world_size=2, lr_rule="linear", base_lr=0.01)
    space["search"]["n_trials"] = 1
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    started = _run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"], tmp_path)
    assert started.returncode == 0, started.stderr[-3000:]
    search = hpsearch.load("quickstart-trial", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}")
    trial = search.study.trials[0]
    assert trial.state.name == "COMPLETE"

    exported = _run([sys.executable, "-m", "hpsearch", "export-trial", "quickstart-trial", "0", "-o", "job"], tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert f"run it: bash {tmp_path / 'job' / 'launch.sh'}" in exported.stdout
    launched = _run(["bash", "job/launch.sh"], tmp_path)
    assert launched.returncode == 0, launched.stderr[-3000:]
    final = json.loads((tmp_path / "job" / "metrics.json").read_text())
    for key in ("val_accuracy", "val_loss", "train_loss", "lr"):
        assert final[key] == pytest.approx(trial.user_attrs[key], abs=1e-6), key
    assert (final["samples_seen"], final["steps"]) == (trial.user_attrs["samples_seen"], trial.user_attrs["steps"])

    config = json.loads((tmp_path / "job" / "trial.json").read_text())
    model = build_workload(config["spec"]["workload"], config["workload_factory_options"]).model
    model.load_state_dict(torch.load(tmp_path / "job" / "model.pt", weights_only=True))

    # At twice the world size, the trial's linear rule at twice the effective batch.
    doubled = _run([sys.executable, "-m", "hpsearch", "export-trial", "quickstart-trial", "0", "-o", "job4",
                    "--world-size", "4", "--epochs", "1"], tmp_path)
    assert doubled.returncode == 0, doubled.stderr
    assert "(the trial: W 2, lr 0.08)" in doubled.stdout
    launched = _run(["bash", "job4/launch.sh"], tmp_path)
    assert launched.returncode == 0, launched.stderr[-3000:]
    final4 = json.loads((tmp_path / "job4" / "metrics.json").read_text())
    assert (final4["world_size"], final4["processes"], final4["effective_batch_size"]) == (4, 4, 128)
    assert final4["lr"] == pytest.approx(scaled_lr("linear", 0.01, 128, 8)) == pytest.approx(0.16)
    assert final4["epochs_completed"] == 1
