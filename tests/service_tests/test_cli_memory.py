"""Memory wherever the CLI shows a trial: the peak in the end-of-search table in a human unit
(within the columns that fit the terminal), ``status --trial N`` with the peak and the batch a
trial ran halved at, ``status``'s reasons in words, ``export`` with the raw bytes, the answer's
memory line and cap, and a study whose every trial ran out of memory saying what to do."""

from __future__ import annotations

import csv
import io
import json

import optuna
import pytest
from click.testing import CliRunner
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

import hpsearch
from hpsearch.cli import _report, cli
from hpsearch.study import format_bytes
from hpsearch.testing import GIB, MIB, SyntheticDevice, SyntheticTruth, synthetic_study

CPU = SyntheticDevice("cpu", memory_bytes=3 * GIB, fixed_bytes=1 * GIB, per_sample_bytes=20 * MIB)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('mem') / 'store.db'}"
    truth = SyntheticTruth(devices=(CPU,), evals_per_epoch=2, world_sizes=(1, 2), accum_steps=(1, 2))
    synthetic_study(url, "skip", n_trials=150, seed=1, truth=truth)
    synthetic_study(url, "halve", n_trials=150, seed=1,
                    truth=SyntheticTruth(devices=(CPU,), evals_per_epoch=2, world_sizes=(1, 2), on_oom="accumulate"))
    return url


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _first(store: str, study: str, **where: object) -> dict[str, object]:
    df = hpsearch.load(study, storage=store).trials_dataframe()
    for column, value in where.items():
        df = df[df[column].notna()] if value is ... else df[df[column] == value]
    return dict(df.iloc[0])


