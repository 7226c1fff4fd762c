"""Search span: the quickstart as a user runs it (mixed world sizes), against the ideal.

Each case is ``hpsearch start`` as a whole command in a fresh folder, on the quickstart's grid
(48 trials: b in {8, 32, 128, 256} x W in {1, 2} x three LR rules x two base LRs, 10 epochs of digits):

- *mixed*: the quickstart as shipped;
- *W=1 only* and *W=2 only*: its two one-shape halves (24 trials each), the controlled cases;
- *mixed, fresh ranks*: as shipped with ``resources.reuse_workers: false``, every rank in a new
  process (what reuse saves).

From each study: the span from the first trial asked to the last told, over the ideal (the
trials' device-seconds over the machine's cores: a perfect scheduler with free launches); per
trial, the overhead (told minus devices reserved minus the rank's training time: starting the
ranks, the reports, the searcher's bookkeeping) and the wait for devices (reserved minus asked);
and the fixed costs before the first ask and after the last tell.

    python -m benchmarks.search_span            # the four cases and the quickstart as of BASELINE (about 8 minutes)
    python -m benchmarks.search_span --quick    # 2 epochs per trial
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import md_table, median, revision_tree, verdict

#: The revision before this round's GPU and orchestrator work, measured beside this tree.
BASELINE = "5e594f5"
BEFORE = f"mixed, as of commit {BASELINE}"
SPAN_TARGET = 1.5
OVERHEAD_TARGET = 0.5
QUICKSTART = Path(__file__).resolve().parents[1] / "search_spaces" / "examples" / "quickstart.yaml"

CASES = {
    "mixed (the quickstart)": {},
    "W=1 only": {"world_size: {choices: [1, 2]}": "world_size: 1", "n_trials: 48": "n_trials: 24"},
    "W=2 only": {"world_size: {choices: [1, 2]}": "world_size: 2", "n_trials: 48": "n_trials: 24"},
    "mixed, fresh ranks (reuse_workers: false)": {"cpus_per_worker: 1": "cpus_per_worker: 1\n  reuse_workers: false"},
}


def space_text(edits: dict[str, str], epochs: int | None) -> str:
    text = QUICKSTART.read_text()
    if epochs is not None:
        edits = {**edits, "epochs: 10": f"epochs: {epochs}"}
    for old, new in edits.items():
        if old not in text:
            raise SystemExit(f"the quickstart no longer has {old!r}: update benchmarks/search_span.py")
        text = text.replace(old, new)
    return text


def run_case(folder: Path, text: str, path: list[str] | None = None) -> dict[str, Any]:
    """Run one ``hpsearch start`` (of the tree on ``path``, default this one) and read its
    study's timeline."""
    import hpsearch

    folder.mkdir()
    (folder / "space.yaml").write_text(text)
    env = {**os.environ, **({"PYTHONPATH": os.pathsep.join(path)} if path else {})}
    began = time.time()
    done = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                          cwd=folder, capture_output=True, text=True, env=env)
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"hpsearch start failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    frame = hpsearch.load("digits-quickstart", storage=f"sqlite:///{folder / 'hpsearch.db'}").trials_dataframe()
    asked = [t.timestamp() for t in frame["datetime_start"]]
    told = [t.timestamp() for t in frame["datetime_complete"]]
    reserved = [float(t) for t in frame["training_started"]]
    runtime = frame["runtime_s"].astype(float).tolist()
    span = max(told) - min(asked)
    ideal = float(frame["device_seconds"].sum()) / (os.cpu_count() or 1)
    outcome = {tuple(sorted((k, str(frame.at[i, k])) for k in ("lr_rule", "per_device_batch_size", "world_size"))):
               (frame.at[i, "val_accuracy"], frame.at[i, "val_loss"]) for i in frame.index}
    return {
        "outcome": outcome,
        "trials": len(frame),
        "complete": int((frame["state"] == "COMPLETE").sum()),
        "command": ended - began,
        "span": span,
        "ideal": ideal,
        "ratio": span / ideal,
        "overhead": median([t - r - rt for t, r, rt in zip(told, reserved, runtime)]),
        "overhead_max": max(t - r - rt for t, r, rt in zip(told, reserved, runtime)),
        "wait": median([r - a for a, r in zip(asked, reserved)]),
        "first_trial": min(reserved) - min(asked),
        "startup": min(asked) - began,
        "teardown": ended - max(told),
    }


