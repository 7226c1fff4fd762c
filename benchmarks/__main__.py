"""Run every benchmark and write the report: ``python -m benchmarks`` (or ``make benchmarks``).

Each module measures its figures side by side in one run (the median of interleaved
repetitions) and returns a Markdown section; this collects them under a description of the
machine, with a summary of every verdict, into ``docs/benchmarks.md``.

    python -m benchmarks                          # all of them, about 22 minutes on 2 cores
    python -m benchmarks --quick                  # smaller sizes, printed (no file unless --output)
    python -m benchmarks --only store_writes dashboard_api
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

#: The benchmarks, in the report's order (module names under ``benchmarks``).
BENCHMARKS = ("orchestration", "ddp_loop", "store_writes", "dashboard_api", "search_efficiency", "dashboard_load",
              "analysis_prediction", "analysis_speed", "search_span", "orchestrator_load", "gpu", "gpu_node",
              "fused", "fused_gpu", "tracking", "answers", "lm_lr_law")
REPORT = Path("docs/benchmarks.md")


def describe_machine() -> list[str]:
    """What the figures were measured on: CPU, memory, GPU, OS and the versions that matter."""
    from importlib.metadata import PackageNotFoundError, version

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        memory = "unknown"
    import torch

    gpu = (f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}" if torch.cuda.is_available()
           else "none (CPU only)")
    versions = []
    for package in ("hpsearch", "torch", "ray", "optuna", "sqlalchemy", "pandas", "plotly"):
        with contextlib.suppress(PackageNotFoundError):
            versions.append(f"{package} {version(package)}")
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return [
        f"- CPU: {cpu}, {os.cpu_count()} logical cores; memory {memory}; GPU: {gpu}",
        f"- OS: {platform.system()} {platform.release()}; Python {platform.python_version()}",
        f"- {', '.join(versions)}",
        f"- load average when the run started (1/5/15 min): {load}",
        f"- run on {datetime.date.today().isoformat()}" + (f", commit {commit}" if commit else ""),
    ]


def verdicts(section: str) -> list[str]:
    """The section's verdict lines, for the summary at the top."""
    return [line.removeprefix("Verdict:").strip() for line in section.splitlines() if line.startswith("Verdict")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, metavar="NAME",
                        help=f"run only these ({', '.join(BENCHMARKS)})")
    parser.add_argument("--output", type=Path, help=f"where to write the report (default: {REPORT}; "
                                                    "with --quick, printed only)")
    args = parser.parse_args()
    output = args.output or (None if args.quick else REPORT)

    machine = describe_machine()
    sections, summary = [], []
    for name in args.only or BENCHMARKS:
        print(f"== {name}", flush=True)
        start = time.perf_counter()
        section = importlib.import_module(f"benchmarks.{name}").run(quick=args.quick)
        minutes = (time.perf_counter() - start) / 60
        print(f"== {name}: {minutes:.1f} min", flush=True)
        sections.append(section.strip())
        title = section.strip().splitlines()[0].removeprefix("## ")
        summary += [f"- {title}: {v}" for v in verdicts(section)] or [f"- {title}: no target"]

    report = "\n".join([
        "# Benchmarks: hpsearch against the plain alternatives",
        "",
        "Every figure is a ratio of two things measured side by side in one run, the median of at "
        "least 3 interleaved repetitions. Written by `make benchmarks` (`python -m benchmarks`"
        + (" --quick, smaller sizes" if args.quick else "") + "); rerun it to measure your machine.",
        "",
        "## The machine",
        "",
        *machine,
        "",
        "## Summary",
        "",
        *summary,
        "",
        "\n\n".join(sections),
        "",
    ])
    if output is None:
        print(report)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report)
    print(f"wrote {output}", file=sys.stderr)


if __name__ == "__main__":
    main()
