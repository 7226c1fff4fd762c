"""Whatever a space file holds, parsing it gives a valid space or one located ``SpaceError``.

Property-based: valid space files (the shipped examples and a few written here) are mutated
(values swapped for another type or pushed out of range, keys removed, unknown and misspelled
keys added, the YAML text damaged, junk bytes) and each result is parsed. The contract checked:

* ``parse_space`` returns a ``SearchSpace`` (some mutations stay valid) or raises
  ``SpaceError``; never another exception.
* The message is one line (the CLI prints it as a single ``error:`` line).
* ``key_path`` is empty only where no key exists to name:

  - errors about the document as a whole (``DOCUMENT_LEVEL_REASONS``): the text is not valid
    YAML (syntax: brackets, indentation, tabs, an undefined alias), is empty, is not UTF-8
    text (undecodable bytes, control characters), holds several documents, is nested
    hundreds deep, or its top level is not a mapping;
  - a YAML value that cannot be read (``ROOT_VALUE_REASONS``: an unknown or unsafe tag, a
    list or mapping used as a key, an impossible date or integer) when that value is the
    root node itself (``!foo`` before the first key, ``? [a]`` at the top level).

  Every other error is about a key and names it.
  Keys that are empty or hold unprintable characters are shown as their ``repr``
  (``workload.'a\\nb'``), so that the path stays on one line and is never empty.
* The key path is where the change was made: the changed key or value, something inside it,
  the mapping or list it was removed from, or its neighbour where a rule ties two values
  together (``low`` above ``high`` is reported at ``high``, a repeated choice at the later one).
* ``line``, when set, is a line of the text: 1 to the number of YAML line breaks + 1 (the
  last is the position after a final newline, where "unexpected end of file" points). It is
  set whenever ``key_path`` is.
* An unknown key names its own key path and line; when it is one edit (a letter changed,
  added, dropped or two swapped) away from a key valid at that level, the reason says
  "did you mean" with a key of that level. The same holds for a misspelled choice value
  (``direction: minimise``).

Runs are reproducible: examples are derandomized and no example database is kept. The last
part runs the CLI (``validate`` and ``start``) on a few fixed mutations as subprocesses.
"""

from __future__ import annotations

import copy
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from hpsearch.search_spaces import (
    CORE_PARAMETERS,
    FloatRange,
    SearchSpace,
    SpaceError,
    example_path,
    list_examples,
    parse_space,
)

KeyPath = tuple[Any, ...]

# ---------------------------------------------------------------------------------------------
# The starting points: every shipped example plus hand-written spaces covering the other forms
# (ranges with step and log, asha as a mapping, cpu resources, constraints, options).

README_SPACE = """\
study: my-study
workload: {name: digits_cnn, epochs: 10}
scaling: {base_batch_size: 8, warmup_epochs: 0}
parameters:
  per_device_batch_size: {choices: [8, 32, 128]}
  world_size: {choices: [1, 2]}
  grad_accum_steps: 1
  lr_rule: {choices: [constant, linear, sqrt]}
  base_lr: {low: 1.0e-3, high: 1.0e-1, log: true}
  momentum: 0.9
objectives:
  - {metric: val_accuracy, direction: maximize}
  - {metric: runtime_s, direction: minimize}
search: {sampler: nsga2, n_trials: 24, max_concurrent: auto, seed: 0}
resources: {device: auto, cpus_per_worker: 1, gpus_per_worker: 1}
constraints: {max_effective_batch_size: 1024, skip_equivalent: true}
"""

ASHA_SPACE = """\
study: asha.cpu_run-1
storage: sqlite:///fuzz.db
workload:
  name: my_pkg.models:build
  epochs: 6
  options: {hidden: 64, dropout: 0.1}
scaling:
  base_batch_size: 32
  warmup_epochs: 0.5
  schedule: cosine
parameters:
  per_device_batch_size: {low: 16, high: 128, step: 16}
  world_size: {low: 1, high: 4, type: int}
  grad_accum_steps: {choices: [1, 2]}
  lr_rule: sqrt
  base_lr: {low: 0.001, high: 0.1, log: true}
  optimizer: adam
  weight_decay: {low: 0.0, high: 0.1, step: 0.01}
  nesterov: {choices: [true, false]}
objectives:
  - metric: val_loss
    direction: minimize
search:
  sampler: tpe
  n_trials: 12
  max_concurrent: 2
  seed: 7
  scheduler: {name: asha, grace_epochs: 1, reduction_factor: 3}
  trial_timeout_s: 600
resources:
  device: cpu
  cpus_per_worker: 2
  gpus_per_worker: 0
  emulate_ranks: true
constraints:
  max_effective_batch_size: 512
  max_lr: 1.0
  skip_equivalent: false
"""

