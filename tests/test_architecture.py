"""The package's dependencies run one way: record <- search_spaces <- trials <- service <- dashboards
(docs/design.md). The service never imports the dashboard package; the dashboard is its client, as
``optuna.visualization`` is of Optuna's core. import-linter checks it on the package laid out as
installed (``linktree.py``), with the contracts in pyproject.toml; the source is read here for what
import-linter does not see (imports inside functions, and cycles through them)."""

from __future__ import annotations

import ast
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


# ---- what import-linter does not see: imports inside functions, and cycles through them ----------

#: The most imports of hpsearch's own modules that may sit inside functions (docs/design.md,
#: "Imports"): each is a lazy entry point with a measured reason.
MAX_FUNCTION_LOCAL = 5


def _package_modules() -> dict[str, Path]:
    """Every module of the package, by its import name, as the wheel lays it out."""
    setup = linktree.tomllib.loads((linktree.ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    modules = {}
    for package in setup["packages"]:
        folder = linktree.ROOT / linktree._source_dir(package, setup["package-dir"])
        for path in sorted(folder.glob("*.py")):
            modules[package if path.name == "__init__.py" else f"{package}.{path.stem}"] = path
    return modules


def _imports(modules: dict[str, Path]) -> list[tuple[str, str, int, bool]]:
    """``(importer, imported, line, inside a function)`` for every import of a hpsearch module
    that runs (those under ``if TYPE_CHECKING:`` never do)."""
    found = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]

        def visit(node: ast.AST, in_function: bool, name: str = name, package: str = package) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    visit(child, True)
                elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue
                elif isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _targets(child, package, modules):
                        if target != name:
                            found.append((name, target, child.lineno, in_function))
                else:
                    visit(child, in_function)

        visit(ast.parse(path.read_text()), False)
    return found


def _targets(node: ast.Import | ast.ImportFrom, package: str, modules: dict[str, Path]) -> list[str]:
    """The hpsearch modules an import statement loads (``from pkg import submodule`` loads the
    submodule; ``from pkg import name``, the package)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*parts, base] if base else parts)
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    out = []
    for target in names:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target:
            out.append(target)
    return out


def _cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return cycles


def test_no_module_imports_itself_through_others_not_even_inside_a_function() -> None:
    imports = _imports(_package_modules())
    assert _cycles({(a, b) for a, b, _, _ in imports}) == []


def test_few_imports_of_hpsearch_modules_sit_inside_functions() -> None:
    local = sorted(f"{a} (line {line}) imports {b}" for a, b, line, inside in _imports(_package_modules()) if inside)
    assert len(local) <= MAX_FUNCTION_LOCAL, "\n".join(local)


def test_the_checks_above_see_a_cycle_and_a_function_local_import(tmp_path: Path) -> None:
    # The checks read source: two modules that import each other, one of them inside a function.
    modules = {"hpsearch.a": tmp_path / "a.py", "hpsearch.b": tmp_path / "b.py"}
    modules["hpsearch.a"].write_text("from hpsearch import b\n")
    modules["hpsearch.b"].write_text("def f():\n    import hpsearch.a\n")
    imports = _imports(modules)
    assert ("hpsearch.b", "hpsearch.a", 2, True) in imports
    assert _cycles({(a, b) for a, b, _, _ in imports}) == [["hpsearch.a", "hpsearch.b"]]


def test_the_packages_that_load_names_lazily_are_the_documented_two() -> None:
    # PEP 562: a module-level __getattr__ loads a module at the first name asked for, as an
    # import inside a function does (docs/design.md, "Imports": the API, and the dashboard's
    # figures and web app).
    lazy = {name for name, path in _package_modules().items()
            if any(isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
                   for node in ast.parse(path.read_text()).body)}
    assert lazy == {"hpsearch", "hpsearch.dashboards"}
