"""A rank pool served over a local socket: what the search's process does for its own node's
trials, so that its warm processes start before Ray."""

from __future__ import annotations

import os
from collections.abc import Iterator
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from pathlib import Path

import pytest

from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.launcher import run_trial
from hpsearch.trials.pool import RankPool
from hpsearch.trials.pool_server import PoolClient, PoolServer
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
    with PoolClient(served.address, served.authkey) as client:
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
    with PoolClient(served.address, served.authkey) as client, pytest.raises(TrialFailed) as failed:
        run_trial(spec, tmp_path / "run", ranks=client)
    assert failed.value.reason == "rank_exited"
    assert "needs GPUs" in failed.value.detail


def test_a_client_without_the_key_is_refused_and_the_server_goes_on(served: PoolServer, tmp_path: Path) -> None:
    with pytest.raises(AuthenticationError):
        Client(served.address, family="AF_UNIX", authkey=b"not the key")
    with PoolClient(served.address, served.authkey) as client:
        final = run_trial(TrialSpec(**dict(OK, world_size=1)), tmp_path / "run", ranks=client)
    assert final["epochs_completed"] == 1


def test_closing_the_server_removes_its_socket(tmp_path: Path) -> None:
    pool = RankPool([], prestart={None: 0})
    server = PoolServer(pool)
    assert os.path.exists(server.address)
    server.close()
    pool.close()
    assert not os.path.exists(server.address)
    with pytest.raises(OSError):
        PoolClient(server.address, server.authkey)
