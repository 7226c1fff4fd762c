"""The documented default scaling rule per optimizer family, and the LR schedule key."""

import pytest

from hpsearch.search_spaces import Fixed, SpaceError, parse_space

BASE = "parameters:\n  per_device_batch_size: 8\n  base_lr: 0.01\n"


def test_sgd_spaces_default_to_the_linear_rule() -> None:
    assert parse_space(BASE).parameters["lr_rule"] == Fixed("linear")


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_adam_type_spaces_default_to_the_sqrt_rule(optimizer: str) -> None:
    space = parse_space(BASE + f"  optimizer: {optimizer}\n")
    assert space.parameters["lr_rule"] == Fixed("sqrt")


def test_searching_optimizers_of_both_families_requires_an_explicit_rule() -> None:
    with pytest.raises(SpaceError) as info:
        parse_space(BASE + "  optimizer: {choices: [sgd, adam]}\n")
    assert info.value.key_path == "parameters.lr_rule"


def test_schedule_is_read_and_checked() -> None:
    assert parse_space(BASE + "scaling: {schedule: cosine}\n").scaling.schedule == "cosine"
    with pytest.raises(SpaceError) as info:
        parse_space(BASE + "scaling:\n  schedule: cosin\n")
    assert info.value.key_path == "scaling.schedule" and info.value.line == 5
    assert "did you mean 'cosine'" in str(info.value)
