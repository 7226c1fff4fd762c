"""Orchestration: ``hpsearch start`` on 8 trials vs a plain Python loop over a 2-process pool.

Both sides run the same 8 trials (digits CNN, one rank each, about 10 s of training each on one
core) two at a time, as whole commands started from a shell:

- *hpsearch*: ``hpsearch start space.yaml`` into a fresh SQLite study: the CLI, a local Ray,
  Tune with the study's searcher, every trial launching its rank process, every epoch recorded;
- *plain pool*: a script that builds the same ``TrialSpec``s and maps
  ``hpsearch.trials.rank.loop.train`` over ``multiprocessing.Pool(2)``: the training loop and nothing
  else, what someone running the trials by hand would write.

The ratio of their wall times is the price of the service. A third side runs the same
``hpsearch start`` with ``--address``, joining a Ray started (untimed) just before it, as a search
on a running cluster does: the price without Ray's own start and stop. The overhead is split into
its parts from the study's own timestamps (when each trial was asked and told, and the training
time its rank measured) and from two side measurements (``ray.init`` alone; one trial launched
with ``run_trial`` vs the same loop called in process), which is where the time goes.

    python -m benchmarks.orchestration            # 8 trials of about 10 s, 3 repetitions
    python -m benchmarks.orchestration --quick    # 8 trials of about 2 s
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import ProcessTreeCPU, interleaved, md_table, median, verdict

TARGET = 1.10
N_TRIALS = 8
CONCURRENCY = 2
BATCH = 16
WORKLOAD = "digits_cnn"
LRS = (0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.06)

SPACE = """\
study: bench-orchestration
workload: {{name: {workload}, epochs: {epochs}}}
scaling: {{base_batch_size: {batch}}}
parameters:
  per_device_batch_size: {batch}
  world_size: 1
  lr_rule: linear
  base_lr: {{choices: [{lrs}]}}
  momentum: 0.9
objectives:
  - {{metric: val_accuracy, direction: maximize}}
search: {{sampler: grid, n_trials: {n}, max_concurrent: {concurrency}, seed: 0}}
resources: {{device: cpu, cpus_per_worker: 1}}
"""


def specs(epochs: int) -> list[Any]:
    """The trials both sides run: what hpsearch's grid makes of ``SPACE``."""
    from hpsearch.trials.spec import TrialSpec

    return [TrialSpec(per_device_batch_size=BATCH, base_lr=lr, world_size=1, lr_rule="linear", base_batch_size=BATCH,
                      workload=WORKLOAD, epochs=epochs, hyperparameters={"momentum": 0.9}, seed=0) for lr in LRS]


# -- the plain side: a pool of 2 processes running the loop ------------------------------------

def _plain_trial(spec: Any) -> dict[str, Any]:
    import torch

    from hpsearch.trials.rank.context import RankContext
    from hpsearch.trials.rank.loop import train

    torch.set_num_threads(1)  # as hpsearch gives each rank its cpus_per_worker
    metrics = train(spec, RankContext(rank=0, world_size=1, device="cpu"))
    assert metrics is not None
    return {"base_lr": spec.base_lr, "val_accuracy": metrics["val_accuracy"], "runtime_s": metrics["runtime_s"]}


def plain_pool(epochs: int) -> list[dict[str, Any]]:
    """Run the 8 trials two at a time in a pool of fresh (spawned) processes."""
    with multiprocessing.get_context("spawn").Pool(CONCURRENCY) as pool:
        return pool.map(_plain_trial, specs(epochs), chunksize=1)


# -- the two commands ------------------------------------------------------------------------------

