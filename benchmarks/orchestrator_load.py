"""Orchestrator load: many short trials that sleep instead of computing, as Ray Tune's own
scalability benchmarks time their orchestrator.

Each trial trains ``benchmarks.workloads.sleepy`` (a linear model whose forward pass sleeps), so
what is measured is the orchestrator's cost, not the training's: reserving a trial's devices,
handing its ranks to warm processes, passing its reports, writing the study. ``hpsearch start``
joins a Ray head started for it with ``ray start --head --num-cpus N``: N logical CPUs on
however few real cores the machine has (a sleeping trial needs none), so a 2-core machine loads
the orchestrator as a 16- or 32-core node would.

Figures, from the study: the span from the first trial's devices reserved to the last trial
told, over the ideal (the trials' device-seconds over N); per trial, the overhead after its
devices were reserved (told minus reserved minus its training, ``runtime_s``), median and max;
the evaluations recorded per second of span. Where the current tree records them, the
trials' phases (``phases``) say where the rest went.

With ``--baseline REV`` (default: the commit before the orchestrator work), the same searches
run on that revision too, in the same run, from a copy of it (``git worktree``) laid out as
installed: today's figure first, then ours.

    python -m benchmarks.orchestrator_load            # 16 and 32 CPUs, both revisions (about 4 min)
    python -m benchmarks.orchestrator_load --quick    # 16 CPUs, 16 trials
"""

from __future__ import annotations

import argparse
import itertools
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import md_table, median, revision_tree, verdict
from hpsearch.record import PHASE_NAMES

#: The tree before the orchestrator work of issue 27 (phases, forked rank processes, warm grants).
BASELINE = "5e594f5"
SPAN_TARGET = 1.5
OVERHEAD_TARGET = 0.3

SPACE = """\
study: sleepy
workload: {{name: "benchmarks.workloads.sleepy:sleepy", epochs: 1, options: {{samples: 64, sample_s: {sample_s}}}}}
scaling: {{base_batch_size: 8}}
parameters:
  per_device_batch_size: 8
  world_size: {{choices: [1, 2]}}
  lr_rule: {{choices: [constant, linear, sqrt]}}
  base_lr: {{low: 0.001, high: 0.1, log: true}}
objectives:
  - {{metric: val_accuracy, direction: maximize}}
search: {{sampler: random, n_trials: {trials}, seed: 0}}
resources: {{device: cpu, cpus_per_worker: 1}}
constraints: {{skip_equivalent: false}}
"""


