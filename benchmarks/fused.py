"""Fused trials: configurations of one shape trained as one vectorized model, against each alone.

``search.fuse`` trains the configurations that share a shape (everything but ``base_lr``,
``lr_rule``, warmup, ``momentum``, ``nesterov`` and ``weight_decay``) as one model vectorized
over its members; each member stays a trial of its own. Every case is ``hpsearch start`` as a
whole command in a fresh folder, the cases interleaved, the median of the repetitions:

A. **The digits grids, fused or not.** ``digits_cnn`` and, apart, ``digits_mlp``: b in {8, 32} x
   three LR rules x four base LRs (24 trials, two shapes of 12), world size 1, 3 epochs, run with
   ``fuse: false`` and ``fuse: true``. The span of each study (its first trial asked to its last
   told), fused over solo; each fused member against its solo twin (the same parameters in the
   ``fuse: false`` study): their validation accuracy and loss, and the member's ``runtime_s`` (what
   it would take alone, estimated from solo steps timed in its group) against the twin's measured
   one; the study's device-seconds. For scale, the same grids once more with ``fuse: false`` and two
   threads a trial: how far the unfused trials' own results move when only the order of the
   floating-point sums changes.
B. **``auto`` against ``false``** where fusing may not pay: the quickstart as shipped on the CPU
   (48 trials, 8 shapes of 6, world sizes 1 and 2), and a CNN grid at b 128 (12 trials of one
   shape, 2 epochs), where a step is large enough that fusing is expected to lose on the CPU and
   ``auto`` should decline after timing its first steps. Spans, and how many trials trained fused.

    python -m benchmarks.fused            # 3 repetitions of A, 2 of B: about 7 min on 2 idle cores
    python -m benchmarks.fused --quick    # 1 repetition, smaller grids, fewer epochs
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import interleaved, md_table, median, run_alone

__all__ = ["run"]

#: Span fused / solo on the digits grids: the goal, and where it should land.
SPAN_GOAL = 0.7
SPAN_TARGET = 0.4
#: A fused member against its solo twin: |val_accuracy difference|, |val_loss relative difference|.
ACCURACY_GOAL = 0.02
LOSS_GOAL = 0.02
#: The solo-runtime estimate: the median |member runtime_s / twin runtime_s - 1|.
ESTIMATE_GOAL = 0.25
#: ``auto`` against ``false``: never more than this slower on any grid (and the quickstart faster).
AUTO_GOAL = 1.05
QUICKSTART = Path(__file__).resolve().parents[1] / "search_spaces" / "examples" / "quickstart.yaml"

#: Every configuration trains (``skip_duplicates: false``): at b 8 = B0 the three rules give one LR,
#: and the b 8 group is 12 members, each against a solo twin, as in the runs this compares with.
GRID = """\
study: {study}
workload: {{name: {workload}, epochs: {epochs}}}
scaling: {{base_batch_size: 8}}
parameters:
  per_device_batch_size: {{choices: [{batches}]}}
  world_size: 1
  lr_rule: {{choices: [constant, linear, sqrt]}}
  base_lr: {{choices: [{lrs}]}}
  momentum: 0.9
objectives:
  - {{metric: val_accuracy, direction: maximize}}
  - {{metric: runtime_s, direction: minimize}}
