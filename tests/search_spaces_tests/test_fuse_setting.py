"""``search.fuse`` (``auto | true | false``, YAML's booleans read as ``true`` and ``false``) and
``search.fuse_max`` (an integer >= 1): their defaults, the spellings a space file may use, and
the one-line errors of a wrong value, of a group size below one and of ``fuse: true`` under
ASHA."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpsearch.search_spaces import SpaceError, parse_space

# Lines 1-3; the search section starts on line 4.
BASE = "parameters:\n  per_device_batch_size: 8\n  base_lr: 0.1\n"


def error_of(text: str) -> SpaceError:
    with pytest.raises(SpaceError) as caught:
        parse_space(BASE + text, source="space.yaml")
    return caught.value


def test_a_space_without_the_keys_fuses_on_auto_in_groups_of_at_most_16() -> None:
    search = parse_space(BASE).search

    assert (search.fuse, search.fuse_max) == ("auto", 16)
    assert parse_space(BASE + "search: {fuse_max: 4}\n").search.fuse_max == 4


@pytest.mark.parametrize(("written", "setting"), [
    ("off", "false"), ("on", "true"), ("no", "false"), ("yes", "true"),   # YAML 1.1 booleans
    ("true", "true"), ("False", "false"),
    ("Auto", "auto"), ("auto", "auto"), ("'TRUE'", "true"), ("'false'", "false"),
])
def test_fuse_reads_yaml_booleans_and_the_three_words_in_any_case(written: str, setting: str) -> None:
    assert parse_space(BASE + f"search: {{fuse: {written}}}\n").search.fuse == setting


@pytest.mark.parametrize(("written", "got"), [("maybe", "got a string: 'maybe'"), ("1", "got an integer: 1"),
                                              ("[true]", "got a list")])
def test_a_fuse_outside_auto_true_false_names_its_key_and_line(written: str, got: str) -> None:
    error = error_of(f"search: {{fuse: {written}}}\n")

    assert (error.key_path, error.line, error.exit_code) == ("search.fuse", 4, 2)
    assert error.reason.startswith("fuse must be one of 'auto', 'true', 'false'")
    assert got in error.reason


def test_a_misspelt_fuse_gets_a_suggestion() -> None:
    assert error_of("search: {fuse: ture}\n").reason.endswith("got a string: 'ture'; did you mean 'true'?")


@pytest.mark.parametrize(("written", "fragment"), [("0", "fuse_max must be >= 1, got 0"),
                                                   ("-3", "fuse_max must be >= 1, got -3"),
                                                   ("2.0", "fuse_max must be an integer"),
                                                   ("auto", "fuse_max must be an integer")])
def test_a_fuse_max_that_is_not_a_positive_integer_is_refused(written: str, fragment: str) -> None:
    error = error_of(f"search: {{fuse_max: {written}}}\n")

    assert (error.key_path, error.line) == ("search.fuse_max", 4)
    assert fragment in error.reason


def test_fuse_true_under_asha_is_refused_at_the_fuse_key() -> None:
    error = error_of("search:\n  scheduler: asha\n  fuse: true\n")

    assert (error.key_path, error.line) == ("search.fuse", 6)
    assert error.reason == ("ASHA judges each trial on its own reports; fused groups do not run under ASHA yet: "
                            "set search.fuse to auto or false")


@pytest.mark.parametrize("written", ["auto", "false"])
def test_fuse_auto_or_false_under_asha_is_accepted(written: str) -> None:
    search = parse_space(BASE + f"search: {{scheduler: {{name: asha}}, fuse: {written}}}\n").search

    assert (search.scheduler, search.fuse) == ("asha", written)


def _validate(space: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpsearch", "validate", str(space)], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize(("section", "message"), [
    ("search: {fuse: maybe}\n",
     "'search.fuse': fuse must be one of 'auto', 'true', 'false' (bare on and off, yes and no mean true and "
     "false), got a string: 'maybe'"),
    ("search: {fuse_max: 0}\n", "'search.fuse_max': fuse_max must be >= 1, got 0"),
    ("search: {scheduler: asha, fuse: on}\n",
     "'search.fuse': ASHA judges each trial on its own reports; fused groups do not run under ASHA yet: set "
     "search.fuse to auto or false"),
])
def test_validate_refuses_a_wrong_fuse_setting_in_one_line_with_status_2(
        tmp_path: Path, section: str, message: str) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(BASE + section)

    result = _validate(space)

    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [f"error: {space}:4 at {message}"]
