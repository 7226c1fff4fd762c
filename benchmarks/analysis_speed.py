"""The analysis of a large study: ``hpsearch recommend`` on 10,000 trials answers in under 1 s.

A synthetic study (``hpsearch.testing``: the records a real search writes, drawn from known laws,
curves evaluated twice an epoch) is written to SQLite; then, interleaved, the medians of:

- reading its trials table (``Search.trials_dataframe()``: what any look at the study pays);
- the whole analysis and answer (``Search.recommend(8)``: the table, every trial's curves, the
  time-to-target of each trial, the fits with their bootstrap intervals, the recommendation).

The figure is the answer's wall time, and its ratio to reading the table.

Run it from the repository root::

    python -m benchmarks.analysis_speed           # 10,000 trials (about a minute)
    python -m benchmarks.analysis_speed --quick   # 2,000 trials
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import interleaved, md_table, median, run_alone

__all__ = ["run"]

#: The goal: the answer for a 10,000-trial study, in seconds.
GOAL_S = 1.0

_WRITE = """
from hpsearch.testing import SyntheticTruth, synthetic_study
synthetic_study({url!r}, "big", n_trials={n_trials}, seed=1, truth=SyntheticTruth(evals_per_epoch=2))
"""


def run(quick: bool = False) -> str:
    import hpsearch

    n_trials = 2000 if quick else 10_000
    with tempfile.TemporaryDirectory() as work:
        url = f"sqlite:///{Path(work) / 'big.db'}"
        # Written by another process, as a search would have: the 10,000 trials this one built
        # would otherwise sit in its memory and slow every garbage collection of the figures.
        subprocess.run([sys.executable, "-c", _WRITE.format(url=url, n_trials=n_trials)], check=True)
        search = hpsearch.load("big", storage=url)
        search.recommend(8)  # imports (numpy, scipy) and the first connection, outside the figures

        def table() -> float:
            start = time.perf_counter()
            hpsearch.load("big", storage=url).trials_dataframe()
            return time.perf_counter() - start

        def answer() -> float:
            start = time.perf_counter()
            hpsearch.load("big", storage=url).recommend(8)
            return time.perf_counter() - start

        times = interleaved({"table": table, "answer": answer}, repeat=3 if quick else 5)
        result = hpsearch.load("big", storage=url).recommend(8)
    ours, base = median(times["answer"]), median(times["table"])
    met = ours <= GOAL_S
    return "\n".join([
        f"## 8. The analysis of a {n_trials:,}-trial study",
        "",
        f"A synthetic study of {n_trials:,} trials in SQLite (`hpsearch.testing`, two evaluations an epoch); "
        "the medians of interleaved repetitions (`benchmarks/analysis_speed.py`).",
        "",
        md_table(["what", "median", "ratio to reading the table"], [
            ["read the trials table (`trials_dataframe`)", f"{base:.3f} s", "1.00x"],
            ["analyse and answer (`recommend(8)`)", f"{ours:.3f} s", f"{ours / base:.2f}x"],
        ]),
        "",
        f"The answer: b {result.per_device_batch_size} x W {result.world_size} x A {result.grad_accum_steps}, "
        f"{result.time_s:.3g} s to {result.target} ({result.basis}).",
        "",
        f"Verdict: **{'met' if met else 'missed'}** ({ours:.2f} s, goal under {GOAL_S:.0f} s for "
        f"{n_trials:,} trials)",
    ])


if __name__ == "__main__":
    run_alone(run, __doc__ or "", "2,000 trials")
