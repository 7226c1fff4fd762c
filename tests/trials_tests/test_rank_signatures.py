"""The rank's training code passes meaningful objects between its parts, not long lists of
loose values: no function in ``hpsearch.trials.rank`` takes more than ``MAX_PARAMETERS``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RANK = Path(__file__).resolve().parents[2] / "trials" / "rank"
#: Parameters a function may take, ``self`` and ``cls`` not counted; ``*args`` and ``**kwargs``
#: count one each.
MAX_PARAMETERS = 8


def parameter_counts(source: str) -> dict[str, int]:
    """Each function's or method's parameter count in ``source``, by its qualified name."""
    counts: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = child.args
                names = [a.arg for a in (*args.posonlyargs, *args.args)]
                in_class = isinstance(node, ast.ClassDef)
                if in_class and names and names[0] in ("self", "cls"):
                    names = names[1:]
                counts[prefix + child.name] = (len(names) + len(args.kwonlyargs)
                                               + (args.vararg is not None) + (args.kwarg is not None))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return counts


def test_the_counter_counts_every_kind_of_parameter_but_self() -> None:
    source = ("def f(a, /, b, *args, c, **kw): pass\n"
              "class C:\n"
              "    def m(self, a, b=1): pass\n"
              "    @classmethod\n"
              "    def k(cls, *, a): pass\n"
              "    def outer(self):\n"
              "        def inner(self, x): pass\n")
    assert parameter_counts(source) == {"f": 5, "C.m": 2, "C.k": 1, "C.outer": 0, "C.outer.inner": 2}


@pytest.mark.parametrize("path", sorted(RANK.glob("*.py")), ids=lambda p: p.name)
def test_no_function_of_the_rank_takes_more_than_eight_parameters(path: Path) -> None:
    counts = parameter_counts(path.read_text(encoding="utf-8"))
    too_many = {name: n for name, n in counts.items() if n > MAX_PARAMETERS}
    assert not too_many, f"functions of {path.name} with more than {MAX_PARAMETERS} parameters: {too_many}"
