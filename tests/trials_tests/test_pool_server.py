"""A rank pool served to other processes: how every trial of a search reaches its ranks (the
search's process serves its own node's pool on a Unix socket, a pool actor serves any other
node's on a TCP port)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from collections.abc import Iterator
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from pathlib import Path

import pytest

from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.launcher import run_trial
from hpsearch.trials.node.pool import RankPool
from hpsearch.trials.node.pool_server import PoolClient, PoolServer
from hpsearch.trials.spec import TrialSpec

OK = dict(per_device_batch_size=32, base_lr=0.05, epochs=1, workload="digits_mlp", hyperparameters={"momentum": 0.9})
COMPARED = ("val_loss", "val_accuracy", "train_loss", "samples_seen", "steps", "noise_scale")


@pytest.fixture(scope="module")
def served() -> Iterator[PoolServer]:
    pool = RankPool(["hpsearch.trials.workloads.digits"], prestart={None: 2})
    server = PoolServer(pool)
    yield server
    server.close()
    pool.close()


def test_a_trial_through_the_socket_trains_as_through_the_pool_itself(served: PoolServer, tmp_path: Path) -> None:
    spec = TrialSpec(**dict(OK, world_size=2))
    seen: list[dict[str, object]] = []
    with PoolClient(served.address) as client:
        remote = run_trial(spec, tmp_path / "remote", ranks=client, report=seen.append)
    direct = run_trial(spec, tmp_path / "direct", ranks=served.pool)

    assert {k: remote[k] for k in COMPARED} == {k: direct[k] for k in COMPARED}
    assert seen and seen[-1]["final"] is True  # the reports streamed through the socket
    # The ranks ran in the served pool's warm processes, which stay warm for the next trial.
    workers = served.pool.workers()
    assert len(workers) == 2 and all(w["state"] == "idle" and w["tasks"] >= 2 for w in workers)


def test_a_failed_trial_keeps_its_reason_across_the_socket(served: PoolServer, tmp_path: Path) -> None:
    # A CUDA trial without GPU ids is refused by the pool itself.
    spec = TrialSpec(**dict(OK, world_size=2, device="cuda"))
    with PoolClient(served.address) as client, pytest.raises(TrialFailed) as failed:
        run_trial(spec, tmp_path / "run", ranks=client)
    assert failed.value.reason == "rank_exited"
    assert "needs GPUs" in failed.value.detail


def test_a_client_without_the_key_is_refused_and_the_server_goes_on(served: PoolServer, tmp_path: Path) -> None:
    with pytest.raises(AuthenticationError):
        Client(served.address.address, family="AF_UNIX", authkey=b"not the key")
    with PoolClient(served.address) as client:
        final = run_trial(TrialSpec(**dict(OK, world_size=1)), tmp_path / "run", ranks=client)
    assert final["epochs_completed"] == 1


def test_closing_the_server_removes_its_socket(tmp_path: Path) -> None:
    pool = RankPool([], prestart={None: 0})
    server = PoolServer(pool)
    assert isinstance(server.address.address, str) and os.path.exists(server.address.address)
    server.close()
    pool.close()
    assert not os.path.exists(server.address.address)
    # A trial that cannot reach its node's pool fails, saying where it tried, and raises nothing else.
    with pytest.raises(TrialFailed) as failed:
        run_trial(TrialSpec(**dict(OK, world_size=1)), tmp_path / "run", ranks=PoolClient(server.address))
    assert failed.value.reason == "rank_exited"
    assert f"cannot reach the node's rank pool at {server.address.address}" in failed.value.detail


def test_a_pool_served_on_a_host_address_trains_as_through_the_pool_itself(tmp_path: Path) -> None:
    # How a pool actor serves its node's pool: on a TCP port of the node's address, so that a
    # trial whose process runs on another node reaches it too.
    pool = RankPool(["hpsearch.trials.workloads.digits"], prestart={None: 2})
    server = PoolServer(pool, host="127.0.0.1")
    try:
        assert isinstance(server.address.address, tuple) and server.address.address[0] == "127.0.0.1"
        spec = TrialSpec(**dict(OK, world_size=2))
        with PoolClient(server.address) as client:
            remote = run_trial(spec, tmp_path / "remote", ranks=client)
        direct = run_trial(spec, tmp_path / "direct", ranks=pool)
        assert {k: remote[k] for k in COMPARED} == {k: direct[k] for k in COMPARED}
        with pytest.raises(AuthenticationError):
            Client(server.address.address, authkey=b"not the key")
    finally:
        server.close()
        pool.close()


_TRIAL_PROCESS = """
import pickle, sys, time
from hpsearch.trials.node.pool_server import PoolClient
from hpsearch.trials.spec import TrialSpec
address, fields, run = pickle.loads(bytes.fromhex(sys.argv[1]))
client = PoolClient(address)
client.start(TrialSpec(**fields), run)
print("started", flush=True)
time.sleep(120)
"""


def test_the_ranks_of_a_trial_whose_process_died_are_stopped(served: PoolServer, tmp_path: Path) -> None:
    # A trial's process killed mid-trial (Tune stopped it, a user killed it): its connection
    # closes, and the server stops the ranks it started instead of leaving them to train for nobody.
    fields = dict(OK, world_size=2, epochs=200)
    argument = pickle.dumps((served.address, fields, str(tmp_path / "run"))).hex()
    with subprocess.Popen([sys.executable, "-c", _TRIAL_PROCESS, argument], stdout=subprocess.PIPE,
                          text=True) as trial_process:
        try:
            assert trial_process.stdout is not None and trial_process.stdout.readline().strip() == "started"
            ranks = {w["pid"] for w in served.pool.workers() if w["state"] == "busy"}
            assert len(ranks) == 2
        finally:
            trial_process.kill()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and sorted(w["state"] for w in served.pool.workers()) != ["idle", "idle"]:
        time.sleep(0.2)
    # The two ranks were stopped and fresh processes replaced them.
    for pid in ranks:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert [w["state"] for w in served.pool.workers()] == ["idle", "idle"]
