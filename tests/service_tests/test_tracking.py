"""A study in MLflow (docs/tracking.md), against real MLflow: a tracking server the tests start
and stop (``mlflow server``), and a SQLite-backed store without a server; read back with
``MlflowClient``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient  # a dev dependency: `make test` installs MLflow

import hpsearch
from hpsearch import record
from hpsearch.cli import cli
from hpsearch.errors import SpaceError, StudyNotFoundError, TrackingError
from hpsearch.integrations import tracking
from hpsearch.testing import MlflowServer, synthetic_study

#: The params every trial's run carries (the issue's list), beside the searched ones.
TRIAL_PARAMS = {record.PER_DEVICE_BATCH_SIZE, record.WORLD_SIZE, record.GRAD_ACCUM_STEPS, record.EFFECTIVE_BATCH_SIZE,
                record.LR_RULE, record.BASE_LR, record.LR}

SPACE = """\
study: tracked
workload: {name: digits_mlp, epochs: 2, eval_every_samples: 720, save_model: all}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: {choices: [32, 128]}
  world_size: 1
  lr_rule: {choices: [linear, sqrt]}
  base_lr: 0.05
  hidden: {choices: [32, 48]}
objectives:
  - {metric: val_accuracy, direction: maximize}
  - {metric: runtime_s, direction: minimize}
search: {sampler: grid, n_trials: 4, seed: 0}
resources: {device: cpu}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _runs(client: MlflowClient, experiment: str) -> tuple[Any, dict[int, Any]]:
    """The study's parent run and its trials' runs by trial number."""
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment!r}"
    runs = client.search_runs([found.experiment_id], max_results=1000)
    parents = [r for r in runs if "hpsearch.trial" not in r.data.tags]
    assert len(parents) == 1, [r.info.run_name for r in parents]
    children = {int(r.data.tags["hpsearch.trial"]): r for r in runs if "hpsearch.trial" in r.data.tags}
    assert len(children) == len(runs) - 1, "two runs for one trial"
    return parents[0], children


def _history(client: MlflowClient, run_id: str, metric: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, metric))


def _curve(trial: optuna.trial.FrozenTrial, metric: str) -> list[tuple[int, float]]:
    curves = trial.user_attrs[record.CURVES]
    return sorted((int(x), float(v)) for x, v in zip(curves[record.SAMPLES_SEEN], curves[metric]) if v is not None)


def _check_trial_runs(client: MlflowClient, search: hpsearch.Search, parent: Any, children: dict[int, Any]) -> None:
    """What a trial's run must hold, against the study's record of the trial."""
    trials = {t.number: t for t in search.study.get_trials(deepcopy=False) if t.state.is_finished()}
    assert set(children) == set(trials)
    status = {"COMPLETE": "FINISHED", "FAIL": "FAILED", "PRUNED": "KILLED"}
    for number, run in children.items():
        trial = trials[number]
        tags, params = run.data.tags, run.data.params
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert tags["hpsearch.study"] == search.study_name
        assert tags["hpsearch.state"] == trial.state.name
        assert run.info.status == status[trial.state.name]
        assert TRIAL_PARAMS | set(trial.params) <= set(params), sorted(set(params))
        for name, value in trial.params.items():
            assert params[name] == str(value)
        assert float(params[record.LR]) == pytest.approx(trial.user_attrs[record.LR])
        reason = trial.user_attrs.get(record.STATUS_REASON)
        assert tags.get(f"hpsearch.{record.STATUS_REASON}") == reason
        for name in (record.DEVICE, record.FUSED_GROUP):
            value = trial.user_attrs.get(name)
            assert tags.get(f"hpsearch.{name}") == (None if value is None else str(value))
        # Each evaluation is a step at its samples seen; the final metrics are the record's.
        if record.CURVES in trial.user_attrs and trial.user_attrs[record.CURVES].get(record.SAMPLES_SEEN):
            for metric in (record.VAL_LOSS, record.TRAIN_LOSS):
                assert _history(client, run.info.run_id, metric) == _curve(trial, metric), metric
        for metric in (record.VAL_ACCURACY, record.RUNTIME_S, record.DEVICE_SECONDS):
            if isinstance(trial.user_attrs.get(metric), (int, float)):
                assert run.data.metrics[metric] == pytest.approx(trial.user_attrs[metric]), metric


