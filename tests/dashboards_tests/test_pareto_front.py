"""pareto_front against a brute-force reference, for every pair of directions."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpsearch.dashboards import pareto_front

DIRECTIONS = ["minimize", "maximize"]


def _better_or_equal(a: float, b: float, direction: str) -> bool:
    return a <= b if direction == "minimize" else a >= b


def _brute_force_front(
    xs: list[float], ys: list[float], x_direction: str, y_direction: str
) -> list[int]:
    """O(n^2) reference: non-dominated finite points, one per identical (x, y)."""
    finite = [i for i in range(len(xs)) if math.isfinite(xs[i]) and math.isfinite(ys[i])]
    front = []
    for i in finite:
        dominated = any(
            _better_or_equal(xs[j], xs[i], x_direction)
            and _better_or_equal(ys[j], ys[i], y_direction)
            and (xs[j], ys[j]) != (xs[i], ys[i])
            for j in finite
        )
        duplicate_of_earlier = any(
            (xs[j], ys[j]) == (xs[i], ys[i]) for j in finite if j < i
        )
        if not dominated and not duplicate_of_earlier:
            front.append(i)
    return sorted(front, key=lambda i: xs[i])


# Few distinct values so that ties in x, in y and exact duplicates are common.
_coordinate = st.one_of(
    st.integers(min_value=0, max_value=6).map(float),
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.floats(min_value=-1e3, max_value=1e3, allow_nan=False),
)


@pytest.mark.parametrize("x_direction", DIRECTIONS)
@pytest.mark.parametrize("y_direction", DIRECTIONS)
@settings(max_examples=300, deadline=None)
@given(points=st.lists(st.tuples(_coordinate, _coordinate), max_size=40))
def test_front_matches_brute_force_reference(
    points: list[tuple[float, float]], x_direction: str, y_direction: str
) -> None:
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    got = pareto_front(xs, ys, x_direction=x_direction, y_direction=y_direction)
    assert got == _brute_force_front(xs, ys, x_direction, y_direction)


def test_front_is_ordered_by_ascending_x_when_x_is_maximized() -> None:
    xs = [1.0, 3.0, 2.0]
    ys = [3.0, 1.0, 2.0]
    assert pareto_front(xs, ys, x_direction="maximize", y_direction="maximize") == [0, 2, 1]


def test_nan_and_infinite_points_are_never_on_the_front() -> None:
    xs = [math.nan, 1.0, -math.inf, 2.0, 0.5]
    ys = [1.0, 0.5, 0.99, 0.9, math.inf]
    # The infinite-y and NaN-x points would dominate everything if they counted.
    assert pareto_front(xs, ys) == [1, 3]


def test_identical_points_appear_once_with_the_lowest_index() -> None:
    xs = [5.0, 1.0, 1.0, 1.0]
    ys = [0.9, 0.5, 0.5, 0.5]
    assert pareto_front(xs, ys) == [1, 0]


def test_equal_x_keeps_only_the_better_y() -> None:
    assert pareto_front([1.0, 1.0], [0.4, 0.6]) == [1]
    assert pareto_front([1.0, 1.0], [0.4, 0.6], y_direction="minimize") == [0]


def test_equal_y_keeps_only_the_better_x() -> None:
    assert pareto_front([2.0, 1.0], [0.6, 0.6]) == [1]


def test_empty_input_has_an_empty_front() -> None:
    assert pareto_front([], []) == []


def test_mismatched_lengths_are_rejected() -> None:
    with pytest.raises(ValueError, match="same length"):
        pareto_front([1.0, 2.0], [1.0])


def test_unknown_direction_is_rejected_with_its_value() -> None:
    with pytest.raises(ValueError, match="'lower'"):
        pareto_front([1.0], [1.0], x_direction="lower")  # type: ignore[arg-type]
