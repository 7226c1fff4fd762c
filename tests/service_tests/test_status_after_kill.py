"""``hpsearch status`` tells a dead search from a live one: after ``kill -9`` it says the search is
not running and how to resume it, not "training: trial #3"; after the resume it no longer says
the interrupted trials wait to run again.

A real CLI search process killed with SIGKILL, a real local Ray, real ranks, a real SQLite study.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
import pytest

from hpsearch.store import open_storage

SPACE = """\
study: S
workload: {name: "benchmarks.workloads.sleepy:sleepy", epochs: 3, options: {samples: 256, sample_s: 0.0125}}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: {choices: [16, 32]}
  world_size: 1
  lr_rule: {choices: [linear, sqrt]}
  base_lr: 0.01
objectives:
  - {metric: val_accuracy, direction: maximize}
  - {metric: runtime_s, direction: minimize}
search: {sampler: grid, n_trials: 4, seed: 0, max_concurrent: 1}
resources: {device: cpu}
"""
ROOT = Path(__file__).resolve().parents[2]
# The project's root on the path (the sleepy workload is in benchmarks/), after what is there.
ENV = {**{k: v for k, v in os.environ.items() if k not in ("HPSEARCH_STORAGE", "HPSEARCH_RUNS_DIR")},
       "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)}


def _hpsearch(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], cwd=work, capture_output=True, text=True,
                          timeout=300, env=ENV)


def _training(url: str) -> bool:
    """Whether a trial trains (RUNNING with its devices reserved: one still waiting for them
    never ran, and resume runs it from the queue, not as an interrupted trial)."""
    return any(t.state == optuna.trial.TrialState.RUNNING and t.user_attrs.get("training_started")
               for t in optuna.load_study(study_name="S", storage=open_storage(url)).get_trials())


def _processes_in(work: Path) -> list[psutil.Process]:
    """Live processes working under ``work`` (trials run in their run folders)."""
    out = []
    for p in psutil.process_iter(["cwd"]):
        try:
            if p.info["cwd"] and Path(p.info["cwd"]).is_relative_to(work) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.mark.slow
def test_status_after_kill_9_says_the_search_is_not_running_and_after_resume_nothing_waits(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    url = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    proc = subprocess.Popen([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"], cwd=tmp_path,
                            env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "timed out waiting for a trial to train"
            try:
                if _training(url):
                    break
            except KeyError:  # the study is not created yet
                pass
            time.sleep(0.5)
        live = _hpsearch(tmp_path, "status", "S")
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()

        assert live.returncode == 0, live.stderr
        assert "the search is not running" not in live.stdout

        dead = _hpsearch(tmp_path, "status", "S")
        assert dead.returncode == 0, dead.stderr
        assert f"the search is not running (the process {proc.pid} that ran it is gone)" in dead.stdout, dead.stdout
        assert "'hpsearch resume S' marks" in dead.stdout
        assert "training: trial" not in dead.stdout and "pending (waiting" not in dead.stdout
        assert '"running": false' in _hpsearch(tmp_path, "status", "S", "--json").stdout

        resumed = _hpsearch(tmp_path, "resume", "S", "--no-progress")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    finally:
        for p in _processes_in(tmp_path):
            p.kill()

    after = _hpsearch(tmp_path, "status", "S")
    assert after.returncode == 0, after.stderr
    assert "interrupted, run again since: a later trial ran" in after.stdout, after.stdout
    assert "resume runs it again" not in after.stdout
    assert "the search is not running" not in after.stdout


def test_status_does_not_say_an_interrupted_trial_waits_once_its_rerun_completed(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from optuna.trial import TrialState, create_trial

    from hpsearch.cli import cli
    from hpsearch.testing import synthetic_study

    url = f"sqlite:///{tmp_path / 'hp.db'}"
    study = synthetic_study(url, "demo", n_trials=2).study
    done = next(t for t in study.get_trials() if t.state == TrialState.COMPLETE)

    def add(state: TrialState, attrs: dict[str, object]) -> None:
        study.add_trial(create_trial(state=state, params=done.params, distributions=done.distributions,
                                     values=done.values if state == TrialState.COMPLETE else None,
                                     user_attrs={**done.user_attrs, "status_reason": None, **attrs}))

    # Two trials a killed search cut short; resume ran the first one's configuration again.
    add(TrialState.FAIL, {"status_reason": "interrupted"})
    add(TrialState.FAIL, {"status_reason": "interrupted"})
    interrupted = [t.number for t in study.get_trials() if t.user_attrs.get("status_reason") == "interrupted"]
    add(TrialState.COMPLETE, {"rerun_of": interrupted[0]})

    out = CliRunner().invoke(cli, ["status", "demo", "--storage", url]).stdout
    assert "1 trial interrupted: the search was stopped under it; resume runs it again" in out, out
    assert "1 trial interrupted, run again since: a later trial ran its configuration (rerun_of)" in out
