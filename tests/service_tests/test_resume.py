"""A search survives its orchestrator: ``kill -9`` then ``hpsearch resume``, and Ctrl-C.

Real CLI processes, a real local Ray, real DDP ranks and a real SQLite study; the store is read
while the search writes it, as ``hpsearch status`` or the dashboard would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import psutil
import pytest
from optuna.trial import TrialState

from hpsearch.store import open_storage
from hpsearch.study.reasons import counts_toward_n_trials

SPACE = """\
study: {study}
workload: {workload}
scaling: {{base_batch_size: 8}}
parameters:
  per_device_batch_size: {{choices: {batches}}}
  world_size: {{choices: [1, 2]}}
  lr_rule: {{choices: [linear, sqrt]}}
  base_lr: 0.01
objectives:
  - {{metric: val_accuracy, direction: maximize}}
  - {{metric: runtime_s, direction: minimize}}
search: {{sampler: {sampler}, n_trials: {n_trials}, seed: 0}}
resources: {{device: cpu}}
"""


DIGITS = "{{name: digits_mlp, epochs: {epochs}}}"
# A workload whose trials take seconds whatever the machine (its forward pass sleeps), for the
# tests that must find a search still running: trials of the digits now train in a tenth of a
# second. It imports from the project's root.
SLEEPY = '{{name: "benchmarks.workloads.sleepy:sleepy", epochs: {epochs}, options: {{samples: 256, sample_s: 0.0125}}}}'
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def _space(study: str, epochs: int, sampler: str, n_trials: int, batches: str, workload: str = DIGITS) -> str:
    return SPACE.format(study=study, workload=workload.format(epochs=epochs), sampler=sampler, n_trials=n_trials,
                        batches=batches)


def _start(work: Path, *args: str) -> subprocess.Popen[str]:
    # Its own session, as a terminal job is its own process group: Ctrl-C goes to the group.
    return subprocess.Popen([sys.executable, "-m", "hpsearch", *args], cwd=work, text=True, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _hpsearch(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], cwd=work, capture_output=True, text=True,
                          timeout=300, env=ENV)


def _grid_db(work: Path) -> str:
    return f"sqlite:///{work / 'hpsearch.db'}"


def _trials(url: str, study: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=open_storage(url)).get_trials()


def _wait_for(condition: Callable[[], bool], proc: subprocess.Popen[str], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the search ended (exit {proc.returncode}) before the condition held:\n{out}\n{err}")
        try:
            if condition():
                return
        except KeyError:  # the study is not created yet
            pass
        time.sleep(0.5)
    pytest.fail("timed out waiting for the search")


def _running_in(work: Path) -> list[psutil.Process]:
    """Live processes working under ``work``: Tune chdirs each trial into its run folder, and the
    trial's ranks inherit it."""
    out = []
    for p in psutil.process_iter(["cwd", "cmdline"]):
        try:
            if p.info["cwd"] and Path(p.info["cwd"]).is_relative_to(work) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def _states(trials: list[optuna.trial.FrozenTrial]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    return counts


@pytest.mark.slow
def test_resume_after_kill_9_keeps_completed_trials_and_reruns_the_orphans(
    storage_url: str, unique_name: str, tmp_path: Path
) -> None:
    study = unique_name
    (tmp_path / "space.yaml").write_text(_space(study=study, epochs=25, sampler="random", n_trials=5,
                                                batches="[16, 32, 64]"))
    proc = _start(tmp_path, "start", "space.yaml", "--no-progress", "--storage", storage_url)

    def two_done_one_running() -> bool:
        states = _states(_trials(storage_url, study))
        return states.get("COMPLETE", 0) >= 2 and states.get("RUNNING", 0) >= 1

    _wait_for(two_done_one_running, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    before = _trials(storage_url, study)
    completed = {t.number: (t.params, t.values, t.user_attrs["runtime_s"]) for t in before
                 if t.state == TrialState.COMPLETE}
    orphans = {t.number: t.params for t in before if t.state == TrialState.RUNNING}
    assert orphans, "the kill left no trial RUNNING: nothing to test"
    trained = {t.number for t in before if t.state == TrialState.RUNNING and t.user_attrs.get("training_started")}
    # A trial killed while the sampler was still writing its parameters never ran: it is marked
    # interrupted but has no configuration to rerun.
    every_parameter = set().union(*(params for params, _, _ in completed.values()))
    chosen = {n: p for n, p in orphans.items() if set(p) >= every_parameter}

    try:
        # The trials' processes die with the orchestrator: its Ray workers, and their ranks by
        # PR_SET_PDEATHSIG. Ray's own node agents of the dead session can linger (an upstream
        # behaviour); they hold no trial and are cleaned up below.
        deadline = time.monotonic() + 60
        while any("ray::" not in " ".join(p.info["cmdline"] or []) or "_trainable" in " ".join(p.info["cmdline"] or [])
                  for p in _running_in(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = [" ".join(p.info["cmdline"] or []) for p in _running_in(tmp_path)]
        assert all(c.startswith("ray::") and "_trainable" not in c for c in left), left

        result = _hpsearch(tmp_path, "resume", study, "--no-progress", "--storage", storage_url)
    finally:
        for p in _running_in(tmp_path):
            p.kill()
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(chosen)} cut-short trial{'s' if len(chosen) != 1 else ''} queued to run again" in result.stderr

    # A configuration the random sampler proposed again was not trained again (PRUNED,
    # equivalent): left out here.
    after = {t.number: t for t in _trials(storage_url, study) if t.user_attrs.get("status_reason") != "equivalent"}
    # n_trials counts finished trials only: five of them, plus the interrupted ones.
    assert sum(counts_toward_n_trials(t) for t in after.values()) == 5
    # Every orphan that ran (or has no configuration) is interrupted and one more trial ran in
    # its place; one that never started ran from the queue under its own number.
    interrupted = {n for n in orphans if n in trained or n not in chosen}
    assert len(after) == 5 + len(interrupted)
    assert {t.state for t in after.values()} <= {TrialState.COMPLETE, TrialState.FAIL}
    for number, (params, values, runtime) in completed.items():
        t = after[number]
        assert (t.state, t.params, t.values, t.user_attrs["runtime_s"]) == (TrialState.COMPLETE, params, values, runtime)
    for number, params in orphans.items():
        reruns = [t for t in after.values() if t.user_attrs.get("rerun_of") == number]
        if number not in interrupted:
            assert (after[number].state, after[number].params, reruns) == (TrialState.COMPLETE, params, [])
            continue
        assert after[number].state == TrialState.FAIL
        assert after[number].user_attrs["status_reason"] == "interrupted"
        if number in chosen:
            [rerun] = reruns
            assert rerun.params == params
            assert rerun.state == TrialState.COMPLETE
        else:
            assert reruns == []


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_resume_finishes_the_grid(tmp_path: Path) -> None:
    # Trials long enough that the search still runs while the test looks at it: the sleeping
    # workload's trials take 1.6 to 6.4 s.
    (tmp_path / "space.yaml").write_text(_space(study="grid", epochs=2, sampler="grid", n_trials=100,
                                                batches="[32, 64]", workload=SLEEPY))
    (tmp_path / "other.yaml").write_text(_space(study="other", epochs=1, sampler="grid", n_trials=1,
                                                batches="[32]"))
    proc = _start(tmp_path, "start", "space.yaml", "--no-progress")

    def one_done_one_training() -> bool:
        trials = _trials(_grid_db(tmp_path), "grid")
        return _states(trials).get("COMPLETE", 0) >= 1 and any(
            t.state == TrialState.RUNNING and t.user_attrs.get("training_started") for t in trials)

    _wait_for(one_done_one_training, proc)
    # While it runs: status shows the trials training (apart from any waiting for resources),
    # and a second search on the same SQLite file is refused before it writes anything.
    status = _hpsearch(tmp_path, "status", "grid")
    assert status.returncode == 0, status.stderr
    assert "training: trial #" in status.stdout
    second = _hpsearch(tmp_path, "start", "other.yaml", "--no-progress")
    assert second.returncode == 3, second.stdout + second.stderr
    assert "is being written by another hpsearch search (study 'grid', pid" in second.stderr
    assert "Traceback" not in second.stderr
    with pytest.raises(KeyError):
        _trials(_grid_db(tmp_path), "other")

    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert "hpsearch resume grid" in err
    assert "Traceback" not in err
    interrupted = _trials(_grid_db(tmp_path), "grid")
    assert TrialState.RUNNING not in {t.state for t in interrupted}
    cut = [t for t in interrupted if t.state == TrialState.FAIL]
    assert cut and all(t.user_attrs["status_reason"] == "interrupted" for t in cut)
    # Only trials that ran are interrupted; a configuration asked ahead, or one still waiting for
    # its devices, is back in the queue, in no fused group.
    assert all(t.user_attrs.get("training_started") for t in cut)
    queued = {t.number: t.params for t in interrupted if t.state == TrialState.WAITING}
    assert all(not t.user_attrs.get("training_started") and t.user_attrs.get("fused_group") is None
               for t in interrupted if t.state == TrialState.WAITING)
    assert _running_in(tmp_path) == []  # no rank, worker or Ray process left behind

    result = _hpsearch(tmp_path, "resume", "grid", "--no-progress")
    assert result.returncode == 0, result.stdout + result.stderr
    trials = _trials(_grid_db(tmp_path), "grid")
    done = [tuple(sorted(t.params.items())) for t in trials if t.state == TrialState.COMPLETE]
    # Every one of the 2 x 2 x 2 grid points completed exactly once, across the two runs.
    assert len(done) == len(set(done)) == 8
    assert {t.number for t in interrupted if t.state == TrialState.COMPLETE} <= {
        t.number for t in trials if t.state == TrialState.COMPLETE}
    # The queued ones ran under their own numbers.
    assert {t.number: t.params for t in trials if t.number in queued and t.state == TrialState.COMPLETE} == queued
