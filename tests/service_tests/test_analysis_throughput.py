"""The step-time model recovers a known device's throughput and says what it extrapolates."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from hpsearch.analysis._step_time import fit_throughput
from hpsearch.errors import AnalysisError

Floats = NDArray[np.float64]

# A device with a 20 ms fixed cost per micro-step, 0.5 ms per sample and a 50 ms ring
# all-reduce; a study of 24 trials drawn over b, W and A as a search would, and step times
# scattering 4% (the median step time of a trial on a shared machine).
T0, T1, T_AR = 0.02, 0.0005, 0.05
B = np.array([8, 16, 32, 64, 128, 256], dtype=np.float64)
W = np.array([1, 2, 4, 8], dtype=np.float64)
A = np.array([1, 2, 4], dtype=np.float64)


def _true_step(b: Floats, w: Floats, a: Floats) -> Floats:
    return np.asarray(a * (T0 + T1 * b) + T_AR * 2 * (w - 1) / w, dtype=np.float64)


def _study(rng: np.random.Generator, n: int = 24, worlds: Floats = W) -> tuple[Floats, ...]:
    b, w, a = rng.choice(B, n), rng.choice(worlds, n), rng.choice(A, n)
    return b, w, a, _true_step(b, w, a) * np.exp(rng.normal(0.0, 0.04, n))


def test_samples_per_s_is_recovered_within_ten_percent() -> None:
    grid = tuple(np.meshgrid(B, W, A))
    truth = grid[0] * grid[1] * grid[2] / _true_step(*grid)
    errors = []
    for seed in range(20):
        model = fit_throughput(*_study(np.random.default_rng(seed)), n_boot=100, seed=seed)
        errors.append(np.max(np.abs(model.samples_per_s(*grid) / truth - 1)))

    # Worst configuration of the 72, per study: median 2.6%, worst study 6.2%.
    assert np.median(errors) < 0.10
    assert model.t1 == pytest.approx(T1, rel=0.1)
    assert model.allreduce_measured and model.world_sizes == (1, 2, 4, 8)


def test_step_time_interval_covers_the_truth_most_of_the_time() -> None:
    covered = []
    for seed in range(100):
        model = fit_throughput(*_study(np.random.default_rng(seed)), n_boot=200, seed=seed)
        low, high = np.quantile(model.step_time_draws(64.0, 4.0, 2.0), [0.05, 0.95])
        covered.append(low <= _true_step(np.array(64.0), np.array(4.0), np.array(2.0)) <= high)
    # Measured 0.84 over these 100 (0.85 over 200) (the non-negativity constraint and 1/t weights make the
    # bootstrap slightly narrow); a prediction interval is for orientation, not a test.
    assert 0.75 <= np.mean(covered) <= 0.99


def test_step_time_counts_one_allreduce_per_step_not_per_micro_step() -> None:
    model = fit_throughput(*_study(np.random.default_rng(0)), n_boot=100)

    one = model.step_time(32.0, 8.0, 1.0)
    four = model.step_time(32.0, 8.0, 4.0)

    # Four micro-steps cost four computes but one all-reduce.
    assert four - 4 * one == pytest.approx(-3 * model.t_ar * 2 * 7 / 8)
    assert model.samples_per_s(32.0, 8.0, 4.0) == pytest.approx(32 * 8 * 4 / four)


def test_extrapolations_name_what_is_outside_the_data() -> None:
    model = fit_throughput(*_study(np.random.default_rng(1)), n_boot=100)

    assert model.extrapolations(64, 4, 2) == ()
    reasons = model.extrapolations(1024, 16, 8)
    assert reasons == (
        "per-device batch 1024 is outside the range that ran (8 to 256)",
        "world size 16 is larger than any that ran (up to 8)",
        "accumulation steps 8 are outside the range that ran (1 to 4)",
    )


def test_single_device_trials_predict_many_devices_with_unmeasured_communication() -> None:
    rng = np.random.default_rng(2)
    model = fit_throughput(*_study(rng, worlds=np.array([1.0])), n_boot=100)

    assert not model.allreduce_measured and model.t_ar == 0.0
    assert model.note is not None and "unmeasured" in model.note
    # The prediction is the compute alone, and it says so.
    assert model.step_time(32.0, 4.0, 1.0) == pytest.approx(model.step_time(32.0, 1.0, 1.0))
    (reason,) = model.extrapolations(32, 4, 1)
    assert reason.startswith("communication is unmeasured: every trial ran on one device (W = 1)")


def test_fewer_than_three_trials_is_refused_with_the_count() -> None:
    with pytest.raises(AnalysisError, match=r"at least 3 trials; got 2"):
        fit_throughput([8, 16], [1, 1], [1, 1], [0.1, 0.2])


def test_one_per_device_batch_is_refused_as_unidentifiable() -> None:
    with pytest.raises(AnalysisError, match=r"2 or more per-device batch sizes.*every trial ran b = 32"):
        fit_throughput([32, 32, 32], [1, 2, 4], [1, 1, 1], [0.1, 0.15, 0.18])


def test_bad_arguments_are_refused_naming_what_is_wrong() -> None:
    with pytest.raises(AnalysisError, match=r"lengths differ"):
        fit_throughput([8, 16, 32], [1, 1], [1, 1, 1], [0.1, 0.2, 0.3])
    with pytest.raises(AnalysisError, match=r"world sizes are at least 1; got 0.5"):
        fit_throughput([8, 16, 32], [1, 0.5, 1], [1, 1, 1], [0.1, 0.2, 0.3])
    with pytest.raises(AnalysisError, match=r"step times must be finite"):
        fit_throughput([8, 16, 32], [1, 1, 1], [1, 1, 1], [0.1, float("inf"), 0.3])


# The same device on nodes of 8: an all-reduce across nodes of 150 ms, three times the one within.
T_AR_INTER = 0.15


def _spanning_study(rng: np.random.Generator, n: int = 32) -> tuple[Floats, ...]:
    b, w, a = rng.choice(B, n), rng.choice(np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0]), n), rng.choice(A, n)
    nodes = np.ceil(w / 8)
    truth = a * (T0 + T1 * b) + np.where(nodes > 1, T_AR_INTER, T_AR) * 2 * (w - 1) / w
    return b, w, a, truth * np.exp(rng.normal(0.0, 0.04, n)), nodes


def test_the_all_reduce_across_nodes_is_recovered_within_ten_percent() -> None:
    errors = []
    for seed in range(20):
        b, w, a, t, nodes = _spanning_study(np.random.default_rng(seed))
        model = fit_throughput(b, w, a, t, nodes=nodes, n_boot=100, seed=seed)
        errors.append(abs(model.t_ar_inter / T_AR_INTER - 1))
        assert model.inter_node_measured and model.allreduce_measured and model.node_counts == (1, 2, 4)
    assert np.median(errors) < 0.10
    # Across nodes the step pays the slower link: at 16 devices, more than within one node would.
    assert model.step_time(32.0, 16.0, 1.0, nodes=2) > model.step_time(32.0, 16.0, 1.0, nodes=1)
    low, high = np.quantile(model.step_time_draws(32.0, 16.0, 1.0, nodes=2), [0.05, 0.95])
    assert low < model.step_time(32.0, 16.0, 1.0, nodes=2) < high


def test_trials_on_one_node_fit_as_the_model_without_nodes_did() -> None:
    b, w, a, t = _study(np.random.default_rng(3))
    without = fit_throughput(b, w, a, t, n_boot=100, seed=3)
    on_one = fit_throughput(b, w, a, t, nodes=np.ones_like(b), n_boot=100, seed=3)
    assert (without.t0, without.t1, without.t_ar, without.note) == (on_one.t0, on_one.t1, on_one.t_ar, on_one.note)
    assert np.array_equal(without.coefficient_draws, on_one.coefficient_draws, equal_nan=True)
    assert not on_one.inter_node_measured and on_one.t_ar_inter == 0.0
    # Asked across nodes, it predicts with the all-reduce it measured within one, and says so.
    assert on_one.step_time(32.0, 16.0, 1.0, nodes=2) == on_one.step_time(32.0, 16.0, 1.0)
    (reason,) = [r for r in on_one.extrapolations(32, 16, 1, nodes=2) if "node" in r]
    assert reason.startswith("the all-reduce across nodes is unmeasured: no trial spanned nodes, so the step time "
                             "on 2 nodes uses the all-reduce measured within one node (a lower bound")


def test_trials_of_several_devices_that_all_spanned_nodes_leave_the_one_within_a_node_unmeasured() -> None:
    b = np.array([8.0, 64.0, 8.0, 64.0, 32.0])
    w = np.array([1.0, 1.0, 16.0, 16.0, 16.0])
    nodes = np.array([1.0, 1.0, 2.0, 2.0, 2.0])
    t = T0 + T1 * b + np.where(nodes > 1, T_AR_INTER, 0.0) * 2 * (w - 1) / w
    model = fit_throughput(b, w, np.ones(5), t, nodes=nodes, n_boot=100)
    assert model.inter_node_measured and not model.allreduce_measured
    assert model.t_ar_inter == pytest.approx(T_AR_INTER, rel=1e-6)
    assert model.note is not None and "within one node is unmeasured" in model.note
    # On one node it predicts with the cost across nodes, an upper bound, and says so.
    assert model.step_time(32.0, 8.0, 1.0) == pytest.approx(T0 + T1 * 32 + T_AR_INTER * 2 * 7 / 8)
    assert any(r.startswith("the all-reduce within one node is unmeasured") for r in model.extrapolations(32, 8, 1))


def test_more_nodes_than_devices_is_refused() -> None:
    with pytest.raises(AnalysisError, match=r"at least one device per node; got world size 2 on 4 nodes"):
        fit_throughput([8, 16, 32], [1, 2, 4], [1, 1, 1], [0.1, 0.2, 0.3], nodes=[1, 4, 1])
    model = fit_throughput([8, 16, 32], [1, 1, 1], [1, 1, 1], [0.1, 0.2, 0.3])
    with pytest.raises(AnalysisError, match=r"at least one device per node"):
        model.step_time(8.0, 2.0, 1.0, nodes=4)
