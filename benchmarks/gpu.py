"""GPU: the trial loop against a hand-written device-resident loop, and a 12-trial grid.

Where CUDA is available, two parts, on the GPU's first device:

1. **The loop's samples/s.** ``teacher_mlp`` (65,536 samples, 128 features, width 1024, depth 3;
   52,429 training samples) at per-device batch 64, 256, 1024 and 4096, W = 1: *ours* is
   ``hpsearch.trials.rank.loop.train`` as a trial runs it (its ``samples_seen / train_s``, so its
   evaluations are left out), with the data on the device (``data: device``) and through the
   loader (``data: loader``, one run, for reference); *hand-written* is the loop a GPU user
   writes: the same model and initial weights, the data on the device, a ``randperm`` each
   epoch, ``x[idx]``, forward, cross-entropy, backward, SGD with momentum. Each side runs once to
   warm up, then the median of interleaved repetitions. Target: ours (data on the device) at
   0.8x of the hand-written loop or better, at every b.
2. **A 12-trial grid through ``hpsearch start``** (per-device batch 64/256/1024/4096 x the
   three rules, W = 1, 3 epochs of the same data), as a whole command in a fresh folder: the
   span from the first trial asked to the last told, the overhead per trial (told minus devices
   reserved minus its runtime), the evaluations' share of each trial's runtime, its data path
   and whether its rank process kept the data, and the GPU's mean utilisation over the span
   (NVML, sampled every 250 ms; needs ``nvidia-ml-py``). Targets: evaluation 5% of runtime or
   less, overhead 0.5 s or less, span 30 s or less, mean utilisation 60% or more.

Where there is no GPU it says so and runs its CPU half: part 1's comparison on the CPU, on the
digits and a small teacher, and exits 0.

    python -m benchmarks.gpu [--quick] [--out DIR]   # DIR gets gpu.json and gpu.md

It takes about 5 minutes on one GPU (the grid's search included), seconds without one.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.common import interleaved, md_table, median, write_figures

__all__ = ["run"]

LOOP_TARGET = 0.8  # ours / hand-written samples per second, at least
EVAL_TARGET = 0.05  # evaluation's share of a trial's runtime, at most
OVERHEAD_TARGET = 0.5  # seconds per trial, at most
SPAN_TARGET = 30.0  # seconds, the grid from first ask to last tell
UTIL_TARGET = 60.0  # the GPU's mean utilisation over the grid's span, percent, at least

TEACHER = {"samples": 65536, "features": 128, "width": 1024, "depth": 3}
BASE_LR, BASE_BATCH, MOMENTUM, SEED = 0.01, 64, 0.9, 0


@dataclass(frozen=True)
class Case:
    """One workload and the batch sizes to compare it at, with epochs per batch size so every
    run takes enough steps to time."""

    name: str
    workload: str
    options: dict[str, Any]
    batches: tuple[int, ...]
    min_steps: int


GPU_CASES = (Case("teacher_mlp, 65,536 samples, width 1024, depth 3", "teacher_mlp", TEACHER,
                  (64, 256, 1024, 4096), 200),)
CPU_CASES = (Case("digits_cnn", "digits_cnn", {}, (16, 64, 256), 60),
             Case("teacher_mlp, 8,192 samples, width 128", "teacher_mlp",
                  {"samples": 8192, "features": 32, "width": 128, "depth": 2}, (64, 256, 1024), 60))


def _spec(case: Case, batch: int, epochs: int, device: str, data: str) -> Any:
    from hpsearch.trials.spec import TrialSpec

    return TrialSpec(per_device_batch_size=batch, base_lr=BASE_LR, base_batch_size=BASE_BATCH, lr_rule="linear",
                     workload=case.workload, workload_options=case.options, epochs=epochs,
                     hyperparameters={"momentum": MOMENTUM}, device=device, seed=SEED, data=data)


def _ours(case: Case, batch: int, epochs: int, device: str, data: str) -> float:
    """Samples per second of the trial loop's training (its evaluations left out)."""
    from hpsearch.trials.rank.context import RankContext
    from hpsearch.trials.rank.loop import train

    final = train(_spec(case, batch, epochs, device, data), RankContext(device=f"{device}:0" if device == "cuda"
                                                                         else device))
    assert final is not None
    return float(final["samples_seen"]) / float(final["train_s"])


