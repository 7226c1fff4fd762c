"""Warm rank processes in a real search: the GPU path on a machine without GPUs, and results
that do not depend on whether rank processes are reused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

import hpsearch

WHERE = '''
import os
from hpsearch.trials.workloads.digits import digits_mlp

def make(options):
    # Notes each rank's process, the process it was forked from (the pool's zygote), the
    # zygote's parent (the pool's process), and the GPU it was given.
    import torch.distributed as dist
    rank = dist.get_rank() if dist.is_initialized() else 0
    zygote = os.getppid()
    with open(f"/proc/{zygote}/stat") as stat:
        pool = stat.read().rsplit(")", 1)[1].split()[1]
    with open(options["log"], "a") as f:
        f.write(f"{rank} {os.getpid()} {pool} {os.environ.get('CUDA_VISIBLE_DEVICES')}\\n")
    return digits_mlp({})
'''

GPU_SPACE = """\
study: gpu-path
workload: {{name: "where:make", epochs: 1, options: {{log: "{log}"}}}}
parameters:
  per_device_batch_size: {{choices: [16, 32, 64]}}
  world_size: {{choices: [1, 2]}}
  base_lr: 0.05
search: {{sampler: grid, n_trials: 6, seed: 0}}
resources: {{device: cuda, cpus_per_worker: 1, gpus_per_worker: 1}}
"""

# A local Ray told it has two GPUs; hpsearch joins it as it joins any running Ray.
WITH_TWO_GPUS = """\
import logging, sys, ray, hpsearch
ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
hpsearch.start("space.yaml", storage="sqlite:///store.db")
"""


def test_cuda_trials_run_each_rank_in_the_warm_process_of_a_gpu_ray_assigned(tmp_path: Path) -> None:
    # The code a GPU node runs (GPUs reserved through Ray, one warm process per device id, rank
    # r on the r-th GPU of the trial's bundle), with the math on the CPU (HPSEARCH_CUDA_AS_CPU).
    (tmp_path / "where.py").write_text(WHERE)
    log = tmp_path / "where.log"
    (tmp_path / "space.yaml").write_text(GPU_SPACE.format(log=log))
    env = dict(os.environ, HPSEARCH_CUDA_AS_CPU="1", PYTHONPATH=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", WITH_TWO_GPUS], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr

    trials = hpsearch.load("gpu-path", f"sqlite:///{tmp_path / 'store.db'}").study.trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 6
    for t in trials:
        ids = t.user_attrs["gpu_ids"]
        assert len(ids) == t.params["world_size"] and len(set(ids)) == len(ids) <= 2
        assert set(ids) <= {"0", "1"}
    # (The search builds the workload once in its own process first, with no GPU: left out.)
    seen = [line.split() for line in log.read_text().splitlines() if not line.endswith(" None")]
    assert len(seen) == sum(t.params["world_size"] for t in trials)
    # Two warm processes served every rank of every trial, whatever its world size, each
    # always on its own device.
    device_of: dict[str, set[str]] = {}
    for _, pid, _, gpu in seen:
        device_of.setdefault(pid, set()).add(gpu)
    assert len(device_of) == 2
    assert sorted(g for gpus in device_of.values() for g in gpus) == ["0", "1"]


REUSE_SPACE = """\
study: reuse
workload: {{name: digits_cnn, epochs: 3}}
parameters:
  per_device_batch_size: {{choices: [32, 64]}}
  world_size: {{choices: [1, 2]}}
  base_lr: {{choices: [0.02, 1000000.0]}}
  momentum: 0.9
search: {{sampler: grid, n_trials: 8, max_concurrent: 1, seed: 0, fuse: true}}
resources: {{device: cpu, reuse_workers: {reuse}}}
"""
# fuse: true, not auto: whether auto fuses a shape rests on timing its steps, which differs
# from one run to the next (a shape fused in one run and declined in the other differs in
# rounding, which a chaotic configuration grows).

COMPARED = ("val_loss", "val_accuracy", "train_loss", "samples_seen", "last_lr", "noise_scale", "status_reason")


def _search(tmp_path: Path, reuse: bool) -> dict[Any, Any]:
    folder = tmp_path / str(reuse)
    folder.mkdir()
    (folder / "space.yaml").write_text(REUSE_SPACE.format(reuse=str(reuse).lower()))
    done = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                          cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    trials = hpsearch.load("reuse", f"sqlite:///{folder / 'hpsearch.db'}").study.trials
    return {tuple(sorted(t.params.items())): (t.state, {k: t.user_attrs.get(k) for k in COMPARED})
            for t in trials}


@pytest.mark.slow
def test_a_grid_gives_bit_identical_results_with_and_without_reusing_rank_processes(tmp_path: Path) -> None:
    warm = _search(tmp_path, reuse=True)
    fresh = _search(tmp_path, reuse=False)
    assert warm == fresh
    reasons = sorted(str(attrs["status_reason"]) for _, attrs in warm.values())
    assert reasons.count("diverged") == 4 and reasons.count("None") == 4


LOCAL_SPACE = """\
study: local-pool
workload: {{name: "where:make", epochs: 1, options: {{log: "{log}"}}}}
parameters:
  per_device_batch_size: 32
  world_size: {{choices: [2, 1]}}
  base_lr: 0.05
search: {{sampler: grid, n_trials: 2, seed: 0}}
resources: {{device: cpu}}
"""


def test_a_local_cpu_search_runs_its_ranks_in_processes_it_started_itself(tmp_path: Path) -> None:
    # Started by the search's process before Ray (hpsearch.tune.pools.LocalPool), not by a Ray
    # actor once Ray is up, and served to the trials over a local socket.
    (tmp_path / "where.py").write_text(WHERE)
    log = tmp_path / "where.log"
    (tmp_path / "space.yaml").write_text(LOCAL_SPACE.format(log=log))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    search = subprocess.Popen([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = search.communicate(timeout=600)
    assert search.returncode == 0, out

    trials = hpsearch.load("local-pool", f"sqlite:///{tmp_path / 'hpsearch.db'}").study.trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    builds = [line.split() for line in log.read_text().splitlines()]
    # The search's workload check built it once more, in a warm process too: the search's own
    # process never builds the workload (nor imports torch).
    assert len(builds) == 3 + 1
    assert {parent for _, _, parent, _ in builds} == {str(search.pid)}
    assert len({pid for _, pid, _, _ in builds}) == 2  # two warm processes served the check and both trials


def test_a_search_that_fails_its_workload_check_leaves_no_rank_log_or_folder(tmp_path: Path) -> None:
    # Its warm processes started before the check (and failed to import the module quietly).
    (tmp_path / "space.yaml").write_text(LOCAL_SPACE.format(log=tmp_path / "unused.log")
                                         .replace('"where:make"', '"no_such_module:make"'))
    done = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot import workload module 'no_such_module'" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "hpsearch_runs").exists()
