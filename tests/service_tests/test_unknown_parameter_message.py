"""A parameter neither the engine nor the workload takes: the refusal lists every parameter the
engine takes, ``precision`` included, and suggests the close one."""

from __future__ import annotations

import pytest

from hpsearch.search_spaces import ENGINE_PARAMETERS, SpaceError, parse_space
from hpsearch.workload_check import check_for_search


def test_a_misspelt_engine_parameter_is_refused_listing_every_engine_parameter() -> None:
    space = parse_space("workload: {name: digits_mlp}\nparameters:\n  per_device_batch_size: 8\n  base_lr: 0.1\n"
                        "  precison: {choices: [fp32, bf16]}\n", source="space.yaml")

    with pytest.raises(SpaceError) as refused:
        check_for_search(space)

    assert refused.value.key_path == "parameters.precison"
    assert "did you mean 'precision'?" in refused.value.reason
    assert refused.value.reason.endswith(f"the engine takes: {', '.join(ENGINE_PARAMETERS)}")
    assert "precision" in ENGINE_PARAMETERS
