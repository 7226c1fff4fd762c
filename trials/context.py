"""``RankContext``: how a rank knows who it is and reports what it measured.

The DDP loop reports through this small object and never imports Ray, so the same loop runs
under the Ray trial driver, under torchrun and in a test. Only rank 0 reports.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
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
    """

    rank: int = 0
    world_size: int = 1
    device: str = "cpu"
    sink: Sink | None = None
    run_dir: Path | None = None
    reports: list[dict[str, Any]] = field(default_factory=list)
    lr_trace: list[float] = field(default_factory=list)

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