MINIMAL_SPACE = "parameters:\n  per_device_batch_size: 8\n  base_lr: 0.1\n"

SEEDS: dict[str, str] = {
    **{f"example:{name}": example_path(name).read_text(encoding="utf-8") for name in list_examples()},
    "readme": README_SPACE,
    "asha": ASHA_SPACE,
    "minimal": MINIMAL_SPACE,
}
SEED_DATA: dict[str, dict[str, Any]] = {name: yaml.safe_load(text) for name, text in SEEDS.items()}

# ---------------------------------------------------------------------------------------------
# The schema, as the user reads it (README): the keys valid in each mapping.

TOP_KEYS = ("study", "storage", "workload", "scaling", "parameters", "objectives", "search",
            "resources", "constraints")
SECTION_KEYS = {
    "workload": ("name", "epochs", "options"),
    "scaling": ("base_batch_size", "warmup_epochs", "schedule"),
    "search": ("sampler", "n_trials", "max_concurrent", "scheduler", "seed", "trial_timeout_s"),
    "resources": ("device", "cpus_per_worker", "gpus_per_worker", "emulate_ranks"),
    "constraints": ("max_effective_batch_size", "max_lr", "skip_equivalent"),
}
SCHEDULER_KEYS = ("name", "grace_epochs", "reduction_factor")
OBJECTIVE_KEYS = ("metric", "direction")
PARAMETER_FORM_KEYS = ("choices", "low", "high", "log", "step", "type")

#: Values that must be one of a few words; a one-edit misspelling gets a suggestion.
CHOICE_VALUES = {
    ("scaling", "schedule"): ("none", "cosine", "step"),
    ("resources", "device"): ("auto", "cpu", "cuda"),
    ("objectives", int, "direction"): ("maximize", "minimize"),
    ("objectives", int, "metric"): ("val_accuracy", "val_loss", "train_loss", "runtime_s",
                                    "device_seconds", "samples_per_s", "comm_fraction"),
    ("parameters", "lr_rule"): ("constant", "linear", "sqrt"),
    ("parameters", "lr_rule", "choices", int): ("constant", "linear", "sqrt"),
}

#: Reasons of errors about the document as a whole: these always have an empty key path.
DOCUMENT_LEVEL_REASONS = (
    "invalid YAML:",
    "the space file is empty",
    "the file must be UTF-8 text",
    "the file must be text",
    "a space file holds one YAML document",
    "lists or mappings are nested too deeply",
    "a space's top level must be a mapping",
)


#: Reasons of errors about one value the YAML reader cannot turn into plain data. When that
#: value is the document's root (``!foo`` before the first key, or a list as a top-level key)
#: there is no key to name either, and the key path is empty.
ROOT_VALUE_REASONS = (
    "unsupported YAML value",
    "cannot read the value",
    "integers must be reasonably sized",
    "mapping keys must be plain values",
)


def root_is_unreadable(text: str | bytes) -> bool:
    """Whether the root node itself is what cannot be read: not a plain mapping (an unknown
    tag, a scalar), or a mapping with a list or mapping as one of its keys."""
    if isinstance(text, bytes):
        text = text.decode("utf-8-sig", errors="replace")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return False
    if not isinstance(root, yaml.MappingNode) or root.tag != "tag:yaml.org,2002:map":
        return root is not None
    return any(not isinstance(key, yaml.ScalarNode) for key, _ in root.value)


def closed_keys(path: KeyPath) -> tuple[str, ...] | None:
    """The keys valid in the mapping at ``path``, or None where any key is allowed
    (``workload.options``) or the level is not a mapping of the schema."""
    if path == ():
        return TOP_KEYS
    if len(path) == 1 and path[0] in SECTION_KEYS:
        return SECTION_KEYS[path[0]]
    if path == ("search", "scheduler"):
        return SCHEDULER_KEYS
    if len(path) == 2 and path[0] == "objectives" and isinstance(path[1], int):
        return OBJECTIVE_KEYS
    if len(path) == 2 and path[0] == "parameters" and isinstance(path[1], str):
        return PARAMETER_FORM_KEYS
    return None