def _child_env() -> dict[str, str]:
    """This environment, with the repository root importable (``benchmarks.orchestration`` runs
    the plain side and the side measurements in child processes started in other folders)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path.cwd()), os.environ.get("PYTHONPATH")]))}


def _command(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    env = env or _child_env()
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return seconds


class Sides:
    """The two commands, each run in a fresh folder, keeping what the analysis needs."""

    def __init__(self, folder: Path, epochs: int) -> None:
        self.folder = folder
        self.epochs = epochs
        self.hpsearch_runs: list[tuple[float, float, str]] = []  # (command start, command end, store URL)
        self.joined_runs: list[tuple[float, float, str]] = []  # the same, joining a running Ray
        self.plain_results: list[list[dict[str, Any]]] = []
        hpsearch = Path(sys.executable).with_name("hpsearch")
        self.hpsearch_exe = str(hpsearch) if hpsearch.exists() else "hpsearch"

    def hpsearch(self) -> float:
        return self._hpsearch(f"hpsearch-{len(self.hpsearch_runs)}", [], self.hpsearch_runs)

    def hpsearch_joined(self) -> float:
        """``hpsearch start --address``, joining a local Ray head started before the command
        and stopped after it, neither timed."""
        import secrets

        ray_exe = str(Path(sys.executable).with_name("ray"))
        port = _free_port()
        # Ray's default token authentication, with a token of this run's own.
        env = {**_child_env(), "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
               "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        subprocess.run([ray_exe, "start", "--head", f"--port={port}", f"--num-cpus={CONCURRENCY}",
                        "--include-dashboard=false", "--disable-usage-stats"], check=True, capture_output=True, env=env)
        try:
            return self._hpsearch(f"joined-{len(self.joined_runs)}", ["--address", f"127.0.0.1:{port}"],
                                  self.joined_runs, env)
        finally:
            subprocess.run([ray_exe, "stop", "--force"], check=True, capture_output=True, env=env)

    def hpsearch_argv(self, name: str, extra: Sequence[str] = ()) -> tuple[list[str], Path]:
        """The ``hpsearch start`` command of a run in a new folder ``name``, and that folder."""
        run = self.folder / name
        run.mkdir()
        space = run / "space.yaml"
        space.write_text(SPACE.format(workload=WORKLOAD, epochs=self.epochs, batch=BATCH, n=N_TRIALS,
                                      concurrency=CONCURRENCY, lrs=", ".join(map(str, LRS))))
        return [self.hpsearch_exe, "start", str(space), "--storage", f"sqlite:///{run / 'study.db'}", *extra], run

    def plain_argv(self, name: str) -> tuple[list[str], Path]:
        """The plain pool's command of a run in a new folder ``name`` (its results go to
        ``results.json`` there), and that folder."""
        run = self.folder / name
        run.mkdir()
        return [sys.executable, "-m", "benchmarks.orchestration", "--plain", str(self.epochs),
                "--out", str(run / "results.json")], run

    def _hpsearch(self, name: str, extra: list[str], runs: list[tuple[float, float, str]],
                  env: dict[str, str] | None = None) -> float:
        argv, run = self.hpsearch_argv(name, extra)
        started = time.time()
        seconds = _command(argv, run, env)
        runs.append((started, started + seconds, f"sqlite:///{run / 'study.db'}"))
        return seconds

    def plain(self) -> float:
        argv, run = self.plain_argv(f"plain-{len(self.plain_results)}")
        seconds = _command(argv, run)
        self.plain_results.append(json.loads((run / "results.json").read_text()))
        return seconds


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- where the CPU goes ------------------------------------------------------------------------------

#: The owners a side's CPU time is split into, in the table's order.
OWNERS = ("rank processes (the training)", "the command's own process", "Tune's trial processes",
          "the reservation desk (a Ray actor of ours)", "Ray's own processes", "not sampled")


def owner(title: str | None) -> str:
    """Which of ``OWNERS`` a process of either side is, by its title (``None``: the command)."""
    if title is None:
        return OWNERS[1]
    if "hpsearch.trials.rank.process" in title or "multiprocessing.spawn" in title:
        return OWNERS[0]
    if title.startswith("ray::ImplicitFunc"):  # Tune's process for a function trainable
        return OWNERS[2]
    if title.startswith("ray::_ReservationsActor"):
        return OWNERS[3]
    return OWNERS[4]  # GCS, raylet, the dashboard and runtime-environment agents, monitors, idle workers


def cpu_accounts(sides: Sides) -> dict[str, dict[str, float]]:
    """One more run of ``hpsearch start`` and of the plain pool, each with its process tree's
    CPU time sampled by owner (apart from the timed repetitions, which run unobserved); returns
    ``{side: {owner: CPU seconds, "total": ..., "wall": ...}}``, and for ``hpsearch start`` also
    when its first trial's devices were reserved (``first_training``, seconds after the
    command started) and how many cores the machine kept busy until then (``startup_busy``)."""
    import hpsearch

    accounts = {}
    for side, argv, cwd in (("hpsearch start", *sides.hpsearch_argv("accounted-hpsearch")),
                            ("plain pool", *sides.plain_argv("accounted-plain"))):
        tree = ProcessTreeCPU(owner)
        began = time.time()
        wall, groups = tree.run(argv, cwd, _child_env())
        accounts[side] = {**groups, "wall": wall}
        if side == "hpsearch start":
            frame = hpsearch.load("bench-orchestration", storage=f"sqlite:///{cwd / 'study.db'}").trials_dataframe()
            first = float(frame["training_started"].astype(float).min()) - began
            accounts[side].update(first_training=first, startup_busy=tree.busy_cores(first))
    return accounts


# -- where the time goes ------------------------------------------------------------------------------

def study_timeline(started_at: float, ended_at: float, url: str) -> dict[str, Any]:
    """Phases of one ``hpsearch start`` from its study: start-up until the first trial was asked,
    per trial the time from being asked to being told beyond its rank's training time, and the
    end after the last trial was told."""
    import hpsearch

    frame = hpsearch.load("bench-orchestration", storage=url).trials_dataframe()
    starts = [t.timestamp() for t in frame["datetime_start"]]
    ends = [t.timestamp() for t in frame["datetime_complete"]]
    trial_wall = [e - s for s, e in zip(starts, ends)]
    return {
        "startup": min(starts) - started_at,
        "teardown": ended_at - max(ends),
        "trial_wall": median(trial_wall),
        "training": median(frame["runtime_s"].tolist()),
        "complete": float((frame["state"] == "COMPLETE").sum()),
        "accuracies": json.dumps(sorted(zip(frame["base_lr"].round(6), frame["val_accuracy"].round(6)))),
    }


def launch_overhead(epochs: int, repeat: int) -> dict[str, float]:
    """What a trial's rank process costs: one trial launched with ``run_trial`` (a warm rank process)
    vs the same loop called in process, both in a fresh interpreter, first and second call (a
    search's first trial in a trial process, and a later one: Tune reuses the process); and
    ``ray.init`` of a local Ray alone."""
    twice = ("import time, tempfile; from benchmarks.orchestration import specs, _plain_trial; "
             "from hpsearch.trials.launcher import run_trial; s = specs({e})[0]; times = []\n"
             "for _ in range(2):\n    t = time.perf_counter(); {call}; times.append(time.perf_counter() - t)\n"
             "print(*times)")
    code = {
        "in process": twice.replace("{call}", "_plain_trial(s)"),
        "run_trial": twice.replace("{call}", "run_trial(s, tempfile.mkdtemp())"),
        "ray.init": "import time, ray; t = time.perf_counter(); ray.init(num_cpus=2, include_dashboard=False, "
                    "log_to_driver=False); ray.shutdown(); print(time.perf_counter() - t)",
    }
    env = {**_child_env(), "RAY_USAGE_STATS_ENABLED": "0"}
    found: dict[str, list[list[float]]] = {name: [] for name in code}

    def in_child(name: str) -> float:
        out = subprocess.run([sys.executable, "-c", code[name].format(e=epochs)], capture_output=True, text=True,
                             env=env, check=True)
        found[name].append([float(x) for x in out.stdout.strip().splitlines()[-1].split()])
        return found[name][-1][0]

    interleaved({name: (lambda n=name: in_child(n)) for name in code}, repeat, log=False)

    def part(name: str, call: int) -> float:
        return median([times[call] for times in found[name]])

    return {
        "ray.init + shutdown": part("ray.init", 0),
        "first": part("run_trial", 0) - part("in process", 0),
        "later": part("run_trial", 1) - part("in process", 1),
    }


def cpu_report(accounts: dict[str, dict[str, float]]) -> tuple[str, str]:
    """The CPU table and what it says about the target: the CPU time either side spent, against
    what the machine's cores give in the target's time (both from the same pair of runs)."""
    ours, plain = accounts["hpsearch start"], accounts["plain pool"]
    rows = [[name, f"{ours.get(name, 0.0):.1f}", f"{plain.get(name, 0.0):.1f}"] for name in OWNERS]
    rows.append(["**all**", f"**{ours['total']:.1f}**", f"**{plain['total']:.1f}**"])
    rows.append(["wall time of this run", f"{ours['wall']:.1f} s", f"{plain['wall']:.1f} s"])
    table = md_table(["process", "`hpsearch start`, CPU-seconds", "plain pool, CPU-seconds"], rows)
    cores = os.cpu_count() or 1
    training, command, tune, desk, ray = (ours.get(name, 0.0) for name in OWNERS[:5])
    ray_tune = tune + ray
    service = ours["total"] - training  # everything but the training
    capacity = cores * TARGET * plain["wall"]  # the CPU-seconds the cores give in the target's time
    room = capacity - plain[OWNERS[0]]  # what that leaves beside the training, at the plain pool's cost
    extra = training - plain[OWNERS[0]]  # what the ranks lose to sharing the cores
    says = (
        f"Both sides keep the machine's {cores} cores busy (the plain pool {plain['total'] / cores / plain['wall']:.0%} "
        f"of its wall time, `hpsearch start` {ours['total'] / cores / ours['wall']:.0%}), so the wall time follows the "
        f"CPU time. In this pair of runs the plain pool took {plain['wall']:.1f} s; in {TARGET:.2f}x that the cores "
        f"give {capacity:.1f} CPU-seconds, of which its training took {plain[OWNERS[0]]:.1f}: {room:.1f} are left for "
        f"everything else. `hpsearch start` spent {service:.1f} beside its training: Ray's and Tune's own processes "
        f"{ray_tune:.1f}, the command's process {command:.1f} (the CLI, the searcher and the study's writes, Tune's "
        f"controller, the report), the reservation desk {desk:.1f}; and its ranks spent {extra:.1f} more than the same "
        f"training in the plain pool ({extra / plain[OWNERS[0]]:+.0%}: they share the cores, and their caches, with "
        f"those processes). Were every core busy from its first instruction to its last, it would take "
        f"{ours['total'] / cores:.1f} s, {ours['total'] / cores / plain['wall']:.2f}x the plain pool")
    if ray_tune > room:
        says += (f". Ray's and Tune's processes alone spend more than the {room:.1f} left: on {cores} cores the "
                 "target cannot be met by a search that runs its trials in Ray Tune, whatever hpsearch's own code "
                 "costs.")
    elif service + extra > room:
        left = room - ray_tune
        mine = command + desk + extra
        says += (f". Ray's and Tune's processes alone leave {left:.1f} of the {room:.1f} for the command's process "
                 f"(Tune's controller among it), the desk and what the ranks lose to sharing the cores, which together "
                 f"spend {mine:.1f}, {mine / left:.1f} times that." if left > 0 else ".")
    else:
        says += ": within the target."
    idle = (cores - ours["startup_busy"]) * ours["first_training"]
    says += (f" Until its first trial's devices were reserved, {ours['first_training']:.1f} s after it started, the "
             f"machine's cores were {ours['startup_busy']:.2f} of {cores} busy on average (Ray starting its processes, "
             "the rank processes importing torch and the workload, the CLI, Tune and its trial processes importing): "
             f"{idle:.1f} core-seconds idle in all, which is the most that starting the first trials sooner (before "
             f"Tune is up) could put to use, {idle / cores:.1f} s of wall time; the start-up waits for CPU more than "
             "for any one step.")
    return table, says


def calibrate_epochs(seconds: float) -> int:
    """Epochs for about ``seconds`` of training per trial on one core of this machine."""
    probe = 3
    out = subprocess.run([sys.executable, "-c", "from benchmarks.orchestration import _plain_trial, specs; "
                          f"print(_plain_trial(specs({probe})[0])['runtime_s'])"], capture_output=True, text=True,
                         check=True)
    per_epoch = float(out.stdout.strip().splitlines()[-1]) / probe
    return max(1, round(seconds / per_epoch))



def _later_cost(seconds: float) -> str:
    """What a later trial's rank process costs over the loop in process, in words: a small or
    negative difference is the measurement's noise, not a saving."""
    if seconds < 0.1:
        return f"costs no more than calling the loop in process ({seconds:+.2f} s, within the noise)"
    return f"costs {seconds:.2f} s more than calling the loop in process"


def run(quick: bool = False) -> str:
    trial_seconds, repeat = (2.0, 3) if quick else (10.0, 3)
    epochs = calibrate_epochs(trial_seconds)
    print(f"  {epochs} epochs per trial for about {trial_seconds:g} s of training", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        sides = Sides(Path(tmp), epochs)
        times = interleaved({"hpsearch start": sides.hpsearch, "plain pool": sides.plain,
                             "hpsearch start --address": sides.hpsearch_joined}, repeat)
        timelines = [study_timeline(*run) for run in sides.hpsearch_runs]
        joined_timelines = [study_timeline(*run) for run in sides.joined_runs]
        print("  CPU by owner: one more run of each side", flush=True)
        accounts = cpu_accounts(sides)
    parts = launch_overhead(epochs, repeat)

    ours, plain, joined = (median(times[k]) for k in ("hpsearch start", "plain pool", "hpsearch start --address"))
    ratio, joined_ratio = ours / plain, joined / plain
    rounds = N_TRIALS / CONCURRENCY
    startup = median([t["startup"] for t in timelines])
    teardown = median([t["teardown"] for t in timelines])
    trial_wall = median([t["trial_wall"] for t in timelines])
    training = median([t["training"] for t in timelines])
    plain_training = median([r["runtime_s"] for results in sides.plain_results for r in results])
    joined_startup = median([t["startup"] for t in joined_timelines])
    joined_teardown = median([t["teardown"] for t in joined_timelines])
    ray_fixed = parts["ray.init + shutdown"]
    same = all(t["complete"] == N_TRIALS for t in timelines + joined_timelines)
    plain_acc = sorted((round(r["base_lr"], 6), round(r["val_accuracy"], 6)) for r in sides.plain_results[0])
    identical = all(json.loads(t["accuracies"]) == [list(p) for p in plain_acc] for t in timelines + joined_timelines)

    table = md_table(["command", "wall time", "ratio"], [
        ["plain pool of 2 processes", f"{plain:.1f} s", "1.00x"],
        ["`hpsearch start`", f"{ours:.1f} s", f"{ratio:.2f}x"],
        ["`hpsearch start --address`, Ray already running", f"{joined:.1f} s", f"{joined_ratio:.2f}x"],
    ])
    profile = md_table(["part", "seconds", "how it was measured"], [
        ["start-up until the first trial is asked", f"{startup:.2f}",
         "command start to the first trial's `datetime_start` (CLI, workload check, study, `ray.init`, Tune)"],
        ["the same, joining a running Ray", f"{joined_startup:.2f}", "the `--address` side"],
        ["`ray.init` + shutdown of a local Ray", f"{ray_fixed:.2f}", "alone, in a fresh interpreter"],
        ["after the last trial is told", f"{teardown:.2f}",
         "the last `datetime_complete` to the command's end (Ray's shutdown, then the report)"],
        ["the same, joining a running Ray", f"{joined_teardown:.2f}", "the `--address` side"],
        ["training time in the rank", f"{training:.2f}", "the rank's `runtime_s`, median"],
        ["training time in the plain pool", f"{plain_training:.2f}", "the same loop's `runtime_s` there, median"],
        ["trial wall time in the study", f"{trial_wall:.2f}", "`datetime_complete - datetime_start`, median"],
        ["per trial, launch and bookkeeping", f"{trial_wall - training:.2f}",
         "trial wall time minus training time in the rank"],
        ["the rank process, a trial process's first trial", f"{parts['first']:.2f}",
         "`run_trial` minus the same loop in process, first call in a fresh interpreter"],
        ["the rank process, later trials", f"{parts['later']:.2f}",
         "the same, second call (Tune reuses the trial process)"],
    ])
    allowance = (TARGET - 1.0) * plain
    cpu_table, cpu_says = cpu_report(accounts)
    return f"""## 1. Orchestration: `hpsearch start` vs a plain process pool

`python -m benchmarks.orchestration`. {N_TRIALS} trials ({WORKLOAD}, per-device batch {BATCH}, one
rank each, {epochs} epochs: about {trial_seconds:g} s of training on one core), {CONCURRENCY} at a
time, as whole commands: `hpsearch start space.yaml` into a fresh SQLite study vs a script
mapping the same training loop (`hpsearch.trials.rank.loop.train`) over `multiprocessing.Pool(2)`;
and the same `hpsearch start` joining a Ray head that was started just before it and stopped
after it (`--address`, neither timed), as a search on a running cluster does.
Median of {repeat} interleaved repetitions. Every side trained the same models:
{"identical validation accuracies per configuration" if identical else "**the accuracies differ** (see the raw numbers)"};
{"every hpsearch trial COMPLETE" if same else "**not every hpsearch trial completed**"}.

{table}

Verdict: {verdict(ratio, TARGET)}.

Where the time goes (medians):

{profile}

Where the CPU goes: one more run of each side, apart from the timed ones, with every process
under the command sampled for its CPU time (user + system) and named by its title
(`benchmarks.common.ProcessTreeCPU`; "not sampled" is what the kernel counted for the tree
beyond the samples):

{cpu_table}

{cpu_says}

What it says: `hpsearch start` took {ours - plain:.1f} s more than the plain pool. The target
allows {allowance:.1f} s on this plain pool; a local `ray.init` with its shutdown alone takes
{ray_fixed:.1f} s here, before a first trial process is started. Joining a Ray that already runs
(`--address`: {joined_ratio:.2f}x, its repetitions {min(times["hpsearch start --address"]):.1f}-{max(times["hpsearch start --address"]):.1f} s) takes Ray's start and stop
away, {joined_startup:.1f} s before the first trial is asked instead of {startup:.1f} s and
{joined_teardown:.1f} s after the last one is told instead of {teardown:.1f} s, but not the cost: on a
cluster each node's warm rank processes are started by a Ray actor once the search has joined,
so the first trials wait for them, and a trial looks at its ranks through Ray calls, where a
local search's trials use a socket to the search process. What is left either way:

- Before the first trial trains: after it is asked, Tune starts its trial process (a Ray worker
  with Tune's runtime environment, which Ray does not take from its prestarted workers: about a
  second alone, two on a loaded machine) and the process reserves the trial's CPUs. Ray's and
  Tune's. Ours before the first ask: the CLI's imports, the workload check (it builds the workload
  once, so that a bad one fails before anything is written; in a warm rank process, so the
  search's own process never imports torch) and the study.
- Training: the rank trains {training:.2f} s (median) against {plain_training:.2f} s in the plain
  pool{f", {training / plain_training - 1:.0%} longer" if training > plain_training else ""}. The ranks share the two cores with the
  search process, which takes the trials' reports from Tune and writes every evaluation to the
  study, the trial processes, which pass the reports from the ranks to Tune, and Ray's own
  processes; a plain pool reports nothing.
- Per trial, the study's wall time exceeds the rank's training time by {trial_wall - training:.2f} s (the
  searcher's asks and tells, the reservation, the rank's start); a later trial's rank process
  {_later_cost(parts['later'])}.
- After the last trial: Ray shuts down (0.35 s, since the search stops Ray's autoscaler monitor
  first: stopped after the head processes it reports to, the monitor outlived them until Ray
  killed it a second later, 1.1-1.35 s), the rank processes are stopped, and the report is
  written (the trial table, the frontier file, the recommendation, with their imports: plotly,
  SciPy).

On trials this short the ratio is mostly these fixed costs over {rounds:g} rounds of training: it
falls as trials get longer or more numerous.

What made the per-trial cost small, measured with this benchmark and with
`benchmarks/search_span.py`: a trial's ranks run in warm rank processes of the node
(`hpsearch.trials.node.pool`), which imported torch, the training loop, the workload's module and
what an optimizer's first construction imports (`torch._dynamo`, about 1 s) when the search
started, and serve the ranks of trials of every shape; every trial asks Tune for the same
resources (and reserves its devices itself), so Tune reuses a finished trial's process for the
next one. Before, each trial started a Ray worker process, then a rank process that imported all
of that again: 6-17 s of overhead per trial on a loaded 2-core machine; then ranks were forked
from a fork server of the trial process, which a new trial shape had to start again (about 8 s:
the quickstart's mixed grid ran at 5x its ideal). Then (1.47x) a local CPU search started its
warm processes itself, before `ray.init`, serving them to its trials over a local socket; a
finished trial's devices passed to the next trial without going back to Ray; Ray Tune was
imported while Ray starts (1.22x). Then the fixed cost at both ends shrank (before the first
ask from 10.0 s to 6.8-7.8 s, after the last tell from 3.5 s to 1.7 s, in three runs of this
benchmark): the digits data is read from
scikit-learn's bundled file without importing scikit-learn (2.5 s of imports, with SciPy's
statistics and pandas, in every rank process and in the search's workload check, all while Ray
starts), Ray shut down while the report was written, and the command's process ends without the
interpreter's last garbage collection over torch, Ray and Optuna (1.3 s). Then, with the CPU
accounting above showing where the CPU goes: a trial's process is woken by its rank 0's
reports instead of polling its ranks ten times a second; a trial of a search without a
scheduler passes its reports to Tune at most once a second, the evaluations between riding
along (these trials evaluate about seven times a second; taking every intermediate report
away saved about 2 CPU-seconds over the 8 trials); a local search checks its workload in a
warm rank process, so that its own process never imports torch (about 1.2 CPU-seconds while Ray
starts); the progress line redraws twice a second, not ten times; and Ray's autoscaler monitor
is stopped first at the end, which makes Ray's shutdown short enough to run before the report
again rather than beside it (beside it, a resumed search sometimes died in Ray's teardown).
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="trials of about 2 s instead of 10 s")
    parser.add_argument("--plain", type=int, metavar="EPOCHS", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain is not None:  # the plain side, as its own command
        results = plain_pool(args.plain)
        args.out.write_text(json.dumps(results))
        return
    print(run(args.quick))


if __name__ == "__main__":
    main()
