"""A search stopped before it started a configuration does not fail it: Ctrl-C, the budget, or
``kill -9`` then ``resume`` put it back in the study's queue (Optuna's WAITING, as
``enqueue_trial`` leaves a trial), and the next run takes it first, under its own number. Only
trials that ran are ``interrupted``. Nothing is asked ahead where nothing can fuse, and groups that
never trained are not reported as fused.

Ctrl-C with two slots, in a space where nothing could fuse, had marked eleven configurations
asked ahead FAIL ``interrupted``; after ``kill -9`` before any trial ran, ``status`` had said
"12 trials (pending 12)" and "fused: 12 trials in 2 groups".

The real searcher on a real SQLite study, driven as Tune drives it (suggest, the ranks started,
the end of the run), without Ray; the real Ctrl-C of a search is in ``test_resume.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from hpsearch import record
from hpsearch.cli import cli
from hpsearch.planner.sampler import create_sampler
from hpsearch.search_spaces import parse_space
from hpsearch.store import open_storage
from hpsearch.tune.orchestrator import _create_study, _requeue_interrupted
from hpsearch.tune.searcher import StudySearcher

#: Six configurations of two shapes (b 8, b 16), three learning rates each: they may fuse.
FUSABLE = """\
study: {study}
workload: {{name: digits_mlp, epochs: 1}}
parameters:
  per_device_batch_size: {{choices: [8, 16]}}
  base_lr: {{choices: [0.01, 0.02, 0.05]}}
search: {{sampler: grid, n_trials: 6, seed: 0, fuse: true, fuse_max: 2}}
resources: {{device: cpu, cpus_per_worker: 1}}
"""
#: Four batch sizes and nothing else searched: no two configurations share a shape.
SHAPES_ONLY = """\
study: shapes
workload: {name: digits_mlp, epochs: 1}
parameters:
  per_device_batch_size: {choices: [8, 16, 32, 64]}
  base_lr: 0.02
