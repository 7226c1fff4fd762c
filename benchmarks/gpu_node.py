"""A GPU node's searches: trials packed on a GPU, a grid that runs out of memory, the quickstart
on one GPU and on the node's CPU cores.

Where CUDA is available (the figures the packing, out-of-memory and orchestrator issues ask for):

1. **Packing.** ``benchmarks.gpu``'s 12-trial ``teacher_mlp`` grid at 1, 0.5 and 0.25 GPU per
   trial (``resources.gpus_per_worker``): span and mean GPU utilisation of each, the same
   trials' numbers.
2. **Out of memory.** ``benchmarks.workloads.activations`` (about 1 MiB of activations a sample)
   at per-device batch 1024, 16384 and the largest (``oom_batch``: 131072 on an 80 GB GPU, 262144 on
   a 141 GB one) x the three rules, 1 epoch: the largest runs out of the GPU's memory; with ``search.on_oom: skip`` its other two are not started
   (``exceeds_memory``); with ``accumulate`` all nine complete, the largest halved (``ran_as``).
   Peak memory per trial, and the recommendation's cap.
3. **The quickstart on one GPU**, as shipped (``device: auto``): its two-rank trials play both
   ranks on the one GPU (``emulate_ranks: auto``).
4. **The quickstart on the CPU cores** (``device: cpu``): span against max(the longest trial,
   the trials' device-seconds over the cores), the overhead after reservation.

Without CUDA it says so and exits 0 (parts 1-3 need a GPU; part 4 is ``benchmarks.search_span``
on this machine).

    python -m benchmarks.gpu_node [--out DIR]    # DIR gets gpu_node.json and gpu_node.md

About 4 minutes on one H100 with 16 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import md_table, median, write_figures
from benchmarks.gpu import Utilisation, run_grid

__all__ = ["run"]

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "search_spaces" / "examples" / "quickstart.yaml"

OOM_SPACE = """\
study: oom
workload: {{name: "benchmarks.workloads.activations:wide_mlp", epochs: 1, options: {{samples: {largest}}}}}
scaling: {{base_batch_size: 1024}}
parameters:
  per_device_batch_size: {{choices: [{largest}, 16384, 1024]}}
  world_size: 1
  lr_rule: {{choices: [constant, linear, sqrt]}}
  base_lr: 0.001
objectives:
  - {{metric: val_accuracy, direction: maximize}}
search: {{sampler: grid, n_trials: 9, seed: 0, on_oom: {on_oom}, fuse: false}}
constraints: {{skip_duplicates: false}}  # every trial of the grid trains, as in the runs this compares with
resources: {{device: cuda, cpus_per_worker: 2}}
"""


def _start(folder: Path, space: str | Path, *extra: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    """``hpsearch start`` in ``folder`` as a user runs it; its wall time and outcome."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    began = time.time()
    done = subprocess.run([sys.executable, "-m", "hpsearch", "start", str(space), "--no-progress", *extra],
                          cwd=folder, capture_output=True, text=True, env=env, timeout=600)
    return time.time() - began, done


def _frame(folder: Path, study: str) -> Any:
    import hpsearch

    return hpsearch.load(study, storage=f"sqlite:///{folder / 'hpsearch.db'}").trials_dataframe()


def _row(trial: Any, *keys: str) -> dict[str, Any]:
    """A trial's ``keys`` from its frame row, ``None`` where the frame holds NaN or nothing."""
    return {k: (None if str(trial.get(k)) == "nan" else trial.get(k)) for k in keys}


