"""A target's metric misspelt (``--target val_acc=0.9``) is one line naming the metrics a target
takes and the one meant, exit status 2, wherever a target is given: ``hpsearch recommend`` and the
study API (``Search.analyze``, ``time_to_target``, ``recommend``), which the dashboard reads."""

from __future__ import annotations

import optuna
import pytest
from click.testing import CliRunner

import hpsearch
from hpsearch.cli import cli
from hpsearch.errors import AnalysisError
from hpsearch.testing import synthetic_study


def test_recommend_suggests_the_metric_a_misspelt_target_means(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/store.db"
    synthetic_study(url, "demo", n_trials=4)
    result = CliRunner().invoke(cli, ["recommend", "demo", "-n", "2", "--storage", url, "--target", "val_acc=0.9"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert "did you mean 'val_accuracy'?" in errors[0] and "val_loss" in errors[0]


@pytest.mark.parametrize("call", ["analyze", "time_to_target", "recommend"])
@pytest.mark.parametrize(("text", "meant"), [("val_acc=0.9", "val_accuracy"), ("loss=0.3", "val_loss"),
                                             ("Val_Accuracy=0.9", "val_accuracy")])
def test_the_api_suggests_the_metric_a_misspelt_target_means(call: str, text: str, meant: str) -> None:
    search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=4)
    args = (2,) if call == "recommend" else ()
    with pytest.raises(AnalysisError, match=f"did you mean '{meant}'"):
        getattr(hpsearch.load("demo", storage=search.storage), call)(*args, target=text)
