"""A trial whose ranks span two nodes' pools trains the model one pool trains, meets at rank
0's address over TCP, fails naming that address when it cannot be reached, and fails as
``peer_lost`` when a node's pool goes away. Two pools of this machine play two nodes, each
served on a TCP port of the loopback address as a node's pool actor serves it (the test with
two Ray nodes are in tests/service_tests/test_cluster.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.launcher import run_trial
from hpsearch.trials.node.network import rank_environment
from hpsearch.trials.node.pool import RankPool
from hpsearch.trials.node.pool_server import PoolAddress, PoolServer
from hpsearch.trials.node.span import NodeShare, SpanningRanks
from hpsearch.trials.spec import TrialSpec

SPEC = dict(per_device_batch_size=16, base_lr=0.05, epochs=1, workload="digits_mlp", hyperparameters={"momentum": 0.9})
COMPARED = ("val_loss", "val_accuracy", "train_loss", "samples_seen", "steps", "noise_scale")


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[PoolServer]]:
    servers = []
    for _ in range(2):
        pool = RankPool(["hpsearch.trials.workloads.digits"], prestart={None: 2})
        servers.append(PoolServer(pool, host="127.0.0.1"))
    yield servers
    for server in servers:
        server.close()
        server.pool.close()


def _shares(servers: list[PoolServer], ranks: list[int]) -> list[NodeShare]:
    return [NodeShare(f"node-{i}", "127.0.0.1", n, s.address) for i, (s, n) in enumerate(zip(servers, ranks))]


def test_a_trial_over_two_pools_trains_the_model_of_one_pool(nodes: list[PoolServer], tmp_path: Path) -> None:
    spec = TrialSpec(**dict(SPEC, world_size=3))
    seen: list[dict[str, object]] = []
    with SpanningRanks(_shares(nodes, [2, 1])) as ranks:
        spanned = run_trial(spec, tmp_path / "spanned", ranks=ranks, report=seen.append)
        assert ranks.rendezvous is not None and ranks.rendezvous.startswith("tcp://127.0.0.1:")
    single = RankPool(["hpsearch.trials.workloads.digits"], prestart={None: 3})
    try:
        one = run_trial(spec, tmp_path / "one", ranks=single)
    finally:
        single.close()

    for key in COMPARED:
        assert spanned[key] == pytest.approx(one[key], rel=1e-3), key
    assert seen and seen[-1]["final"] is True  # rank 0's reports came from its node's pool
    # Each node's share ran in its own pool, whose processes stay warm for the next trial.
    assert [sum(w["tasks"] for w in s.pool.workers()) for s in nodes] == [2, 1]


def test_a_rank_that_cannot_reach_rank_0_fails_naming_the_address(nodes: list[PoolServer], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Rank 1 alone, told to meet a rank 0 that never comes: it gives up within the bound.
    monkeypatch.setenv("HPSEARCH_RENDEZVOUS_TIMEOUT_S", "3")
    pool = RankPool(["hpsearch.trials.workloads.digits"], prestart={None: 1})
    try:
        spec = TrialSpec(**dict(SPEC, world_size=2))
        began = time.monotonic()
        ticket = pool.start(spec, str(tmp_path), ranks=[1], rendezvous="tcp://127.0.0.1:9")
        status = pool.wait(ticket, 60)
        while status.codes is None:
            status = pool.wait(ticket, 60)
        took = time.monotonic() - began
    finally:
        pool.close()
    assert status.codes == [1]
    failure = status.failures[0]
    assert failure["reason"] == "peer_lost"
    assert "127.0.0.1:9" in failure["detail"] and "rank 1" in failure["detail"]
    assert took < 30


#: Another "node": a pool served on a TCP port by a process of its own, which the test kills as
#: a machine would go (its rank processes die with it).
NODE = """\
import sys
from hpsearch.trials.node.pool import RankPool
from hpsearch.trials.node.pool_server import PoolAddress, PoolServer
server = PoolServer(RankPool(["hpsearch.trials.workloads.digits"], prestart={None: 1}), host="127.0.0.1")
host, port = server.address.address
print(host, port, server.address.authkey.hex(), flush=True)
sys.stdin.read()
"""


def test_a_node_lost_mid_trial_fails_it_as_peer_lost_and_stops_the_other_node(tmp_path: Path) -> None:
    here = PoolServer(RankPool(["hpsearch.trials.workloads.digits"], prestart={None: 1}), host="127.0.0.1")
    node = subprocess.Popen([sys.executable, "-c", NODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert node.stdout is not None
        host, port, key = node.stdout.readline().split()
        there = PoolAddress((host, int(port)), bytes.fromhex(key))
        shares = [NodeShare("node-0", "127.0.0.1", 1, here.address), NodeShare("node-1", "127.0.0.1", 1, there)]
        spec = TrialSpec(**dict(SPEC, world_size=2, epochs=200))

        def lose_the_node() -> None:  # once the trial trains
            while not (tmp_path / "metrics.jsonl").exists():
                time.sleep(0.05)
            node.kill()

        threading.Thread(target=lose_the_node, daemon=True).start()
        began = time.monotonic()
        with SpanningRanks(shares) as ranks, pytest.raises(TrialFailed) as failed:
            run_trial(spec, tmp_path, ranks=ranks, collective_timeout_s=60)
        assert failed.value.reason == "peer_lost"
        # The node named to the search's desk, which then grants nothing more there.
        assert ranks.lost_nodes == ["node-1"]
        assert time.monotonic() - began < 60  # not the collective timeout: the node's loss is seen
        # Rank 0's node is clean: its rank was stopped and a fresh process takes its place.
        deadline = time.monotonic() + 30
        while any(w["state"] == "busy" for w in here.pool.workers()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(w["state"] == "busy" for w in here.pool.workers())
    finally:
        node.kill()
        node.communicate()
        here.close()
        here.pool.close()


def test_the_ranks_are_told_the_interface_of_their_node_address() -> None:
    interfaces = {"lo": ["127.0.0.1", "::1"], "docker0": ["172.17.0.1"], "eth0": ["10.1.2.3", "fe80::1"]}
    told = rank_environment("10.1.2.3", {}, interfaces)
    assert told == {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0"}
    # What the node's operator set wins: nothing of theirs is overridden.
    assert rank_environment("10.1.2.3", {"NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "eth1"}, interfaces) == {}
    # An address no interface carries (behind NAT): gloo and NCCL choose as they would.
    assert rank_environment("203.0.113.7", {}, interfaces) == {}
    # This machine's loopback, as a test cluster's nodes have it.
    assert rank_environment("127.0.0.1", {})["GLOO_SOCKET_IFNAME"] == "lo"