def _timeline(frame: Any, cores: int | None = None) -> dict[str, Any]:
    """Span (first asked to last told), overhead after reservation, and the ideal on ``cores``."""
    ok = frame[frame["state"] == "COMPLETE"]
    asked = [t.timestamp() for t in frame["datetime_start"]]
    told = [t.timestamp() for t in frame["datetime_complete"]]
    reserved = [float(t) for t in ok["training_started"]]
    overhead = [t.timestamp() - r - float(rt)
                for t, r, rt in zip(ok["datetime_complete"], reserved, ok["runtime_s"])]
    out = {"trials": len(frame), "complete": len(ok), "span_s": max(told) - min(asked),
           "overhead_median_s": median(overhead) if overhead else None,
           "overhead_max_s": max(overhead) if overhead else None,
           "emulated": int((ok.get("emulated_ranks", 1) > 1).sum()) if "emulated_ranks" in ok else 0,
           # Each trial's own figures, to tell where a span went (fused or not, and why).
           "per_trial": [_row(t, "number", "state", "per_device_batch_size", "world_size", "lr_rule", "fuse",
                              "fused_group", "runtime_s", "device_seconds", "status_reason", "phases") | {
               "asked_at": t["datetime_start"].timestamp() - min(asked),
               "told_at": t["datetime_complete"].timestamp() - min(asked)}
               for _, t in frame.iterrows()]}
    if cores:
        out["ideal_s"] = max(float(ok["runtime_s"].max()), float(ok["device_seconds"].sum()) / cores)
    return out


def packing(epochs: int) -> list[dict[str, Any]]:
    """Part 1: the grid at 1, 0.5 and 0.25 GPU per trial."""
    rows = []
    for share in (1, 0.5, 0.25):
        print(f"  packing: gpus_per_worker {share}", flush=True)
        rows.append({"share": share, **run_grid(epochs, share)})
    return rows


def oom_batch(total_bytes: int) -> int:
    """The smallest power of two from 131072 whose activations (about 1 MiB a sample) exceed the
    GPU's memory by a quarter: 131072 (128 GiB) on an 80 GB H100, 262144 on a 141 GB H200, where
    131072 fits (96 GiB peak, measured)."""
    largest = 131072
    while largest * 2**20 < 1.25 * total_bytes:
        largest *= 2
    return largest


def out_of_memory() -> dict[str, Any]:
    """Part 2: a grid whose largest batch runs out of the GPU's memory, skip and accumulate."""
    largest = oom_batch(torch.cuda.get_device_properties(0).total_memory)
    result: dict[str, Any] = {"largest": largest}
    with tempfile.TemporaryDirectory() as tmp:
        for on_oom in ("skip", "accumulate"):
            print(f"  out of memory: on_oom {on_oom}", flush=True)
            folder = Path(tmp) / on_oom
            folder.mkdir()
            (folder / "space.yaml").write_text(OOM_SPACE.format(on_oom=on_oom, largest=largest))
            wall, done = _start(folder, "space.yaml")
            frame = _frame(folder, "oom")
            rows = [_row(t, "number", "state", "per_device_batch_size", "lr_rule", "status_reason",
                         "peak_memory_bytes", "ran_as", "runtime_s")
                    for _, t in frame.sort_values("number").iterrows()]
            result[on_oom] = {"wall_s": wall, "exit": done.returncode, "trials": rows,
                              "stderr": done.stderr[-1500:] if done.returncode not in (0, 4) else ""}
            if on_oom == "skip":
                rec = subprocess.run([sys.executable, "-m", "hpsearch", "recommend", "oom", "--devices", "1", "--json"],
                                     cwd=folder, capture_output=True, text=True, timeout=300)
                result["recommend"] = rec.stdout[-3000:]
    return result


def quickstart_on_one_gpu() -> dict[str, Any]:
    """Part 3: the quickstart as shipped, on the GPU."""
    print("  the quickstart on one GPU", flush=True)
    with tempfile.TemporaryDirectory() as tmp, Utilisation() as gpu:
        wall, done = _start(Path(tmp), QUICKSTART)
        frame = _frame(Path(tmp), "digits-quickstart")
        figures = _timeline(frame)
        figures.update(wall_s=wall, exit=done.returncode, devices=sorted(set(frame["device"].dropna())),
                       gpu_utilisation_mean=gpu.mean(time.time() - wall, time.time()))
    return figures


def quickstart_on_the_cores() -> dict[str, Any]:
    """Part 4: the quickstart with ``device: cpu`` on every core of the node."""
    print("  the quickstart on the CPU cores", flush=True)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        space = Path(tmp) / "space.yaml"
        text = QUICKSTART.read_text()
        if "device: auto" not in text:
            raise SystemExit("the quickstart no longer says 'device: auto': update benchmarks/gpu_node.py")
        space.write_text(text.replace("device: auto", "device: cpu"))
        wall, done = _start(Path(tmp), space)
        figures = _timeline(_frame(Path(tmp), "digits-quickstart"), cores)
        figures.update(wall_s=wall, exit=done.returncode, cores=cores)
    return figures