def near_miss_keys(path: KeyPath) -> tuple[str, ...]:
    """Keys a one-edit misspelling of which must be refused with a suggestion at ``path``.

    In ``parameters`` any identifier is a parameter for the workload, except a near miss of a
    core parameter (``world_sise``), which would silently leave the core default in place.
    """
    if path == ("parameters",):
        return CORE_PARAMETERS
    return closed_keys(path) or ()


def choice_values(path: KeyPath) -> tuple[str, ...] | None:
    for pattern, values in CHOICE_VALUES.items():
        if len(pattern) == len(path) and all(
            (p is int and isinstance(q, int)) or p == q for p, q in zip(pattern, path)
        ):
            return values
    return None


# ---------------------------------------------------------------------------------------------
# Helpers on plain data.


def format_key_path(path: KeyPath) -> str:
    """``objectives[1].direction``; a key that is empty or not printable is shown as its repr."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            name = part if part and part.isprintable() else repr(part)
            out += f".{name}" if out else name
    return out


def walk(data: Any, path: KeyPath = ()) -> Iterator[tuple[KeyPath, Any]]:
    yield path, data
    if isinstance(data, dict):
        for key, value in data.items():
            yield from walk(value, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from walk(value, path + (i,))


def get(data: Any, path: KeyPath) -> Any:
    for part in path:
        data = data[part]
    return data


def dump(data: Any) -> str:
    """Block-style YAML, one key per line, so every key has a line of its own."""
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10**9,
                          default_flow_style=False)


def one_edit(word: str, op: str, index: int, letter: str) -> str:
    """``word`` with one letter changed, added or dropped, or two neighbours swapped."""
    i = index % (len(word) + (op == "insert"))
    if op == "change":
        return word[:i] + letter + word[i + 1:]
    if op == "insert":
        return word[:i] + letter + word[i:]
    if op == "drop":
        return word[:i] + word[i + 1:]
    i = min(i, len(word) - 2)  # swap
    return word[:i] + word[i + 1] + word[i] + word[i + 2:]


def yaml_line_count(text: str) -> int:
    """Lines as YAML counts them: it breaks lines at \\r\\n, \\r, \\n, NEL, LS and PS."""
    return len(re.findall("\r\n|[\r\n\x85\u2028\u2029]", text)) + 1


def max_line(text: str | bytes) -> int:
    if isinstance(text, str):
        return yaml_line_count(text)
    encoding = "utf-16" if text.startswith((b"\xff\xfe", b"\xfe\xff")) else "utf-8-sig"
    return max(text.count(b"\n") + 1, yaml_line_count(text.decode(encoding, errors="replace")))


# ---------------------------------------------------------------------------------------------
# The checks every parse goes through.


@dataclass(frozen=True)
class Expect:
    """What a mutation lets the test predict about the error, beyond the general contract."""

    yaml_ok: bool = False  # the text is valid YAML whose top level is a mapping
    key_path: str | None = None  # the error, if any, must be at exactly this key path
    near: KeyPath | None = None  # ... or at this path, inside it, above it or beside it
    key_on_line: str | None = None  # ... and its line must hold this key
    suggest_from: tuple[str, ...] = ()  # the reason must say "did you mean" one of these


def parse(text: str | bytes, expect: Expect = Expect()) -> SpaceError | None:
    """Parse ``text``; check the error's contract; return the error, or None when valid."""
    try:
        space = parse_space(text, source="fuzz.yaml")
    except SpaceError as error:
        check_error(error, text, expect)
        _outcome("SpaceError with a key path" if error.key_path else "SpaceError about the document")
        return error
    assert isinstance(space, SearchSpace)
    _outcome("valid space")
    return None


def _outcome(what: str) -> None:
    # Counted in `pytest --hypothesis-show-statistics`; the fixed cases below run outside Hypothesis.
    if currently_in_test_context():
        event(f"outcome: {what}")


