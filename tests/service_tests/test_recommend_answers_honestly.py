"""``hpsearch recommend`` says what its numbers are: device-hours of the answer's W devices and a
time measured with emulated ranks said to be one; a target in a metric the study never records
is bad input; a loss target nobody reached asks to be raised, not lowered; a small LR law's
interval is computed without overflow."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from click.testing import CliRunner
from optuna.distributions import CategoricalDistribution

import hpsearch
from hpsearch import record as r
from hpsearch.cli import cli
from hpsearch.store import study_attrs
from hpsearch.testing import SyntheticTruth, synthetic_study

#: A real two-rank search emulated on one process: W 2, b {32, 64}, one epoch of an MLP, which learns in it
#: (a CNN stayed at chance, and a study at chance has no target to answer).
EMULATED_SPACE = """\
study: emulated
workload: {name: digits_mlp, epochs: 1}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: {choices: [32, 64]}
  world_size: 2
  lr_rule: linear
  base_lr: 0.01
  momentum: 0.9
objectives:
  - {metric: val_accuracy, direction: maximize}
  - {metric: runtime_s, direction: minimize}
search: {sampler: grid, n_trials: 2, seed: 0}
resources: {device: cpu, emulate_ranks: on}
"""

#: The space of the regression study below: a workload of one's own that records val_loss only.
REGRESSION_SPACE = """\
study: regression
workload: {name: "my_workload:make_workload", epochs: 1}
scaling: {base_batch_size: 16}
parameters:
  per_device_batch_size: {choices: [16, 64, 256]}
  lr_rule: constant
  base_lr: {low: 0.001, high: 1.0, log: true}
objectives:
  - {metric: val_loss, direction: minimize}