def measure(quick: bool = False) -> dict[str, Any]:
    figures: dict[str, Any] = {"cuda": torch.cuda.is_available(), "quick": quick}
    if not figures["cuda"]:
        return figures
    figures["device"] = torch.cuda.get_device_name(0)
    figures["packing"] = packing(epochs=1 if quick else 3)
    figures["out_of_memory"] = out_of_memory()
    figures["quickstart_gpu"] = quickstart_on_one_gpu()
    figures["quickstart_cpu"] = quickstart_on_the_cores()
    return figures


def section(figures: dict[str, Any]) -> str:
    head = "## 12. A GPU node: trials packed on a GPU, out of memory, the quickstart on one GPU and on the cores"
    if not figures["cuda"]:
        return f"""{head}

`python -m benchmarks.gpu_node`. **No CUDA device here**: nothing measured. Run it on a CUDA machine
(the packing grid at 1, 0.5 and 0.25 GPU per trial, a grid that runs out of memory, the quickstart on
one GPU and on the node's CPU cores).
"""
    pack = md_table(["GPU per trial", "complete", "span", "the trials' training", "overhead (median)",
                     "mean GPU utilisation"],
                    [[f"{r['share']:g}", f"{r['complete']}/{r['trials']}", f"{r['span_s']:.1f} s",
                      f"{r['training_s']:.1f} s", f"{r['overhead_median_s']:.2f} s",
                      f"{r['gpu_utilisation_mean']:.0f}%" if r["gpu_utilisation_mean"] is not None
                      else str(r["gpu_utilisation_note"])] for r in figures["packing"]])
    oom_rows = []
    for mode in ("skip", "accumulate"):
        for t in figures["out_of_memory"][mode]["trials"]:
            peak = t["peak_memory_bytes"]
            oom_rows.append([mode, t["number"], t["per_device_batch_size"], t["lr_rule"], t["state"],
                             t["status_reason"] or "-", f"{peak / 2**30:.1f} GiB" if peak else "-",
                             json.dumps(t["ran_as"]) if t["ran_as"] else "-"])
    oom = md_table(["on_oom", "#", "b", "rule", "state", "reason", "peak memory", "ran as"], oom_rows)
    g, c = figures["quickstart_gpu"], figures["quickstart_cpu"]
    return f"""{head}

`python -m benchmarks.gpu_node` on {figures["device"]}{", quick sizes" if figures["quick"] else ""}.

**Packing** (`benchmarks.gpu`'s 12-trial grid, {'1' if figures['quick'] else '3'} epoch(s), at 1, 0.5 and 0.25 GPU per trial):

{pack}

**Out of memory** (`benchmarks.workloads.activations`, b {figures['out_of_memory'].get('largest', 131072)} / 16384 / 1024 x three rules, 1 epoch):

{oom}

**The quickstart on one GPU**, as shipped: exit {g['exit']}, {g['complete']}/{g['trials']} COMPLETE, {g['emulated']}
trials with emulated ranks, span {g['span_s']:.1f} s, overhead after reservation median {g['overhead_median_s']:.2f} s,
whole command {g['wall_s']:.1f} s, device {', '.join(g['devices'])}.

**The quickstart on the CPU cores** ({c['cores']} cores, `device: cpu`): span {c['span_s']:.1f} s against an ideal of
{c['ideal_s']:.1f} s ({c['span_s'] / c['ideal_s']:.2f}x), overhead after reservation median {c['overhead_median_s']:.2f} s
(max {c['overhead_max_s']:.2f} s; target 0.5 s or less), whole command {c['wall_s']:.1f} s.
"""


def run(quick: bool = False) -> str:
    return section(measure(quick))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1-epoch packing grids")
    parser.add_argument("--out", type=Path, help="a folder for gpu_node.json and gpu_node.md")
    args = parser.parse_args()
    write_figures(args.out, "gpu_node", (figures := measure(args.quick)), section(figures))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
