"""Every example space shipped with hpsearch validates (guard test: examples keep working)."""

from __future__ import annotations

import pytest

from hpsearch.search_spaces import SpaceError, example_path, list_examples, load_space


def test_at_least_one_example_space_is_shipped() -> None:
    assert list_examples(), "search_spaces/examples/ holds no *.yaml file"


def test_every_shipped_example_space_validates() -> None:
    for name in list_examples():
        path = example_path(name)
        space = load_space(path)
        assert space.source_path == str(path)
        assert space.source_text == path.read_text(encoding="utf-8")


def test_example_path_accepts_the_yaml_suffix() -> None:
    assert list_examples(), "search_spaces/examples/ holds no *.yaml file"
    name = list_examples()[0]

    assert example_path(f"{name}.yaml") == example_path(name)


@pytest.mark.parametrize("name", ["no-such-example", "../space", ""])
def test_unknown_example_name_is_a_space_error_listing_the_shipped_ones(name: str) -> None:
    with pytest.raises(SpaceError) as caught:
        example_path(name)

    assert "no example space named" in caught.value.reason
    assert all(shipped in caught.value.reason for shipped in list_examples())
