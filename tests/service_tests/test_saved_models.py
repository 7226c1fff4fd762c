"""Models out of a search with ``save_model: best``: only the trials no other beats on every
objective keep their weights, and every reader (the table, ``Search.model_path``, exports, the
dashboard) stops naming the files a better trial made the search delete."""

from __future__ import annotations

from pathlib import Path

import optuna
from starlette.testclient import TestClient

import hpsearch
from hpsearch.dashboards.app import create_app
from hpsearch.planner.saved_models import ModelKeeper
from hpsearch.record import ATTR_REMOVED_MODELS, ATTR_SPACE_TEXT
from hpsearch.store import open_storage

# (val_accuracy, runtime_s) of trials 0..3, in the order they complete.
VALUES = [(0.80, 10.0), (0.90, 20.0), (0.70, 30.0), (0.95, 5.0)]


def _complete(study: optuna.Study, keeper: ModelKeeper, runs: Path, values: tuple[float, float]) -> int:
    """A trial that saved its weights completes, recorded as the searcher records it."""
    trial = study.ask()
    path = runs / f"trial-{trial.number:05d}" / "model.pt"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"weights")
    for key, value in keeper.keep(trial.number, list(values), str(path), study).items():
        trial.set_user_attr(key, value)
    study.tell(trial, list(values))
    return trial.number


def test_best_keeps_the_pareto_fronts_weights_and_every_reader_follows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'models.db'}"
    study = optuna.create_study(study_name="models", storage=open_storage(url), directions=["maximize", "minimize"])
    study.set_metric_names(["val_accuracy", "runtime_s"])
    study.set_user_attr(ATTR_SPACE_TEXT, "parameters: {per_device_batch_size: 8, base_lr: 0.1}\n")
    keeper = ModelKeeper.of_study(study, "best")
    runs = tmp_path / "runs"
    for values in VALUES[:3]:
        _complete(study, keeper, runs, values)
    files = {n: runs / f"trial-{n:05d}" / "model.pt" for n in range(4)}
    # Trial 2 completed behind the front: its file is gone and it records no path.
    assert [files[n].exists() for n in range(3)] == [True, True, False]
    assert "model_path" not in study.trials[2].user_attrs

    # Trial 3 beats 0 and 1 on both objectives: their files go, and the study says so.
    _complete(study, keeper, runs, VALUES[3])
    assert [files[n].exists() for n in range(4)] == [False, False, False, True]
    assert study.user_attrs[ATTR_REMOVED_MODELS] == [0, 1]
    assert "model_path" in study.trials[0].user_attrs  # a finished trial's attrs cannot be rewritten...

    search = hpsearch.load("models", storage=url)  # ...so the readers leave it out
    assert [search.model_path(n) for n in range(4)] == [None, None, None, str(files[3])]
    table = search.trials_dataframe()
    assert table.set_index("number")["model_path"].notna().tolist() == [False, False, False, True]
    detail = TestClient(create_app(url)).get("/api/studies/models/trials/3").json()
    assert detail["model_path"] == str(files[3])
    assert TestClient(create_app(url)).get("/api/studies/models/trials/0").json()["model_path"] is None

    # A resumed search picks the front up from the study: a better trial still removes trial 3's.
    resumed = ModelKeeper.of_study(optuna.load_study(study_name="models", storage=open_storage(url)), "best")
    assert resumed.paths == {3: str(files[3])}
    _complete(study, resumed, runs, (0.96, 4.0))
    assert not files[3].exists()
    assert study.user_attrs[ATTR_REMOVED_MODELS] == [0, 1, 3]


def test_all_keeps_every_completed_trials_weights(tmp_path: Path) -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    keeper = ModelKeeper.of_study(study, "all")
    numbers = [_complete(study, keeper, tmp_path, values) for values in VALUES]
    assert [study.trials[n].user_attrs["model_path"] for n in numbers] == [
        str(tmp_path / f"trial-{n:05d}" / "model.pt") for n in numbers]
    assert all((tmp_path / f"trial-{n:05d}" / "model.pt").exists() for n in numbers)
