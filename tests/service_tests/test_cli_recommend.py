"""``hpsearch recommend``: the answer for N devices from the command line, as text and JSON, the
follow-up space, and bad input as one clear line with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpsearch.cli import cli
from hpsearch.search_spaces import load_space
from hpsearch.testing import SURGE_TRUTH, SyntheticTruth, synthetic_study


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('rec') / 'store.db'}"
    synthetic_study(url, "demo", n_trials=600, seed=4, truth=SyntheticTruth(evals_per_epoch=2, world_sizes=(1, 2)))
    return url


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_recommend_prints_what_to_run_its_cost_and_why(store: str) -> None:
    code, out, err = _run("recommend", "demo", "--devices", "8", "--storage", store, "--target", "val_accuracy=0.9")
    assert code == 0, err
    assert "recommendation for 8 devices" in out and "val_accuracy >= 0.9" in out
    assert "run   b " in out and " x W " in out and "lr " in out
    assert "cost " in out and "device-hours" in out and "samples" in out
    # 8 devices, where the study ran at most 2: the answer says what it extrapolated.
    assert "extrapolated: world size" in out
    assert "critical batch B_crit" in out and "best configuration per world size" in out


def test_recommend_json_holds_the_answer_and_the_analysis(store: str) -> None:
    code, out, _ = _run("recommend", "demo", "-n", "2", "--storage", store, "--minimize", "device-hours", "--json")
    assert code == 0
    data = json.loads(out)
    answer = data["recommendation"]
    assert answer["devices"] == 2 and answer["minimize"] == "device-hours" and answer["world_size"] <= 2
    assert len(answer["time_interval"]) == 2 and answer["basis"] == "fitted laws"
    assert data["analysis"]["target"]["source"] == "default" and data["analysis"]["critical_batch"]["b_crit"] > 0


def test_recommend_writes_a_follow_up_space_that_validates(store: str, tmp_path: Path) -> None:
    out_file = tmp_path / "next.yaml"
    code, out, _ = _run("recommend", "demo", "-n", "4", "--storage", store, "--space", str(out_file))
    assert code == 0 and f"follow-up space: {out_file}" in out
    space = load_space(out_file)
    assert space.search.enqueue and space.search.enqueue[0]["world_size"] <= 4


@pytest.mark.parametrize(("args", "words"), [
    (("--target", "val_acc=0.9"), "must be one of"),
    (("--target", "val_accuracy"), "METRIC=VALUE"),
])
def test_a_bad_target_is_one_line_and_exit_code_2(store: str, args: tuple[str, ...], words: str) -> None:
    code, out, err = _run("recommend", "demo", "-n", "2", "--storage", store, *args)
    assert code == 2 and words in err and "Traceback" not in err + out


def test_an_unknown_study_is_exit_code_2(store: str) -> None:
    code, _, err = _run("recommend", "nope", "-n", "2", "--storage", store)
    assert code == 2 and "no study named 'nope'" in err


def test_a_study_that_cannot_answer_is_exit_code_5_and_json_says_why_with_the_analysis(store: str) -> None:
    # A target no trial reached: the question is well formed (not exit 2), the study has no answer.
    code, out, err = _run("recommend", "demo", "-n", "2", "--storage", store, "--target", "val_accuracy=0.999",
                          "--json")
    assert code == 5
    data = json.loads(out)
    assert data["recommendation"] is None and "reached the target" in data["refusal"]
    assert data["analysis"]["n_trials"] == 600 and data["analysis"]["n_reached"] == 0
    assert err == f"error: {data['refusal']}\n"

    code, out, err = _run("recommend", "demo", "-n", "2", "--storage", store, "--target", "val_accuracy=0.999")
    assert (code, out) == (5, "") and err.startswith("error: no trial") and len(err.splitlines()) == 1


def test_the_answer_names_the_studys_other_parameters_to_run_it_as_it_stands(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hidden.db'}"
    synthetic_study(url, "widths", n_trials=300, seed=4, truth=SyntheticTruth(hidden_choices=(16, 64)))
    args = ("recommend", "widths", "-n", "4", "--storage", url, "--target", "val_accuracy=0.9")
    code, out, err = _run(*args, "--json")
    assert code == 0, err
    params = json.loads(out)["recommendation"]["params"]
    code, out, err = _run(*args)
    assert code == 0, err
    # The workload's own width and the optimizer's momentum, beside the batch and LR of the run line.
    assert f"  with  momentum 0.9, hidden {params['hidden']}\n" in out


def test_a_fitted_answer_says_the_level_of_its_intervals_and_the_draws_they_rest_on(store: str) -> None:
    args = ("recommend", "demo", "-n", "8", "--storage", store, "--target", "val_accuracy=0.9")
    code, out, err = _run(*args, "--json")
    assert code == 0, err
    answer = json.loads(out)["recommendation"]
    kept, total = answer["interval_draws"], answer["interval_draws_total"]
    assert answer["basis"] == "fitted laws" and 0 < kept <= total
    code, out, err = _run(*args)
    assert code == 0, err
    (cost,) = [line for line in out.splitlines() if line.startswith("  cost  ")]
    assert cost.endswith(f" samples (fitted laws) (90%, {kept} of {total} draws)"), cost
    assert "at most" not in cost


def test_an_answer_from_a_first_evaluation_crossing_says_at_most(tmp_path: Path) -> None:
    # Nearly every trial reaches the target at its first evaluation: the measured answer may
    # have been reached sooner, so its time, device-hours and samples are ceilings.
    url = f"sqlite:///{tmp_path / 'early.db'}"
    truth = SyntheticTruth(e_min=2000.0, b_crit=1e6, per_device_batches=(32, 128, 512), world_sizes=(1, 2),
                           accum_steps=(1,))
    synthetic_study(url, "early", n_trials=200, seed=1, truth=truth)
    args = ("recommend", "early", "-n", "2", "--storage", url, "--target", "val_accuracy=0.9")
    code, out, err = _run(*args, "--json")
    assert code == 0, err
    answer = json.loads(out)["recommendation"]
    assert answer["upper_bound"] is True and answer["interval_draws"] is None
    code, out, err = _run(*args)
    assert code == 0, err
    (cost,) = [line for line in out.splitlines() if line.startswith("  cost  ")]
    assert cost.startswith("  cost  at most ") and " of training, at most " in cost, cost
    assert f"at most {answer['samples']:,.0f} samples (measured trials, an upper bound)" in cost, cost
    assert "draws" not in cost


@pytest.fixture(scope="module")
def spanning_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    # Trials of up to 16 devices on nodes of 8: those of 16 spanned two nodes.
    url = f"sqlite:///{tmp_path_factory.mktemp('span') / 'store.db'}"
    truth = SyntheticTruth(evals_per_epoch=2, t1=1 / 500, t_allreduce_inter=0.03, world_sizes=(1, 2, 4, 8, 16),
                           devices_per_node=8)
    synthetic_study(url, "span", n_trials=600, seed=3, truth=truth)
    return url


def test_recommend_names_the_nodes_it_assumes(spanning_store: str) -> None:
    args = ("recommend", "span", "--devices", "16", "--storage", spanning_store, "--target", "val_accuracy=0.9")
    code, out, err = _run(*args, "--devices-per-node", "8")
    assert code == 0, err
    (nodes,) = [line for line in out.splitlines() if line.startswith("  nodes ")]
    assert nodes.startswith("  nodes 16 devices on 2 nodes of 8 (devices per node given)"), nodes
    assert "across nodes" in out  # the step-time line names the all-reduce across nodes

    code, out, err = _run(*args, "--devices-per-node", "8", "--json")
    assert code == 0, err
    answer = json.loads(out)["recommendation"]
    assert answer["layout"]["text"] == "16 devices on 2 nodes of 8" and answer["layout"]["assumed"] is False
    assert answer["nodes"] == -(-answer["world_size"] // 8)

    # Without the option the devices per node are read off the trials, and said to be assumed.
    code, out, err = _run(*args)
    assert code == 0, err
    (nodes,) = [line for line in out.splitlines() if line.startswith("  nodes ")]
    assert nodes.startswith("  nodes 16 devices on 2 nodes of 8 (assumed from trial #"), nodes
    assert "8 devices on one node, the most any trial of the study ran; --devices-per-node G to say otherwise" in nodes


def test_a_layout_across_nodes_no_trial_spanned_says_so(store: str) -> None:
    # The module's study ran at most 2 devices, all on one node.
    code, out, err = _run("recommend", "demo", "-n", "8", "--devices-per-node", "4", "--storage", store,
                          "--target", "val_accuracy=0.9")
    assert code == 0, err
    assert "  nodes 8 devices on 2 nodes of 4 (devices per node given)" in out
    assert "the all-reduce across nodes was never measured" in out


def test_devices_per_node_below_one_is_exit_code_2(store: str) -> None:
    code, _, err = _run("recommend", "demo", "-n", "8", "--devices-per-node", "0", "--storage", store)
    assert code == 2 and "--devices-per-node" in err


def test_recommend_beyond_the_lr_laws_peak_says_why_it_does_not_scale_the_lr_up(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'surge.db'}"
    synthetic_study(url, "adam", n_trials=3000, seed=0, truth=SURGE_TRUTH)
    code, out, err = _run("recommend", "adam", "-n", "8", "--storage", url, "--target", "val_accuracy=0.9")
    assert code == 0, err
    # The answer's LR line says why it runs the law's LR as it stands, and the explanation the law.
    assert ", constant rule from base_lr " in out
    assert "\n  lr    B 1024 is beyond the LR law's peak (B " in out
    assert "surge, Li et al. 2024" in out and "rather than scaling up" in out
    assert "LR: the best LR peaks near B " in out
    code, out, _ = _run("recommend", "adam", "-n", "8", "--storage", url, "--target", "val_accuracy=0.9", "--json")
    data = json.loads(out)
    assert data["analysis"]["lr_law"]["preferred"] == "surge" and data["analysis"]["lr_law"]["b_peak"] > 0
    assert data["recommendation"]["params"]["lr_rule"] == "constant" and data["recommendation"]["lr_note"]