search: {sampler: random, n_trials: 12, seed: 0}
resources: {device: cpu}
"""

#: The best LR at each per-device batch of the regression study: far off any power law, so the
#: LR law through three batch sizes has one degree of freedom and wide, heavy-tailed draws.
_BEST_LR = {16: 0.01, 64: 0.1, 256: 0.02}
_SAMPLES = 40_000  # per epoch
_EVALS = 40


def _regression_study(url: str, name: str = "regression", best_lr: Mapping[int, float] = _BEST_LR,
                      factors: Sequence[float] = (1.0, 3.0), quick: Sequence[int] = ()) -> None:
    """A study as a regression workload's search leaves it (``val_loss`` only), written trial by
    trial into a real SQLite store: each per-device batch at its best LR times each of
    ``factors``, two seeds each; a loss 0.2 + 2 exp(-samples / tau), tau growing with the batch
    and with the LR's distance from the best one (the batches in ``quick`` reach any target at
    their first evaluation)."""
    storage = optuna.storages.RDBStorage(url)
    study = optuna.create_study(study_name=name, storage=storage, direction="minimize")
    study.set_metric_names([r.VAL_LOSS])
    for key, value in study_attrs(REGRESSION_SPACE.replace("study: regression", f"study: {name}"), [r.VAL_LOSS],
                                  12).items():
        study.set_user_attr(key, value)
    rng = np.random.default_rng(7)
    lrs = sorted({lr * f for lr in best_lr.values() for f in factors})
    distributions = {r.PER_DEVICE_BATCH_SIZE: CategoricalDistribution(list(best_lr)),
                     r.WORLD_SIZE: CategoricalDistribution([1]), r.GRAD_ACCUM_STEPS: CategoricalDistribution([1]),
                     r.LR_RULE: CategoricalDistribution(["constant"]), r.BASE_LR: CategoricalDistribution(lrs)}
    for b, best in best_lr.items():
        for lr in (best * f for f in factors):
            for _ in range(2):
                tau = 1000 * (1 + b / 64) * (1 + math.log(lr / best) ** 2) * rng.lognormal(0, 0.05)
                tau *= 0.05 if b in quick else 1.0
                step_s = (0.0005 + b / 20_000) * rng.lognormal(0, 0.05)
                samples = [round(_SAMPLES * k / _EVALS) for k in range(1, _EVALS + 1)]
                steps = [s / b for s in samples]
                train_s = [n * step_s for n in steps]
                loss = [0.2 + 2 * math.exp(-s / tau) for s in samples]
                curves = {r.SAMPLES_SEEN: samples, r.STEPS: steps, r.TRAIN_S: train_s,
                          r.RUNTIME_S: [t + 0.05 * (k + 1) for k, t in enumerate(train_s)], r.VAL_LOSS: loss}
                attrs: dict[str, Any] = {
                    r.EFFECTIVE_BATCH_SIZE: b, r.BASE_BATCH_SIZE: 16, r.LR: lr, r.WARMUP_EPOCHS: 0.0,
                    r.LR_SCHEDULE: "none", r.VAL_LOSS: loss[-1], r.RUNTIME_S: curves[r.RUNTIME_S][-1],
                    r.TRAIN_S: train_s[-1], r.STEPS: steps[-1], r.SAMPLES_SEEN: samples[-1], r.EMULATED_RANKS: 1,
                    r.DEVICE: "cpu", r.CURVES: curves}
                params = {r.PER_DEVICE_BATCH_SIZE: b, r.WORLD_SIZE: 1, r.GRAD_ACCUM_STEPS: 1, r.LR_RULE: "constant",
                          r.BASE_LR: lr}
                study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions,
                                                          value=loss[-1], user_attrs=attrs))


@pytest.fixture(scope="module")
def regression(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('regression') / 'store.db'}"
    _regression_study(url)
    return url


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> str:
    work = tmp_path_factory.mktemp("emulated")
    (work / "space.yaml").write_text(EMULATED_SPACE)
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                            capture_output=True, text=True, cwd=work, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return f"sqlite:///{work / 'hpsearch.db'}"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_an_answer_measured_with_emulated_ranks_counts_its_w_devices_and_says_its_time_is_emulated(
        emulated: str) -> None:
    code, out, err = _run("recommend", "emulated", "-n", "2", "--storage", emulated, "--json")
    assert code == 0, err
    answer = json.loads(out)["recommendation"]
    assert answer["world_size"] == 2 and answer["basis"].startswith("measured trials")
    # Two devices for the time it took, not the one device that emulated both ranks.
    assert answer["device_hours"] == pytest.approx(answer["time_s"] * 2 / 3600)
    assert answer["device_kind"] == "cpu"
    assert answer["emulated_ranks"] == 2 and "not its time" in answer["emulation_note"]

    code, out, err = _run("recommend", "emulated", "-n", "2", "--storage", emulated)
    assert code == 0, err
    assert out.startswith("recommendation for 2 devices (cpu) of study 'emulated'")
    assert "  note  time measured with its 2 ranks emulated on 1 device" in out
    # The largest batch the study searched bounds the answer; no memory ceiling was seen.
    (mem,) = [line for line in out.splitlines() if line.startswith("  mem   ")]
    assert mem.endswith("per-device batch: largest searched 64 on cpu; no memory limit seen"), mem


def test_an_answer_on_fewer_devices_than_the_emulated_ranks_is_refused_saying_how_many_ran(emulated: str) -> None:
    code, out, err = _run("recommend", "emulated", "-n", "1", "--storage", emulated)
    assert (code, out) == (5, "")
    assert "the trials that reached it ran 2 ranks or more" in err and "--devices 2" in err


def test_a_target_in_a_metric_the_study_never_records_is_bad_input_that_names_the_ones_it_does(
        regression: str) -> None:
    code, out, err = _run("recommend", "regression", "-n", "1", "--storage", regression,
                          "--target", "val_accuracy=0.4")
    assert code == 2 and out == ""
    assert "val_accuracy, which no trial of study 'regression' records" in err
    assert "its trials record val_loss" in err and "lower the target" not in err and "Traceback" not in err


def test_a_loss_target_nobody_reached_asks_to_raise_it_and_says_the_best_loss(regression: str) -> None:
    code, out, err = _run("recommend", "regression", "-n", "1", "--storage", regression, "--target", "val_loss=0.1")
    assert (code, out) == (5, "")
    assert "val_loss <= 0.1" in err and "raise the target" in err and "lower the target" not in err
    assert "; the best any trial recorded is 0.2" in err


def test_an_lr_law_through_three_batch_sizes_gives_an_interval_without_overflowing(regression: str) -> None:
    # Warnings are errors in this suite: an "overflow encountered in exp" fails the command.
    code, out, err = _run("recommend", "regression", "-n", "1", "--storage", regression, "--target", "val_loss=0.5",
                          "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["analysis"]["lr_law"]["n_batch_sizes"] == 3
    low, high = data["recommendation"]["lr_interval"]
    lr = data["recommendation"]["lr"]
    assert 0 < low <= lr and (high is None or high >= lr)


def test_an_lr_law_that_goes_exactly_through_its_points_prints_no_interval_rather_than_a_collapsed_one(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'exact.db'}"
    _regression_study(url, "exact", best_lr={16: 0.01, 64: 0.04, 256: 0.16})  # the linear rule, exactly
    code, out, err = _run("recommend", "exact", "-n", "1", "--storage", url, "--target", "val_loss=0.5")
    assert code == 0, err
    (run,) = [line for line in out.splitlines() if line.startswith("  run   ")]
    assert "(no interval: the fit has no spread to bound it with)" in run and "[" not in run, run


def test_without_an_lr_law_the_answers_lr_comes_from_the_configuration_its_other_parameters_come_from(
        tmp_path: Path) -> None:
    # One LR per batch (no LR law); batch 16 reaches the target at its first evaluation (an upper
    # bound), so the configuration the answer rests on is the nearest batch that does not.
    url = f"sqlite:///{tmp_path / 'nearest.db'}"
    best_lr = {16: 0.01, 64: 0.03, 256: 0.05, 1024: 0.07}
    _regression_study(url, "nearest", best_lr=best_lr, factors=(1.0,), quick=(16,))
    code, out, err = _run("recommend", "nearest", "-n", "1", "--storage", url, "--target", "val_loss=0.5", "--json")
    assert code == 0, err
    answer = json.loads(out)["recommendation"]
    assert answer["basis"] == "fitted laws" and answer["rule"] == "constant"
    source = optuna.load_study(study_name="nearest", storage=url).trials[answer["source_trials"][0]]
    # The constant rule keeps the LR of the configuration it comes from.
    assert answer["lr"] == pytest.approx(source.user_attrs["lr"])


def test_intervals_that_dropped_draws_say_the_coverage_they_are_sure_of() -> None:
    # Four step-time configurations and noisy step times: some bootstrap draws leave the model.
    truth = SyntheticTruth(per_device_batches=(32, 128), world_sizes=(1, 2), accum_steps=(1,), evals_per_epoch=4,
                           b_noise=None, alpha=0.5, step_noise=0.2)
    search = synthetic_study(optuna.storages.InMemoryStorage(), "dropped", n_trials=60, seed=2, truth=truth)
    answer = search.recommend(2, target="val_accuracy=0.9")
    kept, total = answer.interval_draws, answer.interval_draws_total
    assert answer.basis == "fitted laws" and kept is not None and total is not None and kept < total
    assert answer.interval_coverage == pytest.approx(0.9 * kept / total)
    line = next(line for line in answer.explanation if line.startswith("intervals:"))
    assert f"hold at least {0.9 * kept / total:.0%} of all the draws, not 90%" in line


def test_a_recommendation_prints_as_its_one_paragraph_answer(regression: str) -> None:
    answer = hpsearch.load("regression", storage=regression).recommend(1, target="val_loss=0.5")
    text = str(answer)
    assert text.startswith("on 1 device (cpu): run b ") and "device-hours to reach val_loss <= 0.5" in text
    assert len(text) < 300 and repr(answer) == f"<Recommendation {text}>"
    assert answer.explanation and answer.alternatives  # the full answer stays on its attributes


def test_without_an_lr_law_the_answer_says_why_in_one_plain_sentence(tmp_path: Path) -> None:
    # One LR per batch: no batch has a best LR of its own, so there is no LR law.
    url = f"sqlite:///{tmp_path / 'one-lr.db'}"
    _regression_study(url, "one-lr", best_lr={16: 0.01, 64: 0.03, 256: 0.05, 1024: 0.07}, factors=(1.0,))
    answer = hpsearch.load("one-lr", storage=url).recommend(1, target="val_loss=0.5")
    (line,) = [line for line in answer.explanation if line.startswith("LR:")]
    assert line.endswith("; there is no LR law: it needs the best LR at 3 batch sizes or more, each with 2 LRs or "
                         "more tried; this study has none"), line
    assert "is empty" not in line and line.count("(") <= 1


def test_a_target_nobody_reached_is_refused_in_a_sentence_that_says_it_once(regression: str) -> None:
    code, _out, err = _run("recommend", "regression", "-n", "1", "--storage", regression, "--target", "val_loss=0.1")
    assert code == 5
    assert "no trial on at most 1 device reached the target val_loss <= 0.1; the best any trial recorded is 0.2" in err
    assert "so there is nothing to recommend; raise the target or run more trials." in err
    assert "(no trial reached the target)" not in err and "device(s)" not in err


def test_many_trials_cut_short_are_described_as_many(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cut.db'}"
    _regression_study(url, "cut", best_lr={16: 0.01}, factors=(1.0,))
    study = optuna.load_study(study_name="cut", storage=url)
    for _ in range(11):
        trial = study.ask()
        trial.set_user_attr(r.STATUS_REASON, r.REASON_INTERRUPTED)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    code, out, err = _run("status", "cut", "--storage", url)
    assert code == 0, err
    assert "11 trials interrupted: the search was stopped under them; resume runs them again" in out