search: {{sampler: grid, n_trials: {n}, seed: 0, fuse: {fuse}}}
constraints: {{skip_duplicates: false}}
resources: {{device: cpu, cpus_per_worker: {threads}}}
"""


@dataclass(frozen=True)
class Grid:
    """One grid of the benchmark: its name in the tables and its space file, given ``fuse``."""

    name: str
    label: str  # short, for the verdict lines
    study: str
    text: Callable[[str], str]


def digits_grid(workload: str, batches: tuple[int, ...], lrs: tuple[float, ...], epochs: int,
                threads: int = 1) -> Grid:
    """A digits grid of b x the three rules x base LRs, world size 1, ``threads`` CPU threads a
    trial (``cpus_per_worker``)."""
    n = len(batches) * 3 * len(lrs)
    name = f"{workload}, b {{{', '.join(map(str, batches))}}} ({n} trials, {epochs} epoch{'s' if epochs > 1 else ''})"
    if threads != 1:
        name += f", {threads} threads a trial"
    study = f"fused-{workload}-b{'-'.join(map(str, batches))}"

    def text(fuse: str) -> str:
        return GRID.format(study=study, workload=workload, epochs=epochs, batches=", ".join(map(str, batches)),
                           lrs=", ".join(map(str, lrs)), n=n, fuse=fuse, threads=threads)

    return Grid(name, workload if len(batches) > 1 else f"{workload} at b {batches[0]}", study, text)


def quickstart_grid(epochs: int | None) -> Grid:
    """The quickstart as shipped, on the CPU (``epochs``: fewer than its 10, for a smoke run)."""
    edits = {"device: auto": "device: cpu", "  seed: 0\n": "  seed: 0\n  fuse: {fuse}\n"}
    if epochs is not None:
        edits["epochs: 10"] = f"epochs: {epochs}"
    shipped = QUICKSTART.read_text()
    for old in edits:
        if old not in shipped:
            raise SystemExit(f"the quickstart no longer has {old!r}: update benchmarks/fused.py")

    def text(fuse: str) -> str:
        edited = shipped
        for old, new in edits.items():
            edited = edited.replace(old, new.format(fuse=fuse))
        return edited

    return Grid(f"the quickstart (48 trials{f', {epochs} epochs' if epochs else ''})", "the quickstart",
                "digits-quickstart", text)


@dataclass(frozen=True)
class Study:
    """What one ``hpsearch start`` left in its study."""

    span: float
    trials: list[dict[str, Any]]

    @property
    def complete(self) -> list[dict[str, Any]]:
        return [t for t in self.trials if t["state"] == "COMPLETE"]

    def device_seconds(self) -> float:
        return sum(float(t["attrs"].get("device_seconds") or 0.0) for t in self.trials)

    def fused(self) -> list[dict[str, Any]]:
        return [t for t in self.trials if t["attrs"].get("fuse") == "on"]


def run_study(folder: Path, grid: Grid, fuse: str) -> Study:
    """``hpsearch start`` on ``grid`` with ``search.fuse: fuse`` in the fresh ``folder``; its
    study read back with Optuna."""
    import optuna

    folder.mkdir(parents=True)
    (folder / "space.yaml").write_text(grid.text(fuse))
    done = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                          cwd=folder, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"hpsearch start ({grid.name}, fuse {fuse}) failed ({done.returncode}):\n"
                         f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    frozen = optuna.load_study(study_name=grid.study, storage=f"sqlite:///{folder / 'hpsearch.db'}").get_trials()
    began = [t.datetime_start.timestamp() for t in frozen if t.datetime_start is not None]
    ended = [t.datetime_complete.timestamp() for t in frozen if t.datetime_complete is not None]
    trials = [{"params": tuple(sorted(t.params.items())), "state": t.state.name, "attrs": dict(t.user_attrs)}
              for t in frozen]
    return Study(max(ended) - min(began), trials)


class Cases:
    """The grids, each with ``fuse`` set two ways, every run in a fresh folder; each call runs
    one and returns its span, keeping its study."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.studies: dict[tuple[str, str], list[Study]] = {}

    def side(self, grid: Grid, fuse: str) -> Callable[[], float]:
        runs = self.studies.setdefault((grid.name, fuse), [])

        def one() -> float:
            study = run_study(self.folder / f"{grid.study}-{fuse}-{sum(map(len, self.studies.values()))}", grid, fuse)
            runs.append(study)
            return study.span

        return one