search: {sampler: grid, n_trials: 4, seed: 0}
resources: {device: cpu, cpus_per_worker: 1}
"""


def _searcher(url: str, text: str, n_trials: int, *, create: bool) -> StudySearcher:
    space = parse_space(text)
    storage = open_storage(url)
    study = _create_study(storage, space.study, space) if create else optuna.load_study(
        study_name=space.study, storage=storage, sampler=create_sampler(space))  # as resume loads it
    return StudySearcher(study, space, n_trials, "cpu", Path(url.removeprefix("sqlite:///")).parent, max_processes=1,
                         slots=2)


def _trials(url: str, name: str) -> dict[int, optuna.trial.FrozenTrial]:
    return {t.number: t for t in optuna.load_study(study_name=name, storage=open_storage(url)).get_trials()}


def _members(config: object) -> tuple[int, ...]:
    assert isinstance(config, dict), config
    return tuple(config["trial"].members)


def test_ctrl_c_fails_only_the_trials_that_ran_and_resume_runs_the_rest_under_their_numbers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hp.db'}"
    space = FUSABLE.format(study="stopped")
    searcher = _searcher(url, space, 6, create=True)
    ran = _members(searcher.suggest("t0"))  # a group of two of b 8; the rest asked ahead
    searcher.training_started("t0")  # its devices reserved, its ranks started
    waited = _members(searcher.suggest("t1"))  # launched, still waiting for its devices
    before = _trials(url, "stopped")
    asked_ahead = set(before) - set(ran) - set(waited)
    assert len(ran) == 2 and waited and asked_ahead

    searcher.interrupted = True  # Ctrl-C
    searcher.on_trial_complete("t0")
    searcher.on_trial_complete("t1")  # the desk refused it its devices: it ends without a result
    searcher.end_run()

    after = _trials(url, "stopped")
    assert TrialState.RUNNING not in {t.state for t in after.values()}
    for n in ran:
        assert after[n].state == TrialState.FAIL and after[n].user_attrs[record.STATUS_REASON] == "interrupted"
    for n in (*waited, *asked_ahead):  # never started: back in the queue, not failed
        t = after[n]
        assert t.state == TrialState.WAITING and t.params == before[n].params, n
        assert record.STATUS_REASON not in t.user_attrs
        assert t.user_attrs.get(record.FUSED_GROUP) is None and t.user_attrs.get(record.FUSE) is None

    # resume: what ran is queued to run again; what never started runs from the queue first.
    study = optuna.load_study(study_name="stopped", storage=open_storage(url))
    assert _requeue_interrupted(study, {"per_device_batch_size", "base_lr"}) == len(ran)
    resumed = _searcher(url, space, 6, create=False)
    members = [m for i in range(6) if isinstance(config := resumed.suggest(f"r{i}"), dict)
               for m in _members(config)]
    assert set(waited) | asked_ahead <= set(members)  # under their own numbers, not skipped as repeats
    final = _trials(url, "stopped")
    assert not [t for t in final.values() if t.user_attrs.get(record.STATUS_REASON) == "equivalent"]
    proposed = [tuple(sorted(final[m].params.items())) for m in members]
    assert len(proposed) == len(set(proposed)) == 6  # every configuration once


def test_a_budget_that_stops_the_search_returns_its_unstarted_trials_to_the_queue(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hp.db'}"
    searcher = _searcher(url, FUSABLE.format(study="spent"), 6, create=True)
    ran = _members(searcher.suggest("t0"))
    searcher.training_started("t0")
    searcher.budget_ran_out, searcher.budget_stop = True, "the wall-clock budget of 30s is spent"
    searcher.end_run()
    states = {n: (t.state, t.user_attrs.get(record.STATUS_REASON)) for n, t in _trials(url, "spent").items()}
    assert {states[n] for n in ran} == {(TrialState.FAIL, "budget")}
    assert {s for n, s in states.items() if n not in ran} == {(TrialState.WAITING, None)}


def test_a_space_where_nothing_can_fuse_asks_nothing_ahead(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hp.db'}"
    searcher = _searcher(url, SHAPES_ONLY, 4, create=True)
    assert _members(searcher.suggest("t0")) == (0,)
    [trial] = _trials(url, "shapes").values()  # one configuration asked: the one that runs
    assert trial.user_attrs[record.FUSE] == (
        "off: no two configurations of the space share a shape: it searches none of base_lr, lr_rule, "
        "warmup_epochs, momentum, nesterov, weight_decay, betas, eps, max_grad_norm, which fused members may differ in")
    searcher.interrupted = True
    searcher.end_run()
    assert [t.state for t in _trials(url, "shapes").values()] == [TrialState.WAITING]


def _killed_study(url: str) -> optuna.Study:
    """What ``kill -9`` leaves: a completed fused pair, then the trials a search had asked and
    launched as two groups, left RUNNING: one group training, one waiting for its devices, and a
    trial killed while the sampler chose its parameters."""
    study = optuna.create_study(study_name="killed", storage=open_storage(url), directions=["maximize"])
    study.set_metric_names(["val_accuracy"])
    dists = {"per_device_batch_size": CategoricalDistribution([8, 16]),
             "base_lr": CategoricalDistribution([0.01, 0.02, 0.05])}

    def add(state: TrialState, b: int | None, lr: float, group: int | None, **attrs: object) -> None:
        params = {"base_lr": lr} if b is None else {"per_device_batch_size": b, "base_lr": lr}
        fused = {} if group is None else {record.FUSED_GROUP: group, record.FUSED_MEMBERS: 2, record.FUSE: "on"}
        study.add_trial(create_trial(
            state=state, params=params, distributions={k: dists[k] for k in params},
            values=[0.9] if state == TrialState.COMPLETE else None, user_attrs={**fused, **attrs}))

    add(TrialState.COMPLETE, 8, 0.01, 0, training_started=1.79e9)
    add(TrialState.COMPLETE, 8, 0.02, 0, training_started=1.79e9)
    add(TrialState.RUNNING, 16, 0.01, 2, training_started=1.79e9)  # training when killed
    add(TrialState.RUNNING, 16, 0.02, 2, training_started=1.79e9)
    add(TrialState.RUNNING, 8, 0.05, 4)  # waiting for its devices
    add(TrialState.RUNNING, 16, 0.05, 4)
    add(TrialState.RUNNING, None, 0.05, None)  # its batch size not chosen yet: not launched
    return study


def test_status_after_kill_counts_as_fused_only_the_groups_that_trained(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hp.db'}"
    _killed_study(url)
    out = CliRunner().invoke(cli, ["status", "killed", "--storage", url]).stdout
    assert "fused: 4 trials in 2 groups (2 + 2)\n" in out, out
    assert "the search is not running (" in out, out
    assert "2 trials it left training (#2, #3) were cut short and 3 trials it had asked (#4, #5, #6) never " \
           "started;" in out, out
    assert "marks them interrupted and runs them again, runs them from the queue, and finishes the study" in out


def test_resume_after_kill_returns_the_orphans_that_never_started_to_the_queue(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hp.db'}"
    study = _killed_study(url)
    assert _requeue_interrupted(study, {"per_device_batch_size", "base_lr"}) == 4
    trials = _trials(url, "killed")
    assert [(trials[n].state, trials[n].user_attrs.get(record.STATUS_REASON)) for n in (2, 3, 4, 5, 6)] == [
        (TrialState.FAIL, "interrupted"), (TrialState.FAIL, "interrupted"),
        (TrialState.WAITING, None), (TrialState.WAITING, None),
        (TrialState.FAIL, "interrupted")]  # no configuration to run: marked, not queued
    assert trials[4].user_attrs[record.FUSED_GROUP] is None  # it never trained in group 4
    reruns = [t for t in trials.values() if t.number > 6]
    assert sorted(t.user_attrs[record.RERUN_OF] for t in reruns) == [2, 3]
    out = CliRunner().invoke(cli, ["status", "killed", "--storage", url]).stdout
    assert "fused: 4 trials in 2 groups (2 + 2)\n" in out, out


# ---- a real Ctrl-C ------------------------------------------------------------------------------

#: Three configurations queued to run first: b 8 at two LRs (a fused group, one slot) and b 16,
#: asked ahead while looking for the group's partner, which then waits for the slot. The
#: sleeping workload's trials take seconds whatever the machine.
CTRL_C = """\
study: ctrl-c
workload: {name: "benchmarks.workloads.sleepy:sleepy", epochs: 20, options: {samples: 256, sample_s: 0.0125}}
parameters:
  per_device_batch_size: {choices: [8, 16]}
  base_lr: {choices: [0.01, 0.02]}
