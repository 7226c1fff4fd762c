"""The docstring examples of the read model, the figure modules and the study API run, and say
what they do."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "hpsearch.search",
    "hpsearch.store",
    "hpsearch.store.ownership",
    "hpsearch.store.settings",
    "hpsearch.cli",
    "hpsearch.integrations.torchrun",
    "hpsearch.record",
    "hpsearch.study",
    "hpsearch.study._summary",
    "hpsearch.study._pareto",
    "hpsearch.study._phases",
    "hpsearch.study._export",
    "hpsearch.study._table",
    "hpsearch.study._schema",
    "hpsearch.dashboards",
    "hpsearch.dashboards.points",
    "hpsearch.dashboards.style",
    "hpsearch.dashboards.queries",
    "hpsearch.dashboards.standalone",
    "hpsearch.dashboards.frontier",
    "hpsearch.dashboards.accuracy_vs_batch",
    "hpsearch.dashboards.learning_curves",
    "hpsearch.dashboards.throughput",
    "hpsearch.dashboards.noise_scale",
    "hpsearch.dashboards.peak_memory",
    "hpsearch.dashboards.security",
    "hpsearch.dashboards.server",
    "hpsearch.dashboards.analysis_figures",
    "hpsearch.analysis",
    "hpsearch.analysis._target",
    "hpsearch.analysis._lr_law",
    "hpsearch.analysis._memory_model",
    "hpsearch.study.reasons",
    "hpsearch.study._units",
    "hpsearch.planner.ceilings",
    "hpsearch.planner.planner",
    "hpsearch.planner.report",
    "hpsearch.planner.task",
    "hpsearch.testing",
    "hpsearch.workload_check",
    "hpsearch.planner.saved_models",
    "hpsearch.search_spaces.loader",
    "hpsearch.trials.workloads.base",
    "hpsearch.trials.workloads.text_lm",
    "hpsearch.trials.rank.report",
    "hpsearch.trials.rank.context",
    "hpsearch.trials.spec",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_pass(name: str) -> None:
    module = importlib.import_module(name)
    results = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert results.attempted > 0, f"{name} has no docstring examples"
    assert results.failed == 0
