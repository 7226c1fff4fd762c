"""A trial as the CLI and the study API list it: ``hpsearch best`` writes times as dates, bytes in
a binary unit, thousands with separators, leaves the phases to their own view and says how a
halved trial ran; ``trials_dataframe(curves=True)`` holds each trial's evaluations."""

from __future__ import annotations

import re
import time

import optuna
import pytest
from click.testing import CliRunner
from optuna.trial import TrialState, create_trial

import hpsearch
from hpsearch.cli import cli
from hpsearch.testing import GIB, MIB, SyntheticDevice, SyntheticTruth, synthetic_study

CPU = SyntheticDevice("cpu", memory_bytes=3 * GIB, fixed_bytes=1 * GIB, per_sample_bytes=20 * MIB)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('listing') / 'store.db'}"
    synthetic_study(url, "listed", n_trials=30, seed=1,
                    truth=SyntheticTruth(devices=(CPU,), evals_per_epoch=2, world_sizes=(1, 2), accum_steps=(1,)))
    # The best trial, as a real search writes it: a start time, a cap, its phases, halved.
    study = optuna.load_study(study_name="listed", storage=url)
    study.add_trial(create_trial(
        state=TrialState.COMPLETE, values=[0.999, 1.0],
        params={"per_device_batch_size": 512}, distributions={"per_device_batch_size": study.trials[0].distributions["per_device_batch_size"]},
        user_attrs={"training_started": 1.8e9, "memory_limit_bytes": 629145600, "samples_per_s": 2048.3,
                    "phases": {"asked": 0.0, "reserved": 1.5, "told": 9.0, "asked_at": 1.8e9},
                    "ran_as": {"per_device_batch_size": 256, "grad_accum_steps": 2, "out_of_memory_at": 512}}))
    return url


def test_best_prints_dates_bytes_and_thousands_and_leaves_the_phases_to_their_own_view(store: str) -> None:
    result = CliRunner().invoke(cli, ["best", "listed", "--storage", store])
    assert result.exit_code == 0, result.output
    lines = dict(re.findall(r"^  (\w+): (.*)$", result.stdout, re.M))
    assert lines["memory_limit_bytes"] == "600 MiB"
    assert lines["samples_per_s"] == "2,050"
    assert lines["training_started"] == time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(1.8e9))
    assert lines["phases"] == f"hpsearch status listed --trial {len(optuna.load_study(study_name='listed', storage=store).trials) - 1}"
    assert "asked_at" not in result.stdout and "e+09" not in result.stdout and "e+03" not in result.stdout


def test_best_says_how_a_halved_trial_ran(store: str) -> None:
    result = CliRunner().invoke(cli, ["best", "listed", "--storage", store])
    lines = dict(re.findall(r"^  (\w+): (.*)$", result.stdout, re.M))
    assert lines["per_device_batch_size"] == "512 (ran as b 256 x A 2 (b 512 ran out of memory))"
    assert lines["ran_as"] == "ran as b 256 x A 2 (b 512 ran out of memory)"


def test_trials_dataframe_gives_each_trials_evaluations_when_asked(store: str) -> None:
    search = hpsearch.load("listed", storage=store)
    assert "curves" not in search.trials_dataframe().columns
    df = search.trials_dataframe(curves=True)
    done = df[df["state"] == "COMPLETE"].iloc[0]
    evaluations = done["curves"]
    assert len(evaluations) == 2 * done["epochs_completed"]  # two evaluations an epoch
    assert [e["samples_seen"] for e in evaluations] == sorted(e["samples_seen"] for e in evaluations)
    assert evaluations[-1]["val_accuracy"] == pytest.approx(done["val_accuracy"])
    assert df["curves"].iloc[-1] == []  # the added trial reported none


def test_the_trial_table_puts_a_regression_studys_loss_with_the_results_not_last() -> None:
    import pandas as pd

    from hpsearch.cli import _fmt, _table_columns

    df = pd.DataFrame({"number": [0, 1], "state": ["COMPLETE", "WAITING"], "lr_rule": ["sqrt", None],
                       "per_device_batch_size": [1024.0, float("nan")], "lr": [0.1, 0.2],
                       "runtime_s": [1.5, None], "device_seconds": [1.5, None],
                       "peak_memory_bytes": [3e8, None], "val_loss": [0.49, None]})
    columns = _table_columns(df, ["val_loss", "runtime_s"])
    # Measured: the loss came after the peak memory, the last column of an 80-column terminal.
    assert columns.index("val_loss") == columns.index("lr") + 1 < columns.index("runtime_s")
    # A column that also holds a trial not yet run is float: b 1024 printed 1.02e+03.
    assert [_fmt(v) for v in df["per_device_batch_size"]] == ["1024", "-"]
    assert _fmt(2048.3) == "2,050" and _fmt(0.01131) == "0.0113"
