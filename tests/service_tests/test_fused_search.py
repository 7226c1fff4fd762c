"""Fused trials in a search (``search.fuse``): the real CLI, a real local Ray, real warm rank
processes, a real SQLite study. Each member stays a trial of its own, trains what its solo twin
trains, and says with whom it trained and what its time means."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from hpsearch import record

GRID = """\
study: {study}
workload: {{name: digits_mlp, epochs: 1}}
scaling: {{base_batch_size: 8}}
parameters:
  per_device_batch_size: 16
  lr_rule: {{choices: [constant, linear, sqrt]}}
  base_lr: {{choices: {lrs}}}
  momentum: 0.9
objectives:
  - {{metric: val_accuracy, direction: maximize}}
  - {{metric: runtime_s, direction: minimize}}
search: {{sampler: grid, n_trials: {n}, seed: 0, fuse: {fuse}}}
resources: {{device: cpu}}
"""

PLUGINS = '''
import torch
from torch import nn
from torch.utils.data import TensorDataset
from hpsearch.trials.workloads.base import Workload


def _data(features=64):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(512, features, generator=gen)
    y = torch.randint(0, 4, (512,), generator=gen)
    return TensorDataset(x[128:], y[128:]), TensorDataset(x[:128], y[:128])


class ReadsANumber(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 4)

    def forward(self, x):
        if float(self.fc.weight.abs().max()) > 1e9:  # a Python number out of a member's weight
            x = x * 0
        return self.fc(x)


def reads_a_number(options):
    train, val = _data()
    return Workload(ReadsANumber(), train, val, nn.CrossEntropyLoss(), "mean", num_classes=4)


def wide(options):
    # One member holds about 60 MiB more than the process (weights, gradients, momentum,
    # activations of a batch of 64): eight of them pass 800 MiB, four do not.
    train, val = _data()
    model = nn.Sequential(nn.Linear(64, 65536), nn.ReLU(), nn.Linear(65536, 4))
    return Workload(model, train, val, nn.CrossEntropyLoss(), "mean", num_classes=4)
'''

PLUGIN_SPACE = """\
study: {study}
workload: {{name: "search_plugins:{fn}", epochs: 1}}
scaling: {{base_batch_size: 8}}
parameters:
  per_device_batch_size: 64
  lr_rule: {{choices: [constant, linear]}}
  base_lr: {{choices: {lrs}}}
  momentum: 0.9
objectives:
  - {{metric: val_loss, direction: minimize}}