search:
  sampler: grid
  n_trials: 4
  seed: 0
  fuse: true
  fuse_max: 2
  max_concurrent: 1
  enqueue:
    - {per_device_batch_size: 8, base_lr: 0.01}
    - {per_device_batch_size: 16, base_lr: 0.01}
    - {per_device_batch_size: 8, base_lr: 0.02}
resources: {device: cpu}
"""


@pytest.mark.slow
def test_a_real_ctrl_c_fails_the_group_that_trained_and_queues_the_configuration_asked_ahead(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]  # the sleeping workload is in benchmarks/
    env = {**{k: v for k, v in os.environ.items() if k not in ("HPSEARCH_STORAGE", "HPSEARCH_RUNS_DIR", "RAY_ADDRESS")},
           "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(root)) if p)}
    (tmp_path / "space.yaml").write_text(CTRL_C)
    url = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    # Its own session, as a terminal job is its own process group: Ctrl-C goes to the group.
    proc = subprocess.Popen([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"], cwd=tmp_path,
                            env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:  # the group trains
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "timed out waiting for the group to train"
            try:
                if any(t.user_attrs.get(record.TRAINING_STARTED) for t in _trials(url, "ctrl-c").values()):
                    break
            except KeyError:  # the study is not created yet
                pass
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out + err
    trials = _trials(url, "ctrl-c")
    by_config = {(t.params["per_device_batch_size"], t.params["base_lr"]): t for t in trials.values()}
    assert len(by_config) == 3  # the fourth configuration was never asked
    for config in ((8, 0.01), (8, 0.02)):  # the group that trained
        t = by_config[config]
        assert (t.state, t.user_attrs[record.STATUS_REASON]) == (TrialState.FAIL, "interrupted"), config
    waiting = by_config[(16, 0.01)]  # asked ahead, never started: back in the queue
    assert waiting.state == TrialState.WAITING and record.STATUS_REASON not in waiting.user_attrs
    status = CliRunner().invoke(cli, ["status", "ctrl-c", "--storage", url]).stdout
    assert "(fail 2, waiting 1)" in status, status
