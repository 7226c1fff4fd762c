"""The LR law of AdamW on the language model: a grid of batches x LRs on ``text_lm``, the best LR
at each batch, the law the data choose (power, bend or surge) and the answer.

An LR grid the same at every batch (the constant rule, so each base LR is the LR applied):
``BATCHES`` effective batches x ``LRS`` LRs a factor 2 apart, AdamW with weight decay 0.1, a
warmup from zero over the first epoch, a cosine after it and ``max_grad_norm`` 1.0, as a
transformer is trained; every configuration for the same number of epochs. It runs as a user's
search would (``hpsearch.start``, real ranks, a local Ray, SQLite, fused where that pays); the
answer's confirmation is off, so the figures are the grid's own. Reported: each batch's final
validation loss at every LR, its best LR by that loss and by the analysis (fewest samples to the
target), the law the analysis fits and prefers, and the answer for 1 and 2 devices. The shape is
reported whatever it is: Li et al. 2024 find a surge with Adam, rising then falling past the
noise scale; a small model on a little text may not reach its peak within these batches.

    python -m benchmarks.lm_lr_law            # the grid (about 15-25 minutes on 2 cores)
    python -m benchmarks.lm_lr_law --quick    # 3 batches x 4 LRs, 2 epochs
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import md_table

__all__ = ["run"]

#: The grid: effective batches (W 1, no accumulation) and LRs, a factor 2 apart.
BATCHES = (8, 16, 32, 64, 128)
LRS = (5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2)
EPOCHS = 6
#: What the analysis' "samples to the target" reads: a validation loss per byte this low, which
#: every batch of the grid reaches at its best LR.
TARGET = 2.8
OPTIONS = {"layers": 2, "width": 64, "heads": 4, "context": 64, "level": "byte", "files": 8}


def _space(batches: tuple[int, ...], lrs: tuple[float, ...], epochs: int, target: float) -> dict[str, Any]:
    return {
        "study": "lm-lr-law",
        "workload": {"name": "text_lm", "epochs": epochs, "eval_every_samples": 400, "options": dict(OPTIONS)},
        "scaling": {"base_batch_size": min(batches), "warmup_epochs": 1, "warmup_from": "zero", "schedule": "cosine"},
        "parameters": {
            "per_device_batch_size": {"choices": list(batches)},
            "world_size": 1,
            "grad_accum_steps": 1,
            "lr_rule": "constant",
            "base_lr": {"choices": list(lrs)},
            "optimizer": "adamw",
            "weight_decay": 0.1,
            "max_grad_norm": 1.0,
        },
        "objectives": [{"metric": "val_loss", "direction": "minimize"}, {"metric": "runtime_s", "direction": "minimize"}],
        "search": {"sampler": "grid", "n_trials": len(batches) * len(lrs), "max_concurrent": "auto", "seed": 0},
        "resources": {"device": "auto", "cpus_per_worker": 1},
        "analysis": {"target": {"val_loss": target}, "confirm": False},
    }


def run(quick: bool = False) -> str:
    import hpsearch
    from hpsearch import record

    batches = BATCHES[1:4] if quick else BATCHES
    lrs = LRS[1:5] if quick else LRS
    epochs = 2 if quick else EPOCHS
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lm-lr-law-") as work:
        storage = f"sqlite:///{Path(work) / 'lm.db'}"
        search = hpsearch.start(_space(batches, lrs, epochs, TARGET), storage=storage)
        minutes = (time.perf_counter() - began) / 60
        frame = search.trials_dataframe()
        analysis = search.analyze()
        answers = {}
        for devices in (1, 2):
            try:
                answers[devices] = search.recommend(devices)
            except hpsearch.HPSearchError as exc:  # no answer is a finding too
                answers[devices] = str(exc)
    states = frame["state"].value_counts().to_dict()
    loss: dict[tuple[int, float], float] = {}
    for _, t in frame.iterrows():
        if t["state"] == "COMPLETE":
            loss[(int(t[record.EFFECTIVE_BATCH_SIZE]), float(t[record.LR]))] = float(t[record.VAL_LOSS])

    def cell(b: int, lr: float) -> str:
        value = next((v for (bb, ll), v in loss.items() if bb == b and math.isclose(ll, lr, rel_tol=1e-9)), None)
        if value is None:
            return "-"
        best = min((v for (bb, _), v in loss.items() if bb == b), default=None)
        return f"**{value:.3f}**" if value == best else f"{value:.3f}"

    rows = [[f"B {b}", *(cell(b, lr) for lr in lrs)] for b in batches]
    points = {p.effective_batch_size: p for p in analysis.lr_points}
    best_rows = []
    for b in batches:
        at = {lr: v for (bb, lr), v in loss.items() if bb == b}
        by_loss = min(at, key=lambda lr: at[lr]) if at else None
        p = points.get(b)
        best_rows.append([f"B {b}", "-" if by_loss is None else f"{by_loss:g}",
                          "-" if p is None else f"{p.lr:.3g}"])
    law = analysis.lr_law
    law_lines = ["- no LR law: " + (analysis.lr_law_refusal or "no fit")] if law is None else [
        f"- law preferred: **{law.preferred}**; {law.summary}",
        f"- power law alpha {law.alpha:.2f} [{law.alpha_interval.low:.2f}, {law.alpha_interval.high:.2f}]; "
        f"bend dAICc {_num(law.delta_aicc)}; surge dAICc {_num(law.surge_delta_aicc)}, peak B "
        f"{_num(law.b_peak)} at lr {_num(law.peak_lr)}",
    ]
    answer_lines = []
    for devices, answer in answers.items():
        if isinstance(answer, str):
            answer_lines.append(f"- {devices} device(s): no answer ({answer})")
            continue
        note = f"; {answer.lr_note}" if getattr(answer, "lr_note", None) else ""
        answer_lines.append(f"- {devices} device(s): b {answer.per_device_batch_size} x W {answer.world_size} x A "
                            f"{answer.grad_accum_steps} (B {answer.effective_batch_size}), lr {answer.lr:.3g} "
                            f"({answer.rule} from base_lr {_num(answer.base_lr)}), {answer.samples:,.0f} samples to "
                            f"val_loss <= {TARGET:g} predicted{note}; sched {answer.schedule_text()}")
    return "\n".join([
        "## 17. The LR law of AdamW on the language model (text_lm)",
        "",
        f"`text_lm` ({', '.join(f'{k} {v}' for k, v in OPTIONS.items())}), {epochs} epochs, AdamW (weight decay "
        f"0.1), warmup from zero over 1 epoch then cosine, max_grad_norm 1.0; {len(batches)} batches x {len(lrs)} "
        f"LRs on the constant rule (the LR applied is the grid's), as one `hpsearch.start` "
        f"(`benchmarks/lm_lr_law.py`, {minutes:.1f} min, states {states}). Final validation loss per byte "
        "(the lowest of each batch in bold):",
        "",
        md_table(["batch", *(f"lr {lr:g}" for lr in lrs)], rows),
        "",
        md_table(["batch", "best LR by final val_loss", f"best LR by the analysis (samples to val_loss <= {TARGET:g})"],
                 best_rows),
        "",
        *law_lines,
        *answer_lines,
        "",
    ])


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 batches x 4 LRs, 2 epochs")
    print(run(quick=parser.parse_args().quick))


if __name__ == "__main__":
    main()
