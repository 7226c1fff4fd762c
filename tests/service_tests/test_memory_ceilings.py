"""What a search learns from a trial that ran out of memory, as the searcher proposes trials on
a resumed study: the ceiling holds for the same configuration whatever its accumulation (a rank
holds one micro-batch at a time), and only on the kind of device it was measured on (a study
started on a GPU and resumed on CPU, or the other way round, starts afresh)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from hpsearch.search_spaces import parse_space
from hpsearch.tune.orchestrator import _create_study
from hpsearch.tune.searcher import StudySearcher

SPACE = """\
study: ceilings
workload: {name: digits_mlp, epochs: 1}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: {choices: [8, 512]}
  grad_accum_steps: {choices: [1, 2]}
  lr_rule: {choices: [linear, sqrt]}
  base_lr: 0.01
search: {sampler: random, n_trials: 4, seed: 0, on_oom: {on_oom}}
resources: {device: cpu}
"""


def _resumed(tmp_path: Path, *, ran_out_on: str, on_oom: str = "skip",
             accum: int = 2) -> tuple[optuna.Study, StudySearcher]:
    """A study whose one earlier trial ran out of memory at per-device batch 512 (A 1, linear) on
    ``ran_out_on``, resumed on CPU with the same batch proposed next at A ``accum`` and the other
    rule."""
    space = parse_space(SPACE.replace("{on_oom}", on_oom))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = _create_study(optuna.storages.InMemoryStorage(), "ceilings", space)
    searcher = StudySearcher(study, space, 4, "cpu", tmp_path)
    # The trial as the search records one (its parameters include the fixed ones).
    params = {"per_device_batch_size": 512, "grad_accum_steps": 1, "lr_rule": "linear", "base_lr": 0.01,
              "world_size": 1}
    assert set(params) == set(searcher.state.distributions)
    study.add_trial(optuna.trial.create_trial(
        state=TrialState.FAIL, params=params, distributions=searcher.state.distributions,
        user_attrs={"status_reason": "out_of_memory", "device": ran_out_on, "peak_memory_bytes": 2**30}))
    study.enqueue_trial({"per_device_batch_size": 512, "grad_accum_steps": accum, "lr_rule": "sqrt"})
    return study, StudySearcher(study, space, 4, "cpu", tmp_path)  # resumed: reads the study


def _attr(study: optuna.Study, number: int, key: str) -> Any:
    return study.trials[number].user_attrs.get(key)


def test_a_ceiling_holds_whatever_the_accumulation(tmp_path: Path) -> None:
    study, searcher = _resumed(tmp_path, ran_out_on="cpu")
    config = searcher.suggest("t0")
    # The enqueued 512 x 2 was not started: at per-device batch 512 a rank ran out, A 1 or 2.
    skipped = study.trials[1]
    assert (skipped.params["per_device_batch_size"], skipped.params["grad_accum_steps"]) == (512, 2)
    assert (skipped.state, _attr(study, 1, "status_reason")) == (TrialState.PRUNED, "exceeds_memory")
    assert "at or above 512" in _attr(study, 1, "status_detail")
    assert isinstance(config, dict) and config["trial"].spec.per_device_batch_size == 8


def test_under_accumulate_the_larger_accumulation_runs_halved(tmp_path: Path) -> None:
    study, searcher = _resumed(tmp_path, ran_out_on="cpu", on_oom="accumulate")
    config = searcher.suggest("t0")
    assert isinstance(config, dict) and config["trial"].number == 1
    # 512 x 2 runs as 256 x 4: the same effective batch, below the ceiling.
    assert (config["trial"].spec.per_device_batch_size, config["trial"].spec.grad_accum_steps) == (256, 4)
    assert _attr(study, 1, "effective_batch_size") == 1024
    assert _attr(study, 1, "ran_as") == {"per_device_batch_size": 256, "grad_accum_steps": 4, "out_of_memory_at": 512}


def test_a_ceiling_measured_on_a_gpu_does_not_hold_on_cpu(tmp_path: Path) -> None:
    study, searcher = _resumed(tmp_path, ran_out_on="cuda (NVIDIA H100 80GB HBM3)", accum=1)
    config = searcher.suggest("t0")
    assert isinstance(config, dict) and config["trial"].number == 1
    assert config["trial"].spec.per_device_batch_size == 512 and config["trial"].spec.grad_accum_steps == 1
    assert _attr(study, 1, "status_reason") is None and _attr(study, 1, "ran_as") is None
    # Measured on this kind of device, the same proposal is not started.
    study, searcher = _resumed(tmp_path, ran_out_on="cpu", accum=1)
    assert searcher.suggest("t0") is not None
    assert _attr(study, 1, "status_reason") == "exceeds_memory"
