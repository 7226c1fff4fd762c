"""Trials that span nodes: the step-time model learns the all-reduce across nodes apart from the
one within a node, and the answer for N devices names the nodes it assumes, predicts with the
cost across them, and says when that cost was never measured."""

from __future__ import annotations

import math

import optuna
import pytest

from hpsearch.analysis import StudyAnalysis, analyze, recommend
from hpsearch.errors import AnalysisError
from hpsearch.testing import SyntheticTruth, synthetic_study

# Compute heavy enough (2 ms a sample) that 16 devices beat 8 even across nodes, and an
# all-reduce across nodes twice the one within a node: the answer on 16 devices of nodes of 8
# spans two nodes, and its step time holds the inter-node term.
SPANNING = SyntheticTruth(b_noise=None, alpha=0.5, evals_per_epoch=4, t1=1 / 500, t_allreduce=0.015,
                          t_allreduce_inter=0.03, world_sizes=(1, 2, 4, 8, 16), devices_per_node=8)
#: The same cluster and laws, where no trial was wider than a node.
ONE_NODE = SyntheticTruth(b_noise=None, alpha=0.5, evals_per_epoch=4, t1=1 / 500, t_allreduce=0.015,
                          t_allreduce_inter=0.03, world_sizes=(1, 2, 4, 8), devices_per_node=8)


def _analysis(truth: SyntheticTruth) -> StudyAnalysis:
    search = synthetic_study(optuna.storages.InMemoryStorage(), "nodes", n_trials=800, seed=6, truth=truth)
    return analyze(search, ("val_accuracy", truth.target))


@pytest.fixture(scope="module")
def spanning() -> StudyAnalysis:
    return _analysis(SPANNING)


@pytest.fixture(scope="module")
def one_node() -> StudyAnalysis:
    return _analysis(ONE_NODE)


def test_the_all_reduce_across_nodes_is_learned_apart_from_the_one_within_a_node(spanning: StudyAnalysis) -> None:
    model = spanning.throughput[spanning.device_kind or ""]
    assert model.inter_node_measured and model.node_counts == (1, 2)
    assert model.t_ar_inter == pytest.approx(SPANNING.t_allreduce_inter, rel=0.10)
    assert model.t_ar == pytest.approx(SPANNING.t_allreduce, rel=0.10)
    assert model.t_ar_inter_interval.low <= model.t_ar_inter <= model.t_ar_inter_interval.high
    data = spanning.to_dict()["throughput"][spanning.device_kind]
    assert data["inter_node_measured"] and data["t_allreduce_inter"] == model.t_ar_inter


def test_sixteen_devices_on_nodes_of_eight_are_predicted_with_the_cost_across_nodes(spanning: StudyAnalysis) -> None:
    answer = recommend(spanning, 16, devices_per_node=8)
    assert answer.layout is not None and str(answer.layout) == "16 devices on 2 nodes of 8"
    assert not answer.layout.assumed
    assert answer.world_size == 16 and answer.nodes == 2
    b, a = answer.per_device_batch_size, answer.grad_accum_steps
    true_step = SPANNING.step_time(b, 16, a, nodes=2)
    assert answer.step_time_s == pytest.approx(true_step, rel=0.10)
    # What a model without the term would have said is well off: the test tells them apart.
    assert abs(SPANNING.step_time(b, 16, a, nodes=1) / true_step - 1) > 0.10
    assert not any("node" in line for line in answer.extrapolated)
    assert any(line.startswith("layout: 16 devices on 2 nodes of 8 (given)") for line in answer.explanation)
    data = answer.to_dict()
    assert data["layout"]["text"] == "16 devices on 2 nodes of 8" and data["nodes"] == 2


def test_throughput_across_nodes_matches_the_known_model(spanning: StudyAnalysis) -> None:
    model = spanning.throughput[spanning.device_kind or ""]
    for b in SPANNING.per_device_batches:
        truth = b * 16 / SPANNING.step_time(b, 16, 1, nodes=2)
        assert model.samples_per_s(b, 16, 1, nodes=2) == pytest.approx(truth, rel=0.10)


