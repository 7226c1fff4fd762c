"""``analysis.confirm`` (``auto | off | K``, YAML's on/off read as auto and off) and
``analysis.confirm_budget`` (``rounds`` 1-10, ``share`` in (0, 1]): their defaults, the spellings
a space may use, and the one-line errors, with key path and line, of a value outside them."""

from __future__ import annotations

import pytest

from hpsearch.search_spaces import SpaceError, parse_space

# Lines 1-3; the analysis section starts on line 4.
BASE = "parameters:\n  per_device_batch_size: 8\n  base_lr: 0.1\n"


def error_of(text: str) -> SpaceError:
    with pytest.raises(SpaceError) as caught:
        parse_space(BASE + text, source="space.yaml")
    return caught.value


def test_a_space_without_the_keys_confirms_on_auto_within_two_rounds_and_a_quarter() -> None:
    analysis = parse_space(BASE).analysis

    assert (analysis.confirm, analysis.confirm_rounds, analysis.confirm_share) == ("auto", 2, 0.25)


@pytest.mark.parametrize(("written", "setting"), [("auto", "auto"), ("off", "off"), ("on", "auto"),
                                                  ("false", "off"), ("3", 3), ("16", 16)])
def test_confirm_reads_auto_off_yaml_booleans_and_a_run_count(written: str, setting: str | int) -> None:
    assert parse_space(BASE + f"analysis: {{confirm: {written}}}\n").analysis.confirm == setting


@pytest.mark.parametrize(("written", "said"), [("0", "confirm must be >= 1, got 0"), ("17", "<= 16, got 17"),
                                               ("maybe", "confirm must be auto, off or a number"),
                                               ("[2]", "confirm must be auto, off or a number")])
def test_a_confirm_outside_auto_off_or_1_to_16_names_its_key_and_line(written: str, said: str) -> None:
    error = error_of(f"analysis:\n  confirm: {written}\n")

    assert (error.key_path, error.line, error.exit_code) == ("analysis.confirm", 5, 2)
    assert said in error.reason


def test_the_confirmation_budget_reads_rounds_and_share() -> None:
    analysis = parse_space(BASE + "analysis: {confirm_budget: {rounds: 1, share: 0.5}}\n").analysis

    assert (analysis.confirm_rounds, analysis.confirm_share) == (1, 0.5)


@pytest.mark.parametrize(("written", "path", "said"), [
    ("{rounds: 0}", "analysis.confirm_budget.rounds", ">= 1, got 0"),
    ("{rounds: 11}", "analysis.confirm_budget.rounds", "<= 10, got 11"),
    ("{share: 0}", "analysis.confirm_budget.share", "> 0, got 0"),
    ("{share: 1.5}", "analysis.confirm_budget.share", "between 0 and 1"),
    ("{runs: 2}", "analysis.confirm_budget.runs", "runs"),
])
def test_a_confirmation_budget_outside_its_bounds_names_its_key(written: str, path: str, said: str) -> None:
    error = error_of(f"analysis:\n  confirm_budget: {written}\n")

    assert (error.key_path, error.exit_code) == (path, 2)
    assert said in error.reason
