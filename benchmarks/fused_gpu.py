"""Fused trials on a GPU: what one GPU gives K members trained as one vectorized model.

Two figures, on a CUDA device (``--device cpu`` runs the same small, for a smoke run):

1. **Throughput.** teacher_mlp (the 12-trial grid's workload of ``benchmarks.gpu``), 8 members
   at b 256 trained fused in one process against one member trained alone, in the same process,
   alternately: the group's aggregate samples/s (8 x samples / the group's wall time) over the
   solo trial's samples/s. Goal: at least 4x.
2. **The 12-trial grid** of ``benchmarks.gpu`` (teacher_mlp, b 64..4096 x three rules) as a whole
   ``hpsearch start`` command three ways: each trial alone on the GPU (``fuse: false``,
   ``gpus_per_worker: 1``), four trials sharing it (``fuse: false``, ``gpus_per_worker: 0.25``),
   and fused (``fuse: true``): the span of each.

    python -m benchmarks.fused_gpu --out OUT_DIR               # writes OUT_DIR/fused_gpu.{json,md}
    python -m benchmarks.fused_gpu --out OUT_DIR --device cpu  # the same, small, on the CPU
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu import GRID_SPACE

#: Aggregate samples/s of 8 fused members over one solo trial's, on a GPU.
THROUGHPUT_GOAL = 4.0


def throughput(device: str, members: int = 8, batch: int = 256, repeat: int = 3) -> dict[str, Any]:
    """Part 1: solo and fused, alternately, in this process; medians of ``repeat``."""
    import torch

    from hpsearch.trials.rank.context import RankContext
    from hpsearch.trials.rank.fused import train_fused
    from hpsearch.trials.rank.loop import train
    from hpsearch.trials.spec import TrialSpec, group_spec

    small = device == "cpu"
    options = {"samples": 4096, "features": 32, "width": 128, "depth": 2} if small else \
        {"samples": 65536, "features": 128, "width": 1024, "depth": 3}
    specs = [TrialSpec(per_device_batch_size=batch, base_lr=0.01 * (1 + k), lr_rule="constant", workload="teacher_mlp",
                       workload_options=options, epochs=1, device=device, hyperparameters={"momentum": 0.9})
             for k in range(members)]
    where = "cuda:0" if device == "cuda" else "cpu"
    solo_rates, fused_rates, ratios = [], [], []
    for _ in range(repeat):
        ctx = RankContext(device=where)
        train(specs[0], ctx)
        last = ctx.reports[-1]
        solo = last["samples_seen"] / last["runtime_s"]
        ctx = RankContext(device=where)
        train_fused(group_spec(specs, fuse="true"), ctx)
        final = [r for r in ctx.reports if r.get("final")][-1]
        fused = members * final["samples_seen"] / final["fused_runtime_s"]
        solo_rates.append(solo)
        fused_rates.append(fused)
        ratios.append(fused / solo)
    device_name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    return {"device": device_name, "members": members, "batch": batch, "options": options,
            "solo_samples_per_s": statistics.median(solo_rates), "fused_samples_per_s": statistics.median(fused_rates),
            "ratio": statistics.median(ratios)}


def grid_span(fuse: str, share: float, epochs: int, device: str) -> dict[str, Any]:
    """Part 2: the grid through ``hpsearch start``; its span and how many trials trained fused."""
    import optuna

    text = GRID_SPACE.format(epochs=epochs)
    text = text.replace("gpus_per_worker: 1}", f"gpus_per_worker: {share:g}}}")
    text = text.replace("fuse: false}", f"fuse: {fuse}}}")
    if device == "cpu":  # the smoke run: small, on the CPU
        text = re.sub(r"resources: \{.*\}", "resources: {device: cpu, cpus_per_worker: 1}", text)
        text = text.replace("samples: 65536, features: 128, width: 1024, depth: 3",
                            "samples: 4096, features: 32, width: 128, depth: 2")
        text = text.replace("choices: [64, 256, 1024, 4096]", "choices: [16, 64, 256, 512]")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "space.yaml").write_text(text)
        began = time.time()
        done = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"], cwd=folder,
                              capture_output=True, text=True, timeout=600)
        ended = time.time()
        if done.returncode != 0:
            return {"fuse": fuse, "share": share, "error": (done.stdout + done.stderr)[-3000:]}
        trials = optuna.load_study(study_name="gpu-grid", storage=f"sqlite:///{folder / 'hpsearch.db'}").get_trials()
    asked = [t.datetime_start.timestamp() for t in trials if t.datetime_start]
    told = [t.datetime_complete.timestamp() for t in trials if t.datetime_complete]
    return {"fuse": fuse, "share": share, "command_s": ended - began, "span_s": max(told) - min(asked),
            "complete": sum(t.state.name == "COMPLETE" for t in trials),
            "fused": sum(bool(t.user_attrs.get("fused_group") is not None) for t in trials)}


def measure(device: str, epochs: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"throughput": throughput(device)}
    figures["grid"] = [grid_span(fuse, share, epochs, device)
                       for fuse, share in (("false", 1.0), ("false", 0.25), ("true", 1.0))]
    return figures


def section(figures: dict[str, Any]) -> str:
    t = figures["throughput"]
    lines = [f"## 14. Fused trials on a GPU ({t['device']})", "",
             f"teacher_mlp {t['options']}, {t['members']} members at b {t['batch']}: fused "
             f"{t['fused_samples_per_s']:,.0f} samples/s in all, one solo trial {t['solo_samples_per_s']:,.0f}: "
             f"{t['ratio']:.2f}x (goal {THROUGHPUT_GOAL:g}x: {'met' if t['ratio'] >= THROUGHPUT_GOAL else 'missed'}).",
             "", "| the 12-trial grid | span | command | trials complete | trained fused |", "| --- | --- | --- | --- | --- |"]
    for row in figures["grid"]:
        name = f"fuse: {row['fuse']}, gpus_per_worker: {row['share']:g}"
        if "error" in row:
            lines.append(f"| {name} | failed | | | |")
        else:
            lines.append(f"| {name} | {row['span_s']:.1f} s | {row['command_s']:.1f} s | {row['complete']} | "
                         f"{row['fused']} |")
    return "\n".join(lines) + "\n"


NOT_MEASURED = ("## 14. Fused trials on a GPU\n\nNot measured: no CUDA device on this machine "
                "(`bash benchmarks/gpu_session.sh OUT` runs it on one).\n")


def run(quick: bool = False) -> str:
    """The section for ``python -m benchmarks``: measured on a CUDA device, else said so."""
    import torch

    if not torch.cuda.is_available():
        return NOT_MEASURED
    return section(measure("cuda", 1 if quick else 3))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fused_gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for fused_gpu.json and fused_gpu.md")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--epochs", type=int, default=3, help="epochs of the grid's trials (default 3)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            (out / "fused_gpu.md").write_text(NOT_MEASURED)
            print("no CUDA device: nothing measured")
            return
    figures = measure(args.device, args.epochs)
    (out / "fused_gpu.json").write_text(json.dumps(figures, indent=1) + "\n")
    text = section(figures)
    (out / "fused_gpu.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
