"""MLflow tracking: the quickstart logged to a tracking server as it runs, against not logged.

Both sides run the quickstart (``search_spaces/examples/quickstart.yaml``, 48 trials) as a whole
command, ``hpsearch start SPACE --study NAME --storage sqlite:///... --no-progress --json`` in a
fresh folder; the tracked side adds ``--mlflow URI``, logging to a real ``mlflow server`` (SQLite
backend, local artifacts, one worker) that this benchmark starts before the timed runs, in a
process group of its own, and stops after them, neither timed. Every run has a study (and so,
tracked, an experiment) of its own. The sides are interleaved; the figure is the ratio of the
medians of the whole command's wall time, tracked over untracked. A tracked run counts only when
its JSON summary says MLflow took it all (``mlflow.runs`` 24, ``mlflow.error`` null).

From each study: the span from the first trial asked to the last told (tracked, the logging
thread sends each running trial's evaluations every 5 s, one call a trial, and each trial's start
and end), the time
before it (the CLI, Ray, the study) and after it (Ray's shut-down, the summary, the
recommendation, the frontier page; tracked, also the last sync, the parent run's end and its
self-contained frontier page uploaded); and, tracked, the CPU seconds the tracking server spent
on the run (on a 2-core machine it shares the cores with the trials).

    python -m benchmarks.tracking            # the quickstart as shipped, 5 repetitions a side (about 8 minutes)
    python -m benchmarks.tracking --quick    # 2 epochs per trial, 2 repetitions
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import interleaved, md_table, median, run_alone, verdict
from hpsearch.testing import MlflowServer

TARGET = 1.05
REPEAT = 5
N_TRIALS = 24
QUICKSTART = Path(__file__).resolve().parents[1] / "search_spaces" / "examples" / "quickstart.yaml"
UNTRACKED = "untracked"
TRACKED = "tracked (--mlflow)"


#: The server runs on the trials' own cores here (a team's runs elsewhere): its background job
#: runner, which tracking does not use, is off, so that its idle CPU is not counted as logging's.
SERVER_ENV = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def _executable(name: str) -> str | None:
    """The console script ``name`` of this interpreter's environment, else the one on ``PATH``."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else shutil.which(name)


def _cpu_seconds(server: MlflowServer) -> float:
    """CPU seconds (user + system) the server's processes have spent so far."""
    import psutil

    if server.process is None:
        return 0.0
    total = 0.0
    try:
        root = psutil.Process(server.process.pid)
        for p in (root, *root.children(recursive=True)):
            try:
                times = p.cpu_times()
                total += times.user + times.system
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
    except psutil.NoSuchProcess:
        pass
    return total


def space_path(folder: Path, epochs: int | None) -> Path:
    """The quickstart as shipped, or a copy of it at ``epochs`` epochs per trial."""
    if epochs is None:
        return QUICKSTART
    text = QUICKSTART.read_text()
    if "epochs: 10" not in text:
        raise SystemExit("the quickstart no longer has 'epochs: 10': update benchmarks/tracking.py")
    path = folder / "quickstart.yaml"
    path.write_text(text.replace("epochs: 10", f"epochs: {epochs}"))
    return path


class Sides:
    """The two commands, each run in a fresh folder with a study of its own, keeping what each
    run's study and summary say."""

    def __init__(self, folder: Path, space: Path, server: MlflowServer) -> None:
        self.folder = folder
        self.space = space
        self.server = server
        self.hpsearch_exe = _executable("hpsearch") or "hpsearch"
        self.runs: dict[str, list[dict[str, Any]]] = {UNTRACKED: [], TRACKED: []}
        # Neither side may pick a tracking URI up from this environment.
        self.env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}

    def untracked(self) -> float:
        return self._run(UNTRACKED, [])

    def tracked(self) -> float:
        return self._run(TRACKED, ["--mlflow", self.server.uri])

    def _run(self, side: str, extra: list[str]) -> float:
        n = sum(len(r) for r in self.runs.values())
        study = f"bench-tracking-{n}-{'tracked' if extra else 'untracked'}"
        run = self.folder / study
        run.mkdir()
        storage = f"sqlite:///{run / 'study.db'}"
        argv = [self.hpsearch_exe, "start", str(self.space), "--study", study, "--storage", storage,
                "--no-progress", "--json", *extra]
        server_cpu = _cpu_seconds(self.server)
        began = time.time()
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=run, env=self.env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        server_cpu = _cpu_seconds(self.server) - server_cpu
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n"
                             f"{done.stderr[-4000:]}")
        summary = _summary(done.stdout)
        if extra:
            logged = summary.get("mlflow") or {}
            if logged.get("runs") != N_TRIALS or logged.get("error") is not None:
                raise SystemExit(f"the tracked run did not log its {N_TRIALS} trials to MLflow: {logged}\n"
                                 f"{done.stderr[-3000:]}")
        self.runs[side].append({"command": seconds, "server_cpu": server_cpu if extra else None,
                                "mlflow": summary.get("mlflow"), **_timeline(study, storage, began, seconds)})
        return seconds


