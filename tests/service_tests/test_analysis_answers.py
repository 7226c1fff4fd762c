"""What an answer may claim: intervals a run could meet, upper bounds said as such, no law fitted
from no evidence, every parameter a script needs to run it, and a refusal that says why and
keeps what the trials did say. Through ``search.recommend`` and ``search.analyze``, as a user
calls them, on synthetic studies and on studies written by hand into an Optuna storage."""

from __future__ import annotations

import ast
import json
import warnings
from pathlib import Path

import optuna
import pytest

from hpsearch.analysis import (
    FITTED,
    MEASURED,
    MEASURED_UPPER_BOUND,
    Recommendation,
    StudyAnalysis,
    analyze_study,
    follow_up_space,
)
from hpsearch.errors import AnalysisError, NoAnswerError
from hpsearch.search import Search
from hpsearch.search_spaces import parse_space
from hpsearch.store import study_attrs
from hpsearch.study import study_info
from hpsearch.testing import SyntheticTruth, synthetic_study

#: The synthetic studies of the analysis tests (test_analysis_recommend, test_analysis_study,
#: test_cli_recommend), and studies with four step-time configurations and noisy CPU-like step
#: times: one degree of freedom for the step-time fit, where its draws used to reach ~1e-10 s.
STUDIES = {
    "recommend": (SyntheticTruth(b_noise=None, alpha=0.5, evals_per_epoch=4, world_sizes=(1, 2, 4)), 2000, 5),
    "sqrt": (SyntheticTruth(b_noise=None, alpha=0.5, evals_per_epoch=4), 3000, 2),
    "bent": (SyntheticTruth(evals_per_epoch=4), 3000, 3),
    "cli": (SyntheticTruth(evals_per_epoch=2, world_sizes=(1, 2)), 600, 4),
    **{f"four configurations, seed {seed}": (
        SyntheticTruth(per_device_batches=(32, 128), world_sizes=(1, 2), accum_steps=(1,), evals_per_epoch=4,
                       b_noise=None, alpha=0.5, step_noise=0.2), 60, seed) for seed in range(6)},
}


def _study(name: str) -> Search:
    truth, n_trials, seed = STUDIES[name]
    return synthetic_study(optuna.storages.InMemoryStorage(), "s", n_trials=n_trials, seed=seed, truth=truth)


def _physical_problems(answer: Recommendation) -> list[str]:
    """What in a fitted answer no run could meet: an interval without its estimate, a step of
    (almost) no time, a time interval outside what its samples and step times allow."""
    problems = []
    for point, interval, name in ((answer.time_s, answer.time_interval, "time"),
                                  (answer.device_hours, answer.device_hours_interval, "device-hours"),
                                  (answer.samples, answer.samples_interval, "samples"),
                                  (answer.step_time_s, answer.step_time_interval, "step time"),
                                  (answer.lr, answer.lr_interval, "lr")):
        if point is None or interval is None or not interval.low <= point <= interval.high:
            problems.append(f"{name} {point} outside {interval}")
    steps, samples, time = answer.step_time_interval, answer.samples_interval, answer.time_interval
    assert steps is not None and samples is not None and time is not None and answer.step_time_s is not None
    big_b = answer.effective_batch_size
    if not samples.low >= big_b:  # at least one step's samples
        problems.append(f"samples {samples} below one step of B {big_b}")
    if not steps.low > 0.25 * answer.step_time_s:
        problems.append(f"step time {steps} reaches far below its fit {answer.step_time_s:.3g} s")
    low = answer.startup_s + samples.low / big_b * steps.low
    high = answer.startup_s + samples.high / big_b * steps.high
    if not low * (1 - 1e-9) <= time.low and time.high <= high * (1 + 1e-9):
        problems.append(f"time {time} outside [{low:.3g}, {high:.3g}], the fewest samples at the fastest step "
                        "time and the most at the slowest")
    hours = answer.device_hours_interval
    assert hours is not None
    if hours.low != pytest.approx(time.low * answer.world_size / 3600):
        problems.append(f"device-hours {hours} are not W x time {time}")
    if not 0 < (answer.interval_draws or 0) <= (answer.interval_draws_total or 0):
        problems.append(f"intervals rest on {answer.interval_draws} of {answer.interval_draws_total} draws")
    return problems


