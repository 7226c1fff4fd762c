"""A finished trial's process waits for the Tune trials still starting before it goes back to
Tune (``hpsearch.tune.reservations.hand_over``), so a search keeps one trial process a slot.

Tune gives a finished trial's process to a trial still waiting for the one it started for it,
and stops that one. Where a trial trains faster than a trial process starts, every later trial
then waited for a new process that was stopped as it came up: a 24-trial digits search on 2
CPU cores ran its trials one at a time, with 24 trial processes started, in one run in three.

A real local Ray, the real desk actor and Tune with the search's settings (``reuse_actors``,
two trials at once, the ``TrialsStarting`` callback). The trial processes' start is what is
forced: the first starts at once, every later one 2 s late (a module they import sleeps), so
the first trial ends before the second has a process, every time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: Imported by every trial process (the trainable lives here); counts them, and holds each one
#: after the first for 2 s, as a cold process start on a busy machine takes. Which one is first
#: is decided by an exclusive create: processes importing at the same moment (a slow host starts
#: them together) would otherwise all see an empty folder and none would be held.
SLOW_START = """\
import os, pathlib, sys, time

_FOLDER = pathlib.Path(os.environ["TRIAL_PROCESSES"])
if "default_worker" in sys.argv[0]:
    (_FOLDER / str(os.getpid())).touch()
    try:  # one process creates the marker: two importing at once cannot both take it as first
        os.close(os.open(_FOLDER.parent / "first", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        time.sleep(2.0)


def trial(config):
    from ray import tune
    from hpsearch.tune.reservations import hand_over, reserved
    with reserved(1):
        time.sleep(0.05)
    tune.report({"pid": os.getpid()})
    if config["hand_over"]:
        hand_over()
"""

SCRIPT = """\
import logging, os, sys, ray
from ray import tune
from hpsearch.tune.experiment import TrialsStarting
from hpsearch.tune.pools import PoolOptions
from hpsearch.tune.reservations import Reservations
import slow_start

hand_over = sys.argv[1] == "hand_over"
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
desk = Reservations(PoolOptions(preload=(), device="cpu", cpus_per_worker=1, gpus_per_worker=0.0, ranks_at_once=1,
                                reuse=True, mps="off", sys_path=tuple(sys.path)))
tuner = tune.Tuner(
    tune.with_resources(slow_start.trial, tune.PlacementGroupFactory([{"memory": 2 ** 28}])),
    param_space={"i": tune.grid_search(list(range(8))), "hand_over": hand_over},
    tune_config=tune.TuneConfig(max_concurrent_trials=2, reuse_actors=True),
    run_config=tune.RunConfig(storage_path=os.path.abspath("tune"), verbose=0, callbacks=[TrialsStarting(desk)]),
)
results = tuner.fit()
print("trials", len(results), "errors", results.num_errors)
print("ran in", len({r.metrics["pid"] for r in results}))
print("started", len(os.listdir(os.environ["TRIAL_PROCESSES"])))
desk.close()
ray.shutdown()
"""


def _search(tmp_path: Path, mode: str) -> dict[str, int]:
    folder = tmp_path / mode
    (folder / "processes").mkdir(parents=True)
    (folder / "slow_start.py").write_text(SLOW_START)
    env = {**os.environ, "TRIAL_PROCESSES": str(folder / "processes"),
           "PYTHONPATH": str(folder) + ":" + ":".join(sys.path)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out: dict[str, int] = {}
    for line in done.stdout.splitlines():
        words = line.split()
        if words[:1] == ["trials"]:
            out["trials"], out["errors"] = int(words[1]), int(words[3])
        elif words[:2] == ["ran", "in"]:
            out["ran in"] = int(words[2])
        elif words[:1] == ["started"]:
            out["started"] = int(words[1])
    return out


def test_a_finished_trial_hands_its_process_over_so_each_slot_keeps_one(tmp_path: Path) -> None:
    without = _search(tmp_path, "no_hand_over")
    assert without["trials"] == 8 and without["errors"] == 0, without
    # What the trials did before: each new trial's process stopped as it came up, its trial run
    # in the first one's.
    assert without["started"] >= 5 and without["ran in"] == 1, (
        f"the forced slow start did not reproduce the lost processes: nothing to test ({without})")

    handed = _search(tmp_path, "hand_over")
    assert handed["trials"] == 8 and handed["errors"] == 0, handed
    assert handed["ran in"] == 2, handed  # two slots, two trial processes, each reused
    assert handed["started"] == 2, handed