def _hand_written(case: Case, batch: int, epochs: int, device: str) -> float:
    """Samples per second of the loop a user writes with the data on the device."""
    from hpsearch.trials.workloads.base import build_workload

    spec = _spec(case, batch, epochs, device, "device")
    torch.manual_seed(SEED)
    workload = build_workload(case.workload, case.options)
    where = torch.device(f"{device}:0" if device == "cuda" else device)
    model = workload.model.to(where)
    x, y = (t.to(where) for t in workload.train_set.tensors)  # type: ignore[attr-defined]
    optimizer = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=MOMENTUM)
    generator = torch.Generator(device=where).manual_seed(SEED)
    n = len(y)
    _sync(where)
    start = time.perf_counter()
    for _ in range(epochs):
        order = torch.randperm(n, device=where, generator=generator)
        for i in range(0, n, batch):
            idx = order[i:i + batch]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    _sync(where)
    return epochs * n / (time.perf_counter() - start)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _epochs(case: Case, batch: int) -> int:
    from hpsearch.trials.workloads.base import build_workload

    n = len(build_workload(case.workload, case.options).train_set)  # type: ignore[arg-type]
    return max(1, math.ceil(case.min_steps / math.ceil(n / batch)))


def compare_loops(cases: tuple[Case, ...], device: str, repeat: int) -> list[dict[str, Any]]:
    """Part 1: per case and batch, the median samples/s of each side."""
    rows = []
    for case in cases:
        for batch in case.batches:
            epochs = _epochs(case, batch)
            sides: dict[str, Callable[[], float]] = {
                "ours (data: device)": lambda c=case, b=batch, e=epochs: _ours(c, b, e, device, "device"),
                "hand-written": lambda c=case, b=batch, e=epochs: _hand_written(c, b, e, device),
            }
            print(f"  {case.name}, b {batch}, {epochs} epochs", flush=True)
            for side in sides.values():  # warm up: kernels, allocator, the kept data
                side()
            runs = interleaved(sides, repeat, log=False)
            figures = {name: median(values) for name, values in runs.items()}
            # The loader path for reference, once (the slow side: it would take most of the time).
            figures["ours (data: loader)"] = _ours(case, batch, epochs, device, "loader")
            rows.append({"workload": case.name, "batch": batch, "epochs": epochs, **figures,
                         "ratio": figures["ours (data: device)"] / figures["hand-written"]})
    return rows


# ---- part 2: the grid through hpsearch start ------------------------------------------------
# Each trial on its own (fuse: false): the trial loop's overhead and evaluation share are what
# this part measures; benchmarks.fused_gpu runs the same grid fused.

GRID_SPACE = """\
study: gpu-grid
workload:
  name: teacher_mlp
  epochs: {epochs}
  options: {{samples: 65536, features: 128, width: 1024, depth: 3}}
scaling: {{base_batch_size: 64}}
parameters:
  per_device_batch_size: {{choices: [64, 256, 1024, 4096]}}
  world_size: 1
  lr_rule: {{choices: [constant, linear, sqrt]}}
  base_lr: 0.01
  momentum: 0.9
objectives:
  - {{metric: val_accuracy, direction: maximize}}
  - {{metric: runtime_s, direction: minimize}}
search: {{sampler: grid, n_trials: 12, seed: 0, fuse: false}}
constraints: {{skip_duplicates: false}}  # every trial of the grid trains, as in the runs this compares with
resources: {{device: cuda, cpus_per_worker: 2, gpus_per_worker: 1}}
"""


