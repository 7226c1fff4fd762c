"""CUDA MPS for a node's rank processes: several trials' ranks share a GPU's compute at once.

Without MPS, the CUDA contexts of processes sharing a GPU take turns (time slices); with NVIDIA's
Multi-Process Service their kernels run side by side, which is what packing small trials onto a
GPU (``resources.gpus_per_worker: 0.25``) is for. ``resources.mps`` says whether to use it:

- ``off``: never;
- ``on``: start a daemon of the search's own for the node; if it cannot start, the search says
  why and stops;
- ``auto`` (the default): start one where trials share GPUs (``gpus_per_worker`` below 1) and
  ``nvidia-cuda-mps-control`` is installed; where it cannot start, the trials run without it and
  record why (``mps`` on the trial: ``on``, or ``off: <reason>``).

The daemon is the search's own: its pipe and log folders are private (``CUDA_MPS_PIPE_DIRECTORY``,
``CUDA_MPS_LOG_DIRECTORY``), given to the rank processes in their environment, so a system-wide
daemon, or another search's, is neither used nor stopped. It is stopped when the node's pool closes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["MPS_CONTROL", "MpsDaemon", "MpsError"]

#: NVIDIA's MPS control program.
MPS_CONTROL = "nvidia-cuda-mps-control"
# How long the daemon has to create its pipe once started.
_START_S = 10.0


class MpsError(RuntimeError):
    """``resources.mps: on`` and the daemon could not start; the message says why."""


class MpsDaemon:
    """The search's MPS daemon on this node (or none).

    Args:
        mode: ``on``, ``off`` or ``auto`` (``resources.mps``).
        shared: Whether trials share GPUs here (``gpus_per_worker`` below 1): ``auto`` starts
            MPS only then.

    Attributes:
        state: What the rank processes record as ``mps``: ``on``, or ``off: <reason>``.
        env: The variables a rank process needs to use the daemon (empty without one).

    Raises:
        MpsError: ``mode`` is ``on`` and the daemon could not start.
    """

    def __init__(self, mode: str, *, shared: bool) -> None:
        self.env: dict[str, str] = {}
        self._folder: Path | None = None
        if mode == "off":
            self.state = "off: resources.mps is off"
            return
        if mode == "auto" and not shared:
            self.state = "off: no GPU is shared by several ranks (gpus_per_worker is 1 or more)"
            return
        why = self._start()
        if why is None:
            self.state = "on"
            return
        if mode == "on":
            raise MpsError(f"resources.mps is on but CUDA MPS could not start on this node: {why}")
        self.state = f"off: {why}"

    def _start(self) -> str | None:
        """Start the daemon; ``None`` when it runs, else why it does not."""
        control = shutil.which(MPS_CONTROL)
        if control is None:
            return f"{MPS_CONTROL} is not installed"
        folder = Path(tempfile.mkdtemp(prefix="hpsearch-mps-"))
        env = {"CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(folder / "log")}
        for path in env.values():
            Path(path).mkdir()
        try:
            done = subprocess.run([control, "-d"], env={**os.environ, **env}, capture_output=True, text=True,
                                  timeout=_START_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            shutil.rmtree(folder, ignore_errors=True)
            return f"{MPS_CONTROL} -d failed: {exc}"
        if done.returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            return f"{MPS_CONTROL} -d exited with {done.returncode}: {(done.stderr or done.stdout).strip()[:200]}"
        deadline = time.monotonic() + _START_S
        while not (folder / "pipe" / "control").exists():
            if time.monotonic() > deadline:
                self._folder, self.env = folder, env
                self.stop()
                return f"the daemon did not open its pipe within {_START_S:g} s (is the GPU in exclusive mode?)"
            time.sleep(0.05)
        self._folder, self.env = folder, env
        return None

    def stop(self) -> None:
        """Stop the daemon (if this search started one) and remove its folders."""
        if self._folder is None:
            return
        control = shutil.which(MPS_CONTROL)
        if control is not None:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run([control], input="quit\n", env={**os.environ, **self.env}, capture_output=True,
                               text=True, timeout=_START_S)
        shutil.rmtree(self._folder, ignore_errors=True)
        self._folder, self.env = None, {}
