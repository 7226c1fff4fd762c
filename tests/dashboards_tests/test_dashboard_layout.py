"""The dashboard package's layout keeps its promises: one module per figure, and modules that talk
to each other through public names only."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import hpsearch.dashboards
from hpsearch.dashboards.api import FIGURES

PACKAGE = Path(hpsearch.dashboards.__file__).parent


def _private_imports(path: Path) -> list[str]:
    """``from M import _x``, ``import M._x`` and ``M._x`` for a module ``M`` of hpsearch."""
    tree = ast.parse(path.read_text(), filename=str(path))
    imported_modules = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hpsearch"):
            if any(part.startswith("_") for part in node.module.split(".")):
                found.append(f"{path.name}:{node.lineno}: from {node.module}")
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"{path.name}:{node.lineno}: {alias.name} from {node.module}")
                imported_modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("hpsearch") and any(p.startswith("_") for p in alias.name.split(".")):
                    found.append(f"{path.name}:{node.lineno}: import {alias.name}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in imported_modules and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            found.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_private_name_crosses_a_module_of_the_dashboard() -> None:
    found = [hit for path in sorted(PACKAGE.glob("*.py")) for hit in _private_imports(path)]
    assert found == []


def test_each_figure_of_the_dashboard_is_one_module_from_data_to_endpoint() -> None:
    """A change to one figure touches its module only: the module that answers its endpoint also
    computes its data (``*_info``), draws it (``*_figure``) and plots it for a study (``plot_*``)."""
    for kind, answer in FIGURES.items():
        module = inspect.getmodule(answer)
        assert module is not None, kind
        names = set(vars(module))
        local = {n for n in names if getattr(getattr(module, n), "__module__", None) == module.__name__}
        assert any(n.endswith("_info") for n in local), (kind, module.__name__)
        assert any(n.endswith("_figure") for n in local), (kind, module.__name__)
        assert any(n.startswith("plot_") for n in local), (kind, module.__name__)


def test_the_figures_data_loads_without_plotly() -> None:
    code = ("import sys, hpsearch.dashboards as d\n"
            "assert 'plotly' not in sys.modules and 'pandas' not in sys.modules, 'imported at the top'\n"
            "for name in ('frontier_info', 'accuracy_vs_batch_info', 'learning_curves_info', 'throughput_info',\n"
            "             'noise_scale_info', 'memory_info', 'pareto_front', 'log_axis', 'plot_frontier',\n"
            "             'plot_throughput', 'plot_memory'):\n"
            "    getattr(d, name)\n"
            "assert 'plotly' not in sys.modules, 'plotly imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