def test_the_trials_table_and_its_export_carry_the_peak_in_bytes(store: str) -> None:
    df = hpsearch.load("skip", storage=store).trials_dataframe()
    done = df[df["state"] == "COMPLETE"]
    assert done["peak_memory_bytes"].notna().all() and (done["peak_memory_bytes"] > GIB).all()
    code, out, _ = _run("export", "skip", "--storage", store, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and all(int(r["peak_memory_bytes"]) > GIB for r in rows if r["state"] == "COMPLETE")
    code, out, _ = _run("export", "skip", "--storage", store, "--format", "json")
    trials = json.loads(out)
    peaks = {t["number"]: t["peak_memory_bytes"] for t in trials if t["state"] == "COMPLETE"}
    assert code == 0 and peaks == {int(r["number"]): int(r["peak_memory_bytes"]) for r in rows
                                   if r["state"] == "COMPLETE"}
    halved = [t for t in json.loads(_run("export", "halve", "--storage", store, "--format", "json")[1]) if t["ran_as"]]
    assert halved and halved[0]["ran_as"]["out_of_memory_at"] >= 128


def test_the_end_of_search_table_shows_the_peak_in_a_human_unit(store: str, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    _report(hpsearch.load("skip", storage=store), False, devices=None)
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "peak memory" in line)
    assert header.startswith("┃")
    peaks = {format_bytes(v) for v in hpsearch.load("skip", storage=store).trials_dataframe()["peak_memory_bytes"]
             if v == v}
    assert any(f" {p} " in out for p in peaks) and "GiB" in out
    assert "exceeds_memory" in out and "out_of_memory" in out
    # A narrow terminal keeps the trial's number, state and objectives, and names what it left out.
    monkeypatch.setenv("COLUMNS", "80")
    _report(hpsearch.load("skip", storage=store), False, devices=None)
    out = capsys.readouterr().out
    assert "not shown at this width: " in out and "peak memory" in out.split("not shown at this width: ")[1]


def test_status_trial_shows_the_peak_and_the_batch_a_trial_ran_halved_at(store: str) -> None:
    halved = _first(store, "halve", ran_as=..., state="COMPLETE")
    code, out, err = _run("status", "halve", "--trial", str(halved["number"]), "--storage", store)
    assert code == 0, err
    ran = halved["ran_as"]
    assert isinstance(ran, dict)
    assert (f"  memory: peak {format_bytes(float(halved['peak_memory_bytes']))} per rank on cpu; ran as b "  # type: ignore[arg-type]
            f"{ran['per_device_batch_size']} x A {ran['grad_accum_steps']}: {ran['out_of_memory_at']} ran out of memory"
            in out)
    code, out, _ = _run("status", "halve", "--trial", str(halved["number"]), "--storage", store, "--json")
    data = json.loads(out)
    assert data["ran_as"] == ran and data["peak_memory_bytes"] == halved["peak_memory_bytes"]


def test_status_trial_shows_why_a_trial_ran_out_or_was_not_started(store: str) -> None:
    out_of_memory = _first(store, "skip", status_reason="out_of_memory")
    code, out, _ = _run("status", "skip", "--trial", str(out_of_memory["number"]), "--storage", store)
    assert code == 0 and ": FAIL\n" in out and "  reason: out_of_memory: out of memory at per-device batch" in out
    skipped = _first(store, "skip", status_reason="exceeds_memory")
    code, out, _ = _run("status", "skip", "--trial", str(skipped["number"]), "--storage", store)
    assert code == 0 and ": PRUNED\n" in out
    assert "  reason: exceeds_memory: per-device batch " in out and "where the same configuration ran out of memory" in out
    assert "  no phases recorded (it never ran)" in out and "  memory: " not in out


def test_status_says_what_each_reason_means(store: str) -> None:
    code, out, _ = _run("status", "skip", "--storage", store)
    summary = hpsearch.load("skip", storage=store).summary()
    assert code == 0
    assert (f"{summary['reasons']['exceeds_memory']} trials exceeds_memory: not started: the same configuration ran "
            "out of memory at this per-device batch or a smaller one") in out
    assert "trials out_of_memory: a rank ran out of memory (the device's, or resources.memory_per_worker" in out
    code, out, _ = _run("status", "skip", "--storage", store, "--json")
    assert json.loads(out)["reasons"] == summary["reasons"] and summary["reasons"]["out_of_memory"] > 0


def test_recommend_prints_the_memory_and_why_the_batch_is_capped(store: str) -> None:
    code, out, err = _run("recommend", "skip", "-n", "2", "--storage", store, "--target", "val_accuracy=0.9")
    assert code == 0, err
    line = next(line for line in out.splitlines() if line.startswith("  mem   "))
    assert "per rank predicted, per-device batch at most 64 on cpu" in line
    assert "  - memory per rank on cpu: " in out and "smallest that ran out 128" in out
    code, out, _ = _run("recommend", "skip", "-n", "2", "--storage", store, "--target", "val_accuracy=0.9", "--json")
    answer = json.loads(out)["recommendation"]
    assert answer["per_device_batch_size"] <= 64 and answer["per_device_batch_cap"] == 64
    assert answer["memory"]["smallest_out_of_memory"] == 128


def test_a_study_whose_trials_all_ran_out_of_memory_says_what_to_do(tmp_path: object) -> None:
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(study_name="full", storage=storage, directions=["maximize"])
    dists = {"per_device_batch_size": CategoricalDistribution([256, 512])}
    study.add_trial(create_trial(state=TrialState.FAIL, params={"per_device_batch_size": 256}, distributions=dists,
                                 user_attrs={"status_reason": "out_of_memory"}))
    for _ in range(2):
        study.add_trial(create_trial(state=TrialState.PRUNED, params={"per_device_batch_size": 512},
                                     distributions=dists, user_attrs={"status_reason": "exceeds_memory"}))
    from hpsearch.study.reasons import no_completion_summary

    line = no_completion_summary(study.get_trials())
    assert line == ("no trial completed: 3 trials, 2 not started (at or above a per-device batch that ran out of "
                    "memory), 1 ran out of memory; most common reason 'exceeds_memory' (2 of 3); lower "
                    "per_device_batch_size, or set search.on_oom: accumulate to run such batches halved with "
                    "accumulation")
