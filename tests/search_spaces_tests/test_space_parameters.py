"""Parameter forms (fixed, choices, ranges) and the core parameter rules."""

from __future__ import annotations

from typing import Any

import pytest

from hpsearch.search_spaces import (
    Choice,
    Fixed,
    FloatRange,
    IntRange,
    Parameter,
    SpaceError,
    parse_space,
)


def space_text(name: str, form: str) -> str:
    """``name: form`` on line 2, followed by the required core parameters it does not set."""
    lines = ["parameters:", f"  {name}: {form}"]
    for core, value in (("per_device_batch_size", "8"), ("base_lr", "0.1")):
        if core != name:
            lines.append(f"  {core}: {value}")
    return "\n".join(lines) + "\n"


def parse_parameter(name: str, form: str) -> Parameter:
    return parse_space(space_text(name, form)).parameters[name]


def error_of(name: str, form: str) -> SpaceError:
    with pytest.raises(SpaceError) as caught:
        parse_space(space_text(name, form))
    return caught.value


@pytest.mark.parametrize(
    ("form", "expected"),
    [
        ("0.9", Fixed(0.9)),
        ("3", Fixed(3)),
        ("adamw", Fixed("adamw")),
        ("true", Fixed(True)),
        ("{choices: [sgd, adamw]}", Choice(("sgd", "adamw"))),
        ("{choices: [1, 2.5, x, false]}", Choice((1, 2.5, "x", False))),
        ("{low: 0.0, high: 0.1}", FloatRange(0.0, 0.1)),
        ("{low: 0, high: 1, type: float}", FloatRange(0.0, 1.0)),
        ("{low: 0.0, high: 1.0, step: 0.25}", FloatRange(0.0, 1.0, step=0.25)),
        ("{low: 0.0, high: 0.3, step: 0.1}", FloatRange(0.0, 0.3, step=0.1)),
        ("{low: 1.0e-5, high: 1.0e-2, log: true}", FloatRange(1e-5, 1e-2, log=True)),
        ("{low: 1, high: 8}", IntRange(1, 8)),
        ("{low: 1, high: 64, log: true}", IntRange(1, 64, log=True)),
        ("{low: 16, high: 64, step: 16}", IntRange(16, 64, step=16)),
        ("{low: 1.0, high: 4.0, type: int}", IntRange(1, 4)),
        ("{low: 3, high: 3}", IntRange(3, 3)),
    ],
)
def test_parameter_forms_become_their_dataclass(form: str, expected: Parameter) -> None:
    assert parse_parameter("extra", form) == expected


def test_core_parameter_forms_are_typed_for_the_trial() -> None:
    assert parse_parameter("per_device_batch_size", "{low: 8, high: 512, log: true}") == IntRange(
        8, 512, log=True
    )
    assert parse_parameter("base_lr", "{low: 1, high: 2}") == FloatRange(1.0, 2.0)
    assert parse_parameter("base_lr", "{choices: [1, 0.5]}") == Choice((1.0, 0.5))
    assert parse_parameter("base_lr", "1") == Fixed(1.0)
    assert parse_parameter("lr_rule", "sqrt") == Fixed("sqrt")


@pytest.mark.parametrize(
    ("name", "form", "key_path", "fragment"),
    [
        ("per_device_batch_size", "0", "parameters.per_device_batch_size", ">= 1, got 0"),
        (
            "per_device_batch_size",
            "true",
            "parameters.per_device_batch_size",
            "got a boolean: true",
        ),
        ("per_device_batch_size", "8.5", "parameters.per_device_batch_size", "must be an integer"),
        (
            "per_device_batch_size",
            "4294967296",
            "parameters.per_device_batch_size",
            "<= 2147483648",
        ),
        (
            "per_device_batch_size",
            "{choices: [8, -8]}",
            "parameters.per_device_batch_size.choices[1]",
            ">= 1, got -8",
        ),
        (
            "per_device_batch_size",
            "{low: 0, high: 8}",
            "parameters.per_device_batch_size.low",
            ">= 1, got 0",
        ),
        (
            "per_device_batch_size",
            "{low: 8, high: 64.5}",
            "parameters.per_device_batch_size.high",
            "must be an integer",
        ),
        (
            "per_device_batch_size",
            "{low: 8, high: 64, type: float}",
            "parameters.per_device_batch_size.type",
            "must be 'int'",
        ),
        ("world_size", "{choices: [1, true]}", "parameters.world_size.choices[1]", "got a boolean"),
        ("world_size", "{choices: [1, 2097152]}", "parameters.world_size.choices[1]", "<="),
        (
            "grad_accum_steps",
            "'2'",
            "parameters.grad_accum_steps",
            "must be an integer, got a string",
        ),
        (
            "lr_rule",
            "cubic",
            "parameters.lr_rule",
            "one of 'constant', 'linear', 'sqrt', got 'cubic'",
        ),
        (
            "lr_rule",
            "{choices: [linear, sqr]}",
            "parameters.lr_rule.choices[1]",
            "did you mean 'sqrt'?",
        ),
        ("lr_rule", "{low: 1, high: 2}", "parameters.lr_rule", "cannot be a range"),
        ("base_lr", "-0.1", "parameters.base_lr", "base_lr must be > 0, got -0.1"),
        ("base_lr", "0", "parameters.base_lr", "base_lr must be > 0, got 0"),
        ("base_lr", ".nan", "parameters.base_lr", "finite number, got .nan"),
        (
            "base_lr",
            "{low: 1.0e-3, high: .inf}",
            "parameters.base_lr.high",
            "finite number, got .inf",
        ),
        (
            "base_lr",
            "{choices: [0.1, -.inf]}",
            "parameters.base_lr.choices[1]",
            "finite number, got -.inf",
        ),
        ("base_lr", "fast", "parameters.base_lr", "must be a number, got a string: 'fast'"),
        ("base_lr", "{low: 1, high: 2, type: int}", "parameters.base_lr.type", "must be 'float'"),
    ],
)
def test_core_rules_apply_to_every_value_choice_and_bound(
    name: str, form: str, key_path: str, fragment: str
) -> None:
    error = error_of(name, form)

    assert (error.key_path, error.line) == (key_path, 2)
    assert fragment in error.reason


