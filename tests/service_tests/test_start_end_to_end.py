"""`hpsearch start` end to end: the real CLI, a real local Ray, real DDP ranks, a real SQLite study."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

TINY_SPACE = """\
study: tiny
workload: {name: digits_cnn, epochs: 2}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: 64
  world_size: {choices: [1, 2]}
  lr_rule: {choices: [constant, linear]}
  base_lr: 0.01
  momentum: 0.9
objectives:
  - {metric: val_accuracy, direction: maximize}
  - {metric: runtime_s, direction: minimize}
search: {sampler: grid, n_trials: 10, seed: 0}
resources: {device: cpu}
"""


def _hpsearch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    work = tmp_path_factory.mktemp("e2e")
    (work / "space.yaml").write_text(TINY_SPACE)
    result = _hpsearch("start", "space.yaml", "--no-progress", cwd=work)
    assert result.returncode == 0, result.stdout + result.stderr
    # The command closed the study's connections as it ended (checked before any test opens
    # the file): the SQLite file alone holds the study, its write-ahead log folded back in.
    assert (work / "hpsearch.db").is_file() and not list(work.glob("hpsearch.db-*"))
    return work, result


def test_every_grid_point_completes_with_the_contract_attrs(finished: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    work, _ = finished
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{work / 'hpsearch.db'}")
    trials = study.get_trials()
    # The grid has 2 x 2 points; n_trials: 10 is capped at the grid size.
    assert len(trials) == 4
    assert {t.state for t in trials} == {optuna.trial.TrialState.COMPLETE}
    assert {(t.params["world_size"], t.params["lr_rule"]) for t in trials} == {
        (1, "constant"), (1, "linear"), (2, "constant"), (2, "linear")}
    for t in trials:
        p, a = t.params, t.user_attrs
        assert set(p) >= {"per_device_batch_size", "world_size", "grad_accum_steps", "lr_rule", "base_lr", "momentum"}
        assert a["effective_batch_size"] == 64 * p["world_size"]
        expected_lr = 0.01 * (a["effective_batch_size"] / 8 if p["lr_rule"] == "linear" else 1)
        assert a["lr"] == pytest.approx(expected_lr)
        if a.get("runtime_basis") == "solo_estimate":
            # Trained fused (search.fuse: auto, where it paid): its share of its group's device
            # time, and its runtime an estimate of its own, below the group's.
            assert 0 < a["device_seconds"] <= a["fused_runtime_s"] * p["world_size"]
            assert a["runtime_s"] < a["fused_runtime_s"]
        else:
            assert a["device_seconds"] == pytest.approx(a["runtime_s"] * p["world_size"])
        assert t.values == [pytest.approx(a["val_accuracy"]), pytest.approx(a["runtime_s"])]
        assert a["epochs_completed"] == 2
        assert len(a["curves"]["val_accuracy"]) == 2
        assert a["device"] == "cpu"
        assert a["node"] and a["node_id"]
        assert 0.0 <= a["val_accuracy"] <= 1.0
        # A multi-objective study gets intermediate values too: the first objective, every
        # epoch, on a samples-seen axis.
        assert list(t.intermediate_values) == a["curves"]["samples_seen"]
        assert list(t.intermediate_values.values()) == pytest.approx(a["curves"]["val_accuracy"])
    assert "per_device_batch_size" in study.user_attrs["hpsearch.space_text"]
    assert study.metric_names == ["val_accuracy", "runtime_s"]


def test_start_prints_the_table_and_writes_the_frontier_html(finished: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    work, result = finished
    assert "frontier" in result.stdout
    html = (work / "tiny-frontier.html").read_text()
    assert "Pareto front" in html and "plotly" in html.lower()
    assert not (Path.home() / "ray_results" / "tiny").exists()
    assert (work / "hpsearch_runs" / "tiny").is_dir()
    # The answer for this machine's devices: with two batch sizes no law can be fitted, so it
    # is the measured trial that reached the derived target fastest, and it says why.
    assert "recommendation for " in result.stdout and "(measured trials)" in result.stdout


#: The tiny grid, one epoch, with a configuration queued to run first and a target no trial
#: can reach in one epoch.
ENQUEUED_SPACE = TINY_SPACE.replace("epochs: 2", "epochs: 1").replace("study: tiny", "study: first").replace(
    "search: {sampler: grid, n_trials: 10, seed: 0}",
    "search: {sampler: grid, n_trials: 4, seed: 0, enqueue: [{world_size: 2, lr_rule: linear}]}",
) + "analysis: {target: {val_accuracy: 0.999}}\n"


def test_the_configurations_a_space_enqueues_run_first_and_every_trial_got_its_resources(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(ENQUEUED_SPACE)
    result = _hpsearch("start", "space.yaml", "--no-progress", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    trials = optuna.load_study(study_name="first", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}").get_trials()
    assert (trials[0].params["world_size"], trials[0].params["lr_rule"]) == (2, "linear")
    # The grid still runs each configuration once: the enqueued one is not run twice.
    assert sorted((t.params["world_size"], t.params["lr_rule"]) for t in trials) == [
        (1, "constant"), (1, "linear"), (2, "constant"), (2, "linear")]
    assert all(t.user_attrs.get("training_started") for t in trials)
    # A target nobody reached: the search still ends well, and says why there is no answer.
    answer = json.loads(result.stdout)["recommendation"]
    assert "no trial on at most" in answer["error"] and "reached the target val_accuracy >= 0.999" in answer["error"]


def test_ls_and_export_read_the_finished_study(finished: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    work, _ = finished
    listing = _hpsearch("ls", "--json", cwd=work)
    assert listing.returncode == 0, listing.stderr
    [entry] = json.loads(listing.stdout)
    assert entry["name"] == "tiny" and entry["states"] == {"COMPLETE": 4}

    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{work / 'hpsearch.db'}")
    every_column = {k for t in study.get_trials() for k in (*t.params, *t.user_attrs)}
    exported = _hpsearch("export", "tiny", "--format", "csv", cwd=work)
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert len(rows) == 4
    assert every_column <= set(rows[0])
    assert {"lr_rule", "effective_batch_size", "lr", "val_accuracy", "runtime_s", "device_seconds"} <= set(rows[0])
    assert len(json.loads(rows[0]["curves"])["val_accuracy"]) == 2

    exported = _hpsearch("export", "tiny", "--format", "json", cwd=work)
    assert exported.returncode == 0, exported.stderr
    records = {r["number"]: r for r in json.loads(exported.stdout)}
    for t in study.get_trials():
        record = records[t.number]
        assert {k: record[k] for k in t.params} == t.params
        assert record["curves"]["samples_seen"] == t.user_attrs["curves"]["samples_seen"]
        assert record["curves"]["val_accuracy"] == pytest.approx(t.user_attrs["curves"]["val_accuracy"])
        assert record["val_accuracy"] == pytest.approx(t.user_attrs["val_accuracy"])


def test_starting_the_same_study_again_is_refused_and_changes_nothing(finished: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    work, _ = finished
    again = _hpsearch("start", "space.yaml", "--no-progress", cwd=work)
    assert again.returncode == 2
    assert "already exists" in again.stderr and "Traceback" not in again.stderr
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{work / 'hpsearch.db'}")
    assert len(study.get_trials()) == 4


def test_export_of_an_unknown_study_exits_2(finished: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    work, _ = finished
    result = _hpsearch("export", "nope", cwd=work)
    assert result.returncode == 2 and "no study named 'nope'" in result.stderr


FAILING_SPACE = """\
study: failing
workload: {name: digits_cnn, epochs: 2}
parameters:
  per_device_batch_size: 64
  base_lr: {choices: [0.01, 1.0e+6]}
  momentum: 0.9
