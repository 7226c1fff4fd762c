"""The benchmark suite stays runnable: every module is in the report, and the report command
writes the machine, the summary and the sections (on the quickest benchmark)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_benchmark_module_is_in_the_report_and_exposes_run() -> None:
    # gpu_session runs the GPU benchmarks' parts on a lent machine; the report runs each itself.
    helpers = {"__init__", "__main__", "common", "gpu_session"}
    modules = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem not in helpers)
    code = ("import inspect, benchmarks.__main__ as m, importlib; print(sorted(m.BENCHMARKS)); "
            "print(all('quick' in inspect.signature(importlib.import_module('benchmarks.' + n).run).parameters "
            "for n in m.BENCHMARKS))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    listed, has_run = out.stdout.strip().splitlines()
    assert listed == str(modules)
    assert has_run == "True"


def test_the_report_command_writes_machine_summary_and_sections(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only", "store_writes", "--output", str(report)],
                   cwd=ROOT, capture_output=True, text=True, check=True, timeout=600)
    text = report.read_text()
    assert "## The machine" in text and "logical cores" in text and "torch " in text
    assert "## 3. Store writes" in text
    summary = text.split("## Summary", 1)[1].split("## 3.", 1)[0]
    assert "3. Store writes" in summary and ("met" in summary or "missed" in summary)
    assert "| hpsearch searcher |" in text
