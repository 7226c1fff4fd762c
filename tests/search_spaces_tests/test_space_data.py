"""The workload's data and compute settings: ``data``, ``loader``, ``precision`` (also as a
parameter), ``compile`` and ``keep_data``, checked like any setting."""

from __future__ import annotations

import pytest

from hpsearch.search_spaces import LoaderSpec, SpaceError, parse_space

BASE = "parameters: {per_device_batch_size: 8, base_lr: 0.1}\n"


def test_defaults_keep_data_on_the_device_where_it_fits_in_fp32() -> None:
    workload = parse_space(BASE).workload
    assert (workload.data, workload.precision, workload.compile, workload.keep_data) == ("auto", "fp32", False, True)
    assert workload.loader == LoaderSpec(workers=None, pin_memory=None, prefetch_factor=2, persistent_workers=True)


def test_every_setting_reads_back() -> None:
    workload = parse_space(BASE + "workload: {data: loader, precision: bf16, compile: true, keep_data: false, "
                                  "loader: {workers: 4, pin_memory: false, prefetch_factor: 8, "
                                  "persistent_workers: false}}\n").workload
    assert (workload.data, workload.precision, workload.compile, workload.keep_data) == ("loader", "bf16", True, False)
    assert workload.loader == LoaderSpec(workers=4, pin_memory=False, prefetch_factor=8, persistent_workers=False)
    auto = parse_space(BASE + "workload: {loader: {workers: auto, pin_memory: auto}}\n").workload.loader
    assert auto == LoaderSpec()


@pytest.mark.parametrize(("text", "says"), [
    ("workload: {data: gpu}", r"workload\.data': data must be one of 'auto', 'device', 'loader', got 'gpu'"),
    ("workload: {precision: fp16}", r"workload\.precision': precision must be one of 'fp32', 'tf32', 'bf16', got "
                                    r"'fp16'; did you mean 'bf16'\?"),
    ("workload: {compile: yes please}", r"workload\.compile': compile must be true or false"),
    ("workload: {keep_data: 1}", r"workload\.keep_data': keep_data must be true or false"),
    ("workload: {loader: 4}", r"workload\.loader' must be a mapping"),
    ("workload: {loader: {worker: 4}}", r"unknown key 'worker' in 'workload\.loader'; did you mean 'workers'\?"),
    ("workload: {loader: {workers: many}}", r"workload\.loader\.workers': workers must be 'auto' or an integer >= 0"),
    ("workload: {loader: {workers: -1}}", r"workers must be >= 0, got -1"),
    ("workload: {loader: {pin_memory: always}}", r"pin_memory must be 'auto', true or false"),
    ("workload: {loader: {prefetch_factor: 0}}", r"prefetch_factor must be >= 1"),
])
def test_a_bad_setting_is_one_error_at_its_key(text: str, says: str) -> None:
    with pytest.raises(SpaceError, match=says):
        parse_space(BASE + text + "\n")


def test_precision_is_searchable_like_any_parameter() -> None:
    space = parse_space("parameters: {per_device_batch_size: 8, base_lr: 0.1, precision: {choices: [fp32, bf16]}}")
    assert space.parameters["precision"].choices == ("fp32", "bf16")  # type: ignore[union-attr]
    with pytest.raises(SpaceError, match=r"parameters\.precision\.choices\[1\]': precision must be one of 'fp32', "
                                         r"'tf32', 'bf16', got 'half'"):
        parse_space("parameters: {per_device_batch_size: 8, base_lr: 0.1, precision: {choices: [fp32, half]}}")
    with pytest.raises(SpaceError, match=r"precision names an arithmetic, it cannot be a range"):
        parse_space("parameters: {per_device_batch_size: 8, base_lr: 0.1, precision: {low: 1, high: 2}}")


def test_precision_set_in_two_places_is_refused_at_the_parameter() -> None:
    with pytest.raises(SpaceError) as refused:
        parse_space("workload: {precision: tf32}\nparameters: {per_device_batch_size: 8, base_lr: 0.1, "
                    "precision: {choices: [fp32, bf16]}}\n", source="space.yaml")
    assert str(refused.value) == ("space.yaml:2 at 'parameters.precision': precision is set both here and at "
                                  "workload.precision; set it in one place (under parameters to search it)")
