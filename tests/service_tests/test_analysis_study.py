"""The analysis of a whole study: time-to-target per trial, the laws found back from a study
drawn from known ones, each rule's regret and breaking batch, targets given or derived."""

from __future__ import annotations

import math

import optuna
import pytest

from hpsearch.analysis import Target, analyze, crossing, parse_target, recommend
from hpsearch.errors import AnalysisError
from hpsearch.search import Search
from hpsearch.testing import SURGE_TRUTH, SyntheticTruth, synthetic_study
from hpsearch.trials.scaling import scaled_lr

#: A study like a well-tuned random search: every batch tried at many LRs around its best one.
SQRT_TRUTH = SyntheticTruth(b_noise=None, alpha=0.5, evals_per_epoch=4)
BENT_TRUTH = SyntheticTruth(evals_per_epoch=4)  # linear below B_noise 1024, flat above
#: The same laws with the base LR tuned once at B0 and held: the rules alone set each LR.
RULES_TRUTH = SyntheticTruth(evals_per_epoch=4, base_lr_range=(0.05, 0.05))


@pytest.fixture(scope="module")
def sqrt_study() -> Search:
    return synthetic_study(optuna.storages.InMemoryStorage(), "sqrt", n_trials=3000, seed=2, truth=SQRT_TRUTH)


@pytest.fixture(scope="module")
def bent_study() -> Search:
    return synthetic_study(optuna.storages.InMemoryStorage(), "bent", n_trials=3000, seed=3, truth=BENT_TRUTH)


def test_time_to_target_is_interpolated_between_the_evaluations_around_the_crossing() -> None:
    curves = {"samples_seen": [100, 200, 300], "steps": [10, 20, 30], "val_accuracy": [0.5, 0.8, 0.9],
              "train_s": [1.0, 2.0, 3.0], "runtime_s": [1.5, 3.0, 4.5]}
    hit = crossing(curves, Target("val_accuracy", 0.86, "maximize"))
    assert (hit.samples, hit.steps, hit.train_s, hit.runtime_s) == pytest.approx((260, 26, 2.6, 3.9))
    assert not hit.first_evaluation
    # A minimised metric is reached at or below its target.
    loss = {"samples_seen": [100, 200], "val_loss": [0.9, 0.5]}
    assert crossing(loss, Target("val_loss", 0.7, "minimize")).samples == pytest.approx(150)


def test_a_trial_that_never_crosses_has_not_reached_the_target_and_an_early_crossing_says_so() -> None:
    curves = {"samples_seen": [100, 200], "val_accuracy": [0.5, 0.8]}
    missed = crossing(curves, Target("val_accuracy", 0.95, "maximize"))
    assert not missed.reached and missed.samples is None  # "not reached" is not zero
    early = crossing(curves, Target("val_accuracy", 0.4, "maximize"))
    assert early.samples == 100 and early.first_evaluation
    # Older studies kept no steps: they are counted from the batch.
    assert crossing(curves, Target("val_accuracy", 0.65, "maximize"), batch_size=50).steps == pytest.approx(3)


def test_a_target_is_metric_equals_value_and_a_bad_one_names_what_is_wrong() -> None:
    assert parse_target("val_loss=0.25") == ("val_loss", 0.25)
    for bad, words in (("val_accuracy", "METRIC=VALUE"), ("accuracy=0.9", "must be one of"),
                       ("val_accuracy=high", "must be a number"), ("val_accuracy=nan", "finite")):
        with pytest.raises(AnalysisError, match=words) as info:
            parse_target(bad)
        assert info.value.exit_code == 2


def test_the_critical_batch_and_the_lr_law_are_found_back_from_a_study_drawn_from_them(sqrt_study: Search) -> None:
    analysis = analyze(sqrt_study, ("val_accuracy", SQRT_TRUTH.target))
    fit = analysis.critical_batch
    assert fit is not None and fit.n_batch_sizes >= 6
    assert fit.b_crit == pytest.approx(SQRT_TRUTH.b_crit, rel=0.10)
    assert fit.e_min == pytest.approx(SQRT_TRUTH.e_min, rel=0.10)
    law = analysis.lr_law
    assert law is not None and abs(law.alpha - SQRT_TRUTH.alpha) < 0.1
    # The surge is fitted beside the power law (its sqrt limit) and not chosen: an SGD-shaped
    # study keeps the form it chose before the surge existed.
    assert "sqrt" in law.rules_supported and law.preferred == "power"
    assert law.b_peak is not None and not law.past_peak(1e6)
    # Each batch's best LR lies near the true optimum.
    for point in analysis.lr_points:
        assert point.lr == pytest.approx(SQRT_TRUTH.best_lr(point.effective_batch_size), rel=0.25)


