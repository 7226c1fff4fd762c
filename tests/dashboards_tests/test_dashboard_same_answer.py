"""The dashboard's analysis says what `hpsearch recommend` and the Python API say, on a study
whose trials shared their GPUs (`resources.gpus_per_worker: 0.25`): a rank can count on a
quarter of the GPU's memory, whatever the trials recorded of the whole GPU."""

from __future__ import annotations

from pathlib import Path

import optuna
from starlette.testclient import TestClient

import hpsearch
from hpsearch.dashboards.app import create_app
from hpsearch.record import ATTR_SPACE_TEXT
from hpsearch.store import open_storage
from hpsearch.testing import GIB, MIB, SyntheticDevice, SyntheticTruth, synthetic_study

T4 = SyntheticDevice("cuda (NVIDIA T4)", memory_bytes=16 * GIB, fixed_bytes=1 * GIB, per_sample_bytes=20 * MIB)


def test_the_dashboards_memory_answer_is_the_apis_on_a_study_that_shared_its_gpus(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    synthetic_study(url, "shared", n_trials=200, seed=1, truth=SyntheticTruth(devices=(T4,)))
    study = optuna.load_study(study_name="shared", storage=open_storage(url))
    text = study.user_attrs[ATTR_SPACE_TEXT]
    assert "gpus_per_worker: 1}" in text
    study.set_user_attr(ATTR_SPACE_TEXT, text.replace("gpus_per_worker: 1}", "gpus_per_worker: 0.25}"))

    api = hpsearch.load("shared", storage=url).analyze().to_dict()["memory"]
    shown = TestClient(create_app(url)).get("/api/studies/shared/analysis?devices=8").json()["analysis"]["memory"]
    assert [m["limit_bytes"] for m in api] == [m["limit_bytes"] for m in shown] == [4 * GIB]
    assert [m["predicted_largest"] for m in shown] == [m["predicted_largest"] for m in api]
