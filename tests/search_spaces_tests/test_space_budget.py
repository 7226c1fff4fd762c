"""``search.budget``: a wall-clock time and/or device-hours, or a clear error at its key and line."""

from __future__ import annotations

import pytest

from hpsearch.search_spaces import Budget, SpaceError, parse_budget_text, parse_space

# Lines 1-4; the budget is on line 5.
SPACE = "parameters:\n  per_device_batch_size: 8\n  base_lr: 0.1\nsearch:\n  budget: {budget}\n"


def budget_of(text: str) -> Budget:
    return parse_space(SPACE.format(budget=text), source="space.yaml").search.budget


@pytest.mark.parametrize(
    ("written", "wall_s", "device_hours"),
    [
        ("2h", 7200.0, None),
        ("90m", 5400.0, None),
        ("40s", 40.0, None),
        ("1h30m", 5400.0, None),
        ("'2h, 1.5dh'", 7200.0, 1.5),
        ("2.5device-hours", None, 2.5),
        ("{wall: 90m}", 5400.0, None),
        ("{wall: 3600}", 3600.0, None),  # a number is seconds
        ("{wall: 1.5h, device_hours: 4}", 5400.0, 4.0),
        ("{device_hours: 0.25}", None, 0.25),
        ("none", None, None),
    ],
)
def test_a_budget_reads_as_wall_clock_seconds_and_device_hours(written: str, wall_s: float | None,
                                                               device_hours: float | None) -> None:
    assert budget_of(written) == Budget(wall_s=wall_s, device_hours=device_hours)


def test_a_space_without_a_budget_has_no_limit() -> None:
    space = parse_space("parameters:\n  per_device_batch_size: 8\n  base_lr: 0.1\n")
    assert space.search.budget == Budget()
    assert not space.search.budget.limited


@pytest.mark.parametrize(
    ("written", "key_path", "reason"),
    [
        ("{wall: -1}", "search.budget.wall", "wall must be > 0 s, got -1"),
        ("{wall: 0}", "search.budget.wall", "wall must be > 0 s, got 0"),
        ("{wall: 2x}", "search.budget.wall", "wall must be a wall-clock time such as 40s, 90m, 2h or 1h30m"),
        ("{wall: .inf}", "search.budget.wall", "wall must be a wall-clock time"),
        ("{device_hours: 0}", "search.budget.device_hours", "device_hours must be > 0, got 0"),
        ("{device_hours: two}", "search.budget.device_hours", "device_hours must be a number"),
        ("{wal: 2h}", "search.budget.wal", "did you mean 'wall'?"),
        ("2x", "search.budget", "a budget is a wall-clock time such as 40s"),
        ("'2h, 3h'", "search.budget", "a budget is a wall-clock time"),
        ("3600", "search.budget", "budget must be a wall-clock time"),
        ("[2h]", "search.budget", "budget must be a wall-clock time"),
    ],
)
def test_a_bad_budget_names_its_key_path_and_line(written: str, key_path: str, reason: str) -> None:
    with pytest.raises(SpaceError) as caught:
        budget_of(written)
    error = caught.value
    assert (error.key_path, error.line) == (key_path, 5)
    assert reason in error.reason
    assert "\n" not in str(error)


def test_the_command_line_form_reads_like_the_space_file() -> None:
    assert parse_budget_text("1h30m, 2.5dh") == Budget(wall_s=5400.0, device_hours=2.5)
    assert parse_budget_text(" 2dh ,40s ") == Budget(wall_s=40.0, device_hours=2.0)
    with pytest.raises(SpaceError) as caught:
        parse_budget_text("2x")
    assert str(caught.value).startswith("--budget: a budget is a wall-clock time such as 40s")


def test_a_budget_given_later_replaces_only_the_limits_it_names() -> None:
    space_budget = Budget(wall_s=7200.0, device_hours=4.0)
    assert space_budget.merged(parse_budget_text("3h")) == Budget(wall_s=10800.0, device_hours=4.0)
    assert space_budget.merged(parse_budget_text("8dh")) == Budget(wall_s=7200.0, device_hours=8.0)
    assert space_budget.merged(parse_budget_text("none")) == Budget()
    assert space_budget.merged(None) == space_budget
