"""The small checks every schema rule is built from, and how values are shown in messages.

Each check returns the value in its typed form or raises ``SpaceError`` at the key path it was
given. Messages state the rule, then the value: ``epochs must be >= 1, got 0``.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from hpsearch.search_spaces._document import Document, KeyPath, format_key_path, quote_key

__all__ = [
    "check_bool",
    "check_int",
    "check_keys",
    "check_mapping",
    "check_number",
    "check_one_of",
    "check_string",
    "fail",
    "is_int",
    "is_number",
    "kind",
    "label_of",
    "show",
    "suggest",
]


def fail(doc: Document, path: KeyPath, reason: str) -> NoReturn:
    """Raise a ``SpaceError`` at ``path``."""
    raise doc.error(reason, path)


def label_of(path: KeyPath) -> str:
    """The name a message uses for ``path``: its last key (``low`` for ``parameters.x.low``)."""
    for part in reversed(path):
        if isinstance(part, str):
            return part
    return "the document"


def is_int(value: Any) -> bool:
    """True for integers, false for ``bool`` (``True`` is an int to Python, not to users)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """True for ints and floats, false for ``bool``."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def kind(value: Any) -> str:
    """What a value is, in YAML words: ``a string``, ``a list``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if is_int(value):
        return "an integer"
    if is_number(value):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def show(value: Any) -> str:
    """A value as the user wrote it, shortened: ``-0.1``, ``'cubic'``, ``true``, ``.nan``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if is_int(value):
        value = int(value)
        # str() of an int past 4300 digits raises; a 200-digit number is no easier to read.
        if value.bit_length() > 100:
            return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
        return str(value)
    if is_number(value):
        value = float(value)
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:60] + "...")
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def suggest(word: Any, options: Sequence[str], *, cutoff: float = 0.6, prefix: bool = True) -> str:
    """``"; did you mean 'X'?"`` when an option is close to ``word``, else ``""``.

    Close means: equal ignoring case, the only option ``word`` starts (``max`` ->
    ``maximize``, unless ``prefix`` is false), or similar by ``difflib`` above ``cutoff``.
    """
    if not isinstance(word, str) or not options:
        return ""
    lowered = {option.lower(): option for option in options}
    prefixed = [o for o in options if prefix and word and o.lower().startswith(word.lower())]
    if word.lower() in lowered:
        match = lowered[word.lower()]
    elif len(prefixed) == 1:
        match = prefixed[0]  # "max" -> "maximize"
    else:
        close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=cutoff)
        if not close:
            return ""
        match = lowered[close[0]]
    return f"; did you mean '{match}'?"


def check_mapping(doc: Document, value: Any, path: KeyPath, *, what: str = "") -> Mapping[str, Any]:
    """``value`` as a mapping whose keys are strings."""
    name = what or (f"'{format_key_path(path)}'" if path else "the space")
    if not isinstance(value, Mapping):
        fail(doc, path, f"{name} must be a mapping (key: value), got {kind(value)}: {show(value)}")
    for key in value:
        if not isinstance(key, str):
            fail(doc, path + (str(key),), f"keys must be strings, got {kind(key)}: {show(key)}")
    return value


def check_keys(
    doc: Document, mapping: Mapping[str, Any], path: KeyPath, allowed: Sequence[str]
) -> None:
    """Reject keys of ``mapping`` that are not in ``allowed``, suggesting the closest one."""
    for key in mapping:
        if key not in allowed:
            where = f"'{format_key_path(path)}'" if path else "the top level"
            fail(
                doc,
                path + (key,),
                f"unknown key {quote_key(key)} in {where}{suggest(key, allowed)} "
                f"(expected one of: {', '.join(allowed)})",
            )


def check_int(
    doc: Document,
    value: Any,
    path: KeyPath,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    label: str = "",
) -> int:
    """``value`` as an int in ``[minimum, maximum]``; a bool or a float like 8.0 is refused."""
    label = label or label_of(path)
    if not is_int(value):
        hint = ""
        if is_number(value) and math.isfinite(value) and float(value).is_integer():
            # YAML reads 1e3 and 8.0 as floats; say how to write the integer meant.
            hint = f" (write {int(value)} without a decimal point or exponent)"
        fail(doc, path, f"{label} must be an integer{hint}, got {kind(value)}: {show(value)}")
    number = int(value)  # numpy integers from Python users become plain ints
    if minimum is not None and number < minimum:
        fail(doc, path, f"{label} must be >= {minimum}, got {show(number)}")
    if maximum is not None and number > maximum:
        fail(doc, path, f"{label} must be <= {maximum}, got {show(number)}")
    return number


def check_number(
    doc: Document,
    value: Any,
    path: KeyPath,
    *,
    minimum: float | None = None,
    above: float | None = None,
    label: str = "",
) -> float:
    """``value`` as a finite float, ``>= minimum`` and ``> above`` when given."""
    label = label or label_of(path)
    if not is_number(value):
        fail(doc, path, f"{label} must be a number, got {kind(value)}: {show(value)}")
    if is_int(value):
        value = int(value)
        if value.bit_length() > 1000:  # float() overflows past ~1e308
            fail(doc, path, f"{label} must be a finite number, got {show(value)}")
    number = float(value)
    if not math.isfinite(number):
        fail(doc, path, f"{label} must be a finite number, got {show(number)}")
    if minimum is not None and number < minimum:
        fail(doc, path, f"{label} must be >= {minimum:g}, got {show(value)}")
    if above is not None and number <= above:
        fail(doc, path, f"{label} must be > {above:g}, got {show(value)}")
    return number


def check_bool(doc: Document, value: Any, path: KeyPath, *, label: str = "") -> bool:
    """``value`` as a bool (YAML ``true``/``false``)."""
    if not isinstance(value, bool):
        fail(
            doc,
            path,
            f"{label or label_of(path)} must be true or false, got {kind(value)}: {show(value)}",
        )
    return value


def check_string(doc: Document, value: Any, path: KeyPath, *, label: str = "") -> str:
    """``value`` as a non-empty string; a number gets a hint to quote it."""
    label = label or label_of(path)
    if not isinstance(value, str):
        hint = (
            f" (quote it: '{show(value)}')" if is_number(value) or isinstance(value, bool) else ""
        )
        fail(doc, path, f"{label} must be a string{hint}, got {kind(value)}: {show(value)}")
    if not value.strip():
        fail(doc, path, f"{label} must not be empty, got {show(value)}")
    return value


def check_one_of(
    doc: Document, value: Any, path: KeyPath, options: Sequence[str], *, label: str = ""
) -> str:
    """``value`` as one of the strings in ``options``."""
    label = label or label_of(path)
    if not isinstance(value, str) or value not in options:
        listed = ", ".join(f"'{o}'" for o in options)
        fail(
            doc,
            path,
            f"{label} must be one of {listed}, got {show(value)}{suggest(value, options)}",
        )
    return value