@pytest.mark.parametrize("name", list(STUDIES))
def test_every_interval_holds_its_estimate_and_lies_within_physical_bounds(name: str) -> None:
    search = _study(name)
    for devices in (1, 2, 4, 16):
        for minimize in ("time", "device-hours"):
            answer = search.recommend(devices, target="val_accuracy=0.9", minimize=minimize)
            assert answer.basis == FITTED
            assert _physical_problems(answer) == [], (devices, minimize)


@pytest.mark.parametrize("seed", [1, 2])
def test_four_step_time_configurations_give_no_step_of_almost_no_time(seed: int) -> None:
    # Seen: 0.895 s [0.024 s, 1.2 s] of training for 115,499 [77,150, 159,328] samples, where
    # 77k samples need 0.6 s at the fitted step time. Here the low end was ~1e-4 s of 37 s.
    search = _study(f"four configurations, seed {seed}")
    answer = search.recommend(2, target="val_accuracy=0.9")
    analysis = search.analyze("val_accuracy=0.9")
    kind = analysis.device_kind
    assert kind is not None and answer.basis == FITTED
    step = analysis.throughput[kind].step_time(answer.per_device_batch_size, answer.world_size,
                                               answer.grad_accum_steps)
    assert answer.samples_interval is not None and answer.time_interval is not None
    fewest = analysis.startup(kind, answer.world_size) + answer.samples_interval.low / answer.effective_batch_size * step
    assert answer.time_interval.low >= 0.25 * fewest


def test_the_intervals_say_how_many_draws_they_rest_on() -> None:
    search = _study("four configurations, seed 2")
    data = json.loads(json.dumps(search.recommend(2, target="val_accuracy=0.9").to_dict()))
    assert 0 < data["interval_draws"] < data["interval_draws_total"] == 1000  # some draws left the model
    assert data["step_time_interval"][0] <= data["step_time_s"] <= data["step_time_interval"][1]
    line = next(line for line in data["explanation"] if line.startswith("intervals:"))
    assert f"{data['interval_draws']:,} paired bootstrap draws" in line and "dropped" in line
    analysis = search.analyze("val_accuracy=0.9").to_dict()
    (model,) = analysis["throughput"].values()
    assert model["n_draws"] < model["n_boot"] and "dropped" in model["note"]


def test_a_study_whose_trials_cross_at_their_first_evaluation_gets_an_upper_bound_not_fitted_laws() -> None:
    # The target is reached within the first epoch nearly everywhere: each crossing is only
    # bounded by the first evaluation's samples (one epoch), about the same at every batch size.
    truth = SyntheticTruth(e_min=2000.0, b_crit=1e6, per_device_batches=(32, 128, 512), world_sizes=(1, 2),
                           accum_steps=(1,))
    search = synthetic_study(optuna.storages.InMemoryStorage(), "early", n_trials=200, seed=1, truth=truth)
    analysis = search.analyze("val_accuracy=0.9")
    reached = [t for t in analysis.trials if t["samples_to_target"] is not None]
    assert sum(t["first_evaluation"] for t in reached) >= 0.9 * len(reached)
    assert len(analysis.batches) >= 3 and all(p.upper_bound for p in analysis.batches)
    assert analysis.critical_batch is None and "first evaluation" in str(analysis.critical_batch_refusal)
    _assert_upper_bound(search, search.recommend(2, target="val_accuracy=0.9"))


def _assert_upper_bound(search: Search, answer: Recommendation) -> None:
    """The answer is a measured trial's, said to be an upper bound, and a configuration that ran."""
    assert answer.basis == MEASURED_UPPER_BOUND and answer.basis != FITTED and answer.upper_bound
    assert any("upper bound" in line and "first evaluation" in line for line in answer.explanation)
    assert answer.time_interval is None and answer.samples_interval is None
    assert answer.to_dict()["upper_bound"] is True
    (number,) = answer.source_trials
    assert answer.params() == search.study.trials[number].params


# ---- studies written by hand, as a search of a workload of one's own would leave them -----------

_SPACE = """\
study: {name}
workload: {{name: "my_workload:make_workload", epochs: 2}}
scaling: {{base_batch_size: 16}}
parameters:
  per_device_batch_size: {{choices: [16, 32, 64]}}
  world_size: 1
  lr_rule: linear
  base_lr: 0.001
  hidden: {{choices: [0, 16]}}
objectives:
  - {{metric: val_loss, direction: minimize}}
search: {{sampler: grid, n_trials: 6}}
resources: {{device: cpu}}
"""