# -- the figures ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Twin:
    """A completed fused member against its solo twin (the same parameters, the same repetition)."""

    params: tuple[tuple[str, Any], ...]
    accuracy: float  # |val_accuracy difference|
    loss: float  # |val_loss relative difference|
    estimate: float  # member runtime_s / twin runtime_s - 1: the solo-runtime estimate's error

    def describe(self) -> str:
        p = dict(self.params)
        return f"b {p['per_device_batch_size']}, {p['lr_rule']}, base_lr {p['base_lr']}"


def estimate_by_batch(every: list[tuple[str, Twin]]) -> str:
    """The solo-runtime estimate per grid and per-device batch, as member / twin ``runtime_s``:
    its median and range (a b 8 member at 0.53-0.70x while b 32 was at 0.87-1.34x read as one
    median error of 32%, which said nothing of where it was off)."""
    ratios: dict[tuple[str, Any], list[float]] = {}
    for label, twin in every:
        ratios.setdefault((label, dict(twin.params)["per_device_batch_size"]), []).append(1 + twin.estimate)
    return "; ".join(f"{label} b {b}: {statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f}x, {len(r)} members)"
                     for (label, b), r in sorted(ratios.items(), key=lambda kv: (kv[0][0], kv[0][1]))) or "-"


def twins(fused: list[Study], solo: list[Study]) -> list[Twin]:
    """Every completed fused member against its solo twin of the same repetition."""
    out = []
    for f, s in zip(fused, solo):
        alone = {t["params"]: t for t in s.complete}
        for member in f.complete:
            twin = alone.get(member["params"])
            if member["attrs"].get("fuse") != "on" or twin is None:
                continue
            a, b = member["attrs"], twin["attrs"]
            out.append(Twin(member["params"], abs(float(a["val_accuracy"]) - float(b["val_accuracy"])),
                            abs(float(a["val_loss"]) / float(b["val_loss"]) - 1),
                            float(a["runtime_s"]) / float(b["runtime_s"]) - 1))
    return out


def solo_spread(other: list[Study], solo: list[Study]) -> list[tuple[float, float]]:
    """Each completed trial of ``other`` against the trial of the same parameters in ``solo`` (the
    same repetition): (|val_accuracy difference|, |val_loss relative difference|)."""
    out = []
    for o, s in zip(other, solo):
        alone = {t["params"]: t["attrs"] for t in s.complete}
        for trial in o.complete:
            twin = alone.get(trial["params"])
            if twin is not None:
                a = trial["attrs"]
                out.append((abs(float(a["val_accuracy"]) - float(twin["val_accuracy"])),
                            abs(float(a["val_loss"]) / float(twin["val_loss"]) - 1)))
    return out


def off_reason(attr: str) -> str:
    """A ``fuse: off: <why>`` attribute without its measurements, so that alike reasons count as one."""
    why = attr.removeprefix("off: ").split(":")[0]
    return re.sub(r"\d+(\.\d+)?", "N", why)


def fuse_counts(studies: list[Study]) -> tuple[str, str]:
    """Trials that trained fused / on their own, per repetition, and the most common reason why
    not (with how many trials gave it, over every repetition)."""
    counts = ", ".join(f"{len(s.fused())} / {len(s.trials) - len(s.fused())}" for s in studies)
    reasons = Counter(off_reason(str(t["attrs"]["fuse"])) for s in studies for t in s.trials
                      if str(t["attrs"].get("fuse", "")).startswith("off"))
    if not reasons:
        return counts, "-"
    why, n = reasons.most_common(1)[0]
    return counts, f"{why} ({n} of {sum(reasons.values())})"


def fused_at_a_loss(studies: list[Study]) -> int:
    """Trials that trained fused though their group's timing said a member's share of a fused
    step was no faster than a step alone (what ``auto`` declines on), over every repetition."""
    n = 0
    for s in studies:
        for t in s.fused():
            a = t["attrs"]
            if isinstance(a.get("fused_step_s"), float) and isinstance(a.get("solo_step_s"), float):
                n += a["fused_step_s"] / float(a["fused_members"]) >= a["solo_step_s"]
    return n


