"""The recommendation for N devices: what it picks, what it predicts, what it says it
extrapolated, and its fallback when the laws cannot be fitted."""

from __future__ import annotations

import optuna
import pytest

from hpsearch.analysis import analyze, follow_up_space, recommend
from hpsearch.errors import AnalysisError
from hpsearch.search import Search
from hpsearch.search_spaces import parse_space
from hpsearch.testing import SyntheticTruth, synthetic_study

TRUTH = SyntheticTruth(b_noise=None, alpha=0.5, evals_per_epoch=4, world_sizes=(1, 2, 4))


@pytest.fixture(scope="module")
def search() -> Search:
    return synthetic_study(optuna.storages.InMemoryStorage(), "rec", n_trials=2000, seed=5, truth=TRUTH)


@pytest.fixture(scope="module")
def analysis(search: Search):  # type: ignore[no-untyped-def]
    return analyze(search, ("val_accuracy", TRUTH.target))


def _true_time(b: int, w: int, a: int) -> float:
    batch = b * w * a
    return TRUTH.examples_to_target(batch) / batch * TRUTH.step_time(b, w, a)


def test_the_answer_predicts_its_own_time_to_the_target_within_its_interval_or_ten_percent(analysis) -> None:  # type: ignore[no-untyped-def]
    answer = recommend(analysis, 4)
    truth = _true_time(answer.per_device_batch_size, answer.world_size, answer.grad_accum_steps)
    assert answer.basis == "fitted laws"
    assert answer.time_s == pytest.approx(truth, rel=0.10)
    assert answer.time_interval is not None and answer.time_interval.low <= answer.time_s <= answer.time_interval.high
    assert answer.device_hours == pytest.approx(answer.world_size * answer.time_s / 3600)
    assert answer.effective_batch_size == answer.per_device_batch_size * answer.world_size * answer.grad_accum_steps


def test_the_answer_is_the_fastest_configuration_the_truth_knows_to_within_ten_percent(analysis) -> None:  # type: ignore[no-untyped-def]
    answer = recommend(analysis, 4)
    fastest = min(_true_time(b, w, a) for b in TRUTH.per_device_batches for w in (1, 2, 3, 4) for a in (1, 2, 4, 8)
                  if b * w * a <= 2048)
    assert _true_time(answer.per_device_batch_size, answer.world_size, answer.grad_accum_steps) <= 1.10 * fastest


def test_minimising_device_hours_uses_fewer_devices_than_minimising_time(analysis) -> None:  # type: ignore[no-untyped-def]
    fast = recommend(analysis, 4, minimize="time")
    frugal = recommend(analysis, 4, minimize="device-hours")
    assert frugal.world_size < fast.world_size
    assert frugal.device_hours < fast.device_hours and fast.time_s < frugal.time_s


def test_more_devices_than_any_trial_used_is_an_extrapolation_and_says_so(analysis) -> None:  # type: ignore[no-untyped-def]
    answer = recommend(analysis, 16)
    assert answer.world_size > 4
    assert any("world size" in line for line in answer.extrapolated)
    assert [alt.world_size for alt in answer.alternatives] == [1, 2, 4, 8, 16]


def test_the_per_device_batch_stays_within_what_ran_unless_allowed(analysis) -> None:  # type: ignore[no-untyped-def]
    assert recommend(analysis, 1).per_device_batch_size <= max(TRUTH.per_device_batches)
    larger = recommend(analysis, 1, allow_larger_batch=True)
    assert larger.per_device_batch_size <= 4 * max(TRUTH.per_device_batches)


def test_the_lr_is_the_law_at_the_batch_and_the_rule_states_it(analysis) -> None:  # type: ignore[no-untyped-def]
    from hpsearch.trials.scaling import scaled_lr

    answer = recommend(analysis, 4)
    assert answer.lr == pytest.approx(TRUTH.best_lr(answer.effective_batch_size), rel=0.15)
    assert answer.rule == "sqrt"  # the law's slope is 0.5 everywhere
    assert scaled_lr(answer.rule, answer.base_lr, answer.effective_batch_size, TRUTH.base_batch) == pytest.approx(
        answer.lr)


def test_without_a_critical_batch_fit_the_answer_is_the_best_measured_trial_and_says_why() -> None:
    truth = SyntheticTruth(per_device_batches=(64,), world_sizes=(1, 2), accum_steps=(1,), evals_per_epoch=2)
    search = synthetic_study(optuna.storages.InMemoryStorage(), "narrow", n_trials=60, seed=1, truth=truth)
    answer = recommend(analyze(search, ("val_accuracy", 0.9)), 2)
    assert answer.basis == "measured trials"
    assert any("no prediction from fitted laws" in line and "at least 3 batch sizes" in line
               for line in answer.explanation)
    assert answer.world_size <= 2 and answer.time_interval is None


def test_a_target_nobody_reached_is_a_clear_refusal() -> None:
    search = synthetic_study(optuna.storages.InMemoryStorage(), "far", n_trials=60, seed=1)
    with pytest.raises(AnalysisError, match="no trial on at most 2 device"):
        recommend(analyze(search, ("val_accuracy", 0.999)), 2)


def test_zero_devices_is_refused(analysis) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(AnalysisError, match="devices must be 1 or more"):
        recommend(analysis, 0)


def test_the_follow_up_space_validates_centres_on_the_answer_and_runs_it_first(search: Search, analysis) -> None:  # type: ignore[no-untyped-def]
    answer = recommend(analysis, 4)
    text = follow_up_space(answer, search.space_text, "rec")
    space = parse_space(text)
    assert space.study == "rec-on-4" and space.search.sampler == "grid"
    assert space.search.enqueue[0]["per_device_batch_size"] == answer.per_device_batch_size
    assert space.search.enqueue[0]["world_size"] == answer.world_size
    choices = space.parameters["per_device_batch_size"].choices  # type: ignore[union-attr]
    assert answer.per_device_batch_size in choices and len(choices) == 3
    lrs = space.parameters["base_lr"].choices  # type: ignore[union-attr]
    assert min(lrs) < space.search.enqueue[0]["base_lr"] < max(lrs)
