"""What the ranks print lands in the study's ``ranks.log``, each line marked with the trial and the
rank that printed it, whether it came through Python or straight to the file descriptor (as
gloo's and NCCL's own messages do)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHATTY = '''
import os
import torch.distributed as dist
from hpsearch.trials.workloads.digits import digits_mlp

def make(options):
    rank = dist.get_rank() if dist.is_initialized() else 0
    print(f"python says hello from rank {rank}", flush=True)
    os.write(2, f"the descriptor says hello from rank {rank}\\n".encode())
    return digits_mlp({})
'''

SPACE = """\
study: chatty
workload: {name: "chatty:make", epochs: 1}
parameters:
  per_device_batch_size: 32
  world_size: {choices: [2, 1]}
  base_lr: 0.05
search: {sampler: grid, n_trials: 2, max_concurrent: 1, seed: 0}
resources: {device: cpu}
"""


def test_each_line_a_rank_prints_names_its_trial_and_rank(tmp_path: Path) -> None:
    (tmp_path / "chatty.py").write_text(CHATTY)
    (tmp_path / "space.yaml").write_text(SPACE)
    done = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(tmp_path)), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

    lines = (tmp_path / "hpsearch_runs" / "chatty" / "ranks.log").read_text().splitlines()
    said = {line for line in lines if "says hello" in line}
    # Trial 0 has two ranks, trial 1 one (the grid runs its larger trials first); the search's own
    # workload check built it once more, outside any trial.
    for trial, rank in (("trial-00000", 0), ("trial-00000", 1), ("trial-00001", 0)):
        assert f"[{trial} rank {rank}] python says hello from rank {rank}" in said
        assert f"[{trial} rank {rank}] the descriptor says hello from rank {rank}" in said
    assert all(line.startswith("[") for line in said)
