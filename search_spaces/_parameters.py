"""The ``parameters`` section: value forms (fixed, choices, range) and the core parameter rules.

The core rules (batch sizes and world size are positive integers, ``lr_rule`` names a rule,
``base_lr`` is a positive finite number) are checked on every value a trial could receive: a
fixed value, each choice and both bounds of a range. A bad choice would otherwise surface only
in the one trial that samples it, hours into a search.
"""

from __future__ import annotations

import dataclasses
import decimal
from collections.abc import Mapping
from typing import Any

from hpsearch import record
from hpsearch.search_spaces._checks import (
    check_bool,
    check_int,
    check_keys,
    check_mapping,
    check_number,
    check_one_of,
    fail,
    is_int,
    is_number,
    kind,
    show,
    suggest,
)
from hpsearch.search_spaces._document import Document, KeyPath
from hpsearch.search_spaces.space import (
    CORE_PARAMETERS,
    LR_RULES,
    MAX_GRAD_NORM,
    OPTIMIZERS,
    PRECISIONS,
    Choice,
    Fixed,
    FloatRange,
    IntRange,
    Parameter,
    Scalar,
)

__all__ = ["CORE_DEFAULTS", "DEFAULT_RULE_BY_OPTIMIZER", "parameter_form", "parse_parameters"]

#: Values the core parameters take when the file leaves them out.
CORE_DEFAULTS: dict[str, Parameter] = {
    record.WORLD_SIZE: Fixed(1),
    record.GRAD_ACCUM_STEPS: Fixed(1),
}

_REQUIRED = (record.PER_DEVICE_BATCH_SIZE, record.BASE_LR)

# Positive-integer core parameters and their largest sensible value: past these a value is a
# typo, and a huge int would overflow torch's int64 arithmetic deep inside a trial.
_INT_CAPS = {record.PER_DEVICE_BATCH_SIZE: 2**31, record.WORLD_SIZE: 2**20, record.GRAD_ACCUM_STEPS: 2**20}

# Names users reach for that hpsearch derives itself: searching them would fight the scaling
# rule, so point to the parameter that controls them.
_DERIVED = {
    "lr": record.BASE_LR,
    "learning_rate": record.BASE_LR,
    "batch_size": record.PER_DEVICE_BATCH_SIZE,
    record.EFFECTIVE_BATCH_SIZE: record.PER_DEVICE_BATCH_SIZE,
}

_RANGE_KEYS = ("low", "high", "log", "step", "type")
_FORM_KEYS = ("choices",) + _RANGE_KEYS


def parse_parameters(doc: Document, value: Any, path: KeyPath) -> dict[str, Parameter]:
    """Parse the ``parameters`` mapping, in file order, with the core defaults filled in."""
    if value is None:
        fail(doc, path, "parameters must be a mapping of parameter name to value, got null")
    mapping = check_mapping(doc, value, path)
    out: dict[str, Parameter] = {}
    for name, raw in mapping.items():
        _check_name(doc, name, path + (name,))
        out[name] = _parse_parameter(doc, name, raw, path + (name,))
    for name in _REQUIRED:
        if name not in out:
            fail(doc, path + (name,), f"parameters must set '{name}'{suggest(name, list(out))}")
    for name, default in CORE_DEFAULTS.items():
        out.setdefault(name, default)
    if record.LR_RULE not in out:
        out[record.LR_RULE] = _default_rule(doc, out, path)
    return out


#: The documented default scaling rule per optimizer family (docs/science.md): linear for SGD
#: (Goyal et al. 2017), sqrt for Adam-type optimizers (Malladi et al. 2022). One per ``OPTIMIZERS``.
DEFAULT_RULE_BY_OPTIMIZER = {"sgd": "linear", "adam": "sqrt", "adamw": "sqrt"}


def _default_rule(doc: Document, params: Mapping[str, Parameter], path: KeyPath) -> Parameter:
    """The rule a space that does not set ``lr_rule`` gets, from its optimizer's family."""
    optimizer = params.get("optimizer", Fixed("sgd"))
    names = [optimizer.value] if isinstance(optimizer, Fixed) else list(getattr(optimizer, "choices", []))
    rules = {DEFAULT_RULE_BY_OPTIMIZER[str(n).lower()] for n in names}  # each name checked by _check_optimizer
    if len(rules) > 1:
        fail(doc, path + (record.LR_RULE,),
             "lr_rule must be set when the searched optimizers have different default rules "
             "(linear for sgd, sqrt for adam and adamw)")
    return Fixed(rules.pop() if rules else "linear")


