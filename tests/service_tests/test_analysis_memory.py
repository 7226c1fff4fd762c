"""Memory in the answer: the peak's line per device kind and configuration, the largest
per-device batch that fit and the smallest that ran out, and a recommendation that never goes
above what fit and says why. Through ``search.analyze`` and ``search.recommend``, as a user calls
them, on synthetic studies whose trials run out of memory above a known ceiling."""

from __future__ import annotations

import math

import optuna
import pandas as pd
import pytest

from hpsearch.analysis import MEMORY_MARGIN, MemoryLimits, StudyAnalysis, memory_models, recommend
from hpsearch.search import Search
from hpsearch.testing import GIB, MIB, SyntheticDevice, SyntheticTruth, synthetic_study

#: A CPU rank may hold 3 GiB (resources.memory_per_worker): 1 GiB + 20 MiB x b fits up to b 102,
#: so 32 and 64 fit and 128 runs out.
CPU = SyntheticDevice("cpu", memory_bytes=3 * GIB, fixed_bytes=1 * GIB, per_sample_bytes=20 * MIB)
TRUTH = SyntheticTruth(devices=(CPU,), evals_per_epoch=2, world_sizes=(1, 2, 4, 8))
TARGET = "val_accuracy=0.9"


def _study(truth: SyntheticTruth, n_trials: int = 600, seed: int = 3) -> Search:
    return synthetic_study(optuna.storages.InMemoryStorage(), "mem", n_trials=n_trials, seed=seed, truth=truth)


@pytest.fixture(scope="module")
def search() -> Search:
    return _study(TRUTH)


@pytest.fixture(scope="module")
def analysis(search: Search) -> StudyAnalysis:
    return search.analyze(TARGET)


def test_the_analysis_finds_the_peaks_line_and_what_fit_and_ran_out(analysis: StudyAnalysis) -> None:
    model, = analysis.memory  # one kind, one configuration
    assert model.device == "cpu"
    assert model.largest_fit == 64 and model.smallest_out_of_memory == 128
    assert model.out_of_memory_trials and model.n_trials > 300
    assert model.fixed_bytes == pytest.approx(CPU.fixed_bytes, rel=0.05)
    assert model.per_sample_bytes == pytest.approx(CPU.per_sample_bytes, rel=0.05)
    # The space's resources.memory_per_worker is what a rank may hold: the line predicts the
    # largest batch under it, with a margin.
    assert model.limit_bytes == 3 * GIB and model.limit_source == "resources.memory_per_worker"
    truth_largest = math.floor((3 * GIB / (1 + MEMORY_MARGIN) - CPU.fixed_bytes) / CPU.per_sample_bytes)
    assert model.predicted_largest is not None and abs(model.predicted_largest - truth_largest) <= 3
    assert 64 <= model.predicted_largest < 128


@pytest.mark.parametrize("devices", [1, 2, 4, 8])
def test_the_answer_never_goes_above_the_largest_batch_that_fit(search: Search, analysis: StudyAnalysis,
                                                                 devices: int) -> None:
    answer = search.recommend(devices, analysis=analysis)
    assert answer.per_device_batch_size <= 64
    assert answer.per_device_batch_cap == 64
    assert answer.memory is not None and answer.memory.smallest_out_of_memory == 128
    assert answer.peak_memory_bytes is not None and answer.peak_memory_bytes < 3 * GIB


@pytest.mark.parametrize("devices", [1, 8])
def test_a_larger_batch_allowed_stays_below_what_ran_out_and_what_the_fit_predicts(
        search: Search, analysis: StudyAnalysis, devices: int) -> None:
    answer = search.recommend(devices, analysis=analysis, allow_larger_batch=True)
    model = answer.memory
    assert model is not None and model.predicted_largest is not None
    assert answer.per_device_batch_size <= model.predicted_largest < 128
    assert answer.per_device_batch_cap == model.predicted_largest
    assert answer.peak_memory_bytes is not None and answer.peak_memory_bytes * (1 + MEMORY_MARGIN) <= 3 * GIB
    if answer.per_device_batch_size > 64:  # beyond what ran: said, with the fit's prediction
        assert any("has not run on cpu: the memory fit predicts" in line for line in answer.extrapolated)


def test_the_answer_says_why_its_batch_is_capped_and_keeps_the_effective_batch_by_accumulating(
        search: Search, analysis: StudyAnalysis) -> None:
    lines = {n: search.recommend(n, analysis=analysis).explanation for n in (1, 2, 4, 8)}
    capped = [n for n, why in lines.items() if "per-device batch capped at 64: 128 ran out of memory on cpu" in why]
    assert capped, lines  # the fastest configurations want b 128 on this study's step times
    for n in capped:
        answer = search.recommend(n, analysis=analysis)
        kept = [line for line in answer.explanation if "would not fit, so the answer keeps the effective batch" in line]
        if kept:  # same B and W, half the per-device batch, twice the accumulation
            assert f"b {answer.per_device_batch_size} x A {answer.grad_accum_steps}" in kept[0]
            assert answer.grad_accum_steps >= 2
        else:
            assert any("is left out: it would not fit in memory on cpu" in line for line in answer.explanation)
    assert any(line.startswith("memory per rank on cpu: ") for line in lines[1])