search: {{sampler: grid, n_trials: {n}, seed: 0, fuse: {fuse}, fuse_max: 8, max_concurrent: 1}}
resources: {{device: cpu{extra}}}
"""


def _hpsearch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def _trials(work: Path, study: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=f"sqlite:///{work / 'hpsearch.db'}").get_trials()


def _key(t: optuna.trial.FrozenTrial) -> Any:
    return tuple(sorted(t.params.items()))


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("fused")
    (work / "fused.yaml").write_text(GRID.format(study="fused", lrs="[0.005, 0.02, 1.0e+12]", n=9, fuse="true"))
    (work / "solo.yaml").write_text(GRID.format(study="solo", lrs="[0.005, 0.02]", n=6, fuse="false"))
    for name in ("fused", "solo"):
        result = _hpsearch("start", f"{name}.yaml", "--no-progress", cwd=work)
        assert result.returncode == 0, result.stdout + result.stderr
    return work


def test_members_are_trials_of_their_own_that_train_what_their_solo_twins_train(searched: Path) -> None:
    fused = _trials(searched, "fused")
    solo = {_key(t): t for t in _trials(searched, "solo")}
    assert len(fused) == 9
    # The nine configurations share their shape, asked ahead of the grid: shared among the two
    # trial slots of two CPUs, two groups (5 + 4), each named by its first member.
    groups: dict[int, list[int]] = {}
    for t in fused:
        groups.setdefault(t.user_attrs[record.FUSED_GROUP], []).append(t.number)
    assert sorted(len(members) for members in groups.values()) == [4, 5]
    assert all(group == min(members) for group, members in groups.items())
    assert all(t.user_attrs[record.FUSED_MEMBERS] == len(groups[t.user_attrs[record.FUSED_GROUP]]) for t in fused)
    done = [t for t in fused if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 6
    for t in done:
        twin = solo[_key(t)]
        assert t.user_attrs[record.FUSE] == "on"
        assert t.user_attrs[record.VAL_LOSS] == pytest.approx(twin.user_attrs[record.VAL_LOSS], rel=1e-4)
        assert t.user_attrs[record.VAL_ACCURACY] == pytest.approx(twin.user_attrs[record.VAL_ACCURACY], abs=1e-3)
        assert t.user_attrs[record.CURVES]["samples_seen"] == twin.user_attrs[record.CURVES]["samples_seen"]
        assert list(t.intermediate_values) == list(twin.intermediate_values)
        # What its time means: what it would take alone, estimated from solo steps of its shape
        # timed in the group; the group's own time beside it.
        assert t.user_attrs[record.RUNTIME_BASIS] == "solo_estimate"
        assert t.user_attrs[record.SOLO_STEP_S] > 0 and t.user_attrs[record.FUSED_STEP_S] > 0
        assert 0 < t.user_attrs[record.RUNTIME_S] < t.user_attrs[record.FUSED_RUNTIME_S]
        assert t.values[1] == pytest.approx(t.user_attrs[record.RUNTIME_S])
    # Each group's device time is counted once, shared among its members.
    for members in groups.values():
        group_s = max(t.user_attrs[record.FUSED_RUNTIME_S] for t in done if t.number in members)
        shared = sum(t.user_attrs[record.DEVICE_SECONDS] for t in fused if t.number in members)
        assert 0.9 * group_s <= shared <= 1.5 * group_s
    # One run folder a group, its members' reports in it, and each trial's files found by its number:
    # every other member's folder is a link to its group's.
    runs = searched / "hpsearch_runs" / "fused"
    assert sorted(p.name for p in runs.glob("trial-*")) == [f"trial-{t.number:05d}" for t in fused]
    for group, members in groups.items():
        assert not (runs / f"trial-{group:05d}").is_symlink()
        for number in members:
            folder = runs / f"trial-{number:05d}"
            assert folder.resolve() == (runs / f"trial-{group:05d}").resolve()
            assert number == group or os.readlink(folder) == f"trial-{group:05d}"  # moves with the runs folder
        assert (runs / f"trial-{max(members):05d}" / "metrics.jsonl").is_file()
    # No rank printed, and the log is there, empty.
    assert (runs / "ranks.log").read_text() == ""


def test_a_diverging_member_fails_alone_and_the_others_complete(searched: Path) -> None:
    fused = _trials(searched, "fused")
    wild = [t for t in fused if t.params["base_lr"] > 1]
    assert len(wild) == 3
    for t in wild:
        assert t.state == optuna.trial.TrialState.FAIL
        assert t.user_attrs[record.STATUS_REASON] == record.REASON_DIVERGED
        assert t.user_attrs[record.STATUS_DETAIL].startswith("non-finite training loss in epoch 1")
        assert t.user_attrs[record.DEVICE_SECONDS] > 0


def test_a_model_vmap_refuses_runs_its_trials_on_their_own_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "search_plugins.py").write_text(PLUGINS)
    (tmp_path / "space.yaml").write_text(PLUGIN_SPACE.format(study="refused", fn="reads_a_number", lrs="[0.01, 0.03]",
                                                             n=4, fuse="auto", extra=""))
    result = _hpsearch("start", "space.yaml", "--no-progress", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    trials = _trials(tmp_path, "refused")
    assert len(trials) == 4 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    for t in trials:
        assert t.user_attrs[record.FUSE].startswith("off: the model cannot be vectorized over members")
        assert t.user_attrs.get(record.FUSED_GROUP) is None
        assert t.user_attrs.get(record.RUNTIME_BASIS) is None  # its own wall time
    assert "trials run on their own, one after another: the model cannot be vectorized" in result.stdout + result.stderr
    # In the group's own run, on the devices it held (no trial of their own was started for them),
    # each in its own folder, by its number, not a link.
    runs = tmp_path / "hpsearch_runs" / "refused"
    assert sorted(p.name for p in runs.glob("trial-*")) == [f"trial-{t.number:05d}" for t in trials]
    for t in trials:
        folder = runs / f"trial-{t.number:05d}"
        assert not folder.is_symlink() and (folder / "metrics.jsonl").is_file()


def test_a_group_that_runs_out_of_memory_is_split_in_halves_and_no_member_is_out_of_memory(tmp_path: Path) -> None:
    (tmp_path / "search_plugins.py").write_text(PLUGINS)
    (tmp_path / "space.yaml").write_text(PLUGIN_SPACE.format(
        study="split", fn="wide", lrs="[0.001, 0.002, 0.003, 0.004]", n=8, fuse="true",
        extra=", memory_per_worker: 800MiB"))
    result = _hpsearch("start", "space.yaml", "--no-progress", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    trials = _trials(tmp_path, "split")
    assert len(trials) == 8
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials), [
        (t.number, t.user_attrs.get(record.STATUS_REASON), t.user_attrs.get(record.STATUS_DETAIL)) for t in trials]
    # The group of eight ran out; its halves of four trained, each member in one of them.
    assert sorted(t.user_attrs[record.FUSED_MEMBERS] for t in trials) == [4] * 8
    group = tmp_path / "hpsearch_runs" / "split" / f"trial-{trials[0].number:05d}"
    numbers = [t.number for t in trials]
    assert sorted(p.name for p in group.iterdir() if p.is_dir()) == [
        f"trials-{numbers[0]:05d}-{numbers[3]:05d}", f"trials-{numbers[4]:05d}-{numbers[7]:05d}"]


KILLED = """\
study: K
workload: {name: digits_mlp, epochs: 40}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: {choices: [16, 32]}
  lr_rule: {choices: [constant, linear]}
  base_lr: {choices: [0.002, 0.005, 0.01]}
  momentum: 0.9