search: {sampler: grid, n_trials: 2}
resources: {device: cpu}
"""


def test_a_diverging_trial_is_recorded_as_fail_with_its_reason_and_the_search_goes_on(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(FAILING_SPACE)
    result = _hpsearch("start", "space.yaml", "--no-progress", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    study = optuna.load_study(study_name="failing", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}")
    by_lr = {t.params["base_lr"]: t for t in study.get_trials()}
    assert by_lr[0.01].state == optuna.trial.TrialState.COMPLETE
    assert by_lr[1.0e6].state == optuna.trial.TrialState.FAIL
    assert by_lr[1.0e6].user_attrs["status_reason"] == "diverged"
    assert by_lr[1.0e6].values is None


def test_emulated_ranks_preview_a_two_rank_search_on_one_process(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(
        # fuse: false: a fused member's runtime is its solo estimate and its device-seconds a share
        # of its group's, which this one-device check is not about (under auto, fusing rests on timing).
        TINY_SPACE.replace("study: tiny", "study: emulated").replace(
            "resources: {device: cpu}", "resources: {device: cpu, emulate_ranks: true}").replace(
            "search: {sampler: grid, n_trials: 10, seed: 0}", "search: {sampler: grid, n_trials: 10, seed: 0, fuse: false}")
    )
    result = _hpsearch("start", "space.yaml", "--no-progress", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    study = optuna.load_study(study_name="emulated", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}")
    for t in study.get_trials():
        assert t.state == optuna.trial.TrialState.COMPLETE
        assert t.user_attrs["emulated_ranks"] == t.params["world_size"]
        assert t.user_attrs["effective_batch_size"] == 64 * t.params["world_size"]
        assert t.user_attrs["device_seconds"] == pytest.approx(t.user_attrs["runtime_s"])  # one device


RAISING_WORKLOAD = """
from hpsearch.trials.workloads.digits import digits_mlp

def make(options):
    if options.get("explode_at_build"):
        raise RuntimeError("the data set is not where the options say")
    workload = digits_mlp({})
    if not options.get("explode"):
        return workload

    def loss(out, y):  # the training loop, not the factory, fails
        raise RuntimeError("the data loader lost its files")
    return type(workload)(workload.model, workload.train_set, workload.val_set, loss, "mean", 10)
"""

RAISING_SPACE = """\
study: raising
workload: {name: "raising_workload:make", epochs: 1}
parameters:
  per_device_batch_size: {choices: [32, 64]}
  base_lr: 0.01