class Utilisation:
    """The GPUs' utilisation (NVML) sampled every ``interval`` seconds in a thread."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.samples: list[tuple[float, float]] = []  # (time, mean % over the GPUs)
        self.error: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Utilisation:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        try:
            import pynvml  # nvidia-ml-py; not a dependency of hpsearch
        except ImportError:
            self.error = "not measured: nvidia-ml-py is not installed"
            return
        try:
            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            while not self._done.wait(self.interval):
                rates = [pynvml.nvmlDeviceGetUtilizationRates(h).gpu for h in handles]
                self.samples.append((time.time(), sum(rates) / len(rates)))
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:
            self.error = f"not measured: NVML failed ({exc})"

    def mean(self, start: float, end: float) -> float | None:
        seen = [u for t, u in self.samples if start <= t <= end]
        return sum(seen) / len(seen) if seen else None


def run_grid(epochs: int, share: float = 1, fuse: str = "false") -> dict[str, Any]:
    """Part 2: the grid as a whole ``hpsearch start`` command, and its study's timeline;
    ``share``: each trial's ``gpus_per_worker`` (0.5, 0.25: trials packed on a GPU); ``fuse``:
    the space's ``search.fuse`` (true: the grid's trials of one shape trained as one model)."""
    import hpsearch

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        text = GRID_SPACE.format(epochs=epochs)
        text = text.replace("gpus_per_worker: 1}", f"gpus_per_worker: {share:g}}}")
        text = text.replace("fuse: false}", f"fuse: {fuse}}}")
        (folder / "space.yaml").write_text(text)
        with Utilisation() as gpu:
            began = time.time()
            done = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                                  cwd=folder, capture_output=True, text=True, timeout=420)
            ended = time.time()
        if done.returncode != 0:
            raise SystemExit(f"hpsearch start failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        frame = hpsearch.load("gpu-grid", storage=f"sqlite:///{folder / 'hpsearch.db'}").trials_dataframe()
    complete = frame[frame["state"] == "COMPLETE"]
    asked = [t.timestamp() for t in frame["datetime_start"]]
    told = [t.timestamp() for t in frame["datetime_complete"]]
    reserved = [float(t) for t in frame["training_started"]]
    runtime = frame["runtime_s"].astype(float).tolist()
    train = frame["train_s"].astype(float).tolist()
    overhead = [t - r - rt for t, r, rt in zip(told, reserved, runtime)]
    eval_share = [(rt - tr) / rt for rt, tr in zip(runtime, train) if rt > 0]
    first, last = min(asked), max(told)
    def column(name: str) -> list[Any]:
        return frame[name].tolist() if name in frame else [None] * len(frame)

    fused = [g is not None and g == g for g in column("fused_group")]  # NaN != NaN: not fused
    # Seconds from the first ask: when each trial's devices were reserved and when it was told
    # (which trials overlapped, where several share a GPU); its phases, from its own ask.
    per_trial = [{"b": int(b), "rule": rule, "state": state, "runtime_s": rt, "train_s": tr, "overhead_s": oh,
                  "fused": f, "fused_runtime_s": fr, "reserved_at": r - first, "told_at": t - first, "phases": ph}
                 for b, rule, state, rt, tr, oh, f, fr, r, t, ph in zip(
                     column("per_device_batch_size"), column("lr_rule"), column("state"), runtime, train, overhead,
                     fused, column("fused_runtime_s"), reserved, told, column("phases"))]
    return {
        "fuse": fuse, "share": share, "fused": sum(fused), "per_trial": per_trial,
        "trials": len(frame), "complete": len(complete), "command_s": ended - began, "span_s": last - first,
        "training_s": float(frame["train_s"].sum()), "overhead_median_s": median(overhead),
        "overhead_max_s": max(overhead), "eval_share_median": median(eval_share), "eval_share_max": max(eval_share),
        "setup_median_s": median(frame["setup_s"].astype(float).tolist()) if "setup_s" in frame else None,
        "data_paths": sorted(set(frame.get("data_path", []))),
        "data_kept": int((frame["data_cache"] == "kept").sum()) if "data_cache" in frame else None,
        "gpu_utilisation_mean": gpu.mean(first, last), "gpu_utilisation_note": gpu.error,
        "startup_s": first - began,
    }


# ---- the report ------------------------------------------------------------------------------


def _loop_table(rows: list[dict[str, Any]]) -> str:
    return md_table(
        ["workload", "b", "epochs", "ours, data on the device", "ours, data: loader", "hand-written, on the device",
         "ours / hand-written"],
        [[r["workload"], r["batch"], r["epochs"], f"{r['ours (data: device)'] / 1e3:,.1f}k",
          f"{r['ours (data: loader)'] / 1e3:,.1f}k", f"{r['hand-written'] / 1e3:,.1f}k", f"{r['ratio']:.2f}x"]
         for r in rows])


def _met(ok: bool, text: str) -> str:
    return f"**{'met' if ok else 'missed'}** ({text})"


def measure(quick: bool = False) -> dict[str, Any]:
    """Every figure of this benchmark, as data."""
    cuda = torch.cuda.is_available()
    figures: dict[str, Any] = {"cuda": cuda, "torch": torch.__version__, "quick": quick}
    if cuda:
        torch.cuda.set_device(0)
        figures["device"] = torch.cuda.get_device_name(0)
        cases = GPU_CASES if not quick else (Case(GPU_CASES[0].name, "teacher_mlp", TEACHER, (256, 4096), 100),)
        figures["loops"] = compare_loops(cases, "cuda", repeat=1 if quick else 3)
        # The grid's rank processes get the GPU to themselves.
        from hpsearch.trials.rank.data_cache import kept_data

        kept_data().clear()
        torch.cuda.empty_cache()
        figures["grid"] = run_grid(epochs=1 if quick else 3)
    else:
        figures["device"] = "cpu"
        torch.set_num_threads(1)  # both sides on one core: a fair pair on a shared machine
        cases = CPU_CASES if not quick else tuple(Case(c.name, c.workload, c.options, c.batches[1:], 20)
                                                  for c in CPU_CASES)
        figures["loops"] = compare_loops(cases, "cpu", repeat=1 if quick else 3)
    return figures


def section(figures: dict[str, Any]) -> str:
    """The Markdown section for ``figures``."""
    loops = figures["loops"]
    worst = min(r["ratio"] for r in loops)
    head = "## 11. GPU: the trial loop against a hand-written device-resident loop; a 12-trial grid"
    if not figures["cuda"]:
        return f"""{head}