@pytest.mark.parametrize(
    ("form", "key_path", "fragment"),
    [
        ("{low: 0.1, high: 0.01}", "parameters.wd.high", "high must be >= low (0.1), got 0.01"),
        (
            "{low: 0, high: 1.0, log: true}",
            "parameters.wd.low",
            "low must be > 0 when log is true, got 0.0",
        ),
        (
            "{low: 0.1, high: 1.0, log: true, step: 0.1}",
            "parameters.wd.step",
            "cannot be combined with log",
        ),
        (
            "{low: 1, high: 8, log: true, step: 1}",
            "parameters.wd.step",
            "cannot be combined with log",
        ),
        ("{low: 0.0, high: 1.0, step: 0.3}", "parameters.wd.step", "step must divide high - low"),
        ("{low: 0, high: 10, step: 3}", "parameters.wd.step", "step must divide high - low"),
        ("{low: 0.0, high: 1.0, step: 0}", "parameters.wd.step", "> 0"),
        ("{low: 0, high: 8, step: 0.5}", "parameters.wd.step", "must be an integer"),
        (
            "{low: 0.5, high: 8, type: int}",
            "parameters.wd.low",
            "must be an integer when type is 'int'",
        ),
        ("{low: 0, high: 1, type: double}", "parameters.wd.type", "one of 'int', 'float'"),
        ("{low: 0, high: 1, log: yes please}", "parameters.wd.log", "true or false"),
        ("{low: a, high: 1}", "parameters.wd.low", "must be a number, got a string"),
        ("{low: .nan, high: 1}", "parameters.wd.low", "finite"),
        ("{high: 1}", "parameters.wd.low", "'low' is missing"),
        ("{}", "parameters.wd", "needs {choices: [...]} or {low: ..., high: ...}"),
        ("{choices: []}", "parameters.wd.choices", "non-empty list"),
        ("{choices: 3}", "parameters.wd.choices", "non-empty list"),
        ("{choices: [1, [2]]}", "parameters.wd.choices[1]", "string, number or boolean"),
        ("{choices: [1, null]}", "parameters.wd.choices[1]", "got null"),
        ("{choices: [1, 2, 1]}", "parameters.wd.choices[2]", "unique"),
        ("{choices: [1, 1.0]}", "parameters.wd.choices[1]", "unique"),
        ("{choices: [0.1, .nan]}", "parameters.wd.choices[1]", "finite"),
        ("[1, 2]", "parameters.wd", "write {choices: [1, 2]}"),
        ("null", "parameters.wd", "got null"),
        ("", "parameters.wd", "got null"),
    ],
)
def test_bad_parameter_forms_are_refused(form: str, key_path: str, fragment: str) -> None:
    error = error_of("wd", form)

    assert (error.key_path, error.line) == (key_path, 2)
    assert fragment in error.reason


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("lr_rules", "did you mean 'lr_rule'?"),
        ("World_size", "did you mean 'world_size'?"),
        ("lr", "set 'base_lr' instead"),
        ("batch_size", "set 'per_device_batch_size' instead"),
    ],
)
def test_names_that_would_silently_miss_a_core_parameter_are_refused(
    name: str, fragment: str
) -> None:
    error = error_of(name, "1")

    assert (error.key_path, error.line) == (f"parameters.{name}", 2)
    assert fragment in error.reason


def test_parameter_name_must_be_an_identifier() -> None:
    error = error_of("'weight decay'", "0.1")

    assert error.key_path == "parameters.weight decay"
    assert "identifiers" in error.reason


def test_misspelled_required_parameter_is_named_in_the_missing_error() -> None:
    with pytest.raises(SpaceError) as caught:
        parse_space("parameters:\n  per_device_batch_size: 8\n  base_lrate: 0.1\n")

    assert caught.value.key_path == "parameters.base_lr"
    assert caught.value.line == 1
    assert "did you mean 'base_lrate'?" in caught.value.reason


@pytest.mark.parametrize("value", [{"choices": [8, 8.0]}, {"choices": [1, True]}])
def test_choices_equal_in_python_count_as_duplicates(value: Any) -> None:
    from hpsearch.search_spaces import space_from_mapping

    with pytest.raises(SpaceError) as caught:
        space_from_mapping({"parameters": {"per_device_batch_size": 8, "base_lr": 0.1, "x": value}})

    assert caught.value.key_path == "parameters.x.choices[1]"