def test_the_step_time_model_predicts_throughput_within_ten_percent(sqrt_study: Search) -> None:
    analysis = analyze(sqrt_study, ("val_accuracy", SQRT_TRUTH.target))
    (model,) = analysis.throughput.values()
    for b, w, a in ((32, 1, 1), (128, 4, 2), (512, 8, 4), (64, 2, 1)):
        truth = b * w * a / SQRT_TRUTH.step_time(b, w, a)
        assert model.samples_per_s(b, w, a) == pytest.approx(truth, rel=0.10)


def test_a_bent_lr_law_is_seen_where_the_best_lr_stops_growing(bent_study: Search) -> None:
    law = analyze(bent_study, ("val_accuracy", BENT_TRUTH.target)).lr_law
    # The bend, not the surge fitted beside it: flat beyond B_noise is no fall.
    assert law is not None and law.preferred == "bend" and law.b_peak is not None
    assert law.b_noise == pytest.approx(BENT_TRUTH.b_noise, rel=0.25)
    assert law.b_noise_interval is not None and law.b_noise_interval.contains(BENT_TRUTH.b_noise)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(5))
def test_a_surging_lr_law_gives_its_peak_back_from_a_study_drawn_from_it(seed: int) -> None:
    # An Adam-type study (hpsearch.testing.SURGE_TRUTH): the best LR peaks at B 512, inside
    # the batches that reached the target (B 32 to 2048, 7 batch sizes), and falls beyond.
    search = synthetic_study(optuna.storages.InMemoryStorage(), "surge", n_trials=3000, seed=seed, truth=SURGE_TRUTH)
    law = analyze(search, ("val_accuracy", SURGE_TRUTH.target)).lr_law
    assert SURGE_TRUTH.b_peak is not None
    assert law is not None and law.n_batch_sizes >= 5 and law.preferred == "surge"
    # Measured over seeds 0-4: B_peak 508, 512, 519, 540, 503 (within 6% of 512).
    assert law.b_peak == pytest.approx(SURGE_TRUTH.b_peak, rel=0.2)
    assert law.peak_lr == pytest.approx(SURGE_TRUTH.best_lr(SURGE_TRUTH.b_peak), rel=0.2)
    assert law.summary.startswith("the best LR peaks near B ") and "falls beyond it" in law.summary


def test_an_answer_beyond_the_peak_runs_the_laws_lr_as_a_constant_rule_and_says_why() -> None:
    search = synthetic_study(optuna.storages.InMemoryStorage(), "surge", n_trials=3000, seed=0, truth=SURGE_TRUTH)
    analysis = analyze(search, ("val_accuracy", SURGE_TRUTH.target))
    law = analysis.lr_law
    assert law is not None and law.b_peak is not None
    below, beyond = recommend(analysis, 1), recommend(analysis, 8)
    assert below.effective_batch_size < law.b_peak < beyond.effective_batch_size
    # Below the peak, as before: the rule nearest the law's slope, no note.
    assert below.rule == "sqrt" and below.lr_note is None
    # Beyond it: the law's LR at B, run as it stands by the trial (a constant rule from it),
    # and the reason, with what scaling up from the peak would have set.
    big_b = float(beyond.effective_batch_size)
    assert beyond.lr == pytest.approx(law.lr(big_b))
    params = beyond.params()
    assert (params["lr_rule"], params["base_lr"]) == ("constant", beyond.lr)
    applied = scaled_lr(params["lr_rule"], params["base_lr"], beyond.effective_batch_size, SURGE_TRUTH.base_batch)
    assert applied == pytest.approx(law.lr(big_b))
    assert applied == pytest.approx(SURGE_TRUTH.best_lr(big_b), rel=0.1)
    assert beyond.lr_note is not None and "beyond the LR law's peak" in beyond.lr_note
    assert "rather than scaling up" in beyond.lr_note and "the sqrt rule from the peak would set" in beyond.lr_note
    assert any(beyond.lr_note in line for line in beyond.explanation)
    assert beyond.to_dict()["lr_note"] == beyond.lr_note