def test_the_memory_facts_travel_in_both_json_answers(search: Search, analysis: StudyAnalysis) -> None:
    data = analysis.to_dict()["memory"]
    assert [(m["device"], m["largest_fit"], m["smallest_out_of_memory"], m["cap"]) for m in data] == [
        ("cpu", 64, 128, 64)]
    assert data[0]["summary"].startswith("memory per rank on cpu: ")
    answer = search.recommend(4, analysis=analysis).to_dict()
    assert answer["per_device_batch_cap"] == 64 and answer["memory"]["smallest_out_of_memory"] == 128
    assert answer["peak_memory_bytes"] > 0 and answer["params"]["per_device_batch_size"] <= 64


def test_trials_the_search_did_not_start_are_not_counted_as_trials_that_ran(search: Search,
                                                                           analysis: StudyAnalysis) -> None:
    df = search.trials_dataframe()
    not_started = int((df["status_reason"] == "exceeds_memory").sum())
    assert not_started and analysis.n_trials == len(df) - not_started
    answer = search.recommend(1, analysis=analysis)
    assert "trials reached it" in answer.explanation[1] and f"of {len(df) - not_started} trials" in answer.explanation[1]


def test_out_of_memory_trials_neither_count_as_lrs_tried_nor_break_a_rule(analysis: StudyAnalysis) -> None:
    trained = {(t["lr_rule"], t["effective_batch_size"]) for t in analysis.trials
               if t["status_reason"] not in ("out_of_memory", "exceeds_memory")}
    for report in analysis.rules:
        for point in report.points:
            assert (report.rule, point.effective_batch_size) in trained, (report.rule, point)


def test_trials_run_halved_count_at_the_batch_they_ran_and_say_where_memory_ran_out() -> None:
    search = _study(SyntheticTruth(devices=(CPU,), evals_per_epoch=2, world_sizes=(1, 2, 4), on_oom="accumulate"))
    df = search.trials_dataframe()
    assert "out_of_memory" not in set(df["status_reason"].dropna())  # every one ran, halved where it had to
    analysis = search.analyze(TARGET)
    halved = [t for t in analysis.trials if t["out_of_memory_at"] is not None]
    assert halved and all(t["per_device_batch_size"] <= 64 for t in analysis.trials if t["per_device_batch_size"])
    assert all(t["per_device_batch_size"] * t["grad_accum_steps"] * t["world_size"] == t["effective_batch_size"]
               for t in halved)
    model, = analysis.memory
    assert model.largest_fit == 64 and model.smallest_out_of_memory == 128
    for devices in (1, 4):
        for larger in (False, True):
            answer = search.recommend(devices, analysis=analysis, allow_larger_batch=larger)
            assert answer.per_device_batch_size < 128


def test_each_configuration_has_its_own_memory_and_the_answer_keeps_below_its_own() -> None:
    # Activations scale with the width: hidden 64 runs out at 128, hidden 16 (a quarter of the
    # activations) at 512.
    search = _study(SyntheticTruth(devices=(CPU,), evals_per_epoch=2, world_sizes=(1, 2, 4), hidden_choices=(16, 64)),
                    n_trials=800)
    analysis = search.analyze(TARGET)
    by_width = {m.configuration["hidden"]: m for m in analysis.memory}
    assert by_width[64].smallest_out_of_memory == 128 and by_width[64].largest_fit == 64
    assert by_width[16].smallest_out_of_memory == 512 and by_width[16].largest_fit == 256
    assert by_width[16].per_sample_bytes == pytest.approx(CPU.per_sample_bytes / 4, rel=0.05)
    for devices in (1, 4):
        answer = search.recommend(devices, analysis=analysis)
        own = analysis.memory_model("cpu", answer.other_params)
        assert own is not None and own.configuration == {"hidden": answer.other_params["hidden"]}
        assert answer.per_device_batch_size <= (own.cap() or math.inf)
        assert answer.memory == own


