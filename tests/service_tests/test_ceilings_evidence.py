"""Out-of-memory evidence that contradicts itself does not become a ceiling: a batch that ran
out at or below one that fit (same configuration, same kind of device), or one that ran out in
evaluation rather than training, neither stops the search from running that batch again nor
caps the recommendation, and both say why. Real Optuna trials, as a resumed search and the
analysis read them."""

from __future__ import annotations

from typing import Any

import optuna
import pandas as pd
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from hpsearch.analysis import memory_models
from hpsearch.planner.ceilings import MemoryCeilings

_DISTRIBUTIONS = {"per_device_batch_size": CategoricalDistribution([16, 64, 256, 1024]),
                  "lr_rule": CategoricalDistribution(["constant", "sqrt"])}


def _trial(number: int, b: int, rule: str, state: TrialState, **attrs: Any) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(state=state, params={"per_device_batch_size": b, "lr_rule": rule},
                                      distributions=_DISTRIBUTIONS, value=0.5 if state == TrialState.COMPLETE else None,
                                      user_attrs={"device": "cpu", **attrs})
    trial.number = number
    return trial


def _reported() -> list[optuna.trial.FrozenTrial]:
    """The reported search: b 256 trained twice, b 64 "ran out" after them, b 1024 ran out."""
    oom = {"status_reason": "out_of_memory"}
    return [_trial(0, 256, "constant", TrialState.COMPLETE), _trial(1, 256, "sqrt", TrialState.COMPLETE),
            _trial(2, 64, "sqrt", TrialState.FAIL, **oom), _trial(3, 1024, "constant", TrialState.FAIL, **oom)]


def test_an_out_of_memory_below_a_batch_that_fit_sets_no_ceiling_and_says_why() -> None:
    ceilings = MemoryCeilings.of_trials(_reported(), device="cpu")

    params = {"per_device_batch_size": 128, "lr_rule": "constant"}
    assert ceilings.ceiling(params) == 1024  # the batch that ran out above what fit
    assert ceilings.plan(params, "skip") is None  # 128 runs
    assert ceilings.ignored == ["trial 2 ran out of memory at per-device batch 64, yet 256 trained to its end with "
                                "the same configuration: not taken as a ceiling (something other than the batch "
                                "filled the memory)"]


def test_a_batch_that_fits_above_an_earlier_ceiling_lifts_it() -> None:
    ceilings = MemoryCeilings()
    ceilings.ran_out({"per_device_batch_size": 64}, 64)
    ceilings.fit({"per_device_batch_size": 256}, 256)

    assert ceilings.ceiling({"per_device_batch_size": 128}) is None
    assert len(ceilings.ignored) == 1 and "the out-of-memory at 64 is not a ceiling" in ceilings.ignored[0]


def test_an_out_of_memory_in_evaluation_sets_no_ceiling() -> None:
    trials = [_trial(0, 64, "sqrt", TrialState.FAIL, status_reason="out_of_memory", out_of_memory_phase="evaluation")]

    assert MemoryCeilings.of_trials(trials, device="cpu").ceiling({"per_device_batch_size": 64}) is None


def test_the_recommendation_is_not_capped_by_an_out_of_memory_below_what_fit() -> None:
    frame = pd.DataFrame({
        "number": [0, 1, 2, 3, 4], "state": ["COMPLETE", "COMPLETE", "FAIL", "FAIL", "COMPLETE"],
        "status_reason": [None, None, "out_of_memory", "out_of_memory", None],
        "per_device_batch_size": [256, 256, 64, 1024, 16], "device": ["cpu"] * 5,
        "peak_memory_bytes": [480e6, 500e6, None, None, 300e6]})

    model, = memory_models(frame)

    # Not "per-device batch at most 63", nor "smallest that ran out 64".
    assert (model.largest_fit, model.smallest_out_of_memory, model.cap()) == (256, 1024, 256)
    assert model.out_of_memory_trials == (3,)
    assert "not counted as running out, since 256 fit: trial 2 at 64 (the batch was not the cause)" in model.describe()
    assert model.to_dict()["ignored"] == list(model.ignored)


def test_an_out_of_memory_in_evaluation_is_not_the_smallest_batch_that_ran_out() -> None:
    frame = pd.DataFrame({
        "number": [0, 1], "state": ["COMPLETE", "FAIL"], "status_reason": [None, "out_of_memory"],
        "out_of_memory_phase": [None, "evaluation"], "per_device_batch_size": [16, 64], "device": ["cpu"] * 2,
        "peak_memory_bytes": [300e6, None]})

    model, = memory_models(frame)

    assert model.smallest_out_of_memory is None and model.cap() == 16
    assert "ran out of memory outside training, not counted against its batch: trial 1 in evaluation" in \
        model.describe()


def test_every_layer_writes_a_byte_count_alike() -> None:
    from hpsearch.record import format_bytes
    from hpsearch.study import format_bytes as study_format_bytes

    # The trial's failure detail, its data path's reason, the CLI, the analysis and the
    # dashboard once rounded 600 MiB as "600.0 MiB" in one place and "600 MiB" in another.
    assert study_format_bytes is format_bytes
    assert [format_bytes(n) for n in (600 * 2**20, 107216896, 1.5 * 2**30, 300, None)] == [
        "600 MiB", "102 MiB", "1.5 GiB", "300 B", "-"]