def test_each_rule_breaks_where_its_lr_leaves_the_best_one() -> None:
    search = synthetic_study(optuna.storages.InMemoryStorage(), "rules", n_trials=1500, seed=3, truth=RULES_TRUTH)
    analysis = analyze(search, ("val_accuracy", RULES_TRUTH.target))
    rules = {report.rule: report for report in analysis.rules}
    # Beyond B_noise the linear rule's LR keeps growing while the best LR stays flat: it
    # diverges or falls behind there, and only there.
    linear = rules["linear"]
    assert linear.breaks_at is not None and linear.breaks_at > BENT_TRUTH.b_noise  # type: ignore[operator]
    assert any(p.status in ("best", "within") for p in linear.points if p.effective_batch_size <= 512)
    # A constant LR under-trains large batches, and sqrt's grows too slowly below B_noise: both
    # fall behind long before linear breaks.
    constant, sqrt = rules["constant"], rules["sqrt"]
    assert constant.breaks_at is not None and sqrt.breaks_at is not None
    assert constant.breaks_at <= sqrt.breaks_at < linear.breaks_at
    assert "breaks from B" in linear.summary and "breaks from B" in constant.summary


def test_without_a_target_one_most_batch_sizes_reach_is_derived_and_said(sqrt_study: Search) -> None:
    analysis = analyze(sqrt_study)
    target = analysis.target
    assert target.source == "default" and target.metric == "val_accuracy" and target.direction == "maximize"
    assert "derived" in target.note and "analysis.target" in target.note
    reached = {p.effective_batch_size for p in analysis.batches}
    tried = {t["effective_batch_size"] for t in analysis.trials}
    assert len(reached) >= math.ceil(2 / 3 * len(tried))


def test_the_space_target_is_used_when_none_is_given(tmp_path: object) -> None:
    search = synthetic_study(optuna.storages.InMemoryStorage(), "spaced", n_trials=200, seed=1)
    text = search.space_text + "analysis: {target: {val_accuracy: 0.85}}\n"
    search.study.set_user_attr("hpsearch.space_text", text)
    analysis = analyze(Search("spaced", search.storage))
    assert (analysis.target.metric, analysis.target.value, analysis.target.source) == ("val_accuracy", 0.85, "space")


def test_fewer_than_three_batch_sizes_at_the_target_is_a_refusal_with_its_reason() -> None:
    truth = SyntheticTruth(per_device_batches=(64,), world_sizes=(1, 2), accum_steps=(1,))
    search = synthetic_study(optuna.storages.InMemoryStorage(), "narrow", n_trials=60, seed=1, truth=truth)
    analysis = analyze(search, ("val_accuracy", 0.9))
    assert analysis.critical_batch is None
    assert "at least 3 batch sizes" in str(analysis.critical_batch_refusal)


def test_analysis_to_json_keeps_every_section(sqrt_study: Search) -> None:
    import json

    data = json.loads(json.dumps(analyze(sqrt_study, ("val_accuracy", 0.9)).to_dict()))
    assert {"target", "batches", "critical_batch", "lr_law", "rules", "throughput", "noise_scale"} <= set(data)
    assert data["critical_batch"]["b_crit"] > 0 and len(data["critical_batch"]["b_crit_interval"]) == 2


def test_an_analysis_prints_as_a_short_summary_of_its_laws_not_every_trial(sqrt_study: Search) -> None:
    analysis = sqrt_study.analyze("val_accuracy=0.9")
    text = repr(analysis)
    lines = text.splitlines()
    assert text.startswith(f"<StudyAnalysis analysis of study 'sqrt': {analysis.n_trials:,} trials, "
                           f"{analysis.n_reached:,} reached val_accuracy >= 0.9") and text.endswith(">")
    assert any(line.startswith("critical batch: B_crit ") for line in lines)
    assert analysis.lr_law is not None and f"LR law: {analysis.lr_law.summary}" in lines
    assert lines[-1] == "the answer for N devices: search.recommend(N); every number: .to_dict()>"
    assert len(lines) < 15 and len(text) < 2000  # the dataclass's repr ran to 12,000 characters and more
    assert str(analysis) == text[len("<StudyAnalysis "):-1]
