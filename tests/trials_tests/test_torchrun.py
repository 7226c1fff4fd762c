"""Any trial under torchrun: ``python -m hpsearch.trials.run`` takes its rank from torchrun's
environment and trains with the same loop, to the same numbers, as the trial's own ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from hpsearch.trials.launcher import run_trial
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec
from hpsearch.trials.workloads.base import build_workload

TORCHRUN = Path(sys.executable).with_name("torchrun")
COMPARED = ("val_loss", "val_accuracy", "train_loss", "samples_seen", "steps", "last_lr")


def test_the_rank_context_comes_from_torchruns_environment() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    ctx = RankContext.from_env("cuda", environ=env)
    assert (ctx.rank, ctx.world_size, ctx.device, ctx.is_main) == (3, 4, "cuda:1", False)
    assert RankContext.from_env(environ={}).world_size == 1  # no launcher: one process
    with pytest.raises(ValueError, match="MASTER_ADDR and MASTER_PORT are not set"):
        RankContext.from_env(environ={"RANK": "0", "WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match=r"RANK must be in 0\.\.WORLD_SIZE-1"):
        RankContext.from_env(environ={"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"})


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [*sys.path]))}
    return subprocess.run(list(args), capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def _spec() -> TrialSpec:
    # A warmup from zero over half the epoch, cosine after it, and clipped steps: the LM recipe's
    # schedule, which the torchrun job must follow step for step as the trial did.
    return TrialSpec(per_device_batch_size=16, world_size=2, base_lr=0.02, lr_rule="linear", epochs=1,
                     warmup_epochs=0.5, warmup_from="zero", schedule="cosine",
                     workload="digits_mlp", workload_options={"hidden": 32},
                     hyperparameters={"momentum": 0.9, "max_grad_norm": 0.5},
                     seed=5, save_model=True, eval_every_samples=160)


def test_a_configuration_under_torchrun_ends_like_the_trial_with_the_same_weights(tmp_path: Path) -> None:
    spec = _spec()
    trial = run_trial(spec, tmp_path / "trial")
    job = tmp_path / "job"
    job.mkdir()
    (job / "trial.json").write_text(json.dumps({"spec": spec.to_dict()}))

    done = _run(str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "hpsearch.trials.run",
                str(job / "trial.json"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    final = json.loads((job / "metrics.json").read_text())
    for key in COMPARED:
        assert final[key] == pytest.approx(trial[key], abs=1e-6), key
    assert (final["world_size"], final["processes"], final["effective_batch_size"]) == (2, 2, 32)
    evaluations = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    assert len(evaluations) == trial["evaluation"]  # every evaluation the trial made, at the same points
    # The same first steps: each evaluation's LR and losses are the trial's at the same samples.
    theirs = [json.loads(line) for line in (tmp_path / "trial" / "metrics.jsonl").read_text().splitlines()]
    assert len(theirs) == len(evaluations) > 3
    for ours, reference in zip(evaluations, theirs):
        assert ours["samples_seen"] == reference["samples_seen"]
        assert ours["last_lr"] == pytest.approx(reference["last_lr"], rel=1e-12)
        assert ours["train_loss"] == pytest.approx(reference["train_loss"], abs=1e-6)
    assert evaluations[0]["last_lr"] < spec.lr / 2  # still warming up from zero

    weights = torch.load(job / "model.pt", weights_only=True)
    reference = torch.load(tmp_path / "trial" / "model.pt", weights_only=True)
    assert max(float((weights[k] - reference[k]).abs().max()) for k in weights) <= 1e-6
    model = build_workload(spec.workload, spec.factory_options).model
    model.load_state_dict(weights)  # the saved weights are the workload's model's


def test_without_torchrun_one_process_plays_every_rank(tmp_path: Path) -> None:
    spec = _spec()
    (tmp_path / "trial.json").write_text(json.dumps({"spec": spec.to_dict()}))
    done = _run(sys.executable, "-m", "hpsearch.trials.run", str(tmp_path / "trial.json"), "--out", "out",
                cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    final = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert (final["world_size"], final["processes"], final["emulated_ranks"]) == (2, 1, 2)
    # The same math as two ranks: one process emulating both, in this process.
    reference = train(replace(spec, emulated_ranks=2), RankContext(run_dir=tmp_path))
    assert reference is not None
    for key in COMPARED:
        assert final[key] == pytest.approx(reference[key], abs=1e-6), key


def test_a_bad_configuration_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "trial.json"
    config.write_text(json.dumps({"spec": {"per_device_batch_size": 8, "base_lr": 0.1, "workload": "no_such_mod:make"}}))
    done = _run(sys.executable, "-m", "hpsearch.trials.run", str(config), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: rank 0: cannot import workload module 'no_such_mod': No module named 'no_such_mod'"]