objectives:
  - {metric: val_accuracy, direction: maximize}
search: {sampler: grid, n_trials: 12, seed: 0, fuse: true, max_concurrent: 1}
resources: {device: cpu}
"""


@pytest.mark.slow
def test_kill_9_and_resume_lose_and_duplicate_no_member(tmp_path: Path) -> None:
    import os
    import signal
    import time

    import psutil

    (tmp_path / "space.yaml").write_text(KILLED)
    study = lambda: optuna.load_study(study_name="K", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}")  # noqa: E731
    proc = subprocess.Popen([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"], cwd=tmp_path,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:  # a group trains: its members RUNNING with their group written
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "timed out waiting for a group to train"
            try:
                running = [t for t in study().get_trials() if t.state == optuna.trial.TrialState.RUNNING
                           and t.user_attrs.get(record.CURVES, {}).get("samples_seen")]
            except KeyError:
                running = []
            if running:
                break
            time.sleep(0.5)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        resumed = _hpsearch("resume", "K", "--no-progress", cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    finally:
        for p in psutil.process_iter(["cwd"]):
            try:
                if p.info["cwd"] and Path(p.info["cwd"]).is_relative_to(tmp_path):
                    p.kill()
            except psutil.Error:
                pass
    trials = study().get_trials()
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    # Every configuration of the grid completed exactly once; what the kill cut short (members
    # training, configurations asked ahead) is recorded interrupted and ran again.
    assert sorted(_key(t) for t in complete) == sorted(set(_key(t) for t in complete))
    assert len(complete) == 12
    cut = [t for t in trials if t.state != optuna.trial.TrialState.COMPLETE]
    assert cut and all(t.user_attrs[record.STATUS_REASON] == "interrupted" for t in cut)
    assert any(t.user_attrs.get(record.FUSED_MEMBERS, 0) > 1 for t in complete)


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_samplers_that_propose_one_configuration_at_a_time_still_fuse(sampler: str, tmp_path: Path) -> None:
    # Base LRs for which no two rules give one LR at B = 2 B0 (constant 0.01 and linear from 0.005
    # would be one trial, an exact duplicate, not trained).
    space = GRID.format(study="one", lrs="[0.002, 0.005, 0.013, 0.03]", n=6, fuse="true").replace(
        "sampler: grid", f"sampler: {sampler}, max_concurrent: 1")
    (tmp_path / "space.yaml").write_text(space)
    result = _hpsearch("start", "space.yaml", "--no-progress", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    # A repeated proposal is skipped (PRUNED, equivalent), as without fusing.
    trials = [t for t in _trials(tmp_path, "one") if t.state != optuna.trial.TrialState.PRUNED]
    assert len(trials) == 6 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    # The searcher asked ahead: the six proposals, all of one shape, trained in one group (one
    # trial slot).
    assert {t.user_attrs[record.FUSED_MEMBERS] for t in trials} == {6}
    assert len({_key(t) for t in trials}) == 6  # no configuration twice
