"""The package's dependencies run one way: search_spaces <- trials <- service <- dashboards
(docs/design.md). The service never imports the dashboard package; the dashboard is its client, as
``optuna.visualization`` is of Optuna's core. import-linter checks it on the package laid out as
installed (``linktree.py``), with the contract in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import linktree


def test_imports_keep_the_layers_of_the_design(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(Path(linktree.__file__)), "imports", str(tmp_path / "tree")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " kept, 0 broken" in done.stdout and "BROKEN" not in done.stdout


def test_every_module_of_the_package_is_in_the_tree_the_tools_read(tmp_path: Path) -> None:
    links = linktree.build(tmp_path / "tree")
    sources = {p.resolve() for folder in ("service", "trials", "search_spaces", "dashboards")
               for p in (linktree.ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts}
    assert sources == {src.resolve() for src in links.values() if src.suffix == ".py"}