`python -m benchmarks.gpu`. **No CUDA device here**: the GPU half (samples/s on the GPU, the
12-trial grid's span, overhead, evaluation share and utilisation) was not measured; run it on a
CUDA machine. Its CPU half{" (quick sizes)" if figures["quick"] else ""}: the trial loop
(`samples_seen / train_s`) with the data gathered in place (`data: device`) and through the
loader (`data: loader`), against the loop a user writes with the same model, weights and data
(a `randperm` per epoch, `x[idx]`), one torch thread each, samples/s, median of interleaved runs
(the loader path one run).

{_loop_table(loops)}

Verdict: CPU only, the GPU targets not measured; on the CPU ours is at {worst:.2f}x of the hand-written loop at worst.
"""
    grid = figures["grid"]
    util = grid["gpu_utilisation_mean"]
    util_text = f"{util:.0f}%" if util is not None else grid["gpu_utilisation_note"]
    paths = ", ".join(grid["data_paths"])
    return f"""{head}

`python -m benchmarks.gpu` on {figures["device"]} (torch {figures["torch"]}){", quick sizes" if figures["quick"] else ""}.

**The loop's samples/s** (training only; W = 1; median of interleaved runs after a warm-up, the
loader path one run): ours is `hpsearch.trials.rank.loop.train` as a trial runs it, with the data on
the device and through the loader; the hand-written loop keeps the data on the device and
gathers `x[idx]` of a `randperm`, the same model, weights and optimizer.

{_loop_table(loops)}

**The 12-trial grid through `hpsearch start`** (b 64/256/1024/4096 x the three rules, W = 1,
teacher_mlp as above): {grid["complete"]}/{grid["trials"]} COMPLETE, data path {paths},
{grid["data_kept"]} of {grid["trials"]} trials on data their rank process kept.

{md_table(["span (first ask to last tell)", "the trials' training", "overhead per trial (median, max)",
           "evaluation share of runtime (median, max)", "setup per trial (median)", "mean GPU utilisation",
           "before the first trial", "whole command"],
          [[f"{grid['span_s']:.1f} s", f"{grid['training_s']:.1f} s",
            f"{grid['overhead_median_s']:.2f} s, {grid['overhead_max_s']:.2f} s",
            f"{grid['eval_share_median']:.1%}, {grid['eval_share_max']:.1%}",
            f"{grid['setup_median_s']:.2f} s" if grid["setup_median_s"] is not None else "-",
            util_text, f"{grid['startup_s']:.1f} s", f"{grid['command_s']:.1f} s"]])}

Verdict: loop {_met(worst >= LOOP_TARGET, f"{worst:.2f}x of the hand-written loop at worst, target {LOOP_TARGET}x or better")}.
Verdict: evaluation share {_met(grid["eval_share_max"] <= EVAL_TARGET, f"{grid['eval_share_max']:.1%} at most, target {EVAL_TARGET:.0%} or less")}.
Verdict: overhead per trial {_met(grid["overhead_median_s"] <= OVERHEAD_TARGET, f"median {grid['overhead_median_s']:.2f} s, target {OVERHEAD_TARGET} s or less")}.
Verdict: grid span {_met(grid["span_s"] <= SPAN_TARGET, f"{grid['span_s']:.1f} s, target {SPAN_TARGET:.0f} s or less")}.
Verdict: mean GPU utilisation {_met(util is not None and util >= UTIL_TARGET, f"{util_text}, target {UTIL_TARGET:.0f}% or more")}.
"""


def run(quick: bool = False) -> str:
    return section(measure(quick))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer batch sizes, one repetition, a 1-epoch grid")
    parser.add_argument("--out", type=Path, help="a folder for gpu.json (the figures) and gpu.md (the section)")
    args = parser.parse_args()
    write_figures(args.out, "gpu", (figures := measure(args.quick)), section(figures))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
