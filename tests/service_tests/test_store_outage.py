"""The store goes away mid-search: a PostgreSQL server this test starts, stops and restarts.

A restart within ``HPSEARCH_STORE_PATIENCE_S`` is ridden out and the search finishes; an outage
past it stops the search cleanly, keeps every finished trial, and ``hpsearch resume`` finishes
the study once the server is back.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch.store import open_storage
from hpsearch.study.reasons import counts_toward_n_trials

SPACE = """\
study: outage
workload: {name: digits_mlp, epochs: 40}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: {choices: [16, 32]}
  world_size: 1
  lr_rule: {choices: [linear, sqrt]}
  base_lr: 0.01
search: {sampler: grid, seed: 0}
resources: {device: cpu}
"""

PG_BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"))


class PrivatePostgres:
    """A throwaway PostgreSQL server in a temp folder, on a free port."""

    def __init__(self) -> None:
        self.data = Path(tempfile.mkdtemp(prefix="hppg-", dir="/tmp"))  # short: it holds the socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        # initdb refuses to run as root: run the server as the postgres user then.
        self.prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.prefix:
            shutil.chown(self.data, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.prefix, f"{PG_BIN[-1]}/{tool}", *args], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.data / "log"), "-w", "-o",
                  f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")


@pytest.fixture
def private_postgres(unavailable: Callable[[str], NoReturn]) -> Iterator[PrivatePostgres]:
    if not PG_BIN or (os.geteuid() == 0 and shutil.which("runuser") is None):
        unavailable("needs PostgreSQL's server binaries (initdb, pg_ctl: the Debian package postgresql) "
                    "to start a private server")
    server = PrivatePostgres()
    server.start()
    open_storage(server.url)  # Optuna's tables exist before the search and the test both open the store
    try:
        yield server
    finally:
        subprocess.run([*server.prefix, f"{PG_BIN[-1]}/pg_ctl", "-D", str(server.data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(server.data, ignore_errors=True)


def _trials(url: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="outage", storage=open_storage(url)).get_trials()


def _start(work: Path, url: str, patience: int) -> subprocess.Popen[str]:
    env = {**os.environ, "HPSEARCH_STORE_PATIENCE_S": str(patience)}
    return subprocess.Popen([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--storage", url,
                             "--no-progress"], cwd=work, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _wait_for_one_done_one_running(proc: subprocess.Popen[str], url: str) -> dict[int, list[float]]:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            trials = _trials(url)
        except KeyError:
            trials = []
        done = {t.number: t.values for t in trials if t.state == TrialState.COMPLETE}
        if done and any(t.state == TrialState.RUNNING for t in trials):
            return done
        time.sleep(0.5)
    pytest.fail("the search never had a finished and a running trial at once")


@pytest.mark.slow
def test_a_store_restart_mid_search_is_ridden_out(private_postgres: PrivatePostgres, tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    proc = _start(tmp_path, private_postgres.url, patience=120)
    try:
        done = _wait_for_one_done_one_running(proc, private_postgres.url)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
        reader.start()
        private_postgres.stop()
        # The server stays down until the search has hit the outage (the running trials report
        # their next epoch into the void), so the test cannot pass without one.
        deadline = time.monotonic() + 120
        while not any("does not answer" in line for line in lines) and time.monotonic() < deadline:
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        time.sleep(2)
        private_postgres.start()
        proc.wait(timeout=300)
        reader.join(timeout=10)
        err = "".join(lines)
        out = proc.stdout.read() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()

    assert proc.returncode == 0, out + err
    assert "does not answer" in err and "answers again after" in err
    assert "Traceback" not in err
    trials = _trials(private_postgres.url)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    for t in trials:
        if t.number in done:
            assert t.values == done[t.number]
        assert t.user_attrs["epochs_completed"] == 40


@pytest.mark.slow
def test_a_store_gone_for_good_stops_the_search_and_resume_finishes_it(
    private_postgres: PrivatePostgres, tmp_path: Path
) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    proc = _start(tmp_path, private_postgres.url, patience=3)
    try:
        done = _wait_for_one_done_one_running(proc, private_postgres.url)
        private_postgres.stop()
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()

    assert proc.returncode == 1, out + err
    assert "did not answer for 3 s" in err and "hpsearch resume" in err
    assert "Traceback" not in err
    private_postgres.start()
    resumed = subprocess.run([sys.executable, "-m", "hpsearch", "resume", "outage", "--storage",
                              private_postgres.url, "--no-progress"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    trials = _trials(private_postgres.url)
    for number, values in done.items():
        assert trials[number].state == TrialState.COMPLETE and trials[number].values == values
    assert sum(counts_toward_n_trials(t) for t in trials) == 4
    complete = [tuple(sorted(t.params.items())) for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == len(set(complete)) == 4
