"""What every benchmark shares: interleaved repetitions, medians, verdicts and Markdown.

A benchmark module exposes ``run(quick: bool = False) -> str``: it measures its figures side by
side in one run and returns a Markdown section (a ``## N. Title`` heading, what was run, a table,
the verdict against the target, and what the numbers say). ``python -m benchmarks`` runs every
module and writes the sections under a description of the machine to ``docs/benchmarks.md``;
``python -m benchmarks.<module>`` runs one and prints its section.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ProcessTreeCPU", "interleaved", "md_table", "median", "ratio_row", "revision_tree", "timed", "verdict",
           "write_figures"]


@contextlib.contextmanager
def revision_tree(rev: str | None, work: Path) -> Iterator[list[str] | None]:
    """The import path that makes ``hpsearch`` the code of revision ``rev`` (laid out as it
    installs, ``tests/linktree.py``), for a benchmark that measures before and after in one run;
    ``None`` where this clone lacks ``rev`` or git. ``rev`` ``None``: this tree, as installed.
    The project's root follows, so the benchmarks' own modules import from this tree."""
    root = Path(__file__).resolve().parents[1]
    if rev is None:
        yield [str(root)]
        return
    known = shutil.which("git") is not None and subprocess.run(
        ["git", "-C", str(root), "cat-file", "-e", f"{rev}^{{commit}}"], capture_output=True).returncode == 0
    if not known:
        yield None
        return
    copy = work / f"tree-{rev}"
    subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", "--force", str(copy), rev],
                   check=True, capture_output=True, text=True)
    try:
        build = f"import sys; sys.path.insert(0, {str(copy / 'tests')!r}); import linktree; linktree.build()"
        subprocess.run([sys.executable, "-c", build], check=True, capture_output=True, text=True)
        yield [str(copy / "build" / "linktree"), str(root)]
    finally:
        subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(copy)],
                       capture_output=True, text=True)


def write_figures(out: Path | None, stem: str, figures: dict[str, Any], section: str) -> None:
    """Print a benchmark's section and, with ``out``, write ``stem.json`` (its figures) and
    ``stem.md`` (the section) there: what a run on another machine brings back."""
    import json

    print(section)
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(figures, indent=1, default=str) + "\n")
    (out / f"{stem}.md").write_text(section)
    print(f"wrote {out / (stem + '.json')} and {out / (stem + '.md')}", file=sys.stderr)


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


class ProcessTreeCPU:
    """The CPU time a command's whole process tree spends, split by owner.

    Wall time says how long a command took; on a machine whose cores are all busy it does not
    say why. This runs the command and samples every process under it (``psutil``) every
    ``interval`` seconds, keeping each one's last CPU time (user + system) and title: a Ray
    worker retitles itself (``ray::IDLE``, then ``ray::ImplicitFunc``), and the last title
    other than ``ray::IDLE`` names it. ``owner`` maps a title (the root's is ``None``) to the
    name of its group. The total is the kernel's own account of the tree (``wait4``: the
    command and every descendant reaped under it) where that is more than the samples add up
    to, so CPU the samples missed (a process that lived less than ``interval``, or the time
    between a process's last sample and its end) shows up as the group ``not sampled``.

    Each sample also reads how busy the whole machine's cores were since the last one
    (``/proc/stat``, Linux): ``busy`` lists ``(seconds since the command started, cores busy)``.
    """

    def __init__(self, owner: Callable[[str | None], str], interval: float = 0.25) -> None:
        self.owner = owner
        self.interval = interval
        self.busy: list[tuple[float, float]] = []

    def busy_cores(self, until: float) -> float:
        """The machine's cores busy on average from the command's start to ``until`` seconds
        after it (``nan`` without samples there)."""
        seen = [cores for t, cores in self.busy if t <= until]
        return sum(seen) / len(seen) if seen else float("nan")

    def run(self, argv: Sequence[str], cwd: Any, env: dict[str, str] | None = None) -> tuple[float, dict[str, float]]:
        """Run ``argv`` to its end; returns its wall seconds and CPU seconds by owner (the
        command's output is discarded; a failure raises ``SystemExit`` with its tail)."""
        import os
        import subprocess
        import tempfile
        import threading

        import psutil

        seen: dict[int, tuple[float, str]] = {}
        done = threading.Event()
        self.busy = []

        def sample(root: psutil.Process) -> None:
            last = _cpu_ticks()
            while True:
                now = _cpu_ticks()
                if now is not None and last is not None and now[1] > last[1]:
                    cores = (now[0] - last[0]) / (now[1] - last[1]) * (os.cpu_count() or 1)
                    self.busy.append((time.perf_counter() - start, cores))
                last = now
                try:
                    tree = [root, *root.children(recursive=True)]
                except psutil.NoSuchProcess:
                    tree = []
                for p in tree:
                    try:
                        with p.oneshot():
                            times = p.cpu_times()
                            title = " ".join(p.cmdline())
                            before = seen.get(p.pid, (0.0, title or p.name()))
                    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                        continue
                    # A process on its way out has no command line left: it keeps the title it had.
                    keep = before[1] if not title or title.startswith("ray::IDLE") else title
                    seen[p.pid] = (max(before[0], times.user + times.system), keep)
                if done.wait(self.interval):
                    return

        with tempfile.TemporaryFile() as out:
            start = time.perf_counter()
            proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
            sampler = threading.Thread(target=sample, args=(psutil.Process(proc.pid),), daemon=True)
            sampler.start()
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
            proc.returncode = os.waitstatus_to_exitcode(status)
            done.set()
            sampler.join()
            if proc.returncode != 0:
                out.seek(0)
                tail = out.read().decode(errors="replace")[-4000:]
                raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{tail}")
        groups: dict[str, float] = {}
        for pid, (seconds, title) in seen.items():
            name = self.owner(None if pid == proc.pid else title)
            groups[name] = groups.get(name, 0.0) + seconds
        sampled = sum(groups.values())
        # The kernel's account misses descendants reparented away from the tree before they
        # ended (Ray's workers, when their raylet goes first); the samples miss short lives.
        groups["not sampled"] = max(0.0, usage.ru_utime + usage.ru_stime - sampled)
        groups["total"] = sampled + groups["not sampled"]
        return wall, groups


def _cpu_ticks() -> tuple[int, int] | None:
    """``(busy, total)`` clock ticks of all the machine's cores so far, or ``None`` off Linux."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle and iowait
    return sum(ticks) - idle, sum(ticks)
