"""Several trials per GPU, and a one-GPU machine studying two devices.

The code a GPU node runs (GPUs reserved through Ray, a warm process per share of a GPU, the
desk's choice of GPUs), on a local Ray told it has GPUs, with the math on the CPU
(``HPSEARCH_CUDA_AS_CPU=1``): the trials' own numbers are the CPU's, the placement is the GPU
path's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna

ROOT = Path(__file__).resolve().parents[2]

# Sleeping trials (benchmarks.workloads.sleepy): about 3 s each whatever the machine, so trials
# that share a GPU are seen training at once. Not fused: what is measured is four trials sharing
# a GPU as processes of their own.
PACKED_SPACE = """\
study: packed
workload: {{name: "benchmarks.workloads.sleepy:sleepy", epochs: 1, options: {{samples: 64, sample_s: 0.05}}}}
scaling: {{base_batch_size: 8}}
parameters:
  per_device_batch_size: 8
  world_size: 1
  base_lr: {{choices: [0.001, 0.002, 0.004, 0.008]}}
objectives:
  - {{metric: val_accuracy, direction: maximize}}
search: {{sampler: grid, n_trials: 4, seed: 0, fuse: false}}
resources: {{device: cuda, cpus_per_worker: 1, gpus_per_worker: {share}}}
"""

EMULATED_SPACE = """\
study: one-gpu
workload: {{name: digits_mlp, epochs: 1}}
parameters:
  per_device_batch_size: 32
  world_size: 2
  base_lr: 0.05
search: {{sampler: grid, n_trials: 1, seed: 0}}
resources: {{device: cuda, gpus_per_worker: 0.5, emulate_ranks: {emulate}}}
"""

# A local Ray told it has GPUs; hpsearch joins it as it joins any running Ray.
WITH_GPUS = """\
import json, logging, sys, ray, hpsearch
ray.init(num_cpus=int(sys.argv[1]), num_gpus=int(sys.argv[2]), include_dashboard=False, log_to_driver=False,
         logging_level=logging.ERROR)
try:
    hpsearch.start("space.yaml", storage="sqlite:///store.db")
except hpsearch.HPSearchError as exc:
    print(json.dumps({"error": str(exc), "exit_code": exc.exit_code}))
"""


def _search(folder: Path, space: str, cpus: int, gpus: int, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    folder.mkdir()
    (folder / "space.yaml").write_text(space)
    env = dict(os.environ, HPSEARCH_CUDA_AS_CPU="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", WITH_GPUS, str(cpus), str(gpus)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _trials(folder: Path, study: str) -> list[Any]:
    return optuna.load_study(study_name=study, storage=f"sqlite:///{folder / 'store.db'}").trials


def test_four_quarter_gpu_trials_train_at_once_on_one_gpu_and_measure_what_whole_gpus_do(tmp_path: Path) -> None:
    _search(tmp_path / "packed", PACKED_SPACE.format(share=0.25), cpus=4, gpus=1)
    packed = _trials(tmp_path / "packed", "packed")
    assert [t.state for t in packed] == [optuna.trial.TrialState.COMPLETE] * 4
    assert {tuple(t.user_attrs["gpu_ids"]) for t in packed} == {("0",)}
    # Each trial trained while every other one did: the four shared the GPU at once.
    spans = [(t.user_attrs["phases"]["asked_at"] + t.user_attrs["phases"]["training_started"],
              t.user_attrs["phases"]["asked_at"] + t.user_attrs["phases"]["training_ended"]) for t in packed]
    assert max(start for start, _ in spans) < min(end for _, end in spans)

    # The same grid with a whole GPU per trial, on four GPUs: the same numbers.
    _search(tmp_path / "whole", PACKED_SPACE.format(share=1), cpus=4, gpus=4)
    whole = _trials(tmp_path / "whole", "packed")
    measured = ("val_loss", "val_accuracy", "train_loss", "samples_seen", "last_lr")
    assert {t.params["base_lr"]: [t.user_attrs[k] for k in measured] for t in packed} == \
        {t.params["base_lr"]: [t.user_attrs[k] for k in measured] for t in whole}
    assert len({tuple(t.user_attrs["gpu_ids"]) for t in whole}) > 1


def test_a_two_rank_trial_on_one_gpu_plays_both_ranks_in_one_process_or_is_refused(tmp_path: Path) -> None:
    # emulate_ranks: auto (the default): its two ranks never share the GPU as two processes.
    _search(tmp_path / "auto", EMULATED_SPACE.format(emulate="auto"), cpus=2, gpus=1)
    (trial,) = _trials(tmp_path / "auto", "one-gpu")
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert trial.user_attrs["emulated_ranks"] == 2 and trial.user_attrs["gpu_ids"] == ["0"]
    assert trial.user_attrs["effective_batch_size"] == 64

    # emulate_ranks: off: refused once the cluster's size is known, with the reason, before the
    # study is written.
    done = _search(tmp_path / "off", EMULATED_SPACE.format(emulate="off"), cpus=2, gpus=1)
    refusal = json.loads(done.stdout.strip().splitlines()[-1])
    assert refusal["exit_code"] == 2
    assert "two ranks of one trial never share a GPU" in refusal["error"]
    assert "set resources.emulate_ranks: auto" in refusal["error"]
    assert not (tmp_path / "off" / "store.db").exists()


def test_a_two_rank_trial_at_half_a_gpu_on_a_two_gpu_machine_gets_one_share_of_each_gpu(tmp_path: Path) -> None:
    # Ray places the two half-GPU units of one reservation on one GPU; the desk keeps what it was
    # placed while it waits and asks again (the node has the CPUs for a second group), until it
    # holds two shares on different GPUs. Before, it gave the first group back and asked again
    # for the same, for ever.
    _search(tmp_path / "two", EMULATED_SPACE.format(emulate="off"), cpus=4, gpus=2, timeout_s=240)
    (trial,) = _trials(tmp_path / "two", "one-gpu")
    assert trial.state == optuna.trial.TrialState.COMPLETE, trial.user_attrs.get("status_detail")
    assert trial.user_attrs["emulated_ranks"] == 1 and sorted(trial.user_attrs["gpu_ids"]) == ["0", "1"]