def check_error(error: SpaceError, text: str | bytes, expect: Expect) -> None:
    message = str(error)
    assert error.source == "fuzz.yaml"
    assert message.startswith("fuzz.yaml"), message
    assert len(message.splitlines()) == 1, f"the message spans several lines: {message!r}"
    if error.reason.startswith(DOCUMENT_LEVEL_REASONS):
        assert error.key_path == "", message
        assert not expect.yaml_ok, f"valid YAML mapping reported as a document error: {message}"
    elif error.key_path == "":
        assert error.reason.startswith(ROOT_VALUE_REASONS) and root_is_unreadable(text), (
            f"no key path: {message}")
    else:
        assert error.line is not None, f"a key path but no line: {message}"
    if error.line is not None:
        assert 1 <= error.line <= max_line(text), f"line {error.line} outside the text: {message}"
    if expect.key_path is not None:
        assert error.key_path == expect.key_path, message
    if expect.near is not None:
        # The changed value itself, something inside it (a key of a mapping put there), the
        # mapping or list it was removed from, or its neighbour when a rule ties two values
        # together (low <= high is reported at high, a repeated choice at the later one).
        changed = format_key_path(expect.near)
        above = {format_key_path(expect.near[:i]) for i in range(1, len(expect.near))}
        parent = format_key_path(expect.near[:-1])
        beside = parent and parent + ("[" if isinstance(expect.near[-1], int) else ".")
        assert (error.key_path in above or error.key_path.startswith(changed)
                or (beside and error.key_path.startswith(beside))), (
            f"changed {changed!r}, error elsewhere: {message}")
    if expect.key_on_line is not None:
        assert isinstance(text, str) and error.line is not None
        line = text.splitlines()[error.line - 1]
        assert re.match(rf"\s*(- )*['\"]?{re.escape(expect.key_on_line)}['\"]?:", line), (
            f"line {error.line} ({line!r}) does not hold the key: {message}")
    if expect.suggest_from:
        found = re.search(r"did you mean '([^']*)'\?", error.reason)
        assert found, f"no suggestion: {message}"
        assert found.group(1) in expect.suggest_from, message


# ---------------------------------------------------------------------------------------------
# Value strategies.

_WORD = st.text(st.characters(codec="ascii", categories=("L", "N", "Pc", "Pd")), min_size=1, max_size=12)
_TEXT = st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs")), max_size=16)
_LONG_TEXT = st.sampled_from([1_000, 20_000]).map(lambda n: "x" * n)
_OUT_OF_RANGE = st.sampled_from(
    [0, -1, -7, 0.0, -0.5, 1.5, 10**30, -(10**30), 2**63, 2**64 + 1, 1e300, 1e-320,
     math.nan, math.inf, -math.inf]
)
_SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), _TEXT, _WORD, _LONG_TEXT, _OUT_OF_RANGE
)
_KEY = st.one_of(_WORD, _TEXT.filter(bool), st.integers(-3, 3), st.booleans(), st.none())
_VALUE = st.one_of(
    _SCALAR,
    st.lists(_SCALAR, max_size=3),
    st.dictionaries(_KEY, _SCALAR, max_size=3),
    st.recursive(_SCALAR, lambda inner: st.lists(inner, min_size=1, max_size=2)
                 | st.dictionaries(_WORD, inner, min_size=1, max_size=2), max_leaves=8),
)


@st.composite
def seed_data(draw: st.DrawFn) -> dict[str, Any]:
    return copy.deepcopy(SEED_DATA[draw(st.sampled_from(sorted(SEED_DATA)))])


# ---------------------------------------------------------------------------------------------
# The guard: the starting points themselves are valid.


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_every_seed_space_is_valid(name: str) -> None:
    assert isinstance(parse_space(SEEDS[name], source="fuzz.yaml"), SearchSpace)
    assert isinstance(parse_space(dump(SEED_DATA[name]), source="fuzz.yaml"), SearchSpace)


# ---------------------------------------------------------------------------------------------
# Data mutations: the YAML stays well-formed, so every error is about a key.