def test_without_a_trial_across_nodes_the_answer_says_that_cost_is_unmeasured(one_node: StudyAnalysis) -> None:
    model = one_node.throughput[one_node.device_kind or ""]
    assert not model.inter_node_measured
    answer = recommend(one_node, 16, devices_per_node=8)
    assert str(answer.layout) == "16 devices on 2 nodes of 8"
    spans = [answer.extrapolated] if answer.nodes > 1 else []
    spans += [alt.extrapolated for alt in answer.alternatives if alt.world_size > 8]
    assert spans and all(any("across nodes is unmeasured: no trial spanned nodes" in line for line in reasons)
                         for reasons in spans)
    assert any("the all-reduce across nodes was never measured" in line for line in answer.explanation)
    # Predicted with the all-reduce within a node: a lower bound on the step across nodes.
    assert model.step_time(64, 16, 1, nodes=2) < SPANNING.step_time(64, 16, 1, nodes=2)


def test_more_nodes_than_any_trial_spanned_is_an_extrapolation(spanning: StudyAnalysis) -> None:
    answer = recommend(spanning, 32, devices_per_node=8)
    assert str(answer.layout) == "32 devices on 4 nodes of 8"
    widest = next(alt for alt in answer.alternatives if alt.world_size == 32)
    assert any("4 nodes are more than any trial spanned (up to 2)" in line for line in widest.extrapolated)


def test_the_devices_per_node_default_is_the_most_a_trial_ran_on_one_node_said_as_assumed(
        spanning: StudyAnalysis) -> None:
    answer = recommend(spanning, 16)
    assert answer.layout is not None and answer.layout.assumed
    on_one_node = [t for t in spanning.trials if t["device"] is not None and t["nodes"] == 1]
    assert answer.layout.devices_per_node == max(int(t["devices"]) for t in on_one_node) == 8
    assert answer.layout.source.startswith("assumed from trial #")
    assert answer.layout.source.endswith("8 devices on one node, the most any trial of the study ran")


def test_fewer_devices_than_a_node_holds_stay_on_one_node(spanning: StudyAnalysis) -> None:
    answer = recommend(spanning, 8, devices_per_node=8)
    assert str(answer.layout) == "8 devices on 1 node of 8" and answer.nodes == 1
    assert answer.step_time_s == pytest.approx(
        SPANNING.step_time(answer.per_device_batch_size, answer.world_size, answer.grad_accum_steps), rel=0.10)


def test_a_study_recorded_before_trials_spanned_nodes_answers_as_if_on_one_node() -> None:
    # No trial recorded ``nodes``: each reads as one node, and the step-time model is the one
    # of one node, whatever the layout asked for.
    truth = SyntheticTruth(evals_per_epoch=2, world_sizes=(1, 2, 4))
    analysis = _analysis(truth)
    assert all(t["nodes"] == 1 for t in analysis.trials)
    model = analysis.throughput[analysis.device_kind or ""]
    assert not model.inter_node_measured and model.node_counts == (1,)
    assert model.step_time(64, 8, 1, nodes=2) == model.step_time(64, 8, 1)
    answer = recommend(analysis, 8)
    assert answer.layout is not None and answer.layout.devices_per_node == 4
    assert answer.time_s == recommend(analysis, 8, devices_per_node=8).time_s


@pytest.mark.parametrize("bad", [0, -8])
def test_devices_per_node_below_one_is_refused(spanning: StudyAnalysis, bad: int) -> None:
    with pytest.raises(AnalysisError, match=rf"devices per node must be a whole number of 1 or more, got {bad}"):
        recommend(spanning, 16, devices_per_node=bad)


def test_a_synthetic_trial_wider_than_a_node_records_the_nodes_it_spanned() -> None:
    search = synthetic_study(optuna.storages.InMemoryStorage(), "wide", n_trials=60, seed=1, truth=SPANNING)
    ran = [t for t in search.study.get_trials(deepcopy=False) if "node_id" in t.user_attrs]
    assert {t.user_attrs["nodes"] for t in ran} == {1, 2}
    for trial in ran:
        ids = trial.user_attrs["node_ids"]
        assert trial.user_attrs["nodes"] == math.ceil(trial.params["world_size"] / 8) == len(set(ids)) == len(ids)
        assert ids[0] == trial.user_attrs["node_id"]  # rank 0's node first


def test_a_synthetic_world_size_wider_than_the_cluster_is_refused() -> None:
    truth = SyntheticTruth(world_sizes=(1, 64), devices_per_node=8)
    with pytest.raises(ValueError, match="world size 64 needs 8 nodes of 8 devices; the synthetic cluster has 4"):
        synthetic_study(optuna.storages.InMemoryStorage(), "x", n_trials=1, truth=truth)
