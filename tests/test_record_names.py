"""The trial record's names have one owner: ``hpsearch.record``.

Every name a trial writes into its study (its parameters, what it measured, its bookkeeping, the
reasons it ended) is declared there once; package code names them through its constants, so a
renamed or misspelt name is an ``AttributeError`` at import, not a silently empty column. This
scans the package's source for a string that *is* such a name, outside docstrings and the text of
f-strings (a key an f-string subscripts with counts).
A string that only happens to equal one (a module's or a figure's name) says so on its line with
the comment ``# not a record name``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from hpsearch import record

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ("service", "trials", "search_spaces", "dashboards")
#: The record module itself, and the space parser, whose strings are the space file's own keys.
EXEMPT = {"service/record.py", "search_spaces/_sections.py", "search_spaces/loader.py"}
#: Record names that are also everyday words of other meanings in code (an optimizer's "lr", a
#: "device", a search's "budget" section, an answer's "error"), left out of the scan.
COMMON_WORDS = frozenset({"budget", "error", "timeout", "stopped", "interrupted", "device", "node", "lr", "steps",
                          "epoch", "precision", "mps"})
MARK = "# not a record name"


def record_names() -> set[str]:
    declared = set(record.FIELDS) | {v for k, v in vars(record).items() if k.startswith("REASON_") and isinstance(v, str)}
    return declared - COMMON_WORDS


def raw_names(path: Path, names: set[str]) -> list[str]:
    """``file:line: 'name'`` for each raw record name in ``path``."""
    source = path.read_text()
    tree = ast.parse(source)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skipped.add(id(body[0].value))  # a docstring
        if isinstance(node, ast.JoinedStr):
            # An f-string's text is prose; a key it subscripts with (``f"{t['lr_rule']}"``) is not.
            keys = {id(sub.slice) for sub in ast.walk(node) if isinstance(sub, ast.Subscript)}
            skipped.update(id(part) for part in ast.walk(node) if id(part) not in keys)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            skipped.update(id(part) for part in ast.walk(node.value))
    lines = source.splitlines()
    hits = sorted((node.lineno, node.col_offset, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
                  and id(node) not in skipped and MARK not in lines[node.lineno - 1])
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return [f"{where}:{line}: {value!r}" for line, _, value in hits]


def test_package_code_names_the_trial_record_through_its_constants() -> None:
    names = record_names()
    found = [hit for folder in PACKAGE for path in sorted((ROOT / folder).rglob("*.py"))
             if path.relative_to(ROOT).as_posix() not in EXEMPT for hit in raw_names(path, names)]
    assert found == [], "raw record names (use hpsearch.record's constants):\n" + "\n".join(found)


def test_the_scan_finds_a_raw_name(tmp_path: Path) -> None:
    # The guard itself can fail: a raw name in a plain string, a subscript and a comparison is
    # found; a docstring, an f-string and a marked line are not.
    sample = tmp_path / "sample.py"
    sample.write_text('"""lr_rule in a docstring."""\n'
                      'x = {"lr_rule": 1}\n'
                      'y = x["lr_rule"] == "status_reason"\n'
                      'z = f"{x}lr_rule"\n'
                      'w = "lr_rule"  # not a record name: a test\n')
    assert [hit.split(": ", 1)[1] for hit in raw_names(sample, record_names())] == \
        ["'lr_rule'", "'lr_rule'", "'status_reason'"]