def _against_before(results: dict[str, dict[str, Any]]) -> str:
    """The quickstart as shipped against the earlier revision's: its span, and whether every
    trial measured the same (same seeds, so the same numbers: the engine's changes must not move
    a result)."""
    before = results.get(BEFORE)
    if before is None:
        return "\n(The earlier revision is not in this clone's history: no before/after row.)\n"
    mixed = results["mixed (the quickstart)"]
    same = mixed["outcome"] == before["outcome"]
    differ = sum(mixed["outcome"].get(k) != v for k, v in before["outcome"].items())
    return (f"\nAgainst commit {BASELINE} (the row above it, run first): span/ideal {before['ratio']:.2f}x -> "
            f"{mixed['ratio']:.2f}x, overhead per trial {before['overhead']:.2f} s -> {mixed['overhead']:.2f} s; "
            + ("every trial's validation accuracy and loss are identical.\n" if same else
               f"**{differ} of {len(before['outcome'])} trials measured differently.**\n"))


def _met(seconds: float, target: float) -> str:
    return f"**{'met' if seconds <= target else 'missed'}** ({seconds:.2f} s, target {target:.2f} s or better)"


def run(quick: bool = False, baseline: str | None = BASELINE) -> str:
    epochs = 2 if quick else None
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp, revision_tree(baseline, Path(tmp)) as before:
        if before is not None:
            # Today's figure first, then ours, in one run (the same machine state): the quickstart
            # as shipped on the earlier revision.
            print(f"  {BEFORE}", flush=True)
            results[BEFORE] = run_case(Path(tmp) / "before", space_text({}, epochs), before)
        for i, (name, edits) in enumerate(CASES.items()):
            print(f"  {name}", flush=True)
            results[name] = run_case(Path(tmp) / f"case-{i}", space_text(edits, epochs))
    mixed = results["mixed (the quickstart)"]
    fresh = results["mixed, fresh ranks (reuse_workers: false)"]
    rows = [[name, f"{r['complete']}/{r['trials']}", f"{r['span']:.1f} s", f"{r['ideal']:.1f} s", f"{r['ratio']:.2f}x",
             f"{r['overhead']:.2f} s (max {r['overhead_max']:.2f})", f"{r['wait']:.2f} s",
             f"{r['startup']:.1f} + {r['first_trial']:.1f} s", f"{r['teardown']:.1f} s", f"{r['command']:.1f} s"]
            for name, r in results.items()]
    table = md_table(["grid", "complete", "span", "ideal", "span / ideal", "overhead per trial (median)",
                      "wait for devices (median)", "start-up + first trial's devices", "after the last",
                      "whole command"], rows)
    return f"""## 9. Search span: the quickstart as users run it, mixed world sizes

`python -m benchmarks.search_span`. `hpsearch start` on the quickstart's grid{" (2 epochs per trial)" if quick else ""}, as a
whole command in a fresh folder, one run per case: as shipped (W in {{1, 2}}), its two
one-shape halves, and as shipped with every rank in a fresh process (`reuse_workers: false`).
The span runs from the first trial asked to the last told; the ideal is the trials'
device-seconds over the machine's {os.cpu_count()} cores. Overhead per trial: told minus devices
reserved minus the rank's training time. Wait: devices reserved minus asked.

{table}

Verdict: span {verdict(mixed['ratio'], SPAN_TARGET)}; overhead per trial {_met(mixed['overhead'], OVERHEAD_TARGET)}.
{_against_before(results)}
What it says: with warm rank processes the mixed grid costs what its one-shape halves cost,
{mixed['ratio']:.2f}x its ideal against {fresh['ratio']:.2f}x with a fresh process per rank. What
remains of the span: the trials of one world size queue for their devices (the median wait; the
grid runs its largest trials first, so a core sits idle only where W=2 gives way to W=1), the
last trials leave a core idle while the longest one finishes, and the first trial waits for Ray
to start its process. Per trial, launching the ranks and the bookkeeping cost
{mixed['overhead']:.2f} s. Fixed costs: {mixed['startup']:.1f} s before the first trial is asked
(the CLI, the workload check, `ray.init`, the study, Tune, with the warm rank processes importing
torch and the workload meanwhile: the search's process starts them before Ray; Ray's share is
measured in section 1), {mixed['first_trial']:.1f} s more until its devices are reserved (the first
Tune trial process and the reservation desk starting in Ray), and {mixed['teardown']:.1f} s after the last trial
(Ray's shut-down, with the summary, the frontier file and the recommendation written meanwhile).
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 epochs per trial instead of 10")
    parser.add_argument("--baseline", default=BASELINE, help=f"the revision measured beside this tree (default "
                                                               f"{BASELINE}); 'none' for this tree only")
    args = parser.parse_args()
    print(run(args.quick, None if args.baseline.lower() == "none" else args.baseline))


if __name__ == "__main__":
    main()
