"""One configuration is one key wherever the search compares configurations: a grid's ``1`` and
Optuna's stored ``1.0`` are the same value to the sampler, the searcher, the resume, the memory
ceilings and the analysis (three helpers once disagreed on it)."""

from __future__ import annotations

from hpsearch.analysis._batches import config_key
from hpsearch.planner.ceilings import memory_key
from hpsearch.planner.sampler import _point_key
from hpsearch.planner.state import exact as _exact
from hpsearch.record import params_key

AS_WRITTEN = {"per_device_batch_size": 8, "base_lr": 1, "momentum": 0, "lr_rule": "sqrt", "nesterov": True}
AS_STORED = {"per_device_batch_size": 8.0, "base_lr": 1.0, "momentum": 0.0, "lr_rule": "sqrt", "nesterov": True}


def test_an_int_and_its_float_are_one_configuration_to_every_part_of_the_search() -> None:
    for key in (params_key, _point_key, _exact, memory_key):
        assert key(AS_WRITTEN) == key(AS_STORED), key.__module__
    assert config_key(AS_WRITTEN, ["momentum", "nesterov"]) == config_key(AS_STORED, ["momentum", "nesterov"])


def test_different_values_stay_different_configurations() -> None:
    for key in (params_key, _point_key, _exact, memory_key):
        assert key(AS_WRITTEN) != key({**AS_WRITTEN, "momentum": 0.9}), key.__module__
        assert key(AS_WRITTEN) != key({**AS_WRITTEN, "nesterov": False}), key.__module__
        # a string that prints like a number is not that number
        assert key(AS_WRITTEN) != key({**AS_WRITTEN, "momentum": "0"}), key.__module__
