"""The docstring examples of the figure modules and the study API run, and say what they do."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "hpsearch.search",
    "hpsearch.dashboards",
    "hpsearch.dashboards.plots",
    "hpsearch.dashboards.figures",
    "hpsearch.dashboards.synthetic",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_pass(name: str) -> None:
    module = importlib.import_module(name)
    results = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert results.attempted > 0, f"{name} has no docstring examples"
    assert results.failed == 0
