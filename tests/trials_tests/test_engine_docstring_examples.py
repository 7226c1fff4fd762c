"""The docstring examples of the trial engine's data, compute, schedule and solo-time modules run, and say what they do."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["hpsearch.trials.rank.data", "hpsearch.trials.rank.compute", "hpsearch.trials.workloads.base", "hpsearch.trials.rank.memory",
           "hpsearch.trials.rank.schedule", "hpsearch.trials.rank.solo_time"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_pass(name: str) -> None:
    module = importlib.import_module(name)
    results = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert results.attempted > 0, f"{name} has no docstring examples"
    assert results.failed == 0
