"""A target derived from trials that learned nothing is refused, not answered.

A study of random labels (the walk's wide MLP: four classes, the commonest 26.4% of the
validation set) was answered with "to reach val_accuracy >= 0.261": a target below what always
answering the commonest class scores, met at every trial's first evaluation.
"""

from __future__ import annotations

import pandas as pd
import pytest

from hpsearch.analysis._study import analyze_trials
from hpsearch.errors import NoAnswerError


def _study(best: list[float], chance: float | None) -> tuple[pd.DataFrame, dict[int, dict[str, list[float]]]]:
    rows, curves = [], {}
    for n, (b, accuracy) in enumerate(zip([16, 64, 256], best)):
        rows.append({"number": n, "state": "COMPLETE", "per_device_batch_size": b, "world_size": 1,
                     "grad_accum_steps": 1, "effective_batch_size": b, "lr_rule": "constant", "base_lr": 0.01,
                     "lr": 0.01, "base_batch_size": 8, "val_accuracy": accuracy, "runtime_s": 1.0, "train_s": 0.9,
                     "device": "cpu", **({"chance_accuracy": chance} if chance is not None else {})})
        curves[n] = {"samples_seen": [820.0, 1639.0], "steps": [1639 / b / 2, 1639 / b], "train_s": [0.45, 0.9],
                     "runtime_s": [0.5, 1.0], "val_accuracy": [accuracy - 0.01, accuracy]}
    return pd.DataFrame(rows), curves


def test_a_derived_accuracy_target_at_or_below_chance_is_refused_with_what_to_do() -> None:
    frame, curves = _study([0.2665, 0.262, 0.2641], chance=0.2641)
    with pytest.raises(NoAnswerError) as refused:
        analyze_trials("wide", frame, curves, target=None, metric="val_accuracy", direction="maximize")
    message = str(refused.value)
    assert "no better than chance (0.264: always answering the validation set's commonest class)" in message
    assert "give a target (analysis.target in the space, or --target METRIC=VALUE)" in message


def test_trials_that_learned_still_get_their_derived_target() -> None:
    frame, curves = _study([0.93, 0.95, 0.91], chance=0.2641)
    analysis = analyze_trials("learned", frame, curves, target=None, metric="val_accuracy", direction="maximize")
    assert analysis.target.value == pytest.approx(0.91) and analysis.target.source == "default"
    # A study recorded before trials kept chance_accuracy is answered as it was.
    frame, curves = _study([0.2665, 0.262, 0.2641], chance=None)
    assert analyze_trials("old", frame, curves, target=None, metric="val_accuracy", direction="maximize").target
