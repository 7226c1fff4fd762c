"""``RankContext``: how a rank knows who it is and reports what it measured.

The DDP loop reports through this small object and never imports Ray, so the same loop runs
under the Ray trial driver, under torchrun (``RankContext.from_env``, ``hpsearch.trials.run``)
and in a test. Only rank 0 reports.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["JsonlSink", "RankContext"]

Sink = Callable[[dict[str, Any]], None]


class JsonlSink:
    """Appends each report as one JSON line and flushes it, so a parent process can tail the file.

    Non-finite floats are written as ``null`` (JSON has no NaN).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __call__(self, metrics: dict[str, Any]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(clean) + "\n")
            f.flush()


@dataclass
class RankContext:
    """Identity of one rank and its reporting channel.

    Attributes:
        rank: Global rank, 0..world_size-1.
        world_size: Number of ranks.
        device: ``"cpu"`` or ``"cuda:N"``.
        sink: Receives rank 0's reports; ignored on other ranks.
        run_dir: The trial's folder, where rank 0 may write files (``model.pt``).
        reports: Every report rank 0 made, in order (handy in tests and for the final record).
        lr_trace: The LR applied at every optimizer step, in order.
        training_started: When the loop's clock started, its model and data built (wall-clock
            seconds; ``None`` before): a rank that fails says it in its failure report.
    """

    rank: int = 0
    world_size: int = 1
    device: str = "cpu"
    sink: Sink | None = None
    run_dir: Path | None = None
    reports: list[dict[str, Any]] = field(default_factory=list)
    lr_trace: list[float] = field(default_factory=list)
    training_started: float | None = None

    @classmethod
    def from_env(cls, device: str = "cpu", *, environ: Mapping[str, str] | None = None, sink: Sink | None = None,
                 run_dir: Path | None = None) -> RankContext:
        """The rank a launcher following torchrun's convention started: ``RANK``, ``WORLD_SIZE``
        and ``LOCAL_RANK`` from the environment (``MASTER_ADDR`` and ``MASTER_PORT`` are read by
        ``torch.distributed.init_process_group(init_method="env://")``). Without them, one
        process: rank 0 of 1.

        Args:
            device: ``cpu``, or ``cuda`` for the GPU of this rank's ``LOCAL_RANK``.
            environ: The environment to read (default: this process's).

        Raises:
            ValueError: a variable is not an integer, the rank is outside the world, or a
                multi-process world has no ``MASTER_ADDR``/``MASTER_PORT``.

        Example:
            >>> env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
            ...        "MASTER_PORT": "29500"}
            >>> ctx = RankContext.from_env("cuda", environ=env)
            >>> ctx.rank, ctx.world_size, ctx.device, ctx.is_main
            (1, 2, 'cuda:1', False)
        """
        env = os.environ if environ is None else environ
        values = {}
        for name, default in (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", None)):
            raw = env.get(name)
            try:
                values[name] = int(raw) if raw not in (None, "") else default
            except ValueError:
                raise ValueError(f"{name} must be an integer, got {raw!r}") from None
        rank, world = int(values["RANK"] or 0), int(values["WORLD_SIZE"] or 1)
        local = rank if values["LOCAL_RANK"] is None else int(values["LOCAL_RANK"])
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"RANK must be in 0..WORLD_SIZE-1, got RANK={rank}, WORLD_SIZE={world}")
        if world > 1:
            missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
            if missing:
                verb = "are" if len(missing) > 1 else "is"
                raise ValueError(f"WORLD_SIZE is {world} but {' and '.join(missing)} {verb} not set: start the "
                                 "ranks with torchrun, which sets them")
        where = f"cuda:{local}" if device.startswith("cuda") else device
        return cls(rank=rank, world_size=world, device=where, sink=sink, run_dir=run_dir)

    @property
    def is_main(self) -> bool:
        """True on rank 0, the one rank that reports and writes."""
        return self.rank == 0

    def report(self, metrics: dict[str, Any]) -> None:
        """Report one epoch's (or the final) metrics. A no-op except on rank 0."""
        if not self.is_main:
            return
        self.reports.append(dict(metrics))
        if self.sink is not None:
            self.sink(dict(metrics))