def declined_example(studies: list[Study]) -> str | None:
    """One ``fuse`` attribute of a group that timed its steps and declined (its measurements in it)."""
    for s in studies:
        for t in s.trials:
            attr = str(t["attrs"].get("fuse", ""))
            if attr.startswith("off: fusing did not pay"):
                return attr
    return None


def _pct(x: float) -> str:
    return f"{x:.1%}"


def _mark(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def _worst(pairs: list[Twin], field: str, grid: str) -> str:
    if not pairs:
        return "-"
    w = max(pairs, key=lambda t: getattr(t, field))
    return f"{grid}, {w.describe()}"


# -- the benchmark ----------------------------------------------------------------------------

def run(quick: bool = False) -> str:
    repeat_a, repeat_b = (1, 1) if quick else (3, 2)
    lrs = (0.003, 0.01) if quick else (0.001, 0.003, 0.01, 0.03)
    epochs = 2 if quick else 3
    part_a = [digits_grid(w, (8, 32), lrs, epochs) for w in ("digits_cnn", "digits_mlp")]
    # The unfused trials' own spread: the same grids, two threads a trial instead of one.
    part_t = [digits_grid(w, (8, 32), lrs, epochs, threads=2) for w in ("digits_cnn", "digits_mlp")]
    part_b = [quickstart_grid(2 if quick else None), digits_grid("digits_cnn", (128,), lrs, 1 if quick else 2)]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cases = Cases(Path(tmp))
        print("  A: fuse false vs true", flush=True)
        interleaved({f"{g.name}, fuse {fuse}": cases.side(g, fuse) for g in part_a for fuse in ("false", "true")},
                    repeat_a)
        print("  A: fuse false, two threads a trial", flush=True)
        interleaved({g.name: cases.side(g, "false") for g in part_t}, 1)
        print("  B: fuse auto vs false", flush=True)
        interleaved({f"{g.name}, fuse {fuse}": cases.side(g, fuse) for g in part_b for fuse in ("false", "auto")},
                    repeat_b)
    minutes = (time.perf_counter() - started) / 60
    studies = cases.studies

    def span(grid: Grid, fuse: str) -> float:
        return median([s.span for s in studies[(grid.name, fuse)]])

    # A: spans, twins, device time.
    rows_a, spans_a, every = [], [], []
    for g in part_a:
        solo, fused = span(g, "false"), span(g, "true")
        spans_a.append((g.label, fused / solo))
        pairs = twins(studies[(g.name, "true")], studies[(g.name, "false")])
        every += [(g.label, t) for t in pairs]
        est = [abs(t.estimate) for t in pairs]
        device = [median([s.device_seconds() for s in studies[(g.name, f)]]) for f in ("false", "true")]
        complete = [f"{len(studies[(g.name, f)][-1].complete)}/{len(studies[(g.name, f)][-1].trials)}"
                    for f in ("false", "true")]
        rows_a.append([
            g.name, " vs ".join(complete), f"{solo:.1f} s", f"{fused:.1f} s", f"{fused / solo:.2f}x", len(pairs),
            f"{max((t.accuracy for t in pairs), default=float('nan')):.3f}",
            f"{_pct(max((t.loss for t in pairs), default=float('nan')))} "
            f"({_pct(statistics.median(t.loss for t in pairs)) if pairs else '-'})",
            (f"{_pct(statistics.median(est))} (max {_pct(max(est))}; mean signed "
             f"{statistics.mean(t.estimate for t in pairs):+.1%})" if est else "-"),
            f"{device[0]:.1f} s vs {device[1]:.1f} s ({device[1] / device[0]:.2f}x)",
        ])
    table_a = md_table(["grid", "complete (false vs true)", "span, fuse false", "span, fuse true", "fused / solo",
                        "members with a twin", "max abs val_accuracy diff", "val_loss rel. diff: max (median)",
                        "runtime estimate abs error: median", "device-seconds, false vs true"], rows_a)
    acc_max = max((t.accuracy for _, t in every), default=float("nan"))
    loss_max = max((t.loss for _, t in every), default=float("nan"))
    est_abs = [abs(t.estimate) for _, t in every]
    est_med = statistics.median(est_abs) if est_abs else float("nan")
    est_max = max(est_abs, default=float("nan"))
    by_batch = estimate_by_batch(every)
    spreads = []
    for g, g2 in zip(part_a, part_t):
        spread = solo_spread(studies[(g2.name, "false")], studies[(g.name, "false")])
        losses = [loss for _, loss in spread]
        spreads.append(f"{g.label}: max |val_loss relative difference| {_pct(max(losses, default=float('nan')))} "
                       f"(median {_pct(statistics.median(losses)) if losses else '-'}), max |val_accuracy "
                       f"difference| {max((a for a, _ in spread), default=float('nan')):.3f}, over {len(spread)} "
                       "trials")
    worst_acc = max(every, key=lambda gt: gt[1].accuracy, default=None)
    worst_loss = max(every, key=lambda gt: gt[1].loss, default=None)

    # B: auto against false.
    rows_b, spans_b = [], []
    for g in part_b:
        off, auto = span(g, "false"), span(g, "auto")
        spans_b.append((g.label, auto / off))
        counts, reason = fuse_counts(studies[(g.name, "auto")])
        rows_b.append([g.name, f"{off:.1f} s", f"{auto:.1f} s", f"{auto / off:.2f}x", counts,
                       fused_at_a_loss(studies[(g.name, "auto")]), reason])
    table_b = md_table(["grid", "span, fuse false", "span, fuse auto", "auto / false",
                        "trials fused / on their own (per repetition)", "fused though the timing said it did not pay",
                        "most common `fuse: off` reason (trials)"], rows_b)
    example = next((e for g in part_b if (e := declined_example(studies[(g.name, "auto")]))), None)

    span_verdict = "; ".join(
        f"{name}: {_mark(r <= SPAN_GOAL)} ({r:.2f}x, goal {SPAN_GOAL:.2f}x or better, target {SPAN_TARGET:.2f}x"
        f"{': reached' if r <= SPAN_TARGET else ''})" for name, r in spans_a)
    auto_verdict = "; ".join(
        f"{name}: {_mark(r < 1.0 if i == 0 else r <= AUTO_GOAL)} ({r:.2f}x, goal "
        + ("faster, under 1.00x" if i == 0 else f"{AUTO_GOAL:.2f}x or better") + ")"
        for i, (name, r) in enumerate(spans_b))
    if acc_max <= ACCURACY_GOAL and loss_max <= LOSS_GOAL:
        twins_say = "each member ends where its solo twin ends"
    else:
        twins_say = (f"members end up to {acc_max:.3f} in accuracy and {_pct(loss_max)} in validation loss away from "
                     "their solo twins")
    worst = (f" (the largest accuracy difference: {_worst([worst_acc[1]], 'accuracy', worst_acc[0])}; the largest "
             f"loss difference: {_worst([worst_loss[1]], 'loss', worst_loss[0])})" if worst_acc and worst_loss else "")
    signed = statistics.mean(t.estimate for _, t in every) if every else float("nan")
    then = ("after declining its members train on their own, one after another, on the group's devices"
            if declined_example(studies[(part_b[1].name, "auto")]) else "it did not decline")
    one_group = ("its groups (one shape, shared among the trial slots) spend their first steps timing fused "
                 f"against one member alone, and {then}")
    at_a_loss = sum(fused_at_a_loss(studies[(g.name, "auto")]) for g in part_b)
    loss_note = (f" {at_a_loss} trial{'s' if at_a_loss != 1 else ''} trained fused though their group's own timing "
                 "said it did not pay (the steady timing a quarter into the run, which it records, where its first "
                 "steps, which decide, said it did; or a group of one member left, which trains on)."
                 if at_a_loss else "")
    reps = f"{repeat_a} repetition{'s' if repeat_a > 1 else ''} of A, {repeat_b} of B"
    epoch_word = "epoch" if epochs == 1 else "epochs"
    return f"""## 13. Fused trials: configurations of one shape trained as one vectorized model

`python -m benchmarks.fused{" --quick" if quick else ""}`. Every case is `hpsearch start` as a whole command in a
fresh folder (a local Ray, SQLite, `device: cpu`, `cpus_per_worker: 1`, on this machine's
{os.cpu_count()} cores: see "The machine"), the cases interleaved ({reps}; the medians; {minutes:.1f} minutes
in all). The span: the study's last trial told (`datetime_complete`) minus its first asked
(`datetime_start`), read with Optuna.

**A. The digits grids, `fuse: false` vs `fuse: true`.** b in {{8, 32}} x lr_rule in {{constant,
linear, sqrt}} x base_lr in {{{", ".join(map(str, lrs))}}}, momentum 0.9, world size 1, {epochs} {epoch_word}, the grid
sampler, seed 0: two shapes, so with `fuse: true` two fused groups. Each fused member is compared with
its solo twin (the same parameters, in the `fuse: false` study of the same repetition): the
validation accuracy and loss it ends with, and its `runtime_s` (for a member, the estimate of what it
would take alone, from solo steps of its shape timed in its group) against the twin's measured
`runtime_s`. Device-seconds: the study's total (a member's is its share of its group's).

{table_a}

Over both grids and every repetition: max |val_accuracy difference| {acc_max:.3f}, max |val_loss
relative difference| {_pct(loss_max)}{worst}; the runtime estimate's |error| median {_pct(est_med)},
max {_pct(est_max)}. Per batch size, the estimate over its twin's `runtime_s` (median, range): {by_batch}.

The unfused trials' own spread, for scale: the same grids with `fuse: false` and
`cpus_per_worker: 2` (two threads a trial; one repetition), each trial against its one-thread
twin of the first repetition. {"; ".join(spreads)}. Nothing but the threads' share of the sums
changed: where a member's loss is chaotic (a high base_lr with momentum 0.9), the order in which
floating-point sums are added moves its end as far as fusing does, or farther.

**B. `fuse: auto` vs `fuse: false`**, where fusing may not pay: the quickstart as shipped on the CPU
(8 shapes of 3 trials, world sizes 1 and 2), and a CNN grid at b 128 (one shape of
{3 * len(lrs)} trials), where a step is large enough that `auto` is expected to time fused against solo
steps on its first steps and decline.

{table_b}
{f"{chr(10)}A group that declined said: `{example}`.{chr(10)}" if example else ""}
Verdict: span fused/solo: {span_verdict}.
Verdict: fused members against their solo twins: accuracy {_mark(acc_max <= ACCURACY_GOAL)} (max {acc_max:.3f}, goal \
{ACCURACY_GOAL:.2f} or less); val_loss {_mark(loss_max <= LOSS_GOAL)} (max {_pct(loss_max)}, goal {LOSS_GOAL:.0%} or less).
Verdict: the solo-runtime estimate: {_mark(est_med <= ESTIMATE_GOAL)} (median |error| {_pct(est_med)}, max \
{_pct(est_max)}; goal a median of {ESTIMATE_GOAL:.0%} or less).
Verdict: span auto/false: {auto_verdict}.

What it says: training a shape's configurations as one model takes {" and ".join(f"{r:.2f}x" for _, r in spans_a)}
of the span of training them one by one on the digits grids (CNN, MLP), and {twins_say}. A member's
`runtime_s`, what it would take alone, is off from what its twin took by a median of {_pct(est_med)} (on
average {signed:+.1%}). Under `auto` the quickstart took {spans_b[0][1]:.2f}x of its unfused span, the
b 128 grid {spans_b[1][1]:.2f}x: {one_group}.{loss_note}
"""


if __name__ == "__main__":
    run_alone(run, __doc__ or "", "1 repetition, 2 base LRs, fewer epochs")
