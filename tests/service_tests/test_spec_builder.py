"""One place turns a configuration into a trial: ``hpsearch.trials.spec.trial_spec``.

The searcher's proposals, the grid's constraint check, the budget's device count and
``hpsearch export-trial`` each need a trial's ``TrialSpec``; each builds it with that one
function, so they never disagree. Built here from the same parameters by every caller.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import optuna

from hpsearch.integrations.torchrun import export_trial
from hpsearch.planner.budget import trial_devices
from hpsearch.planner.plan import runnable_grid_points
from hpsearch.planner.task import TrialTask
from hpsearch.search_spaces import parse_space
from hpsearch.trials.spec import TrialSpec, trial_spec
from hpsearch.tune.orchestrator import _create_study
from hpsearch.tune.searcher import StudySearcher

SPACE = """\
study: specs
workload: {name: digits_mlp, epochs: 3, options: {val_fraction: 0.25}}
scaling: {base_batch_size: 8, warmup_epochs: 1}
parameters:
  per_device_batch_size: {choices: [16, 64]}
  world_size: {choices: [1, 4]}
  grad_accum_steps: 2
  lr_rule: {choices: [linear, sqrt]}
  base_lr: 0.02
  momentum: 0.9
  hidden: {choices: [32, 64]}
search: {sampler: grid, n_trials: 16, seed: 3}
resources: {device: cpu, cpus_per_worker: 1, emulate_ranks: auto}
"""


def test_every_caller_builds_the_same_spec_from_the_same_parameters(tmp_path: Path) -> None:
    space = parse_space(SPACE)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = _create_study(optuna.storages.InMemoryStorage(), "specs", space)
    # A cluster whose largest node holds two processes: world size 4 plays its ranks on two.
    searcher = StudySearcher(study, space, 16, "cpu", tmp_path, max_processes=2)
    grid = runnable_grid_points(space, "cpu", 2)
    assert len(grid) == 16

    seen = 0
    members = []
    for i in range(16):
        config = searcher.suggest(f"t{i}")
        if config is None or config == searcher.FINISHED:
            break
        assert isinstance(config, dict)
        task = config["trial"]  # what the trial runs, as it crosses to Ray
        assert isinstance(task, TrialTask)
        # A fused group (search.fuse: auto) holds its members' own specs: each is its trial's.
        members += [(task.spec.member(k) if task.spec.fused else task.spec, number)
                    for k, number in enumerate(task.members)]
    assert len(members) == 16
    for i, (proposed, number) in enumerate(members):
        trial = study.trials[number]
        built = trial_spec(space, trial.params, device="cpu", max_processes=2)
        assert proposed == built
        assert proposed.per_device_batch_size == trial.params["per_device_batch_size"]
        assert proposed.effective_batch_size == trial.params["per_device_batch_size"] * trial.params["world_size"] * 2
        assert dict(proposed.hyperparameters) == {"momentum": 0.9, "hidden": trial.params["hidden"]}
        assert proposed.factory_options == {"val_fraction": 0.25, "hidden": trial.params["hidden"]}
        assert proposed.emulated_ranks == (2 if trial.params["world_size"] == 4 else 1)
        # The budget counts the processes the trial runs.
        assert trial_devices(trial.params, space, 2) == proposed.processes
        # export-trial writes the same trial, at real ranks and keeping its weights.
        job = export_trial(study, number, tmp_path / f"job-{i}")
        written = TrialSpec(**json.loads(job.config.read_text())["spec"])
        assert written == dataclasses.replace(built, emulated_ranks=1, save_model=True)
        seen += 1
    assert seen == 16