def _check_name(doc: Document, name: str, path: KeyPath) -> None:
    if not name.isidentifier():
        fail(
            doc, path, f"parameter names must be identifiers (letters, digits, _), got {show(name)}"
        )
    if name in _DERIVED:
        fail(
            doc,
            path,
            f"parameter names must not be ones hpsearch derives from the scaling rule, got "
            f"{show(name)}; set '{_DERIVED[name]}' instead",
        )
    if name not in CORE_PARAMETERS:
        # Any other name is passed to the workload, so "lr_rules" or "World_size" would be
        # silently ignored by the engine while the core default applies: refuse near misses.
        hint = suggest(name, CORE_PARAMETERS, cutoff=0.85, prefix=False)
        if hint:
            fail(doc, path, f"'{name}' is not a core parameter but looks like one{hint}")


def _parse_parameter(doc: Document, name: str, raw: Any, path: KeyPath) -> Parameter:
    raw = parameter_form(raw)
    if isinstance(raw, Mapping):
        form = check_mapping(doc, raw, path)
        check_keys(doc, form, path, _FORM_KEYS)
        if "choices" in form:
            for key in form:
                if key != "choices":
                    fail(doc, path + (key,), f"'{key}' cannot be combined with 'choices'")
            return _parse_choices(doc, name, form["choices"], path + ("choices",))
        if not form:
            fail(doc, path, f"{name} needs {{choices: [...]}} or {{low: ..., high: ...}}, got {{}}")
        return _parse_range(doc, name, form, path)
    if isinstance(raw, (list, tuple)):
        fail(
            doc,
            path,
            f"{name} must be a value, {{choices: [...]}} or a range; "
            f"write {{choices: {show(list(raw))}}} to search a list",
        )
    return Fixed(_check_value(doc, name, raw, path))


def parameter_form(raw: Any) -> Any:
    """A parameter object as its space-file form (``Choice`` -> ``{"choices": [...]}``).

    Python users may pass parameter objects; they are checked in this form like YAML values.
    Anything else is returned as is.
    """
    if isinstance(raw, Fixed):
        return raw.value
    if isinstance(raw, Choice):
        return {"choices": list(raw.choices)}
    if isinstance(raw, (FloatRange, IntRange)):
        form = {k: v for k, v in dataclasses.asdict(raw).items() if v is not None}
        if isinstance(raw, IntRange) and raw.step == 1:
            del form["step"]  # the default; keeping it would clash with log
        if not form["log"]:
            del form["log"]
        form["type"] = "int" if isinstance(raw, IntRange) else "float"
        return form
    return raw


def _check_value(doc: Document, name: str, value: Any, path: KeyPath) -> Scalar:
    """One value a trial may receive: a finite scalar, meeting the core rule for ``name``."""
    if name in _INT_CAPS:
        return check_int(doc, value, path, minimum=1, maximum=_INT_CAPS[name], label=name)
    if name == record.LR_RULE:
        return check_one_of(doc, value, path, LR_RULES, label=name)
    if name == "precision":
        return check_one_of(doc, value, path, PRECISIONS, label=name)
    if name == "optimizer":
        return _check_optimizer(doc, value, path)
    if name in (record.BASE_LR, MAX_GRAD_NORM):
        return check_number(doc, value, path, above=0, label=name)
    if value is None or (not isinstance(value, (str, bool)) and not is_number(value)):
        fail(
            doc,
            path,
            f"{name} must be a string, number or boolean, got {kind(value)}: {show(value)}",
        )
    if is_number(value) and not isinstance(value, bool):
        if is_int(value):
            return int(value)
        return check_number(doc, value, path, label=name)
    return value  # type: ignore[no-any-return]


def _check_optimizer(doc: Document, value: Any, path: KeyPath) -> str:
    """An optimizer the engine builds (``OPTIMIZERS``), in any case, kept as written."""
    if not isinstance(value, str) or value.lower() not in OPTIMIZERS:
        listed = ", ".join(f"'{o}'" for o in OPTIMIZERS)
        fail(doc, path, f"optimizer must be one of {listed} (in any case), the optimizers the engine builds; got "
                        f"{show(value)}{suggest(value, OPTIMIZERS)}")
    return value


