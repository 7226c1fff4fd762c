"""One trial's configuration as a torchrun job, without Ray and without a study store.

``hpsearch export-trial`` writes a trial's configuration (``trial.json``) and a ``launch.sh``
that runs::

    torchrun --standalone --nproc-per-node W -m hpsearch.trials.run trial.json

Each process builds its ``RankContext`` from torchrun's environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``; ``MASTER_ADDR`` and ``MASTER_PORT`` for the process group), joins the group
(gloo on CPU, nccl on CUDA) and calls ``hpsearch.trials.rank.loop.train``, the loop a search's
trials run. The LR is the trial's rule applied to the configuration's effective batch, so a
configuration exported at another world size trains at the LR its rule gives there.

Rank 0 writes into the output folder (default: the configuration's folder):

- ``metrics.jsonl``: one line per evaluation, as a trial reports them;
- ``metrics.json``: the final metrics, with the effective batch, world size and device-seconds;
- ``model.pt``: the final weights, a state dict that loads into the workload's model.

Started with fewer processes than the configuration's world size (a divisor of it), each
process plays several ranks as gradient accumulation in the ranks' sample order (emulated
ranks): the same math on fewer devices. Without torchrun (plain ``python -m``) it runs as one
process.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from hpsearch import record
from hpsearch.errors import HPSearchError
from hpsearch.trials.errors import WorkloadError
from hpsearch.trials.rank.context import JsonlSink, RankContext
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec

__all__ = ["METRICS_FILE", "load_config", "main", "run"]

#: The final metrics rank 0 writes into the output folder.
METRICS_FILE = "metrics.json"
#: One line per evaluation, as a trial's rank 0 reports them.
REPORTS_FILE = "metrics.jsonl"


def load_config(path: str | os.PathLike[str]) -> TrialSpec:
    """The ``TrialSpec`` of a configuration file: ``hpsearch export-trial``'s ``trial.json``
    (its ``spec``), or a JSON object of ``TrialSpec`` fields.

    Raises:
        WorkloadError: the file is missing, not JSON, or not a trial's configuration.
    """
    source = Path(path)
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WorkloadError(f"cannot read the trial configuration {source}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{source} is not JSON: {exc}") from None
    fields = data.get("spec", data) if isinstance(data, Mapping) else None
    if not isinstance(fields, Mapping):
        raise WorkloadError(f"{source} must hold a trial configuration (a JSON object), got {type(data).__name__}")
    try:
        return TrialSpec(**fields)
    except (TypeError, ValueError) as exc:
        raise WorkloadError(f"{source} is not a trial configuration: {exc}") from None


def run(config: str | os.PathLike[str], out: str | os.PathLike[str] | None = None, *,
        environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """Train the configuration in ``config`` as this rank of a torchrun job.

    Args:
        config: The configuration file (``trial.json``).
        out: Where rank 0 writes ``metrics.jsonl``, ``metrics.json`` and ``model.pt``
            (default: the configuration's folder).
        environ: The environment torchrun set (default: this process's).

    Returns:
        Rank 0's final metrics; ``None`` on the other ranks.

    Raises:
        WorkloadError: the configuration or the workload is unusable, or the job's process
            count does not divide the configuration's world size.
        TrialFailed: training diverged.
    """

    spec = load_config(config)
    folder = Path(out if out is not None else Path(config).parent).resolve()
    try:
        ctx = RankContext.from_env(spec.device, environ=environ, run_dir=folder)
    except ValueError as exc:
        raise WorkloadError(str(exc)) from None
    if spec.world_size % ctx.world_size:
        raise WorkloadError(f"the configuration's world_size is {spec.world_size}, which {ctx.world_size} processes "
                            "cannot play: start world_size processes (torchrun --nproc-per-node), or a divisor of it")
    if spec.device.startswith("cuda") and not torch.cuda.is_available():
        raise WorkloadError("the configuration trains on cuda but this machine has no CUDA device; set \"device\": "
                            "\"cpu\" in its spec to train on the CPU")
    # Each process plays world_size / processes ranks (1 under a full torchrun job); the
    # weights are saved, since they are what this run is for.
    spec = replace(spec, emulated_ranks=spec.world_size // ctx.world_size, save_model=True)
    # torchrun sets OMP_NUM_THREADS=1 for its workers; the trial's ranks ran with this many
    # threads, and the same count keeps their arithmetic, so their numbers, the same.
    torch.set_num_threads(max(1, spec.cpus_per_worker))
    if ctx.is_main:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / REPORTS_FILE).unlink(missing_ok=True)
        ctx.sink = JsonlSink(folder / REPORTS_FILE)
    if ctx.world_size > 1:
        backend = "gloo"
        if spec.device.startswith("cuda"):
            torch.cuda.set_device(torch.device(ctx.device))
            backend = "nccl"
        dist.init_process_group(backend, init_method="env://", rank=ctx.rank, world_size=ctx.world_size)
    final = train(spec, ctx)
    # Every collective completed (the loop ends in a barrier): the group can be torn down.
    if dist.is_initialized():
        dist.destroy_process_group()
    if final is None:
        return None
    runtime = float(final[record.RUNTIME_S])
    final = {**final, record.EFFECTIVE_BATCH_SIZE: spec.effective_batch_size, record.WORLD_SIZE: spec.world_size,
             "processes": ctx.world_size, record.EMULATED_RANKS: spec.emulated_ranks, record.LR: spec.lr,
             record.DEVICE_SECONDS: runtime * ctx.world_size,
             record.SAMPLES_PER_S: final[record.SAMPLES_SEEN] / runtime if runtime > 0 else None}
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in final.items()}
    (folder / METRICS_FILE).write_text(json.dumps(clean, indent=1) + "\n", encoding="utf-8")
    return final


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m hpsearch.trials.run CONFIG [--out DIR]``, one process of a torchrun job.

    A failure is one ``error:`` line on stderr and exit status 2 (an unusable configuration or
    workload) or 1 (training diverged).
    """
    parser = argparse.ArgumentParser(
        prog="python -m hpsearch.trials.run",
        description="Train one exported trial configuration as a process of a torchrun job.")
    parser.add_argument("config", help="the trial configuration (trial.json from 'hpsearch export-trial')")
    parser.add_argument("--out", help="folder for metrics.jsonl, metrics.json and model.pt (default: the config's)")
    args = parser.parse_args(argv)
    try:
        final = run(args.config, args.out)
    except HPSearchError as exc:
        rank = os.environ.get("RANK", "0")
        _leave(f"error: rank {rank}: {exc}", exc.exit_code)
    if final is not None:
        print(f"final: {json.dumps({k: final.get(k) for k in ('val_accuracy', 'val_loss', 'train_loss', 'lr', 'last_lr')})}; "
              f"wrote {METRICS_FILE}, {REPORTS_FILE} and model.pt to {Path(args.out or Path(args.config).parent)}")
    # Done, its files closed: leave without the interpreter's teardown, where a rank of a CPU job
    # can abort ("terminate called without an active exception", a thread of torch's still
    # running) after the job has trained and rank 0 has written its results.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _leave(message: str, code: int) -> NoReturn:
    """Say why and leave at once, without tearing the process group down: a rank that fails in
    a step may have a gradient all-reduce in flight, and tearing the group down then deadlocks
    (see ``hpsearch.trials.launcher``). torchrun stops the other ranks when this one exits."""
    print(message, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
