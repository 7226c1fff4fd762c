"""A search that fails after its nodes' warm rank pools started leaves no rank process behind.

On a Ray the search joins (as on a cluster), every node's pool runs in a Ray actor that outlives
the search unless the search closes it. A real local Ray, real pool actors and their zygotes;
the failure is the user's own ``on_plan`` callback raising once the pools are warm.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SPACE = """\
study: failed-start
workload: {name: digits_mlp, epochs: 1}
parameters:
  per_device_batch_size: 32
  world_size: 1
  base_lr: 0.01
search: {sampler: grid, n_trials: 1, seed: 0}
resources: {device: cpu}
"""

# The search joins the Ray this script starts; its on_plan waits for a warm rank process (a
# zygote of a node's pool) and fails. What is left of the pools is counted after the failure,
# with the error kept as a notebook keeps it (its traceback holds the search's frames: the pools
# are not left to end when Python frees them).
SCRIPT = """\
import logging, time, psutil, ray, hpsearch

def zygotes():
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "hpsearch.trials.rank.zygote" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out

def fail_once_warm(plan):
    deadline = time.monotonic() + 120
    while not zygotes() and time.monotonic() < deadline:
        time.sleep(0.2)
    print("warm", len(zygotes()), flush=True)
    raise RuntimeError("on_plan failed")

ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
try:
    hpsearch.start("space.yaml", storage="sqlite:///store.db", on_plan=fail_once_warm)
except RuntimeError as exc:
    print("raised", exc, flush=True)
    last = exc  # kept, as a notebook keeps the last error (and the frames of its traceback)
deadline = time.monotonic() + 20  # processes asked to end may take a moment to exit
while zygotes() and time.monotonic() < deadline:
    time.sleep(0.2)
print("left", len(zygotes()), flush=True)
ray.shutdown()
"""


def test_no_rank_process_outlives_a_search_that_fails_after_its_pools_started(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    warm = next(line for line in lines if line.startswith("warm "))
    assert int(warm.split()[1]) >= 1, "no pool was warm when the search failed: nothing to test"
    assert "raised on_plan failed" in lines
    assert "left 0" in lines, done.stdout
