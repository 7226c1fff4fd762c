"""Out-of-memory in a real search (`hpsearch start`, a local Ray, real ranks): a per-device batch
past `resources.memory_per_worker` is recorded `out_of_memory`; the same configuration at that
batch or above is then not run (`exceeds_memory`, not counted toward `n_trials`), or, with
`search.on_oom: accumulate`, runs halved with the same effective batch, and trains exactly what a
run at b/2 x 2A trains. The workload's activations grow with the batch
(`benchmarks.workloads.activations`): at a 600 MiB cap per rank, 8 and 256 fit and 512 does not."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import torch

from hpsearch.planner.ceilings import MemoryCeilings
from hpsearch.search_spaces import parse_space
from hpsearch.torchrun import export_trial
from hpsearch.trials.launcher import run_trial
from hpsearch.trials.rank.loop import MODEL_FILE
from hpsearch.trials.spec import TrialSpec, trial_spec

REPO = Path(__file__).resolve().parents[2]
MiB = 2**20

SPACE = """\
study: {study}
workload:
  name: "benchmarks.workloads.activations:wide_mlp"
  epochs: 1
  options: {{samples: 1024}}
  save_model: all
scaling: {{base_batch_size: 8}}
parameters:
  per_device_batch_size: {{choices: [8, 256, 512, 1024]}}
  lr_rule: {{choices: [linear, sqrt]}}
  base_lr: 0.001
  momentum: 0.9
objectives:
  - {{metric: val_accuracy, direction: maximize}}
search:
  sampler: random
  n_trials: {n_trials}
  max_concurrent: 1
  seed: 0
  on_oom: {on_oom}
  # Run first, in this order: a batch that runs out of memory, then a larger one of the same
  # configuration (the rule is not part of it), then one that fits.
  enqueue:
    - {{per_device_batch_size: 512, lr_rule: linear}}
    - {{per_device_batch_size: 1024, lr_rule: sqrt}}
    - {{per_device_batch_size: 8, lr_rule: linear}}
resources: {{device: cpu, memory_per_worker: 600MiB}}
"""


def _search(tmp_path: Path, *, study: str, on_oom: str,
            n_trials: int) -> tuple[str, list[optuna.trial.FrozenTrial], str]:
    """Run the search through the CLI: the space's text, the study's trials, what it printed."""
    text = SPACE.format(study=study, on_oom=on_oom, n_trials=n_trials)
    (tmp_path / "space.yaml").write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    storage = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    return text, optuna.load_study(study_name=study, storage=storage).get_trials(), result.stdout


def _attr(t: optuna.trial.FrozenTrial, key: str) -> Any:
    return t.user_attrs.get(key)


def test_a_batch_that_ran_out_of_memory_is_not_run_again_at_or_above_it(tmp_path: Path) -> None:
    _, trials, _ = _search(tmp_path, study="oom-skip", on_oom="skip", n_trials=3)
    State = optuna.trial.TrialState

    first, larger, small = trials[:3]
    assert (first.params["per_device_batch_size"], first.state, _attr(first, "status_reason")) == \
        (512, State.FAIL, "out_of_memory")
    detail = _attr(first, "status_detail")
    assert detail.startswith("ran out of memory at per-device batch 512 (grad_accum_steps 1, world_size 1) on cpu:")
    assert "the limit is 600 MiB (resources.memory_per_worker)" in detail and "DefaultCPUAllocator" in detail
    # What it measured before it ran out is on the record too (the dashboard and the memory fit read it).
    assert _attr(first, "memory_limit_bytes") == 600 * MiB and _attr(first, "peak_memory_bytes") > 64 * MiB
    assert _attr(first, "device") == "cpu"
    # The same configuration (the rule aside) at a larger batch is not run at all.
    assert (larger.params["per_device_batch_size"], larger.state, _attr(larger, "status_reason")) == \
        (1024, State.PRUNED, "exceeds_memory")
    assert "at or above 512" in _attr(larger, "status_detail") and _attr(larger, "runtime_s") is None
    assert (small.params["per_device_batch_size"], small.state) == (8, State.COMPLETE)
    # n_trials counts the trials that ran: the skipped ones came on top.
    ran = [t for t in trials if _attr(t, "status_reason") not in ("exceeds_memory", "equivalent")]
    assert len(ran) == 3
    for t in trials:
        b = t.params["per_device_batch_size"]
        if t.number > 0 and b >= 512:
            assert _attr(t, "status_reason") == "exceeds_memory", t.number
        if t.state == State.COMPLETE:
            assert b < 512
            assert _attr(t, "peak_memory_bytes") > 64 * MiB and _attr(t, "memory_limit_bytes") == 600 * MiB
    peaks = {t.params["per_device_batch_size"]: _attr(t, "peak_memory_bytes") for t in trials
             if t.state == State.COMPLETE}
    if 256 in peaks:  # the sampler's third trial may be a batch of 8 or 256
        assert peaks[256] > peaks[8]


def test_on_oom_accumulate_runs_the_batch_halved_and_trains_what_b_half_times_2a_trains(tmp_path: Path) -> None:
    text, trials, printed = _search(tmp_path, study="oom-accumulate", on_oom="accumulate", n_trials=2)
    State = optuna.trial.TrialState

    first, larger = trials[:2]
    # The trial that ran out of memory at 512 ran again in its own process at 256 x 2 ...
    assert first.state == State.COMPLETE, _attr(first, "status_detail")
    assert first.params["per_device_batch_size"] == 512 and _attr(first, "effective_batch_size") == 512
    assert _attr(first, "ran_as") == {"per_device_batch_size": 256, "grad_accum_steps": 2, "out_of_memory_at": 512}
    # ... and the larger batch of the same configuration started halved, below 512: 256 x 4.
    assert larger.state == State.COMPLETE, _attr(larger, "status_detail")
    assert _attr(larger, "ran_as") == {"per_device_batch_size": 256, "grad_accum_steps": 4, "out_of_memory_at": 512}
    assert all(_attr(t, "status_reason") != "exceeds_memory" for t in trials)
    # The trial table marks the b no rank held, and says how each such trial ran.
    rows = {line.split("│")[1].strip(): line for line in printed.splitlines() if line.startswith("│")}
    assert "512*" in rows[str(first.number)] and "1024*" in rows[str(larger.number)], printed
    assert (f"#{first.number} ran as b 256 x A 2 (b 512 ran out of memory); "
            f"#{larger.number} ran as b 256 x A 4 (b 512 ran out of memory)") in printed, printed

    # The weights the halved trial kept are those of a run at b/2 x 2A, bit for bit.
    space = parse_space(text)
    direct = trial_spec(space, {**first.params, "per_device_batch_size": 256, "grad_accum_steps": 2})
    final = run_trial(direct, tmp_path / "direct")
    kept = torch.load(_attr(first, "model_path"))
    again = torch.load(tmp_path / "direct" / MODEL_FILE)
    assert kept.keys() == again.keys()
    assert all(torch.equal(kept[k], again[k]) for k in kept)
    assert (_attr(first, "val_loss"), _attr(first, "train_loss")) == (final["val_loss"], final["train_loss"])

    # Exported to run on its own, it runs at the shape it trained, not at the batch that ran out.
    study = optuna.load_study(study_name="oom-accumulate", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}")
    job = export_trial(study, first.number, tmp_path / "job")
    exported = json.loads(job.config.read_text())["spec"]
    assert (exported["per_device_batch_size"], exported["grad_accum_steps"]) == (256, 2)
    assert TrialSpec(**exported) == dataclasses.replace(direct, emulated_ranks=1, save_model=True)


GROWING = """\
study: oom-late
workload:
  name: "benchmarks.workloads.activations:wide_mlp"
  epochs: 2
  # Past the first epoch a rank holds more activations per sample (about 690 MiB at a per-device
  # batch of 256, 490 MiB at 128, measured): at 600 MiB a batch of 256 trains its first epoch,
  # reports it, and runs out in the second; 128 fits throughout.
  options: {samples: 1024, grow_after_samples: 1024, grow: 2}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: 256
  base_lr: 0.001
  momentum: 0.9