def _parse_choices(doc: Document, name: str, raw: Any, path: KeyPath) -> Choice:
    if not isinstance(raw, (list, tuple)) or not raw:
        fail(doc, path, f"choices must be a non-empty list, got {kind(raw)}: {show(raw)}")
    values: list[Scalar] = []
    for i, item in enumerate(raw):
        value = _check_value(doc, name, item, path + (i,))
        for j, earlier in enumerate(values):
            # ``==`` as Optuna compares choices: 1, 1.0 and true are the same choice.
            if earlier == value:
                fail(
                    doc,
                    path + (i,),
                    f"choices must be unique, got {show(item)} again (choices[{j}] is {show(earlier)})",
                )
        values.append(value)
    return Choice(tuple(values))


def _parse_range(
    doc: Document, name: str, form: Mapping[str, Any], path: KeyPath
) -> FloatRange | IntRange:
    for key in ("low", "high"):
        if key not in form:
            fail(doc, path + (key,), f"a range needs both 'low' and 'high'; '{key}' is missing")
    if name == record.LR_RULE:
        fail(
            doc,
            path,
            f"lr_rule names a rule, it cannot be a range; write {{choices: {list(LR_RULES)}}}",
        )
    if name == "optimizer":
        fail(doc, path, f"optimizer names an optimizer, it cannot be a range; write {{choices: {list(OPTIMIZERS)}}}")
    if name == "precision":
        fail(doc, path, f"precision names an arithmetic, it cannot be a range; write {{choices: {list(PRECISIONS)}}}")
    kind_ = (
        check_one_of(doc, form["type"], path + ("type",), ("int", "float"))
        if "type" in form
        else None
    )
    if name in _INT_CAPS and kind_ == "float":
        fail(doc, path + ("type",), f"{name} is an integer; type must be 'int', got 'float'")
    if name == record.BASE_LR and kind_ == "int":
        fail(doc, path + ("type",), "base_lr is a float; type must be 'float', got 'int'")
    log = check_bool(doc, form["log"], path + ("log",)) if "log" in form else False
    low_raw, high_raw = form["low"], form["high"]
    if name in _INT_CAPS or name in (record.BASE_LR, MAX_GRAD_NORM):
        low_raw = _check_value(doc, name, low_raw, path + ("low",))
        high_raw = _check_value(doc, name, high_raw, path + ("high",))
    low = check_number(doc, low_raw, path + ("low",))
    high = check_number(doc, high_raw, path + ("high",))
    integer = kind_ == "int" or (
        kind_ is None and name != record.BASE_LR and is_int(low_raw) and is_int(high_raw)
    )
    if integer:
        for key, bound in (("low", low), ("high", high)):
            if not bound.is_integer():
                fail(
                    doc,
                    path + (key,),
                    f"{key} must be an integer when type is 'int', got {show(form[key])}",
                )
        low, high = int(low_raw), int(high_raw)
    if low > high:
        fail(doc, path + ("high",), f"high must be >= low ({show(low)}), got {show(high)}")
    if log and low <= 0:
        fail(doc, path + ("low",), f"low must be > 0 when log is true, got {show(low)}")
    step = _parse_step(doc, form, path, integer=integer, log=log)
    if step is not None:
        _check_step_divides(doc, low, high, step, path + ("step",))
    if integer:
        return IntRange(low=int(low), high=int(high), log=log, step=int(step or 1))
    return FloatRange(low=float(low), high=float(high), log=log, step=step)


def _parse_step(
    doc: Document, form: Mapping[str, Any], path: KeyPath, *, integer: bool, log: bool
) -> float | None:
    if "step" not in form:
        return None
    if log:
        fail(
            doc,
            path + ("step",),
            "step cannot be combined with log: true (Optuna does not support it), "
            f"got step {show(form['step'])}",
        )
    if integer:
        return check_int(doc, form["step"], path + ("step",), minimum=1)
    return check_number(doc, form["step"], path + ("step",), above=0)


def _check_step_divides(doc: Document, low: float, high: float, step: float, path: KeyPath) -> None:
    # Optuna would quietly lower ``high`` to the last multiple of step (with a warning the
    # user rarely sees); decimals avoid 0.1-style float noise in the test. The context is wide
    # enough to be exact for any finite bounds: with the default 28 digits,
    # {low: -1.0e30, high: 0.1, step: 0.01} raised decimal.InvalidOperation instead of a
    # SpaceError (and a rounded span could pass or fail the test wrongly).
    exact = decimal.Context(prec=2000)
    span = exact.subtract(decimal.Decimal(str(high)), decimal.Decimal(str(low)))
    if exact.remainder(span, decimal.Decimal(str(step))) != 0:
        fail(doc, path, f"step must divide high - low ({span}) evenly, got {show(step)}")
