"""Store writes: trials with per-epoch results through hpsearch's searcher vs raw Optuna ask/tell.

Both sides write the same trials into fresh SQLite files, interleaved, repeated: raw Optuna asks
a trial, reports one intermediate value per epoch and tells the final values; the searcher does
what it does inside a search (the configuration's derived attrs, per-epoch curves and progress
attrs, the intermediate value, the final measurements) through the same calls Ray Tune makes
(``suggest``, ``on_trial_result``, ``on_trial_complete``), without Ray itself.

    python benchmarks/store_writes.py                  # 1,000 trials x 10 epochs, 3 repetitions
    python benchmarks/store_writes.py --trials 200 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

SPACE = """\
study: bench
workload: {name: digits_mlp, epochs: EPOCHS}
parameters:
  per_device_batch_size: {choices: [8, 16, 32, 64, 128]}
  world_size: {choices: [1, 2]}
  lr_rule: {choices: [constant, linear, sqrt]}
  base_lr: {low: 0.001, high: 0.1, log: true}
objectives:
  - {metric: val_accuracy, direction: maximize}
search: {sampler: random, n_trials: TRIALS, seed: 0}
resources: {device: cpu}
"""


def raw_optuna(url: str, trials: int, epochs: int) -> float:
    import optuna

    from hpsearch.sampler import distributions
    from hpsearch.search_spaces import parse_space

    space = parse_space(SPACE.replace("EPOCHS", str(epochs)).replace("TRIALS", str(trials)))
    study = optuna.create_study(study_name="bench", storage=url, direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    dists = distributions(space)
    start = time.perf_counter()
    for _ in range(trials):
        trial = study.ask(dists)
        for epoch in range(1, epochs + 1):
            trial.report(0.5 + epoch / 100, step=epoch * 1000)
        study.tell(trial, 0.5 + epochs / 100)
    return time.perf_counter() - start


def hpsearch_searcher(url: str, trials: int, epochs: int) -> float:
    import optuna

    from hpsearch.orchestrator import _create_study, trial_settings
    from hpsearch.search_spaces import parse_space
    from hpsearch.searcher import FINAL_KEY, StudySearcher
    from hpsearch.store import patient_storage

    space = parse_space(SPACE.replace("EPOCHS", str(epochs)).replace("TRIALS", str(trials)))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = _create_study(patient_storage(url, 300), "bench", space)
    searcher = StudySearcher(study, space, trials, trial_settings(space, "cpu"), Path(tempfile.gettempdir()))
    start = time.perf_counter()
    for i in range(trials):
        tid = f"t{i}"
        searcher.suggest(tid)
        result: dict[str, object] = {}
        for epoch in range(1, epochs + 1):
            result = {"epoch": epoch, "samples_seen": epoch * 1000, "val_accuracy": 0.5 + epoch / 100,
                      "val_loss": 1.0, "train_loss": 1.0, "lr": 0.01, "runtime_s": epoch * 0.1,
                      "comm_fraction": 0.1, "noise_scale": 100.0}
            searcher.on_trial_result(tid, result)
        searcher.on_trial_complete(tid, {**result, FINAL_KEY: True, "device_seconds": 1.0, "samples_per_s": 1e4,
                                         "epochs_completed": epochs, "device": "cpu"})
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"raw Optuna ask/tell": [], "hpsearch searcher": []}
    with tempfile.TemporaryDirectory() as folder:
        for r in range(args.repeat):  # interleaved: both sides see the same machine state
            for name, fn in (("raw Optuna ask/tell", raw_optuna), ("hpsearch searcher", hpsearch_searcher)):
                url = f"sqlite:///{Path(folder) / f'{r}-{len(times[name])}-{fn.__name__}.db'}"
                times[name].append(fn(url, args.trials, args.epochs))
                print(f"  {name}: {times[name][-1]:.2f} s", flush=True)
    raw = statistics.median(times["raw Optuna ask/tell"])
    ours = statistics.median(times["hpsearch searcher"])
    print(f"\n{args.trials} trials x {args.epochs} epochs, SQLite, median of {args.repeat}:")
    print(f"raw Optuna ask/tell  {raw:8.2f} s  ({raw / args.trials * 1e3:.1f} ms per trial)")
    print(f"hpsearch searcher    {ours:8.2f} s  ({ours / args.trials * 1e3:.1f} ms per trial)")
    print(f"ratio                {ours / raw:8.2f}x  (target 1.2x)")


if __name__ == "__main__":
    main()
