"""Two searches at once on one PostgreSQL database, each with its own local Ray: every study
gets exactly its own trials, all finished."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import psutil
import pytest

import hpsearch

pytestmark = pytest.mark.postgres

SPACE = """\
workload: {{name: digits_mlp, epochs: 1}}
parameters:
  per_device_batch_size: {{choices: {batches}}}
  lr_rule: {rule}
  base_lr: 0.01
search: {{sampler: grid, n_trials: 10}}
resources: {{device: cpu}}
"""

#: Two searches whose trials cannot be mistaken for each other's.
SEARCHES = {"a": ([16, 32, 64], "linear"), "b": ([24, 48, 96], "sqrt")}


def _processes_with(marker: str) -> list[psutil.Process]:
    """Live processes whose environment carries ``HPSEARCH_TEST_MARKER=marker``: all that the
    searches started (their drivers, local Rays, Ray workers, trial ranks)."""
    found = []
    for p in psutil.process_iter():
        with suppress(psutil.Error):
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get("HPSEARCH_TEST_MARKER") == marker:
                found.append(p)
    return found


def _left_after(marker: str, timeout_s: float = 30.0) -> list[str]:
    """The marked processes still alive after up to ``timeout_s`` (a local Ray's processes may
    take a moment to exit after their driver)."""
    deadline = time.monotonic() + timeout_s
    while (left := _processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    names = []
    for p in left:
        with suppress(psutil.Error):
            names.append(f"{p.pid} {p.name()}")
    return names


def test_two_searches_at_once_on_one_database_each_finish_exactly_their_own_trials(
    postgres_url: str, unique_name: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "HPSEARCH_STORAGE", "HPSEARCH_RUNS_DIR")}
    env["HPSEARCH_TEST_MARKER"] = marker = str(tmp_path)
    names = {key: f"{unique_name}-{key}" for key in SEARCHES}
    procs = {}
    for key, (batches, rule) in SEARCHES.items():
        work = tmp_path / key
        work.mkdir()
        (work / "space.yaml").write_text(SPACE.format(batches=batches, rule=rule))
        procs[key] = subprocess.Popen(
            [sys.executable, "-m", "hpsearch", "start", "space.yaml", "--storage", postgres_url,
             "--study", names[key], "--no-progress"],
            cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
    outputs = {}
    try:
        for key, proc in procs.items():
            outputs[key] = proc.communicate(timeout=240)
    finally:
        for proc in procs.values():
            if proc.poll() is None:  # a search that ran past the timeout: stop it and its Ray
                proc.kill()
                proc.communicate()
                for p in _processes_with(marker):
                    with suppress(psutil.Error):
                        p.kill()
    for key, proc in procs.items():
        assert proc.returncode == 0, f"search {key}:\n" + "\n".join(outputs[key])
    assert _left_after(marker) == [], "processes of a finished search are still running"

    frames = {key: hpsearch.load(names[key], storage=postgres_url).trials_dataframe() for key in SEARCHES}
    for key, (batches, rule) in SEARCHES.items():
        df = frames[key]
        assert sorted(df.number) == [0, 1, 2]
        assert set(df.state) == {"COMPLETE"}  # none left RUNNING, none failed
        assert sorted(df.per_device_batch_size) == batches
        assert set(df.lr_rule) == {rule}
        assert df.val_accuracy.notna().all() and df.runtime_s.notna().all()
        assert (df.epochs_completed == 1).all()
    # The two searches really overlapped: each started before the other finished.
    a, b = frames["a"], frames["b"]
    assert a.datetime_start.min() < b.datetime_complete.max()
    assert b.datetime_start.min() < a.datetime_complete.max()
