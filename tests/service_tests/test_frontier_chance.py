"""A trial that learned nothing stands on no frontier, however fast it was.

The quickstart's linear rule at a per-device batch of 256 (LR 0.32) ends at val_accuracy 0.078
with a finite loss: it answers one class for every image. It was the fastest trial, so it stood
on the runtime-vs-accuracy frontier, first, as if it were the cheapest configuration worth
running. Each classifier trial now records ``chance_accuracy``, what always answering the
validation set's commonest class scores; a trial at or below it is on no frontier (the CLI's,
``Search.frontier``, the dashboard's) and the end-of-search report says which and why.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

import hpsearch
from hpsearch import record
from hpsearch.trials.rank.loop import ClassCounts
from hpsearch.trials.workloads.base import resolve_workload

SPACE = """\
study: {study}
workload: {{name: digits_cnn, epochs: 10}}
scaling: {{base_batch_size: 8, warmup_epochs: 0}}
parameters:
  per_device_batch_size: 256
  lr_rule: {{choices: [constant, linear]}}
  base_lr: 0.01
  momentum: 0.9
objectives:
  - {{metric: val_accuracy, direction: maximize}}
  - {{metric: runtime_s, direction: minimize}}
search: {{sampler: grid, n_trials: 2, seed: 0, fuse: {fuse}, max_concurrent: 1}}
resources: {{device: cpu, cpus_per_worker: 1}}
"""


def _commonest_share() -> float:
    """The digits validation split's commonest class, as a share: counted here from the labels."""
    workload = resolve_workload("digits_cnn")({})
    labels = [int(workload.val_set[i][1]) for i in range(len(workload.val_set))]
    return max(Counter(labels).values()) / len(labels)


@pytest.mark.parametrize("fuse", ["true", "false"])
def test_a_trial_no_better_than_chance_is_on_no_frontier(tmp_path: Path, fuse: str) -> None:
    study = f"chance-{fuse}"
    (tmp_path / "space.yaml").write_text(SPACE.format(study=study, fuse=fuse))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr

    search = hpsearch.load(study, storage=f"sqlite:///{tmp_path / 'hpsearch.db'}")
    df = search.trials_dataframe().set_index("lr_rule")
    chance = _commonest_share()
    # Every trial, fused or not, records the same chance figure: the split's commonest class.
    assert df[record.CHANCE_ACCURACY].tolist() == pytest.approx([chance, chance], abs=1e-12)
    if fuse == "true":
        assert df[record.FUSED_MEMBERS].tolist() == [2, 2]
    learned, collapsed = df.loc["constant"], df.loc["linear"]
    # LR 0.32 collapsed to one class, and the constant LR learned, though slowly.
    assert collapsed[record.VAL_ACCURACY] <= chance < learned[record.VAL_ACCURACY]

    front = search.frontier()
    assert front["number"].tolist() == [int(learned["number"])], front
    assert (f"on no frontier, having learned nothing: #{int(collapsed['number'])} (val_accuracy at or below "
            f"{chance:.3g}") in result.stdout, result.stdout


def test_class_counts_give_the_commonest_class_share_and_nothing_for_soft_labels() -> None:
    counts = ClassCounts(3, torch.device("cpu"))
    counts.add(torch.tensor([0, 2, 2, 1]))
    counts.add(torch.tensor([2, -100, 2]))  # an ignore index is not a class
    # Read with the correct answers, in one read from the device.
    assert counts.read(torch.tensor(5)) == ([5], 4)
    assert counts.chance(4, 7) == {record.CHANCE_ACCURACY: 4 / 7}

    soft = ClassCounts(3, torch.device("cpu"))
    soft.add(torch.tensor([[0.2, 0.5, 0.3]]))  # probabilities: no class index per sample
    assert soft.read(torch.tensor(1)) == ([1], None) and soft.chance(None, 1) == {}
    regression = ClassCounts(None, torch.device("cpu"))
    assert regression.read(torch.tensor(0))[1] is None  # no classes: no chance figure
