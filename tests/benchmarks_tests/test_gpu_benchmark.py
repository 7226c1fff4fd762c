"""``benchmarks/gpu.py`` runs anywhere: on a machine without CUDA it says so, runs its CPU half
(the trial loop against a hand-written loop) and exits 0, writing its figures and section."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_benchmark_runs_its_cpu_half_where_there_is_no_gpu(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu", "--quick", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads((tmp_path / "gpu.json").read_text())
    section = (tmp_path / "gpu.md").read_text()
    assert section.startswith("## 11. GPU:") and section in done.stdout
    assert figures["cuda"] == torch.cuda.is_available()
    workloads = {row["workload"] for row in figures["loops"]}
    assert any(w.startswith("teacher_mlp") for w in workloads)
    for row in figures["loops"]:
        assert row["ours (data: device)"] > 0 and row["hand-written"] > 0
        assert row["ratio"] == row["ours (data: device)"] / row["hand-written"]
        assert f"| {row['batch']} |" in section
    if not figures["cuda"]:
        assert "digits_cnn" in workloads
        assert "**No CUDA device here**" in section and "Verdict: CPU only" in section


def test_the_gpu_session_says_there_is_no_gpu_and_exits_0(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_session", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "no CUDA device" in done.stdout
    assert not (tmp_path / "session.json").exists()