def run_search(path: list[str], cpus: int, trials: int, folder: Path, sample_s: float) -> dict[str, Any]:
    """One search against a Ray head told ``cpus`` CPUs; its figures."""
    folder.mkdir(parents=True)
    (folder / "space.yaml").write_text(SPACE.format(trials=trials, sample_s=sample_s))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env.pop("RAY_ADDRESS", None)
    ray_exe = str(Path(sys.executable).with_name("ray"))
    port = 6390 + secrets.randbelow(500)
    subprocess.run([ray_exe, "start", "--head", f"--port={port}", f"--num-cpus={cpus}", "--num-gpus=0",
                    "--include-dashboard=false", "--disable-usage-stats"], env=env, check=True,
                   capture_output=True, text=True)
    try:
        began = time.time()
        done = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress",
                               "--address", f"127.0.0.1:{port}"], cwd=folder, env=env, capture_output=True,
                              text=True)
        command = time.time() - began
    finally:
        subprocess.run([ray_exe, "stop", "--force"], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"hpsearch start failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return {**_figures(folder / "hpsearch.db", cpus), "command": command}


def _figures(db: Path, cpus: int) -> dict[str, Any]:
    """The span, ideal, overheads and phases of the study in ``db``, read with the current tree's
    own reader (the baseline's study has the same columns, less the phases)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="sleepy", storage=f"sqlite:///{db}")
    trials = [t for t in study.get_trials() if t.state.name == "COMPLETE"]
    told = [t.datetime_complete.timestamp() for t in trials]  # type: ignore[union-attr]
    reserved = [float(t.user_attrs["training_started"]) for t in trials]
    runtime = [float(t.user_attrs["runtime_s"]) for t in trials]
    overhead = [o - r - rt for o, r, rt in zip(told, reserved, runtime)]
    span = max(told) - min(reserved)
    ideal = sum(float(t.user_attrs["device_seconds"]) for t in trials) / cpus
    evaluations = sum(len((t.user_attrs.get("curves") or {}).get("samples_seen") or []) for t in trials)
    gaps: dict[str, float] = {}
    phased = [t.user_attrs["phases"] for t in trials if isinstance(t.user_attrs.get("phases"), dict)]
    for a, b in itertools.pairwise(PHASE_NAMES):
        values = [p[b] - p[a] for p in phased if a in p and b in p]
        if values:
            gaps[f"{a} -> {b}"] = median(values)
    return {"trials": len(trials), "span": span, "ideal": ideal, "ratio": span / ideal,
            "overhead": median(overhead), "overhead_max": max(overhead), "results_per_s": evaluations / span,
            "gaps": gaps}


def run(quick: bool = False, baseline: str | None = BASELINE) -> str:
    cases = [(16, 16)] if quick else [(16, 32), (32, 32)]
    results: dict[tuple[str, int], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="hpsearch-load-") as tmp, \
            revision_tree(baseline, Path(tmp)) as before, revision_tree(None, Path(tmp)) as ours:
        assert ours is not None
        paths = {f"before (commit {baseline})": before, "hpsearch (this tree)": ours}
        sides = {name: path for name, path in paths.items() if path is not None}
        for cpus, trials in cases:
            for name, path in sides.items():
                print(f"  {cpus} CPUs, {trials} trials: {name}", flush=True)
                results[name, cpus] = run_search(path, cpus, trials, Path(tmp) / f"{len(results)}", sample_s=2.0 / 64)
    return _section(results, cases, list(sides), quick)


def _section(results: dict[tuple[str, int], dict[str, Any]], cases: list[tuple[int, int]], sides: list[str],
             quick: bool) -> str:
    rows = []
    for cpus, trials in cases:
        for name in sides:
            r = results[name, cpus]
            rows.append([f"{cpus} CPUs, {trials} trials", name, f"{r['span']:.1f} s", f"{r['ideal']:.1f} s",
                         f"{r['ratio']:.2f}x", f"{r['overhead']:.2f} s (max {r['overhead_max']:.2f})",
                         f"{r['results_per_s']:.1f}", f"{r['command']:.1f} s"])
    table = md_table(["load", "tree", "span from first reservation", "ideal", "span / ideal",
                      "overhead after reservation (median)", "evaluations recorded / s", "whole command"], rows)
    ours = results[sides[-1], 16]
    gaps = md_table(["phase", "median (s)"], [[k, f"{v:.3f}"] for k, v in ours["gaps"].items()])
    met = "**met**" if ours["overhead"] <= OVERHEAD_TARGET else "**missed**"
    return f"""## 10. Orchestrator load: many short trials at once

`python -m benchmarks.orchestrator_load{' --quick' if quick else ''}`. Trials of `benchmarks.workloads.sleepy`, whose
forward pass sleeps (about 2 s of training for a one-rank trial, 1 s for a two-rank one; W in {{1, 2}}), random
search, `hpsearch start --address` against a Ray head started with `ray start --head --num-cpus N` on this
machine's {os.cpu_count()} cores. Span: the first trial's devices reserved to the last trial told; ideal: the
trials' device-seconds over N. Overhead: told minus reserved minus the trial's `runtime_s`. Each side once,
in one run, the earlier revision first (its tree laid out as installed, the same Ray, the same space).

{table}

Where a trial's time went after its devices were reserved, this tree, {cases[0][0]} CPUs (median of the trials'
recorded `phases`):

{gaps}

Verdict ({cases[0][0]} CPUs): span from the first reservation {verdict(ours['ratio'], SPAN_TARGET)}; overhead after reservation {met} ({ours['overhead']:.2f} s median, target {OVERHEAD_TARGET:.2f} s or less).

What it says: after its devices are reserved a trial waits for nothing but its own training (the
phases after `reserved`, apart from training, add up to a tenth of a second): its ranks go to
warm processes forked ahead from the node's template (`hpsearch.trials.rank.zygote`), where the
revision before started them on demand, each importing torch while trials waited (its
overhead above). `asked -> reserved` is the wait for devices (more trials asked than the CPUs
hold) and, in the first wave, Ray Tune starting one trial process per concurrent trial (about
1.3 CPU-seconds each, importing Ray Tune): {cases[0][0]} of them on this machine's
{os.cpu_count()} cores take most of the whole command's start; on a node with as many cores as
trials they start side by side. With more logical CPUs than real ones ({cases[-1][0]} on
{os.cpu_count()}), {cases[-1][0]} rank processes joining their process groups at once share the
cores: the rest of the overhead there.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 CPUs and 16 trials only")
    parser.add_argument("--baseline", default=BASELINE, help=f"the revision to compare with (default {BASELINE}); "
                                                               "'none' for this tree only")
    args = parser.parse_args()
    print(run(args.quick, None if args.baseline.lower() == "none" else args.baseline))


if __name__ == "__main__":
    main()