search: {sampler: grid, n_trials: 2}
resources: {device: cpu}
"""


def test_a_raising_workload_is_recorded_with_its_message_and_nothing_hangs(tmp_path: Path) -> None:
    (tmp_path / "raising_workload.py").write_text(RAISING_WORKLOAD)
    (tmp_path / "space.yaml").write_text(RAISING_SPACE.replace("epochs: 1}", "epochs: 1, options: {explode: true}}"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    study = optuna.load_study(study_name="raising", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}")
    trials = study.get_trials()
    assert len(trials) == 2  # the search went on after the first failure
    for t in trials:
        assert t.state == optuna.trial.TrialState.FAIL
        assert t.user_attrs["status_reason"] == "workload_error"
        assert "the data loader lost its files" in t.user_attrs["status_detail"]
    # Every trial failed: the report, then exit status 4 and one line a script can read.
    assert result.returncode == 4, result.stdout + result.stderr
    assert "study raising: trials" in result.stdout
    assert result.stderr.strip().splitlines()[-1] == (
        "error: study 'raising': no trial completed: 2 trials, 2 failed; most common reason 'workload_error' (2 of 2)")
    assert "Traceback" not in result.stderr
    best = subprocess.run([sys.executable, "-m", "hpsearch", "best", "raising"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert best.returncode == 4, best.stdout + best.stderr
    assert best.stderr.strip() == ("error: study 'raising': no trial completed: 2 trials, 2 failed; most common "
                                   "reason 'workload_error' (2 of 2)")


def test_best_and_status_report_the_finished_study(finished: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    work, _ = finished
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{work / 'hpsearch.db'}")
    top = max(study.get_trials(), key=lambda t: t.values[0])

    best = _hpsearch("best", "tiny", "--json", cwd=work)
    assert best.returncode == 0, best.stderr
    record = json.loads(best.stdout)
    assert record["number"] == top.number
    assert record["values"]["val_accuracy"] == pytest.approx(top.values[0])
    assert record["params"]["lr_rule"] == top.params["lr_rule"]

    status = _hpsearch("status", "tiny", cwd=work)
    assert status.returncode == 0, status.stderr
    assert "4 trials (complete 4)" in status.stdout
    assert "finished 4 of 4" in status.stdout  # n_trials 10, of which the grid has 4: its size is the total
    assert "grid exhausted: all 4 configurations ran" in status.stdout
    assert f"best so far: trial #{top.number}" in status.stdout
    assert "running:" not in status.stdout


def test_a_workload_that_cannot_be_built_is_refused_before_any_trial(tmp_path: Path) -> None:
    (tmp_path / "raising_workload.py").write_text(RAISING_WORKLOAD)
    (tmp_path / "space.yaml").write_text(
        RAISING_SPACE.replace("epochs: 1}", "epochs: 1, options: {explode_at_build: true}}"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert ("error: workload 'raising_workload:make' failed to build: RuntimeError: the data set is not where "
            "the options say") in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "hpsearch.db").exists()  # nothing written


def test_a_batch_larger_than_the_training_set_is_refused_before_any_trial(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(TINY_SPACE.replace("per_device_batch_size: 64",
                                                            "per_device_batch_size: {choices: [64, 1024]}"))
    result = _hpsearch("start", "space.yaml", "--no-progress", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "at 'parameters.per_device_batch_size'" in result.stderr
    assert "the largest effective batch of this space, 2048 (b x W x A), is larger than the 1438 training" in result.stderr
    assert not (tmp_path / "hpsearch.db").exists()  # nothing written


HANGING_WORKLOAD = """
import time
from hpsearch.trials.workloads.digits import digits_mlp

def make(options):
    workload = digits_mlp({})
    if not options.get("hang"):
        return workload
    loss_fn = workload.loss_fn
    def loss(out, y):  # a data loader stuck on a dead file system
        if out.shape[0] == 64:
            time.sleep(3600)
        return loss_fn(out, y)
    return type(workload)(workload.model, workload.train_set, workload.val_set, loss, "mean", 10)
"""


def test_a_hung_trial_times_out_and_the_search_goes_on(tmp_path: Path) -> None:
    (tmp_path / "hanging_workload.py").write_text(HANGING_WORKLOAD)
    (tmp_path / "space.yaml").write_text(
        RAISING_SPACE.replace("raising_workload:make", "hanging_workload:make")
        .replace("epochs: 1}", "epochs: 1, options: {hang: true}}")
        .replace("search: {sampler: grid, n_trials: 2}", "search: {sampler: grid, n_trials: 2, trial_timeout_s: 20}"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    study = optuna.load_study(study_name="raising", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}")
    by_batch = {t.params["per_device_batch_size"]: t for t in study.get_trials()}
    assert by_batch[32].state == optuna.trial.TrialState.COMPLETE
    hung = by_batch[64]
    assert hung.state == optuna.trial.TrialState.FAIL
    assert hung.user_attrs["status_reason"] == "timeout"
    assert "ran past its 20 s limit (search.trial_timeout_s)" in hung.user_attrs["status_detail"]
