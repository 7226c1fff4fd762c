import math

import pytest

from hpsearch.trials.scaling import effective_batch_size, lr_at, scale_factor, scaled_lr
from hpsearch.trials.spec import TrialSpec


def test_effective_batch_multiplies_device_batch_world_size_and_accumulation() -> None:
    assert effective_batch_size(32, 4, 2) == 256
    assert TrialSpec(per_device_batch_size=16, base_lr=0.1, world_size=2, grad_accum_steps=3).effective_batch_size == 96


@pytest.mark.parametrize(
    ("rule", "batch", "expected"),
    [
        ("constant", 512, 0.01),
        ("linear", 512, 0.64),  # k = 512 / 8 = 64
        ("sqrt", 512, 0.08),  # sqrt(64) = 8
        ("linear", 8, 0.01),  # B = B0: every rule gives base_lr
        ("sqrt", 8, 0.01),
        ("linear", 2, 0.0025),  # below B0 the linear rule scales down
    ],
)
def test_scaled_lr_follows_the_rule(rule: str, batch: int, expected: float) -> None:
    assert scaled_lr(rule, 0.01, batch, 8) == pytest.approx(expected)


def test_trial_spec_applies_the_rule_to_the_effective_batch() -> None:
    spec = TrialSpec(per_device_batch_size=32, world_size=2, grad_accum_steps=2, base_lr=0.01,
                     base_batch_size=8, lr_rule="sqrt")
    assert spec.lr == pytest.approx(0.01 * math.sqrt(128 / 8))


def test_unknown_rule_is_rejected_with_the_allowed_names() -> None:
    with pytest.raises(ValueError, match="constant, linear, sqrt"):
        scale_factor("cubic", 2.0)


def test_warmup_rises_linearly_from_base_to_peak_then_holds() -> None:
    kw = dict(base_lr=0.1, peak_lr=0.5, warmup_epochs=2.0)
    assert lr_at(0.0, **kw) == pytest.approx(0.1)
    assert lr_at(1.0, **kw) == pytest.approx(0.3)
    assert lr_at(2.0, **kw) == pytest.approx(0.5)
    assert lr_at(7.5, **kw) == pytest.approx(0.5)


def test_no_warmup_means_peak_from_the_first_step() -> None:
    assert lr_at(0.0, base_lr=0.1, peak_lr=0.4, warmup_epochs=0.0) == pytest.approx(0.4)