# Fixed examples (derandomize, no database) so that CI runs the same ones every time; no
# deadline and no slowness health check, which depend on the machine's speed.
FUZZ = settings(derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


@settings(FUZZ, max_examples=250)
@given(data=seed_data(), choice=st.data())
def test_swapped_removed_or_out_of_range_value_is_refused_at_a_key(
    data: dict[str, Any], choice: st.DataObject
) -> None:
    paths = [p for p, _ in walk(data) if p]
    path = choice.draw(st.sampled_from(paths), label="path")
    parent = get(data, path[:-1])
    how = choice.draw(st.sampled_from(["swap", "out_of_range", "remove"]), label="how")
    if how == "remove":
        del parent[path[-1]]
    else:
        parent[path[-1]] = choice.draw(_OUT_OF_RANGE if how == "out_of_range" else _VALUE, label="value")
    event(f"mutation: {how}")
    parse(dump(data), Expect(yaml_ok=True, near=path))


@settings(FUZZ, max_examples=250)
@given(data=seed_data(), choice=st.data())
def test_unknown_key_is_refused_at_its_path_suggesting_the_near_miss(
    data: dict[str, Any], choice: st.DataObject
) -> None:
    levels = [p for p, v in walk(data) if isinstance(v, dict) and near_miss_keys(p)]
    path = choice.draw(st.sampled_from(levels), label="level")
    mapping = get(data, path)
    valid = near_miss_keys(path)
    if choice.draw(st.booleans(), label="misspelled"):
        meant = choice.draw(st.sampled_from(valid), label="meant")
        op = choice.draw(st.sampled_from(["change", "insert", "drop", "swap"]), label="edit")
        letter = choice.draw(st.sampled_from("abcdefghijklmnopqrstuvwxyz_ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
        key = one_edit(meant, op, choice.draw(st.integers(0, 40)), letter)
        suggest_from: tuple[str, ...] = valid
        event("key: one edit from a valid key")
    else:
        key = choice.draw(st.one_of(_KEY, _LONG_TEXT), label="key")
        suggest_from = ()
        event("key: arbitrary")
    assume(key not in valid and key not in mapping and str(key) not in mapping)  # unknown
    mapping[key] = choice.draw(_SCALAR, label="value")
    text = dump(data)
    if path == ("parameters",) and not suggest_from:
        # Any other parameter name is the workload's: valid, or refused for its value or name.
        parse(text, Expect(yaml_ok=True, near=path + (str(key),)))
        return
    plain = isinstance(key, str) and re.fullmatch(r"[\w-]{1,99}", key, re.ASCII)
    error = parse(text, Expect(yaml_ok=True, key_path=format_key_path(path + (str(key),)),
                               key_on_line=key if plain else None, suggest_from=suggest_from))
    assert error is not None, f"unknown key {key!r} at {format_key_path(path)!r} was accepted"
    rule = ("keys must be strings" if not isinstance(key, str) else
            "is not a core parameter but looks like one" if path == ("parameters",) else "unknown key")
    assert rule in error.reason, error.reason


@settings(FUZZ, max_examples=150)
@given(data=seed_data(), choice=st.data())
def test_misspelled_choice_value_is_refused_suggesting_the_meant_one(
    data: dict[str, Any], choice: st.DataObject
) -> None:
    spots = [(p, v) for p, v in walk(data) if isinstance(v, str) and choice_values(p)]
    if not spots:
        data.setdefault("resources", {})["device"] = "auto"
        spots = [(("resources", "device"), "auto")]
    path, meant = choice.draw(st.sampled_from(spots), label="spot")
    options = choice_values(path) or ()
    op = choice.draw(st.sampled_from(["change", "insert", "drop", "swap"]), label="edit")
    letter = choice.draw(st.sampled_from("abcdefghijklmnopqrstuvwxyz_"))
    value = one_edit(meant, op, choice.draw(st.integers(0, 40)), letter)
    assume(value not in options)
    get(data, path[:-1])[path[-1]] = value
    error = parse(dump(data), Expect(yaml_ok=True, key_path=format_key_path(path),
                                     suggest_from=options))
    assert error is not None


# ---------------------------------------------------------------------------------------------
# Text mutations: YAML syntax damage, tabs, truncation, several documents, junk, huge values.

_JUNK_BYTES = st.one_of(
    st.binary(min_size=1, max_size=64),
    st.sampled_from([b"\x00", b"\xff\xfe", b"\x89PNG\r\n\x1a\n", b"\xc3", b"\xed\xa0\x80", b"\x1b[31m"]),
)


@st.composite
def damaged_text(draw: st.DrawFn) -> str | bytes:
    name = draw(st.sampled_from(sorted(SEEDS)))
    text = SEEDS[name] if draw(st.booleans()) else dump(SEED_DATA[name])
    lines = text.splitlines(keepends=True)
    at = draw(st.integers(0, len(text)))
    row = draw(st.integers(0, len(lines) - 1))
    how = draw(st.sampled_from([
        "drop_bracket", "insert_char", "indent", "dedent", "tab_indent", "tab_anywhere",
        "truncate", "duplicate_line", "swap_lines", "second_document", "insert_text",
        "junk_bytes", "long_value", "long_line", "huge_int", "empty", "yaml_feature", "nesting",
    ]))
    event(f"mutation: {how}")
    if how == "drop_bracket":
        spots = [i for i, c in enumerate(text) if c in "[]{}:-,"] or [0]
        i = draw(st.sampled_from(spots))
        return text[:i] + text[i + 1:]
    if how == "insert_char":
        return text[:at] + draw(st.sampled_from(list("[]{}:,-?&*!|>%@`'\"#\\"))) + text[at:]
    if how in ("indent", "dedent", "tab_indent"):
        line = lines[row]
        stripped = line.lstrip(" ")
        if how == "indent":
            lines[row] = " " * draw(st.integers(1, 3)) + line
        elif how == "dedent":
            lines[row] = line[: max(0, len(line) - len(stripped) - draw(st.integers(1, 3)))] + stripped
        else:
            lines[row] = "\t" + stripped
        return "".join(lines)
    if how == "tab_anywhere":
        return text[:at] + "\t" + text[at:]
    if how == "truncate":
        return text[:at]
    if how == "duplicate_line":
        lines.insert(draw(st.integers(0, len(lines))), lines[row])
        return "".join(lines)
    if how == "swap_lines":
        other = draw(st.integers(0, len(lines) - 1))
        lines[row], lines[other] = lines[other], lines[row]
        return "".join(lines)
    if how == "second_document":
        return "".join(lines[:row]) + "---\n" + "".join(lines[row:])
    if how == "insert_text":
        return text[:at] + draw(st.text(max_size=12)) + text[at:]
    if how == "junk_bytes":
        raw = text.encode("utf-8")
        i = draw(st.integers(0, len(raw)))
        return raw[:i] + draw(_JUNK_BYTES) + raw[i:]
    if how in ("long_value", "long_line", "huge_int"):
        filler = {"long_value": "v" * draw(st.sampled_from([2_000, 100_000])),
                  "long_line": "#" + "k" * 100_000,
                  "huge_int": "9" * draw(st.sampled_from([400, 5_000]))}[how]
        match = re.search(r": [^\n{\[]+$", lines[row])
        if how != "long_line" and match:
            lines[row] = lines[row][: match.start()] + ": " + filler + "\n"
        else:
            lines.insert(row, filler + "\n")
        return "".join(lines)
    if how == "yaml_feature":
        indent = re.match(" *", lines[row]).group()  # type: ignore[union-attr]
        snippet = draw(st.sampled_from(YAML_FEATURES))
        lines.insert(row, "".join(f"{indent}{part}\n" for part in snippet.split("\n")))
        return "".join(lines)
    if how == "nesting":
        depth = draw(st.sampled_from([10, 100, 5_000]))
        opening, closing = draw(st.sampled_from([("[", "]"), ("{a: ", "}")]))
        indent = re.match(" *", lines[row]).group()  # type: ignore[union-attr]
        lines.insert(row, f"{indent}nested: {opening * depth}1{closing * depth}\n")
        return "".join(lines)
    return draw(st.sampled_from(["", "\n", "   \n\t\n", "# nothing\n", "---\n", "...\n", "\ufeff"]))


#: Well-formed but unusual YAML: anchors and aliases, merge keys, explicit and unsafe tags,
#: complex keys, block scalars, directives, keys that are not strings or not printable.
YAML_FEATURES = [
    "<<: {study: merged}", "<<: 1", "<<: [*nowhere]", "? [a, b]\n: 1", "? {a: 1}\n: 1",
    "x: !!python/object/apply:os.getcwd []", "x: !!binary aGVsbG8=", "x: !!timestamp 2024-02-30",
    "x: &a [*a]", "x: &b {y: *b}", "*undefined: 1", "&k study: *k", "x: !!set {a, b}",
    "x: !!omap [a: 1, a: 2]", "x: !!int 0x_", "x: !!float abc", "x: !custom 1",
    "x: |\n  block\n  text", "%YAML 1.1", "1: one", "true: yes", "null: ~", "~: 1",
    "2024-01-01: date", ".nan: 1", "x: 1e999", "x: -.inf", "x: 0o777", "x: 1_000", "x: !!str",
    "x: '\u2028'", "\u2028: 1", 'x: "\\x00"', "'''': 1", '"": 1', '"a\\nb": 1', '"a\\rb": 1',
    "'key with\ttab': 1", '"\\u00a0": 1',
]


@settings(FUZZ, max_examples=250)
@given(text=damaged_text())
def test_damaged_text_gives_a_space_error_with_a_line_in_the_text(text: str | bytes) -> None:
    parse(text)


@settings(FUZZ, max_examples=150)
@given(raw=st.one_of(st.binary(max_size=200), st.text(max_size=200)))
def test_arbitrary_bytes_or_text_never_escape_as_another_exception(raw: str | bytes) -> None:
    parse(raw)


# ---------------------------------------------------------------------------------------------
# What fuzzing found, kept as fixed cases so that they are checked on every run whatever the
# examples drawn above.

_PARAMETERS = "parameters:\n  per_device_batch_size: 8\n  base_lr: 0.1\n"


@pytest.mark.parametrize(
    ("text", "key_path", "line", "fragment"),
    [
        # A key with a line break split the message (and the CLI's error line) in two.
        (_PARAMETERS + '"a\\nb": 1\n', "'a\\nb'", 4, "unknown key 'a\\nb'"),
        (_PARAMETERS + 'workload: {"\\r": 1}\n', "workload.'\\r'", 4, "unknown key '\\r'"),
        # An empty top-level key gave an empty key path, as if about the whole document.
        (_PARAMETERS + '"": 1\n', "''", 4, "unknown key ''"),
        # A non-string scheduler key was reported as a list index ('search.scheduler[1]').
        (_PARAMETERS + "search:\n  scheduler: {1: asha}\n", "search.scheduler.1", 5,
         "keys must be strings"),
        # A bad merge key was "invalid YAML" with no key path.
        (_PARAMETERS + "search:\n  seed: 1\n  <<: 1\n", "search.<<", 6, "merge key"),
        # Bounds far apart raised decimal.InvalidOperation from the step check.
        (_PARAMETERS + "  weight_decay: {low: 0, high: 1.0e30, step: 7.0}\n",
         "parameters.weight_decay.step", 4, "step must divide high - low"),
    ],
)
def test_cases_found_by_fuzzing_give_a_located_one_line_error(
    text: str, key_path: str, line: int, fragment: str
) -> None:
    error = parse(text, Expect(yaml_ok=True, key_path=key_path))

    assert error is not None
    assert error.line == line
    assert fragment in error.reason


def test_step_check_is_exact_for_bounds_far_apart() -> None:
    space = parse_space(_PARAMETERS + "  weight_decay: {low: -1.0e30, high: 0.1, step: 0.01}\n")

    assert space.parameters["weight_decay"] == FloatRange(low=-1e30, high=0.1, step=0.01)


# ---------------------------------------------------------------------------------------------
# The CLI on a few fixed mutations: one error line naming the file and the key path, exit code
# 2, no traceback, and no study created. Each case costs two subprocesses (about 1-2 s each).

CLI_CASES = {
    # key path, mutated space
    "search.n_trails": README_SPACE.replace("n_trials: 24", "n_trails: 24"),
    "parameters.per_device_batch_size.choices[1]": README_SPACE.replace("[8, 32, 128]", "[8, '32', 128]"),
    "parameters.base_lr.high": ASHA_SPACE.replace("high: 0.1, log", "high: .nan, log"),
}


@pytest.mark.parametrize("command", ["validate", "start"])
@pytest.mark.parametrize("key_path", sorted(CLI_CASES))
def test_cli_refuses_a_mutated_space_with_one_error_line(
    tmp_path: Path, command: str, key_path: str
) -> None:
    space_file = tmp_path / "fuzz.yaml"
    space_file.write_text(CLI_CASES[key_path])
    db = tmp_path / "s.db"
    args = [sys.executable, "-m", "hpsearch", command, str(space_file)]
    if command == "start":
        args += ["--storage", f"sqlite:///{db}", "--no-progress"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "HPSEARCH_STORAGE", "HPSEARCH_RUNS_DIR")}

    result = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and result.stderr.strip() == errors[0], result.stderr
    assert errors[0].startswith(f"error: {space_file}:")
    assert f" at '{key_path}': " in errors[0]
    assert result.stdout == ""
    # Nothing was created: no store, no runs folder, no study.
    assert not db.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fuzz.yaml"]
