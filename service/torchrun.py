"""A trial as a torchrun job: its full configuration and a launch script (``hpsearch export-trial``).

The last step of a search is training the chosen configuration for real, on one's own
machines, with PyTorch's own launcher. ``export_trial`` writes, into a folder:

- ``trial.json``: the trial's ``TrialSpec`` (every parameter, the workload and its options,
  the scaling rule, the seed...), where it came from, and what the trial recorded;
- ``launch.sh``: ``torchrun --standalone --nproc-per-node W -m hpsearch.trials.run trial.json``.

``bash launch.sh`` needs neither Ray nor the study's store. Exported at another world size
(``world_size=``), the configuration keeps its per-device batch and accumulation, so its
effective batch changes and its LR is the trial's rule applied to the new one.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch.errors import TrialNotFoundError
from hpsearch.trials.spec import TrialSpec

if TYPE_CHECKING:
    import optuna

__all__ = ["CONFIG_FILE", "LAUNCH_FILE", "ExportedTrial", "export_trial"]

#: The configuration file ``hpsearch.trials.run`` reads.
CONFIG_FILE = "trial.json"
#: The script that runs it with torchrun.
LAUNCH_FILE = "launch.sh"

#: What the trial recorded, copied into the configuration to compare a run against.
_RECORDED = ("val_accuracy", "val_loss", "train_loss", "lr", "samples_seen", "steps", "epochs_completed",
             "runtime_s", "device", "model_path")


@dataclass(frozen=True)
class ExportedTrial:
    """A trial written out as a torchrun job.

    Attributes:
        study: The study's name.
        number: The trial's number.
        folder: Where the files are.
        spec: The configuration the job trains (its ``world_size`` and ``epochs`` as exported).
        trial_world_size: The world size the trial ran at.
        trial_lr: The peak LR the trial ran at.
    """

    study: str
    number: int
    folder: Path
    spec: TrialSpec
    trial_world_size: int
    trial_lr: float

    @property
    def config(self) -> Path:
        """``trial.json``."""
        return self.folder / CONFIG_FILE

    @property
    def launch(self) -> Path:
        """``launch.sh``."""
        return self.folder / LAUNCH_FILE

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``hpsearch export-trial --json``)."""
        return {"study": self.study, "number": self.number, "folder": str(self.folder), "config": str(self.config),
                "launch": str(self.launch), "world_size": self.spec.world_size, "epochs": self.spec.epochs,
                "effective_batch_size": self.spec.effective_batch_size, "lr": self.spec.lr,
                "trial_world_size": self.trial_world_size, "trial_lr": self.trial_lr}


def export_trial(study: optuna.Study, number: int, folder: str | os.PathLike[str], *,
                 world_size: int | None = None, epochs: int | None = None) -> ExportedTrial:
    """Write trial ``number`` of ``study`` as a torchrun job into ``folder`` (created).

    Args:
        study: A study started by hpsearch (its space text says how the trial was built).
        number: The trial's number.
        folder: Where to write ``trial.json`` and ``launch.sh``.
        world_size: Train at this many ranks instead of the trial's (the LR follows the
            trial's rule at the new effective batch).
        epochs: Train this many epochs instead of the trial's.

    Raises:
        TrialNotFoundError: the study has no such trial, or it never got a full configuration.
        SpaceError: the study was not started by hpsearch.
    """
    from hpsearch.orchestrator import space_of_study, trial_settings

    space = space_of_study(study)
    trial = next((t for t in study.get_trials(deepcopy=False) if t.number == number), None)
    if trial is None:
        raise TrialNotFoundError(f"study {study.study_name!r} has no trial #{number} "
                                 f"(it has {len(study.get_trials(deepcopy=False))} trials)")
    missing = [p for p in space.parameters if p not in trial.params]
    if missing:
        raise TrialNotFoundError(f"trial #{number} of study {study.study_name!r} has no {', '.join(missing)}: "
                                 "it stopped before its configuration was chosen")
    recorded = str(trial.user_attrs.get("device") or "")
    device = "cuda" if recorded.startswith("cuda") else "cpu" if recorded else (
        space.resources.device if space.resources.device != "auto" else "cpu")
    ran = TrialSpec.from_params(dict(trial.params), **trial_settings(space, device))
    # Real ranks under torchrun (the trial may have emulated its ranks on fewer devices), and
    # the weights saved: they are what this run is for.
    spec = replace(ran, world_size=world_size or ran.world_size, epochs=epochs or ran.epochs, emulated_ranks=1,
                   save_model=True)
    out = Path(folder).resolve()
    out.mkdir(parents=True, exist_ok=True)
    exported = ExportedTrial(study.study_name, number, out, spec, ran.world_size, ran.lr)
    config = {
        "spec": spec.to_dict(),
        "study": study.study_name,
        "trial": number,
        "state": trial.state.name,
        "effective_batch_size": spec.effective_batch_size,
        "lr": spec.lr,
        "workload_factory_options": spec.factory_options,
        "trial_world_size": ran.world_size,
        "trial_epochs": ran.epochs,
        "trial_effective_batch_size": ran.effective_batch_size,
        "trial_lr": ran.lr,
        "recorded": {k: trial.user_attrs[k] for k in _RECORDED if k in trial.user_attrs},
    }
    exported.config.write_text(json.dumps(config, indent=1, default=str) + "\n", encoding="utf-8")
    exported.launch.write_text(_launch_script(exported), encoding="utf-8")
    exported.launch.chmod(0o755)
    return exported


def _launch_script(exported: ExportedTrial) -> str:
    spec = exported.spec
    was = "" if (spec.world_size, spec.lr) == (exported.trial_world_size, exported.trial_lr) else \
        f" (the trial ran at W {exported.trial_world_size}, lr {exported.trial_lr:.6g})"
    return f"""#!/usr/bin/env bash
# Trial #{exported.number} of study {shlex.quote(exported.study)} as a torchrun job (written by 'hpsearch export-trial').
# {spec.workload}, {spec.epochs} epochs, seed {spec.seed}, on {spec.device}: b {spec.per_device_batch_size} x W {spec.world_size} x A {spec.grad_accum_steps} = B {spec.effective_batch_size};
# {spec.lr_rule} rule from base_lr {spec.base_lr:g} at B0 {spec.base_batch_size}: lr {spec.lr:.6g}{was}.
#
# Runs {spec.world_size} rank(s) on this machine with PyTorch's torchrun (no Ray, no study store), each
# with the same training loop as the search's trials. hpsearch and the workload's module must be
# importable by the python that torchrun runs. Rank 0 writes metrics.jsonl (each evaluation),
# metrics.json (the final metrics) and model.pt (the final weights) beside this script;
# 'bash launch.sh --out DIR' writes them to DIR. On several nodes, run on each one:
#   torchrun --nnodes NODES --nproc-per-node {spec.world_size}/NODES --rdzv-backend c10d \\
#       --rdzv-endpoint HOST:PORT -m hpsearch.trials.run trial.json
set -euo pipefail
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
exec torchrun --standalone --nproc-per-node {spec.world_size} -m hpsearch.trials.run "$here/{CONFIG_FILE}" "$@"
"""