def test_a_tracked_search_is_one_parent_run_and_a_nested_run_per_trial(mlflow_server: MlflowServer,
                                                                       tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    done = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--mlflow", mlflow_server.uri,
                           "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)  # MLflow's own printing stays out of the JSON
    assert summary["mlflow"]["runs"] == 4 and summary["mlflow"]["error"] is None, summary["mlflow"]
    assert summary["mlflow"]["created"] == 4

    search = hpsearch.load("tracked", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}")
    client = MlflowClient(mlflow_server.uri)
    parent, children = _runs(client, "tracked")
    assert len(children) == 4
    _check_trial_runs(client, search, parent, children)
    for run in children.values():  # the saved weights, where the space keeps models (save_model: all)
        files = [a.path for a in client.list_artifacts(run.info.run_id, "model")]
        assert len(files) == 1 and files[0].endswith(Path(search.model_path(int(run.data.tags["hpsearch.trial"]))).name)

    # The parent: the space file, the objectives, the frontier page, the recommendation, the best trial.
    assert parent.info.status == "FINISHED"
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"space.yaml", "objectives.json", "frontier.html", "recommendation.json"} <= artifacts
    local = Path(client.download_artifacts(parent.info.run_id, "space.yaml", str(tmp_path)))
    assert local.read_text() == SPACE
    answer = json.loads(Path(client.download_artifacts(parent.info.run_id, "recommendation.json", str(tmp_path))).read_text())
    assert answer == summary["recommendation"]
    page = Path(client.download_artifacts(parent.info.run_id, "frontier.html", str(tmp_path))).read_text()
    assert "plotly" in page and len(page) > 1_000_000  # plotly.js inside: MLflow's viewer shows the page alone
    best = search.best_trial
    assert parent.data.tags["hpsearch.best_trial"] == str(best.number)
    assert parent.data.metrics[record.VAL_ACCURACY] == pytest.approx(best.user_attrs[record.VAL_ACCURACY])
    assert parent.data.params["objectives"] == "val_accuracy (maximize), runtime_s (minimize)"

    # Exporting the study again adds no runs: its runs are found by their tags.
    again = subprocess.run([sys.executable, "-m", "hpsearch", "export", "tracked", "--to", "mlflow", mlflow_server.uri,
                            "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    report = json.loads(again.stdout)
    assert (report["created"], report["unchanged"], report["runs"]) == (0, 4, 4)
    parent_again, children_again = _runs(client, "tracked")
    assert parent_again.info.run_id == parent.info.run_id
    assert {n: r.info.run_id for n, r in children_again.items()} == {n: r.info.run_id for n, r in children.items()}
    for run in children_again.values():  # and no evaluation twice
        assert len(_history(client, run.info.run_id, record.VAL_LOSS)) == len(
            _history(client, children[int(run.data.tags["hpsearch.trial"])].info.run_id, record.VAL_LOSS))

    # A resumed search carries on in the study's parent run: its new trials are nested under it.
    more = subprocess.run([sys.executable, "-m", "hpsearch", "resume", "tracked", "--n-trials", "6", "--mlflow",
                           mlflow_server.uri, "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert more.returncode == 0, more.stderr[-3000:]
    assert json.loads(more.stdout)["mlflow"]["created"] == 2
    parent_resumed, children_resumed = _runs(client, "tracked")
    assert parent_resumed.info.run_id == parent.info.run_id and parent_resumed.info.status == "FINISHED"
    assert len(children_resumed) == 6
    _check_trial_runs(client, search, parent_resumed, children_resumed)


def test_a_finished_study_exports_to_a_sqlite_backed_mlflow_once(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    search = synthetic_study(storage, "synthetic", n_trials=30, seed=3)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    os.chdir(tmp_path)  # MLflow keeps a SQLite store's artifacts in the working folder
    report = search.export_to_mlflow(uri)
    assert (report.created, report.runs, report.error) == (30, 30, None)
    client = MlflowClient(uri)
    parent, children = _runs(client, "synthetic")  # the experiment is named after the study
    assert len(children) == 30
    _check_trial_runs(client, search, parent, children)
    states = {r.data.tags["hpsearch.state"] for r in children.values()}
    assert "COMPLETE" in states and len(states) > 1, states  # the failed and pruned trials are runs too
    # Its trials were written without warmup_from, as before the setting existed: they warmed up from base_lr.
    assert {r.data.params.get(record.WARMUP_FROM) for r in children.values()} == {"base_lr"}

    again = search.export_to_mlflow(uri)
    assert (again.created, again.updated, again.unchanged) == (0, 0, 30)
    assert len(_runs(client, "synthetic")[1]) == 30


def test_a_running_trial_exported_then_finished_is_brought_up_to_date(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    search = synthetic_study(storage, "growing", n_trials=3, seed=1)
    study = search.study
    done = study.get_trials(deepcopy=False)[0]
    curves = done.user_attrs[record.CURVES]
    study.enqueue_trial(done.params)
    trial = study.ask(fixed_distributions=done.distributions)  # a trial still training: two evaluations so far
    half = {k: v[:2] for k, v in curves.items()}
    for key, value in {record.TRAINING_STARTED: time.time(), record.CURVES: half, record.LR: done.user_attrs[record.LR],
                       record.EFFECTIVE_BATCH_SIZE: done.user_attrs[record.EFFECTIVE_BATCH_SIZE]}.items():
        trial.set_user_attr(key, value)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    os.chdir(tmp_path)
    first = search.export_to_mlflow(uri, experiment="team-runs")
    assert (first.created, first.runs) == (4, 4)
    client = MlflowClient(uri)
    running = _runs(client, "team-runs")[1][trial.number]
    assert running.info.status == "RUNNING"
    assert len(_history(client, running.info.run_id, record.VAL_LOSS)) == 2

    for key, value in done.user_attrs.items():  # it finishes: every evaluation, its final metrics
        if key not in (record.TRAINING_STARTED, record.PHASES):
            trial.set_user_attr(key, value)
    study.tell(trial, list(done.values))
    second = search.export_to_mlflow(uri, experiment="team-runs")
    assert (second.created, second.updated, second.unchanged) == (0, 1, 3)
    finished = _runs(client, "team-runs")[1][trial.number]
    assert finished.info.run_id == running.info.run_id and finished.info.status == "FINISHED"
    assert _history(client, finished.info.run_id, record.VAL_LOSS) == [
        (int(x), float(v)) for x, v in zip(curves[record.SAMPLES_SEEN], curves[record.VAL_LOSS])]


def _export_cut_once(search: hpsearch.Search, uri: str, monkeypatch: pytest.MonkeyPatch, owner: type, name: str,
                     where: Callable[..., bool] = lambda *args, **kwargs: True) -> str:
    """Export ``search`` to ``uri`` with the server gone at the first call of ``owner.name`` whose
    arguments after the run id ``where`` accepts (a fault no local store makes by itself): the
    export fails saying so. Returns the run id of the call that was cut."""
    real = getattr(owner, name)
    cut: list[str] = []

    def gone_once(self: Any, run_id: str, *args: Any, **kwargs: Any) -> Any:
        if not cut and where(*args, **kwargs):
            cut.append(run_id)
            raise ConnectionError("Connection refused")
        return real(self, run_id, *args, **kwargs)

    monkeypatch.setattr(owner, name, gone_once)
    with pytest.raises(TrackingError, match="connection refused"):
        search.export_to_mlflow(uri)
    monkeypatch.setattr(owner, name, real)
    return cut[0]


def test_a_run_whose_end_was_logged_but_not_its_status_is_ended_by_the_next_export(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server goes away between a trial's end (its final metrics and tags, one call) and the
    call that ends its run: the next pass ends the run, and logs nothing twice."""
    storage = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    search = synthetic_study(storage, "cut", n_trials=3, seed=2)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    os.chdir(tmp_path)
    went = _export_cut_once(search, uri, monkeypatch, MlflowClient, "set_terminated")  # the first trial's run
    client = MlflowClient(uri)
    cut = client.get_run(went)
    assert cut.data.tags["hpsearch.final"] == "1" and cut.info.status == "RUNNING"
    before = _history(client, went, record.VAL_LOSS)

    again = search.export_to_mlflow(uri)
    assert (again.created, again.updated, again.runs) == (2, 1, 3)
    parent, children = _runs(client, "cut")
    assert client.get_run(went).info.status != "RUNNING"
    assert _history(client, went, record.VAL_LOSS) == before
    _check_trial_runs(client, search, parent, children)


def test_export_says_when_mlflow_does_not_answer_and_exits_1(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    synthetic_study(storage, "offline", n_trials=2)
    port = _free_port()  # nothing listens there
    result = CliRunner().invoke(cli, ["export", "offline", "--storage", storage, "--to", "mlflow",
                                      f"http://127.0.0.1:{port}"])
    assert result.exit_code == 1, result.output
    assert result.output.strip() == (f"error: could not log study 'offline' to MLflow at http://127.0.0.1:{port}, "
                                     "experiment 'offline': connection refused")


def test_a_space_that_asks_for_mlflow_without_it_installed_is_refused_before_the_study_is_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE + "tracking:\n  mlflow: http://mlflow.internal:5000\n")
    monkeypatch.setitem(sys.modules, "mlflow", None)  # how Python marks a module that cannot be imported
    result = CliRunner().invoke(cli, ["validate", str(space)])
    assert result.exit_code == 2, result.output
    line = SPACE.count("\n") + 2
    assert result.output.strip() == (f"error: {space}:{line} at 'tracking.mlflow': MLflow is not installed; install "
                                     "it with: pip install 'hpsearch[mlflow]'")
    storage = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    with pytest.raises(SpaceError, match=r"hpsearch\[mlflow\]"):
        hpsearch.start(space, storage=storage)
    with pytest.raises(StudyNotFoundError):
        hpsearch.load("tracked", storage=storage)


def test_validate_names_where_a_space_is_tracked(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE + "tracking: {mlflow: 'http://mlflow.internal:5000', experiment: bs-lr}\n")
    result = CliRunner().invoke(cli, ["validate", str(space)])
    assert result.exit_code == 0, result.output
    assert "tracked in MLflow at http://mlflow.internal:5000, experiment 'bs-lr'" in result.output
    space.write_text(SPACE + "tracking: {mlfow: 'http://mlflow.internal:5000'}\n")
    result = CliRunner().invoke(cli, ["validate", str(space)])
    assert result.exit_code == 2
    assert "tracking.mlfow" in result.output and "mlflow" in result.output


HELD = '''\
"""digits_mlp, slowed per forward pass and held while a file exists: a search the test paces."""
import time
from pathlib import Path

from torch import nn

from hpsearch.trials.workloads.digits import digits_mlp


class Held(nn.Module):
    def __init__(self, inner, hold, delay):
        super().__init__()
        self.inner, self.hold, self.delay = inner, hold, delay

    def forward(self, x):
        time.sleep(self.delay)
        while Path(self.hold).exists():
            time.sleep(0.05)
        return self.inner(x)


def held_mlp(options):
    options = dict(options)
    hold, delay = options.pop("hold"), float(options.pop("delay"))
    workload = digits_mlp(options)
    return type(workload)(Held(workload.model, hold, delay), *[getattr(workload, f) for f in
                          ("train_set", "val_set", "loss_fn", "loss_reduction", "num_classes")])
'''


def test_a_trial_end_whose_metrics_landed_without_its_tags_is_not_logged_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow commits a batch's metrics and its tags one after the other: the server goes away
    between the two in a trial's end. The next pass finds the run's evaluations and end metrics
    from its history, not from the tags it lacks, and logs none of them again."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    storage = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    search = synthetic_study(storage, "torn", n_trials=3, seed=4)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    os.chdir(tmp_path)
    # The first trial end's tags: its metrics are in by then.
    torn = _export_cut_once(search, uri, monkeypatch, SqlAlchemyStore, "_set_tags",
                            lambda tags: any(t.key == "hpsearch.final" for t in tags))
    client = MlflowClient(uri)
    cut = client.get_run(torn)
    assert "hpsearch.final" not in cut.data.tags and "hpsearch.logged_through" not in cut.data.tags
    end_metrics = [k for k in cut.data.metrics if k not in tracking.STEPPED]
    assert end_metrics and _history(client, torn, record.VAL_LOSS)  # they landed

    again = search.export_to_mlflow(uri)
    assert (again.error, again.runs) == (None, 3)
    parent, children = _runs(client, "torn")
    _check_trial_runs(client, search, parent, children)  # each evaluation once
    assert client.get_run(torn).data.tags["hpsearch.final"] == "1"
    assert all(len(client.get_metric_history(torn, k)) == 1 for k in end_metrics)


@pytest.mark.slow
def test_a_tracking_server_stopped_mid_search_loses_no_trial(tmp_path: Path) -> None:
    """The server goes away after the first trial and comes back before the last: the search goes
    on, says so once, and at its end every trial is in MLflow, each evaluation once."""
    server = MlflowServer(tmp_path / "mlflow")
    server.start()
    try:
        (tmp_path / "held.py").write_text(HELD)
        hold = tmp_path / "hold"
        (tmp_path / "space.yaml").write_text(
            SPACE.replace("{name: digits_mlp,", f"{{name: 'held:held_mlp', options: {{hold: '{hold}', delay: 0.01}},")
            .replace("n_trials: 4, seed: 0}", "n_trials: 6, seed: 0, max_concurrent: 1, fuse: false}")
            .replace("lr_rule: {choices: [linear, sqrt]}", "lr_rule: {choices: [constant, linear, sqrt]}")
            .replace("save_model: all", "save_model: none"))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
        search_process = subprocess.Popen(
            [sys.executable, "-m", "hpsearch", "start", "space.yaml", "--mlflow", server.uri, "--no-progress", "--json"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        storage = f"sqlite:///{tmp_path / 'hpsearch.db'}"

        def finished() -> int:
            try:
                study = optuna.load_study(study_name="tracked", storage=storage)
            except Exception:  # not made yet
                return 0
            return sum(t.state.is_finished() for t in study.get_trials(deepcopy=False))

        def wait_for(n: int) -> None:
            deadline = time.monotonic() + 300
            while finished() < n:
                assert search_process.poll() is None, search_process.communicate()[1][-3000:]
                assert time.monotonic() < deadline, f"fewer than {n} trials finished in 300 s"
                time.sleep(0.1)

        try:
            wait_for(1)
            server.stop()  # the tracking server goes away mid-search
            wait_for(3)  # two trials finish while it is away
            hold.touch()  # the next trial waits until the server is back, so the search ends after it
            server.start()
            hold.unlink()
            out, err = search_process.communicate(timeout=300)
        finally:
            hold.unlink(missing_ok=True)
            if search_process.poll() is None:
                search_process.terminate()
                search_process.communicate(timeout=120)
        assert search_process.returncode == 0, err[-3000:]
        assert err.count("did not answer") == 1, err[-3000:]  # said once, not per trial
        summary = json.loads(out)
        assert summary["mlflow"]["error"] is None and summary["mlflow"]["runs"] == 6, summary["mlflow"]
        client = MlflowClient(server.uri)
        parent, children = _runs(client, "tracked")
        assert len(children) == 6
        assert all(r.data.tags.get("hpsearch.final") == "1" for r in children.values())
        _check_trial_runs(client, hpsearch.load("tracked", storage=storage), parent, children)
    finally:
        server.stop()
