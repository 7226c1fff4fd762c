"""The synthetic study (``hpsearch.testing``): the records a real search writes, a realistic shape,
every store."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

from hpsearch import Search, load, record
from hpsearch.dashboards.accuracy_vs_batch import accuracy_vs_batch_info
from hpsearch.errors import StudyExistsError
from hpsearch.record import ATTR_N_TRIALS, ATTR_OBJECTIVES, ATTR_SPACE_TEXT, ATTR_VERSIONS
from hpsearch.search_spaces import parse_space
from hpsearch.testing import GIB, HIDDEN_PENALTY, MIB, SyntheticDevice, SyntheticTruth, synthetic_study

# docs/design.md, "What each trial must record".
PARAMS = {"per_device_batch_size", "world_size", "grad_accum_steps", "lr_rule", "base_lr"}
COMPLETE_ATTRS = {
    "effective_batch_size", "base_batch_size", "lr", "warmup_epochs", "val_accuracy", "val_loss", "train_loss",
    "epochs_completed", "samples_seen", "steps", "runtime_s", "train_s", "device_seconds", "samples_per_s",
    "comm_fraction", "device", "curves", "training_started",
}
CURVES = set(record.CURVE_METRICS)


@pytest.fixture(scope="module")
def search() -> Search:
    return synthetic_study(optuna.storages.InMemoryStorage(), "synthetic", n_trials=400, seed=3)


@pytest.fixture(scope="module")
def study(search: Search) -> optuna.Study:
    return search.study


def _by_state(study: optuna.Study, state: str) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if t.state.name == state]


def test_study_keeps_objectives_space_and_target_like_a_real_search(study: optuna.Study) -> None:
    assert study.metric_names == ["val_accuracy", "runtime_s"]
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    assert study.user_attrs[ATTR_OBJECTIVES] == ["val_accuracy", "runtime_s"]
    assert study.user_attrs[ATTR_N_TRIALS] == 400
    assert set(study.user_attrs[ATTR_VERSIONS]) == {"hpsearch", "optuna", "ray", "torch"}
    space = parse_space(study.user_attrs[ATTR_SPACE_TEXT])
    assert space.study == "synthetic"
    assert [o.metric for o in space.objectives] == ["val_accuracy", "runtime_s"]
    assert "no trial was run" in study.user_attrs[ATTR_SPACE_TEXT]


def test_completed_trials_carry_every_contract_attr_curve_and_intermediate_value(study: optuna.Study) -> None:
    done = _by_state(study, "COMPLETE")
    assert len(done) > 300
    for trial in done:
        assert set(trial.params) >= PARAMS
        assert set(trial.user_attrs) >= COMPLETE_ATTRS
        attrs, params = trial.user_attrs, trial.params
        assert attrs["effective_batch_size"] == (
            params["per_device_batch_size"] * params["world_size"] * params["grad_accum_steps"])
        assert trial.values == [attrs["val_accuracy"], attrs["runtime_s"]]
        assert attrs["device_seconds"] == pytest.approx(attrs["runtime_s"] * params["world_size"])
        assert attrs["samples_per_s"] == pytest.approx(attrs["samples_seen"] / attrs["runtime_s"])
        curves = attrs["curves"]
        assert set(curves) == CURVES
        assert len(curves["samples_seen"]) == attrs["epochs_completed"] == 10
        assert curves["samples_seen"][-1] == attrs["samples_seen"]
        assert trial.intermediate_values == dict(zip(curves["samples_seen"], curves["val_accuracy"]))
        # A noise scale only where two gradients can be compared, as the trial engine records it.
        measurable = params["world_size"] * params["grad_accum_steps"] > 1
        assert ("noise_scale" in attrs) == measurable
        assert ("noise_scale_note" in attrs) == (not measurable)


def test_a_few_trials_diverge_and_a_few_are_stopped_early(study: optuna.Study) -> None:
    failed, pruned = _by_state(study, "FAIL"), _by_state(study, "PRUNED")
    assert 0 < len(failed) < 60 and 0 < len(pruned) < 40
    assert {t.user_attrs["status_reason"] for t in failed} == {"diverged"}
    assert {t.user_attrs["status_reason"] for t in pruned} == {"early_stopped"}
    # Divergence comes from an LR far too large: the linear rule at large batches.
    assert all(t.params["lr_rule"] != "constant" for t in failed)
    for trial in pruned:
        assert trial.user_attrs["epochs_completed"] in (1, 3)
        assert len(trial.user_attrs["curves"]["val_accuracy"]) == trial.user_attrs["epochs_completed"]
        assert trial.values is None


def test_accuracy_falls_with_batch_at_constant_lr_and_linear_diverges_at_large_batch(search: Search) -> None:
    df = search.trials_dataframe()
    lines = {line.name: {p.effective_batch_size: p.value for p in line.points}
             for line in accuracy_vs_batch_info(df).lines}
    constant, sqrt = lines["constant"], lines["sqrt"]
    large = max(set(constant) & set(sqrt))
    assert constant[min(constant)] - constant[large] > 0.3
    assert sqrt[large] > constant[large]
    failed = df[df["state"] == "FAIL"]
    assert failed["effective_batch_size"].median() > df["effective_batch_size"].median()


def test_runtime_falls_with_world_size(search: Search) -> None:
    df = search.trials_dataframe()
    done = df[(df["state"] == "COMPLETE") & (df["per_device_batch_size"] == 128) & (df["grad_accum_steps"] == 1)]
    medians = done.groupby("world_size")["runtime_s"].median()
    assert list(medians.index) == [1, 2, 4, 8]
    assert np.all(np.diff(medians.to_numpy()) < 0)


def test_same_seed_writes_the_same_study_and_another_seed_does_not() -> None:
    def frame(seed: int) -> pd.DataFrame:
        return synthetic_study(optuna.storages.InMemoryStorage(), "s", n_trials=40, seed=seed).trials_dataframe(
            all_attrs=True)

    pd.testing.assert_frame_equal(frame(7), frame(7))
    assert not frame(7)["base_lr"].equals(frame(8)["base_lr"])


def test_a_searched_workload_parameter_is_written_and_its_largest_width_trains_fastest() -> None:
    plain = synthetic_study(optuna.storages.InMemoryStorage(), "s", n_trials=40, seed=7)
    truth = SyntheticTruth(hidden_choices=(16, 64))
    wide = synthetic_study(optuna.storages.InMemoryStorage(), "w", n_trials=400, seed=7, truth=truth)
    assert "hidden" not in plain.trials_dataframe().columns  # studies without it keep their draws
    assert parse_space(wide.space_text).parameters["hidden"].choices == (16, 64)  # type: ignore[union-attr]
    df = wide.trials_dataframe()
    assert set(df["hidden"]) == {16, 64}
    # At the best configurations, the narrower width needs HIDDEN_PENALTY more samples: lower
    # accuracy at the first evaluation of the trials that share a batch.
    first = df[df["state"] == "COMPLETE"].assign(
        first=[wide.study.trials[n].user_attrs["curves"]["val_accuracy"][0] for n in df[df["state"] == "COMPLETE"]["number"]])
    best = first.groupby(["effective_batch_size", "hidden"])["first"].max().unstack().dropna()
    assert (best[64] > best[16]).mean() > 0.8 and HIDDEN_PENALTY > 0


def test_bulk_written_store_reads_back_like_optunas_own_writes(storage_url: str, unique_name: str) -> None:
    # The SQL stores take a bulk insert; the in-memory store goes through study.add_trials.
    written = synthetic_study(storage_url, unique_name, n_trials=60, seed=5).study.get_trials()
    reference = synthetic_study(optuna.storages.InMemoryStorage(), unique_name, n_trials=60, seed=5).study.get_trials()
    assert len(written) == len(reference) == 60
    for got, want in zip(written, reference):
        assert (got.number, got.state, got.params, got.distributions) == (
            want.number, want.state, want.params, want.distributions)
        assert got.user_attrs == want.user_attrs
        assert got.values == want.values
        assert got.intermediate_values == want.intermediate_values
        assert (got.datetime_start, got.datetime_complete) == (want.datetime_start, want.datetime_complete)
        assert got.system_attrs == want.system_attrs == {}


def test_study_written_to_a_url_opens_with_load(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/demo.db"
    synthetic_study(url, "demo", n_trials=30)
    summary = load("demo", storage=url).summary()
    assert summary["n_trials"] == 30
    assert summary["best_trial"] is not None and math.isfinite(summary["best_trial"]["values"]["val_accuracy"])


def test_existing_study_name_is_refused() -> None:
    storage = optuna.storages.InMemoryStorage()
    synthetic_study(storage, "taken", n_trials=1)
    with pytest.raises(StudyExistsError, match="'taken'"):
        synthetic_study(storage, "taken", n_trials=1)


def test_studies_drawn_before_memory_was_modelled_draw_the_same_trials() -> None:
    # Pinned from the release before the memory model: the peaks draw from a stream of their
    # own, and no trial of the default device runs out of memory.
    df = synthetic_study(optuna.storages.InMemoryStorage(), "s", n_trials=200, seed=7).trials_dataframe()
    assert df["state"].value_counts().to_dict() == {"COMPLETE": 174, "FAIL": 17, "PRUNED": 9}
    assert df["base_lr"].sum() == pytest.approx(12.311855996566235, rel=1e-12)
    assert df["val_accuracy"].sum() == pytest.approx(124.1875199849201, rel=1e-12)
    assert df["runtime_s"].sum() == pytest.approx(16347.442078198259, rel=1e-12)
    assert df[df["state"] == "FAIL"]["number"].tolist() == [0, 11, 16, 41, 47, 67, 78, 97, 118, 119, 153, 154, 155,
                                                              176, 181, 182, 194]


def test_every_trial_that_trained_records_its_peak_memory_on_the_line_of_its_device(study: optuna.Study) -> None:
    device = SyntheticTruth().devices[0]
    for trial in study.get_trials(deepcopy=False):
        if trial.state.name == "PRUNED":
            continue  # stopped early by ASHA: a trial reports its peak with its last result
        peak = trial.user_attrs["peak_memory_bytes"]
        assert isinstance(peak, int)
        assert peak == pytest.approx(device.peak_bytes(trial.params["per_device_batch_size"]), rel=0.05)


CPU = SyntheticDevice("cpu", memory_bytes=3 * GIB, fixed_bytes=1 * GIB, per_sample_bytes=20 * MIB)


def test_trials_above_the_memory_ceiling_run_out_and_the_search_then_does_not_start_them() -> None:
    search = synthetic_study(optuna.storages.InMemoryStorage(), "m", n_trials=300, seed=1,
                             truth=SyntheticTruth(devices=(CPU,)))
    df = search.trials_dataframe(all_attrs=True)
    out = df[df["status_reason"] == "out_of_memory"]
    skipped = df[df["status_reason"] == "exceeds_memory"]
    assert len(out) and len(skipped)
    assert set(out["state"]) == {"FAIL"} and set(skipped["state"]) == {"PRUNED"}
    assert (out["per_device_batch_size"] >= 128).all() and "needed about" in out["status_detail"].iloc[0]
    assert (df[df["state"] == "COMPLETE"]["per_device_batch_size"] <= 64).all()
    # Each configuration (all but the batch, the accumulation, the LR and the rule) runs out once
    # at its smallest batch above the ceiling; later proposals at or above it are not started, and
    # do not count.
    config = ["world_size"]
    for _, row in skipped.iterrows():
        same = out[(out[config] == row[config]).all(axis=1) & (out["number"] < row["number"])]
        assert len(same) and row["per_device_batch_size"] >= same["per_device_batch_size"].min()
    assert search.summary()["finished"] == 300 == len(df) - len(skipped)
    assert skipped["training_started"].isna().all() and skipped["peak_memory_bytes"].isna().all()
    assert parse_space(search.space_text).resources.memory_per_worker == 3 * GIB  # type: ignore[attr-defined]


def test_with_on_oom_accumulate_a_trial_runs_halved_with_the_same_effective_batch() -> None:
    search = synthetic_study(optuna.storages.InMemoryStorage(), "m", n_trials=300, seed=1,
                             truth=SyntheticTruth(devices=(CPU,), on_oom="accumulate"))
    df = search.trials_dataframe()
    assert not set(df["status_reason"].dropna()) & {"out_of_memory", "exceeds_memory"}
    halved = df[df["ran_as"].notna()]
    assert len(halved)
    for _, row in halved.iterrows():
        ran = row["ran_as"]
        assert ran["out_of_memory_at"] >= 128 and ran["per_device_batch_size"] <= 64
        assert ran["per_device_batch_size"] * ran["grad_accum_steps"] == (
            row["per_device_batch_size"] * row["grad_accum_steps"])
        if row["state"] != "PRUNED":  # stopped early: no last result, no peak
            assert row["peak_memory_bytes"] == pytest.approx(CPU.peak_bytes(ran["per_device_batch_size"]), rel=0.05)


def test_several_device_kinds_each_with_their_own_nodes_and_memory() -> None:
    small = SyntheticDevice("cuda (NVIDIA T4)", memory_bytes=4 * GIB, fixed_bytes=1 * GIB, per_sample_bytes=20 * MIB)
    large = SyntheticDevice(fixed_bytes=1.5 * GIB, speed=4.0)
    df = synthetic_study(optuna.storages.InMemoryStorage(), "k", n_trials=300, seed=2,
                         truth=SyntheticTruth(devices=(small, large))).trials_dataframe()
    ran = df[df["device"].notna()]
    assert set(ran["device"]) == {small.name, large.name}
    assert ran.groupby("node")["device"].nunique().max() == 1  # a node holds one kind
    out = df[df["status_reason"] == "out_of_memory"]
    assert set(out["device"]) == {small.name}
    done = ran[(ran["state"] == "COMPLETE") & (ran["per_device_batch_size"] == 128) & (ran["world_size"] == 1)
               & (ran["grad_accum_steps"] == 1)]
    speeds = done.groupby("device")["train_s"].median()
    assert speeds[small.name] > 3 * speeds[large.name]