def _summary(stdout: str) -> dict[str, Any]:
    """The ``--json`` summary: the last line of the output that is a JSON object."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            summary: dict[str, Any] = json.loads(line)
            return summary
    raise SystemExit(f"no JSON summary in the output:\n{stdout[-2000:]}")


def _timeline(study: str, storage: str, began: float, seconds: float) -> dict[str, Any]:
    """From the study: its trials by state, the span from the first trial asked to the last
    told, and the command's time before and after it."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
    asked = min(t.datetime_start.timestamp() for t in trials if t.datetime_start is not None)
    told = max(t.datetime_complete.timestamp() for t in trials if t.datetime_complete is not None)
    return {"trials": len(trials), "complete": sum(t.state.name == "COMPLETE" for t in trials),
            "span": told - asked, "before": asked - began, "after": began + seconds - told}


def _not_measured(why: str) -> str:
    return f"""## 15. MLflow tracking: the quickstart logged to a tracking server as it runs

`python -m benchmarks.tracking`: not measured here ({why}).

Verdict: not measured ({why}).
"""


def run(quick: bool = False) -> str:
    if MlflowServer.executable() is None:
        return _not_measured("MLflow is not installed: pip install 'hpsearch[mlflow]'")
    repeat = 2 if quick else REPEAT
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-tracking-") as tmp:
        server = MlflowServer(Path(tmp) / "mlflow", env=SERVER_ENV)
        print(f"  starting mlflow server at {server.uri}", flush=True)
        server.start()
        try:
            sides = Sides(Path(tmp), space_path(Path(tmp), 2 if quick else None), server)
            times = interleaved({UNTRACKED: sides.untracked, TRACKED: sides.tracked}, repeat)
        finally:
            server.stop()
    minutes = (time.perf_counter() - began) / 60
    plain, logged = median(times[UNTRACKED]), median(times[TRACKED])
    ratio = logged / plain

    def med(side: str, key: str) -> float:
        return median([r[key] for r in sides.runs[side]])

    rows = []
    for side in (UNTRACKED, TRACKED):
        runs = sides.runs[side]
        cpu = f"{med(side, 'server_cpu'):.1f} s" if side == TRACKED else "-"
        rows.append([side, f"{med(side, 'command'):.1f} s", ", ".join(f"{r['command']:.1f}" for r in runs),
                     f"{med(side, 'span'):.1f} s", f"{med(side, 'before'):.1f} s", f"{med(side, 'after'):.1f} s",
                     f"{min(r['complete'] for r in runs)}/{N_TRIALS}", cpu])
    rows.append(["tracked / untracked", f"**{ratio:.2f}x**", "", f"{med(TRACKED, 'span') / med(UNTRACKED, 'span'):.2f}x",
                 f"{med(TRACKED, 'before') - med(UNTRACKED, 'before'):+.1f} s",
                 f"{med(TRACKED, 'after') - med(UNTRACKED, 'after'):+.1f} s", "", ""])
    table = md_table(["side", "whole command (median)", "each repetition", "span (median)", "before the first trial",
                      "after the last trial", "trials complete (fewest)", "tracking server's CPU (median)"], rows)
    extra = logged - plain
    shares = {"before the first trial": med(TRACKED, "before") - med(UNTRACKED, "before"),
              "the span": med(TRACKED, "span") - med(UNTRACKED, "span"),
              "after the last trial": med(TRACKED, "after") - med(UNTRACKED, "after")}
    return f"""## 15. MLflow tracking: the quickstart logged to a tracking server as it runs

`python -m benchmarks.tracking`. The quickstart (48 trials{", 2 epochs per trial" if quick else ""}) as a whole
`hpsearch start SPACE --study NAME --storage sqlite:///... --no-progress --json` in a fresh folder, with and
without `--mlflow URI`: the tracked side logs to a real `mlflow server` (SQLite backend, local
artifacts, `--workers 1`, its background job runner off: tracking does not use it) on the same
cores as the trials, started before the timed runs and stopped after them, a new experiment per
run. Interleaved, {repeat} repetitions a side ({minutes:.1f} minutes in all); the medians. Every
tracked run's JSON summary said `mlflow.runs` {N_TRIALS}, `mlflow.error` null. Span: the study's
first trial asked to its last told; before and after: the rest of the command. The server's CPU:
its processes' CPU seconds during the run (it shares the machine's {os.cpu_count()} cores with the trials).

{table}

Verdict: whole command, tracked over untracked, {verdict(ratio, TARGET)}.

What it says: {_cost(extra, plain, times)}
Tracked minus untracked: before the first trial {shares['before the first trial']:+.1f} s; the span
{shares['the span']:+.1f} s (the logging thread's requests, a trial's evaluations together every
5 s, and the server answering them, on the trials' cores); after the last trial {shares['after the last trial']:+.1f} s
(the evaluations held sent, the last sync, the recommendation for the parent run, its
self-contained frontier page drawn and uploaded, the run ended).
"""


def _cost(extra: float, plain: float, times: dict[str, list[float]]) -> str:
    """The tracked side's extra seconds, against the spread of the untracked repetitions."""
    spread = max(times[UNTRACKED]) - min(times[UNTRACKED])
    if extra <= 0:
        return (f"the tracked command was no slower ({extra:+.1f} s on {plain:.1f} s; the untracked "
                f"repetitions alone spread over {spread:.1f} s).")
    return (f"logging the search to MLflow costs {extra:.1f} s on a {plain:.1f} s command "
            f"({extra / plain:.1%}; the untracked repetitions alone spread over {spread:.1f} s).")


if __name__ == "__main__":
    run_alone(run, __doc__, "2 epochs per trial, 2 repetitions")
