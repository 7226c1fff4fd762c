"""``workload.save_model``: which trials keep their final weights, checked like any setting."""

from __future__ import annotations

import pytest

from hpsearch.search_spaces import ENGINE_PARAMETERS, SpaceError, parse_space

BASE = "parameters: {per_device_batch_size: 8, base_lr: 0.1}\n"


@pytest.mark.parametrize("mode", ["none", "all", "best"])
def test_save_model_takes_none_all_or_best(mode: str) -> None:
    assert parse_space(BASE + f"workload: {{save_model: {mode}}}\n").workload.save_model == mode


def test_save_model_defaults_to_none() -> None:
    assert parse_space(BASE).workload.save_model == "none"


def test_a_bad_save_model_names_the_modes_and_suggests_the_close_one() -> None:
    with pytest.raises(SpaceError, match=r"workload\.save_model.*must be one of 'none', 'all', 'best', "
                                         r"got 'bets'; did you mean 'best'\?"):
        parse_space(BASE + "workload: {save_model: bets}\n")


def test_the_engine_owns_the_core_optimizer_precision_and_clipping_parameters_only() -> None:
    assert set(ENGINE_PARAMETERS) == {"per_device_batch_size", "world_size", "grad_accum_steps", "lr_rule",
                                      "base_lr", "optimizer", "momentum", "nesterov", "weight_decay", "precision",
                                      "max_grad_norm"}
