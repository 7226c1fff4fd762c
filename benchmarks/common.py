"""What every benchmark shares: interleaved repetitions, medians, verdicts and Markdown.

A benchmark module exposes ``run(quick: bool = False) -> str``: it measures its figures side by
side in one run and returns a Markdown section (a ``## N. Title`` heading, what was run, a table,
the verdict against the target, and what the numbers say). ``python -m benchmarks`` runs every
module and writes the sections under a description of the machine to ``docs/benchmarks.md``;
``python -m benchmarks.<module>`` runs one and prints its section.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["interleaved", "md_table", "median", "ratio_row", "timed", "verdict"]


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of ``fn`` takes (wall clock), after a garbage collection."""
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(sides: dict[str, Callable[[], float]], repeat: int, *, log: bool = True) -> dict[str, list[float]]:
    """Run each side once per round, ``repeat`` rounds, alternating which side goes first.

    Each callable returns the figure it measured (seconds, usually). Interleaving makes every
    side see the same machine state (caches, other load), so their ratio is fair even when the
    absolute times drift.
    """
    names = list(sides)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeat):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            out[name].append(float(sides[name]()))
            if log:
                print(f"  round {r + 1}/{repeat}  {name}: {out[name][-1]:.3f}", flush=True)
    return out


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def verdict(ratio: float, target: float) -> str:
    """``met`` or ``missed`` for a lower-is-better ratio against its target."""
    return f"**met** ({ratio:.2f}x, target {target:.2f}x or better)" if ratio <= target else (
        f"**missed** ({ratio:.2f}x, target {target:.2f}x or better)")


def ratio_row(what: str, ours: float, baseline: float, target: float | None, unit: str = "s") -> list[str]:
    """A table row: what, ours, the baseline, the ratio and the verdict (``-`` without a target)."""
    ratio = ours / baseline if baseline else float("nan")
    mark = "-" if target is None else ("met" if ratio <= target else "missed")
    goal = "-" if target is None else f"<= {target:.2f}x"
    return [what, f"{ours:.3f} {unit}", f"{baseline:.3f} {unit}", f"{ratio:.2f}x", goal, mark]


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(str(h) for h in headers) + " |",
             "| " + " | ".join("---" for _ in headers) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def run_alone(run: Callable[[bool], str], doc: str, quick_help: str) -> None:
    """The command line of a benchmark module run alone: ``--quick`` (described by
    ``quick_help``) and the module's section printed."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    print(run(parser.parse_args().quick))