search: {sampler: random, n_trials: 1, seed: 0, on_oom: accumulate}
resources: {device: cpu, memory_per_worker: 600MiB}
"""


def test_a_trial_that_runs_out_after_it_reported_records_the_halved_run_alone(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(GROWING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    (trial,) = optuna.load_study(study_name="oom-late", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}").get_trials()
    assert trial.state == optuna.trial.TrialState.COMPLETE, _attr(trial, "status_detail")
    assert _attr(trial, "ran_as") == {"per_device_batch_size": 128, "grad_accum_steps": 2, "out_of_memory_at": 256}
    # Its curves are those of the run it records, the halved one, from its first evaluation:
    # its rank's own reports (the run folder's, which the halved run started afresh), none of
    # the run that ran out.
    run = tmp_path / "hpsearch_runs" / "oom-late" / "trial-00000"
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evaluations = [line for line in lines if "evaluation" in line]  # the last one is the final report
    curves = _attr(trial, "curves")
    assert curves["samples_seen"] == [line["samples_seen"] for line in evaluations] == [1024, 2048]
    assert curves["runtime_s"] == [line["runtime_s"] for line in evaluations]
    assert curves["runtime_s"][-1] == _attr(trial, "runtime_s")
    # The attempt that ran out held and worked its device too: its device-seconds, which the
    # budget counts, are more than the halved run's runtime on its one device.
    assert _attr(trial, "device_seconds") > _attr(trial, "runtime_s")


def test_a_trial_halved_until_it_cannot_be_records_where_it_last_ran_out(tmp_path: Path) -> None:
    # From the first sample on, a rank holds about 2 MiB a sample: 702 runs out, 351 too, and 351
    # cannot be halved evenly.
    space = GROWING.replace("oom-late", "oom-odd").replace("per_device_batch_size: 256", "per_device_batch_size: 702")
    space = space.replace("grow_after_samples: 1024, grow: 2", "grow_after_samples: 0, grow: 3")
    (tmp_path / "space.yaml").write_text(space)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    # No trial completed: exit 4, with what to do about it.
    assert result.returncode == 4, result.stdout + result.stderr
    assert "make it even: search.on_oom: accumulate halved it until it could not halve it evenly" in result.stderr
    (trial,) = optuna.load_study(study_name="oom-odd", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}").get_trials()
    assert (trial.state, _attr(trial, "status_reason")) == (optuna.trial.TrialState.FAIL, "out_of_memory")
    assert _attr(trial, "status_detail").startswith("ran out of memory at per-device batch 351 (grad_accum_steps 2")
    # The record says how it ran and where it ran out last: what a resumed search learns from.
    assert _attr(trial, "ran_as") == {"per_device_batch_size": 351, "grad_accum_steps": 2, "out_of_memory_at": 351}
    assert MemoryCeilings.of_trials([trial], device="cpu").ceiling(trial.params) == 351
