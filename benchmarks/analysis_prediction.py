"""Held-out prediction: fit the analysis on part of a real study and predict the rest.

The recommendation predicts a configuration's training time to a target as steps to the target
(the critical-batch fit) times its step time (the throughput model). This checks that product
on trials the fits never saw:

1. **A real study on this machine.** ``hpsearch start`` runs a grid of the digits CNN: per-device
   batch 8..128 x world size 1 or 2 (effective batch 8..256) x three base LRs on the linear
   rule, evaluated about four times an epoch, real DDP ranks over gloo, a local Ray, SQLite.
2. **Leave one batch out.** For each effective batch B_h, the analysis is fitted on every trial
   at other batches; for each trial at B_h that ran at the best LR there (both of its b x W
   splits where there are two), its training seconds to the target are predicted as
   startup(W) + S(B_h) x step_time(b, W, A) and compared with what it measured (interpolated
   between evaluations, evaluations left out).
3. **The figure:** the median relative error |predicted - measured| / measured over those
   trials, apart for B_h inside the other batches (interpolation) and at either end
   (extrapolation), with the error of each factor (samples to the target, step time) beside it.

Run it from the repository root::

    python -m benchmarks.analysis_prediction           # 30 trials, about 5 minutes on 2 idle cores
    python -m benchmarks.analysis_prediction --quick   # 12 trials of the digits MLP, about 2 minutes
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import md_table, run_alone

__all__ = ["run"]

#: The goal: median relative error of the predicted time to the target, interpolating.
GOAL = 0.25

_SPACE = {
    "study": "heldout",
    "workload": {"name": "digits_cnn", "epochs": 8, "eval_every_samples": 180},
    "scaling": {"base_batch_size": 8},
    "parameters": {
        "per_device_batch_size": {"choices": [8, 16, 32, 64, 128]},
        "world_size": {"choices": [1, 2]},
        "grad_accum_steps": 1,
        "lr_rule": "linear",
        "base_lr": {"choices": [0.005, 0.01, 0.02]},
        "momentum": 0.9,
    },
    "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
    "search": {"sampler": "grid", "n_trials": 30, "seed": 0},
    "resources": {"device": "cpu", "cpus_per_worker": 1},
    "analysis": {"target": {"val_accuracy": 0.95}},
}
_QUICK = {
    "workload": {"name": "digits_mlp", "epochs": 6, "eval_every_samples": 180},
    "parameters": {**_SPACE["parameters"], "per_device_batch_size": {"choices": [8, 32, 128]},  # type: ignore[dict-item]
                   "base_lr": {"choices": [0.01, 0.04]}},
    "search": {"sampler": "grid", "n_trials": 12, "seed": 0},
    "analysis": {"target": {"val_accuracy": 0.9}},
}


def run(quick: bool = False) -> str:
    import hpsearch
    from hpsearch import record
    from hpsearch.analysis import CURVE_FIELDS, CURVE_STATES, analyze_trials
    from hpsearch.errors import AnalysisError
    from hpsearch.study import read_attr

    space = {**_SPACE, **(_QUICK if quick else {})}
    target = next(iter(space["analysis"]["target"].items()))  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory() as work:
        storage = f"sqlite:///{Path(work) / 'study.db'}"
        started = time.perf_counter()
        search = hpsearch.start(space, storage=storage)
        minutes = (time.perf_counter() - started) / 60
        frame = search.trials_dataframe()
        curves = read_attr(search.backend, search.study_name, record.CURVES, states=CURVE_STATES,
                           fields=(*CURVE_FIELDS, target[0]))
        whole = analyze_trials("heldout", frame, curves, target=_target(search, target), metric=target[0],
                               direction="maximize")

    batches = sorted(p.effective_batch_size for p in whole.batches)
    rows, errors = [], {"interpolated": [], "extrapolated": []}  # type: dict[str, list[float]]
    parts: dict[str, list[float]] = {"samples": [], "step time": []}
    for held in batches:
        train = frame[frame[record.EFFECTIVE_BATCH_SIZE] != held]
        kind = "interpolated" if batches[0] < held < batches[-1] else "extrapolated"
        try:
            fitted = analyze_trials("heldout", train, curves, target=whole.target, metric=target[0],
                                    direction="maximize")
        except AnalysisError as exc:
            rows.append([f"{held:,.0f}", kind, "-", "-", "-", f"no fit: {exc}"])
            continue
        if fitted.critical_batch is None or not fitted.throughput:
            rows.append([f"{held:,.0f}", kind, "-", "-", "-", f"no fit: {fitted.critical_batch_refusal}"])
            continue
        model = next(iter(fitted.throughput.values()))
        for t in _best_lr_runs(whole.trials, held):
            b, w, a = int(t["per_device_batch_size"]), int(t["world_size"]), int(t["grad_accum_steps"])
            steps = float(fitted.critical_batch.steps(held))
            step_time = float(model.step_time(b, w, a))
            predicted = fitted.startup(model.device, w) + steps * step_time
            measured = float(t["train_seconds_to_target"])
            measured_step = (measured - fitted.startup(model.device, w)) / float(t["steps_to_target"])
            error = abs(predicted - measured) / measured
            errors[kind].append(error)
            parts["samples"].append(abs(steps * held - t["samples_to_target"]) / t["samples_to_target"])
            parts["step time"].append(abs(step_time - measured_step) / measured_step)
            rows.append([f"{held:,.0f}", kind, f"#{t['number']} b {b} x W {w}", f"{predicted:.3g} s",
                         f"{measured:.3g} s", f"{error:+.0%}".replace("+", "")])

    def med(values: list[float]) -> str:
        return f"{statistics.median(values):.0%} ({len(values)} trials)" if values else "-"

    inside = errors["interpolated"]
    met = bool(inside) and statistics.median(inside) <= GOAL
    verdict = (f"**{'met' if met else 'missed'}** (median error {med(inside)} interpolating, goal {GOAL:.0%} or "
               "better)")
    return "\n".join([
        "## 7. Held-out prediction: time to the target of trials the fits never saw",
        "",
        f"A real study run here ({len(frame)} trials of {space['workload']['name']}, "  # type: ignore[index]
        f"{minutes:.1f} min), target {whole.target}: for each effective batch, the critical-batch fit and "
        "the step-time model are fitted without it, and the training time to the target of its trials at the "
        "best LR is predicted as startup(W) + S(B) x step_time(b, W, A) (`benchmarks/analysis_prediction.py`).",
        "",
        md_table(["held-out B", "", "trial", "predicted", "measured", "error"], rows),
        "",
        f"- median error, interpolating: {med(inside)}; extrapolating to the smallest or largest batch: "
        f"{med(errors['extrapolated'])}",
        f"- of which the samples to the target: {med(parts['samples'])}; the step time: {med(parts['step time'])}",
        f"- the whole study's fit: {_fit_text(whole)}",
        "",
        f"Verdict: {verdict}",
        "",
        "What limits it: each batch's best LR is the best of three LRs, so a held-out batch's measured "
        "samples can sit a few tens of percent off the fitted line (the winner's curse and a coarse grid); "
        "a crossing is only known to the evaluation cadence (180 samples, a few steps at large batches); "
        "the digits reach the target within an epoch or two, where a trial's first steps (1.2x to 3x slower "
        "than its later ones) weigh most, and the start-up term is one median per world size; and on 2 "
        "shared cores the step time of a two-rank trial depends on what else runs.",
    ])


def _best_lr_runs(trials: Any, batch: float) -> list[Any]:
    """The trials at ``batch`` that ran at its best measured LR (fewest samples to the target,
    median over the LR's runs): what the critical-batch fit stands for at that batch."""
    by_lr: dict[float, list[Any]] = {}
    for t in trials:
        if t["effective_batch_size"] == batch and t["state"] in ("COMPLETE", "PRUNED") \
                and t["train_seconds_to_target"] is not None:
            by_lr.setdefault(round(float(t["lr"]), 10), []).append(t)
    if not by_lr:
        return []
    return min(by_lr.values(), key=lambda runs: statistics.median(r["samples_to_target"] for r in runs))


def _target(search: Any, target: tuple[str, float]) -> Any:
    from hpsearch.analysis import Target

    return Target(target[0], float(target[1]), search.direction(target[0]), "space")


def _fit_text(analysis: Any) -> str:
    cb = analysis.critical_batch
    if cb is None:
        return f"no critical batch ({analysis.critical_batch_refusal})"
    return f"B_crit {cb.b_crit:,.0f} {cb.b_crit_interval}, E_min {cb.e_min:,.0f} samples, {cb.n_batch_sizes} batch sizes"


if __name__ == "__main__":
    run_alone(run, __doc__ or "", "12 trials of the digits MLP (about 2 minutes)")