_EPOCH = 512  # training samples per epoch, evaluated at each epoch's end


def _by_hand(name: str, curves: dict[tuple[int, int], list[float]]) -> Search:
    """A study of (per-device batch, hidden) -> val_loss at each epoch's end, COMPLETE trials on
    one CPU, recorded as the engine records them."""
    from optuna.distributions import CategoricalDistribution

    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(study_name=name, storage=storage, directions=["minimize"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(["val_loss"])
    for key, value in study_attrs(_SPACE.format(name=name), ["val_loss"], len(curves)).items():
        study.set_user_attr(key, value)
    distributions = {"per_device_batch_size": CategoricalDistribution([16, 32, 64]),
                     "world_size": CategoricalDistribution([1]), "grad_accum_steps": CategoricalDistribution([1]),
                     "lr_rule": CategoricalDistribution(["linear"]), "base_lr": CategoricalDistribution([0.001]),
                     "hidden": CategoricalDistribution([0, 16])}
    for i, ((b, hidden), losses) in enumerate(curves.items()):
        step_s = (0.001 + 0.0001 * b) * (1 + 0.02 * (-1) ** i)  # a little noise: the fit is not exact
        samples = [_EPOCH * (k + 1) for k in range(len(losses))]
        steps = [s // b for s in samples]
        train_s = [n * step_s for n in steps]
        runtime_s = [t + 0.01 * (k + 1) for k, t in enumerate(train_s)]
        attrs = {"effective_batch_size": b, "base_batch_size": 16, "lr": 0.001 * b / 16, "warmup_epochs": 0.0,
                 "training_started": True, "steps": steps[-1], "train_s": train_s[-1], "runtime_s": runtime_s[-1],
                 "samples_seen": samples[-1], "device": "cpu", "emulated_ranks": 1, "val_loss": losses[-1],
                 "curves": {"samples_seen": samples, "steps": steps, "val_loss": losses, "train_s": train_s,
                            "runtime_s": runtime_s}}
        params = {"per_device_batch_size": b, "world_size": 1, "grad_accum_steps": 1, "lr_rule": "linear",
                  "base_lr": 0.001, "hidden": hidden}
        study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE, params=params,
                                                  distributions=distributions, values=[losses[-1]],
                                                  user_attrs=attrs))
    return Search(name, storage)


def test_a_derived_target_ignores_diverging_trials() -> None:
    # Seen: val_loss <= 2.65 derived from a diverging trial while the best reached 0.009; every
    # trial crossed it at its first evaluation, and a flat line through one epoch's samples
    # recommended, as "fitted laws" with intervals of zero width, a configuration that never ran.
    search = _by_hand("diverging", {
        (16, 0): [0.05, 0.009], (16, 16): [0.3, 0.03],
        (32, 0): [0.08, 0.012], (32, 16): [0.4, 0.05],
        (64, 0): [2.65, 40.0], (64, 16): [2.9, 35.0],  # the loss grows: training diverges
    })
    analysis = search.analyze()
    assert analysis.target.source == "default" and analysis.target.value < 0.1
    assert analysis.diverging == (4, 5) and "2 diverging trial(s) left out" in analysis.target.note
    answer = search.recommend(1)
    assert answer.basis == MEASURED and not answer.upper_bound
    (number,) = answer.source_trials
    trial = search.study.trials[number]
    assert answer.params() == {k: v for k, v in trial.params.items()}  # what ran, every parameter of it


def test_a_study_whose_every_trial_crosses_at_its_first_evaluation_gets_an_upper_bound_not_fitted_laws() -> None:
    search = _by_hand("early", {(b, h): [0.01, 0.005] for b in (16, 32, 64) for h in (0, 16)})
    analysis = search.analyze("val_loss=0.05")
    assert all(t["first_evaluation"] for t in analysis.trials) and analysis.n_reached == 6
    assert analysis.critical_batch is None and "first evaluation" in str(analysis.critical_batch_refusal)
    _assert_upper_bound(search, search.recommend(1, target="val_loss=0.05"))


def test_zero_width_intervals_from_a_fit_are_never_called_fitted_laws() -> None:
    # Every trial crosses val_loss 0.5 half way through its second epoch: the same samples at
    # every batch, so every bootstrap draw of the critical batch agrees exactly.
    search = _by_hand("exact", {(b, h): [1.0, 0.0] for b in (16, 32, 64) for h in (0, 16)})
    analysis = search.analyze("val_loss=0.5")
    assert analysis.critical_batch is None and "no scatter" in str(analysis.critical_batch_refusal)
    answer = search.recommend(1, target="val_loss=0.5")
    assert answer.basis == MEASURED and answer.time_interval is None and not answer.upper_bound


def test_the_answer_names_the_workloads_own_parameters_from_the_trials_it_rests_on() -> None:
    truth = SyntheticTruth(b_noise=None, alpha=0.5, evals_per_epoch=4, world_sizes=(1, 2, 4), hidden_choices=(16, 64))
    search = synthetic_study(optuna.storages.InMemoryStorage(), "wide", n_trials=1500, seed=5, truth=truth)
    answer = search.recommend(4, target="val_accuracy=0.9")
    assert answer.basis == FITTED
    # The widest trains fastest: the best configurations, and so the answer, run it.
    assert answer.params()["hidden"] == 64 and answer.params()["momentum"] == 0.9
    runs = {t.number: t.params for t in search.study.trials}
    assert answer.source_trials and all(runs[n]["hidden"] == 64 for n in answer.source_trials)
    data = json.loads(json.dumps(answer.to_dict()))
    assert data["params"]["hidden"] == 64 and data["other_params"] == {"momentum": 0.9, "hidden": 64}
    assert any(line.startswith("other parameters: ") and "hidden 64" in line for line in answer.explanation)
    # The follow-up space runs the answer first, whole, with hidden held at its value.
    space = parse_space(follow_up_space(answer, search.space_text, "wide"))
    assert space.search.enqueue[0]["hidden"] == 64
    assert space.parameters["hidden"].value == 64  # type: ignore[union-attr]
    assert space.search.n_trials == 15  # the grid: 3 batches x 5 base LRs


def test_a_measured_answer_names_its_trials_parameters() -> None:
    truth = SyntheticTruth(per_device_batches=(64,), world_sizes=(1, 2), accum_steps=(1,), evals_per_epoch=2,
                           hidden_choices=(8, 32))
    search = synthetic_study(optuna.storages.InMemoryStorage(), "narrow", n_trials=60, seed=1, truth=truth)
    answer = search.recommend(2, target="val_accuracy=0.9")
    assert answer.basis == MEASURED
    (number,) = answer.source_trials
    assert answer.params()["hidden"] == search.study.trials[number].params["hidden"]


def test_a_study_that_cannot_answer_refuses_with_its_reason_and_the_analysis_that_exists() -> None:
    search = synthetic_study(optuna.storages.InMemoryStorage(), "far", n_trials=60, seed=1)
    with pytest.raises(NoAnswerError) as refusal:
        search.recommend(2, target="val_accuracy=0.999")
    assert isinstance(refusal.value, AnalysisError) and refusal.value.exit_code not in (0, 1, 2)
    assert "no trial on at most 2 device" in str(refusal.value) and "lower the target" in str(refusal.value)
    analysis = refusal.value.analysis
    assert isinstance(analysis, StudyAnalysis) and analysis.n_reached == 0
    assert json.loads(json.dumps(analysis.to_dict()))["target"]["value"] == 0.999
    # A study with nothing to analyse yet: the reason, and no analysis.
    empty = synthetic_study(optuna.storages.InMemoryStorage(), "empty", n_trials=0, seed=1)
    with pytest.raises(NoAnswerError, match="no trial with an effective batch size") as nothing:
        empty.recommend(2)
    assert nothing.value.analysis is None
    # Bad input stays bad input.
    with pytest.raises(AnalysisError) as bad:
        search.recommend(0)
    assert not isinstance(bad.value, NoAnswerError) and bad.value.exit_code == 2


def test_the_analysis_takes_the_studys_data_not_the_study_api() -> None:
    search = _study("cli")
    by_data = analyze_study(search.backend, study_info(search.backend, "s"), ("val_accuracy", 0.9))
    by_api = search.analyze("val_accuracy=0.9")
    assert by_data.to_dict() == by_api.to_dict()
    # No module of the analysis imports the study API, even for its types.
    package = Path(__file__).resolve().parents[2] / "service" / "analysis"
    imported = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert "hpsearch.search" not in imported and not any(m.startswith("hpsearch.search.") for m in imported)
