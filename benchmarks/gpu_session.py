"""Every GPU figure in one run, most wanted first, within a time budget.

A lent GPU machine gives minutes, not hours, so this runs the parts of ``benchmarks.gpu``,
``benchmarks.gpu_node`` and ``benchmarks.fused_gpu`` once each (the 12-trial grid alone on the GPU
is run once and serves all three), in the order of what they prove, and skips a part its estimate
says would not finish in the time left. After each part it rewrites ``OUT/session.json`` (every
figure so far, each part's seconds, what failed and why), so a run cut short still brings its
figures back; at the end each benchmark's section is written where all its parts ran
(``gpu.md``, ``gpu_node.md``, ``fused_gpu.md``), and ``profile.txt`` holds where a trial's time
goes at the loop's worst batch size (``torch.profiler``, CPU and CUDA time by operator).

    python -m benchmarks.gpu_session --out OUT [--budget SECONDS]

Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import fused_gpu, gpu, gpu_node
from benchmarks.common import write_figures

__all__ = ["main"]

EPOCHS = 3  # the 12-trial grid's epochs, as benchmarks.gpu runs it


def profile_trial(out: Path, batch: int = 4096, epochs: int = EPOCHS, device: str = "cuda") -> dict[str, Any]:
    """One grid trial at ``batch`` (the loop's worst against the hand-written loop) and the
    hand-written loop on the same batches, each under ``torch.profiler`` after a warm-up run:
    their operators by device and by CPU time, side by side in ``profile.txt``."""
    from torch.profiler import ProfilerActivity, profile

    from hpsearch.trials.rank.context import RankContext
    from hpsearch.trials.rank.loop import train

    case = gpu.GPU_CASES[0]
    spec = gpu._spec(case, batch, epochs, device, "device")
    where = "cuda:0" if device == "cuda" else device
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sides: dict[str, Callable[[], Any]] = {
        "ours": lambda: train(spec, RankContext(device=where)),
        "hand-written": lambda: gpu._hand_written(case, batch, epochs, device),
    }
    text, figures = [], {}
    for name, side in sides.items():
        side()  # warm: kernels, the allocator, the kept data
        with profile(activities=activities) as prof:
            began = time.perf_counter()
            result = side()
            seconds = time.perf_counter() - began
        table = prof.key_averages()
        figures[name] = {"seconds_profiled": seconds, **(
            {k: result.get(k) for k in ("runtime_s", "train_s", "samples_seen", "steps")} if isinstance(result, dict)
            else {"samples_per_s": result})}
        text.append(f"=== {name}: teacher_mlp {case.options}, b {batch}, {epochs} epochs, data on the device; "
                    f"{json.dumps(figures[name])}\n\nby device time:\n"
                    + table.table(sort_by="device_time_total", row_limit=25)
                    + "\n\nby CPU time:\n" + table.table(sort_by="cpu_time_total", row_limit=25) + "\n")
    (out / "profile.txt").write_text("\n\n".join(text))
    return figures


def parts(out: Path) -> list[tuple[str, float, Callable[[], Any]]]:
    """(name, estimated seconds on one H100, what it measures), most wanted first."""
    loops = gpu.GPU_CASES
    return [
        ("loops", 90, lambda: gpu.compare_loops(loops, "cuda", repeat=3)),
        ("grid", 60, lambda: gpu.run_grid(EPOCHS)),
        ("fused_throughput", 30, lambda: fused_gpu.throughput("cuda")),
        ("grid_fused", 60, lambda: gpu.run_grid(EPOCHS, fuse="true")),
        ("grid_quarter", 60, lambda: gpu.run_grid(EPOCHS, share=0.25)),
        ("profile", 20, lambda: profile_trial(out)),
        ("out_of_memory", 120, gpu_node.out_of_memory),
        ("quickstart_gpu", 70, gpu_node.quickstart_on_one_gpu),
        ("grid_half", 60, lambda: gpu.run_grid(EPOCHS, share=0.5)),
        ("quickstart_cpu", 50, gpu_node.quickstart_on_the_cores),
    ]


def _sections(out: Path, got: dict[str, Any], device: str) -> None:
    """Each benchmark's own section where every part of it ran."""
    base = {"cuda": True, "device": device, "torch": torch.__version__, "quick": False}
    if {"loops", "grid"} <= got.keys():
        write_figures(out, "gpu", figures := {**base, "loops": got["loops"], "grid": got["grid"]},
                      gpu.section(figures))
    if {"grid", "grid_half", "grid_quarter", "out_of_memory", "quickstart_gpu", "quickstart_cpu"} <= got.keys():
        packing = [{**got[k], "share": s} for k, s in (("grid", 1), ("grid_half", 0.5), ("grid_quarter", 0.25))]
        figures = {**base, "packing": packing, "out_of_memory": got["out_of_memory"],
                   "quickstart_gpu": got["quickstart_gpu"], "quickstart_cpu": got["quickstart_cpu"]}
        write_figures(out, "gpu_node", figures, gpu_node.section(figures))
    if {"fused_throughput", "grid", "grid_quarter", "grid_fused"} <= got.keys():
        figures = {"throughput": got["fused_throughput"],
                   "grid": [got[k] for k in ("grid", "grid_quarter", "grid_fused")]}
        write_figures(out, "fused_gpu", figures, fused_gpu.section(figures))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_session", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for session.json and the sections")
    parser.add_argument("--budget", type=float, default=900.0, help="seconds this run may take (default 900)")
    parser.add_argument("--only", help="comma-separated parts to run (default: all): "
                        + ", ".join(name for name, _, _ in parts(Path("."))))
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing measured")
        return
    began = time.monotonic()
    device = torch.cuda.get_device_name(0)
    session: dict[str, Any] = {"device": device, "torch": torch.__version__, "budget_s": args.budget,
                               "cores": len(os.sched_getaffinity(0)), "seconds": {}, "errors": {}, "skipped": [],
                               "figures": {}}
    only = set(args.only.split(",")) if args.only else None
    for name, estimate, measure in parts(out):
        if only is not None and name not in only:
            continue
        left = args.budget - (time.monotonic() - began)
        if estimate > left:
            session["skipped"].append(f"{name} (about {estimate:.0f} s, {left:.0f} s left)")
            continue
        print(f"{name} ({left:.0f} s left)", flush=True)
        start = time.monotonic()
        try:
            session["figures"][name] = measure()
        except (Exception, SystemExit) as exc:  # one part failing must not lose the others' figures
            session["errors"][name] = "".join(traceback.format_exception(exc))[-4000:]
        session["seconds"][name] = round(time.monotonic() - start, 1)
        torch.cuda.empty_cache()
        (out / "session.json").write_text(json.dumps(session, indent=1, default=str) + "\n")
    try:
        _sections(out, session["figures"], device)
    except Exception:  # the figures are in session.json either way
        traceback.print_exc()
    print(json.dumps({k: session[k] for k in ("seconds", "skipped")}, indent=1))
    for name, error in session["errors"].items():
        print(f"--- {name} failed:\n{error}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