def test_each_device_kind_has_its_own_memory() -> None:
    small = SyntheticDevice("cuda (NVIDIA T4)", memory_bytes=4 * GIB, fixed_bytes=1 * GIB, per_sample_bytes=20 * MIB)
    large = SyntheticDevice("cuda (NVIDIA H100 80GB HBM3)", fixed_bytes=1.5 * GIB, per_sample_bytes=20 * MIB, speed=4.0)
    search = _study(SyntheticTruth(devices=(small, large), evals_per_epoch=2, world_sizes=(1, 2, 4)), n_trials=800)
    analysis = search.analyze(TARGET)
    kinds = {m.device: m for m in analysis.memory}
    assert set(kinds) == {small.name, large.name}
    assert kinds[small.name].smallest_out_of_memory == 256 and kinds[large.name].smallest_out_of_memory is None
    assert kinds[large.name].fixed_bytes == pytest.approx(1.5 * GIB, rel=0.05)
    # The small GPU's trials recorded its memory: the line predicts what fits in it.
    assert kinds[small.name].limit_bytes == 4 * GIB and kinds[small.name].limit_source == "the GPU's total memory"
    assert kinds[small.name].predicted_largest is not None and 128 <= kinds[small.name].predicted_largest < 256
    assert kinds[large.name].limit_bytes is None and kinds[large.name].predicted_largest is None
    answer = recommend(analysis, 2, device_kind=small.name)
    assert answer.per_device_batch_size < 256 and answer.memory == kinds[small.name]


def test_a_trial_that_ran_out_before_reporting_its_device_counts_for_its_nodes_kind() -> None:
    frame = pd.DataFrame({
        "number": [0, 1, 2, 3, 4], "state": ["COMPLETE", "COMPLETE", "FAIL", "COMPLETE", "FAIL"],
        "status_reason": [None, None, "out_of_memory", None, "out_of_memory"],
        "per_device_batch_size": [64, 128, 256, 512, 1024],
        "device": ["cpu", "cpu", None, "cuda (NVIDIA H100 80GB HBM3)", None],
        "node_id": ["a", "a", "a", "b", "b"],
        "peak_memory_bytes": [1.0e9, 1.5e9, None, 20e9, None],
    })
    models = {m.device: m for m in memory_models(frame)}
    assert models["cpu"].smallest_out_of_memory == 256 and models["cpu"].largest_fit == 128
    assert models["cuda (NVIDIA H100 80GB HBM3)"].smallest_out_of_memory == 1024
    # One batch measured on the GPU: no line, and it says why.
    assert not models["cuda (NVIDIA H100 80GB HBM3)"].has_line
    assert "a line needs two" in (models["cuda (NVIDIA H100 80GB HBM3)"].note or "")


def test_the_follow_up_space_tries_no_batch_that_ran_out_of_memory(search: Search, analysis: StudyAnalysis) -> None:
    from hpsearch.analysis import follow_up_space
    from hpsearch.search_spaces import parse_space

    answer = search.recommend(8, analysis=analysis)
    space = parse_space(follow_up_space(answer, search.space_text, "mem"))
    choices = space.parameters["per_device_batch_size"].choices  # type: ignore[union-attr]
    assert answer.per_device_batch_size in choices and max(choices) < 128


def test_trials_sharing_a_gpu_count_on_their_share_of_its_memory() -> None:
    frame = pd.DataFrame({
        "number": [0, 1, 2], "state": ["COMPLETE"] * 3, "per_device_batch_size": [64, 128, 256],
        "device": ["cuda (NVIDIA H100 80GB HBM3)"] * 3, "peak_memory_bytes": [3 * GIB, 5 * GIB, 9 * GIB],
        "memory_limit_bytes": [80 * GIB] * 3,
    })
    alone, = memory_models(frame)
    shared, = memory_models(frame, limits=MemoryLimits(gpu_share=0.25))
    assert alone.limit_bytes == 80 * GIB and shared.limit_bytes == 20 * GIB
    assert "x gpus_per_worker 0.25 (trials share the GPU)" in (shared.limit_source or "")
    # 1 GiB + 32 MiB x b: 20 GiB less the margin holds b 577, 80 GiB b 2406.
    assert shared.predicted_largest == 577 and alone.predicted_largest == 2406
    assert shared.cap(allow_larger=True) == 577 and shared.cap() == 256


def test_a_fused_groups_peak_counts_as_a_fit_and_stays_out_of_the_line() -> None:
    # Solo trials on the line 1 GiB + 4 MiB x b; fused members at b 64 recorded their group's
    # process (8 members: far above any one of them).
    frame = pd.DataFrame({
        "number": [0, 1, 2, 3, 4], "state": ["COMPLETE"] * 5, "status_reason": [None] * 5,
        "per_device_batch_size": [16, 32, 64, 64, 128], "device": ["cpu"] * 5,
        "peak_memory_bytes": [GIB + 16 * 4 * MIB, GIB + 32 * 4 * MIB, 6 * GIB, 6 * GIB, GIB + 128 * 4 * MIB],
        "fused_members": [None, None, 8, 8, None],
    })
    (model,) = memory_models(frame)

    assert model.largest_fit == 128 and model.batches == (16, 32, 128)
    assert model.per_sample_bytes == pytest.approx(4 * MIB, rel=1e-6)
    assert "2 fused trials' peaks left out of the line" in model.describe()
