"""`hpsearch start --address` on a real two-node Ray cluster: the trials spread over both nodes.

The cluster is two raylets on this machine, started with the ``ray`` CLI as an operator starts
one: a head node and a worker node of one CPU each, each with its own temp dir. Both nodes have
the machine's IP, so only the trials' ``node_id`` tells them apart. The cluster uses token
authentication (Ray's default) with a token of its own in ``RAY_AUTH_TOKEN``, so it neither
reads nor writes ``~/.ray/auth_token``. Teardown kills exactly this cluster's processes:
``ray stop`` would stop every Ray on the machine.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import psutil
import pytest

import hpsearch

RAY_CLI = Path(sys.executable).with_name("ray")

# Trials of about 2 s whatever the machine (the workload's forward pass sleeps), so that two of
# them train at once: trials of the digits train in a tenth of a second.
SPACE = """\
workload: {name: "benchmarks.workloads.sleepy:sleepy", epochs: 1, options: {samples: 128, sample_s: 0.015}}
parameters:
  per_device_batch_size: {choices: [16, 32, 64, 128]}
  world_size: 1
  base_lr: 0.01
search: {sampler: grid, n_trials: 4}
resources: {device: cpu, cpus_per_worker: 1}
"""

#: A short-lived driver: waits until the cluster has `want` alive nodes, prints them as JSON.
ALIVE_NODES = """\
import json, logging, sys, time
import ray
address, want = sys.argv[1], int(sys.argv[2])
ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
deadline = time.monotonic() + 60
while True:
    alive = [n for n in ray.nodes() if n["Alive"]]
    if len(alive) >= want or time.monotonic() > deadline:
        break
    time.sleep(0.2)
print(json.dumps([{"node_id": n["NodeID"], "ip": n["NodeManagerAddress"], "cpus": n["Resources"].get("CPU", 0)}
                  for n in alive]))
ray.shutdown()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class TwoNodeCluster:
    """A head node and a worker node on this machine, ``cpus`` CPUs each, started with ``ray start``."""

    def __init__(self, cpus: int = 1) -> None:
        self.cpus = cpus
        # Short on purpose: Ray puts Unix sockets under the temp dir, and a socket path may
        # not exceed 107 bytes, which pytest's tmp_path plus Ray's session folder would.
        self.root = Path(tempfile.mkdtemp(prefix="hpray-", dir="/tmp"))
        # Not 6379, Ray's default, which another service (Redis, another Ray) may hold.
        self.address = f"127.0.0.1:{_free_port()}"
        # Every process of the cluster inherits this environment; the marker finds them all.
        self.marker = str(self.root)
        self.env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "HPSEARCH_STORAGE")}
        self.env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32), RAY_USAGE_STATS_ENABLED="0",
                        HPSEARCH_TEST_RAY_CLUSTER=self.marker,
                        # The nodes import the benchmarks' sleeping workload from the project's root.
                        PYTHONPATH=str(Path(__file__).resolve().parents[2]))

    def start(self, *head: str) -> None:
        self._ray_start("head", "--head", f"--port={self.address.rsplit(':', 1)[1]}", "--include-dashboard=false", *head)
        self._ray_start("worker", f"--address={self.address}")

    def _ray_start(self, name: str, *args: str) -> None:
        # The dashboard agent's HTTP port is 52365 unless given, the same for both nodes; it is
        # bound only where ray[default] is installed, and there the second node would clash.
        command = [str(RAY_CLI), "start", *args, f"--num-cpus={self.cpus}", "--num-gpus=0", "--disable-usage-stats",
                   f"--temp-dir={self.root / name}", f"--dashboard-agent-listen-port={_free_port()}",
                   "--object-store-memory=100000000"]
        result = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"ray start ({name}) failed:\n{result.stdout}\n{result.stderr}"

    def alive_nodes(self, want: int = 2) -> list[dict[str, Any]]:
        """The alive nodes (``node_id``, ``ip``, ``cpus``), from a driver in another process."""
        result = subprocess.run([sys.executable, "-c", ALIVE_NODES, self.address, str(want)], env=self.env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        return list(json.loads(result.stdout.strip().splitlines()[-1]))

    def processes(self) -> set[psutil.Process]:
        """This cluster's live processes: those that carry its marker in their command line
        or environment, and their descendants (Ray workers rename themselves; trial ranks)."""
        found: set[psutil.Process] = set()
        for p in psutil.process_iter(["cmdline"]):
            if p.pid == os.getpid():
                continue
            with suppress(psutil.Error):
                if (self.marker in " ".join(p.info["cmdline"] or ())
                        or p.environ().get("HPSEARCH_TEST_RAY_CLUSTER") == self.marker):
                    found.add(p)
                    found.update(p.children(recursive=True))
        return {p for p in found if _alive(p)}

    def lose_worker_node(self) -> int:
        """Kill the worker node, as a machine that goes away: its raylet, its Ray workers and
        what they started (a pool's rank processes). Returns how many processes went."""
        node = str(self.root / "worker")
        procs: set[psutil.Process] = set()
        for p in self.processes():
            with suppress(psutil.Error):
                if node in " ".join(p.cmdline()):
                    procs.add(p)
                    procs.update(p.children(recursive=True))
        for p in procs:
            with suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(procs, timeout=10)
        return len(procs)

    def stop(self) -> list[str]:
        """Kill every process of the cluster, as ``ray stop --force`` would but on this cluster
        only; return a description of any that survive."""
        procs = self.processes()
        for _ in range(3):  # a process may start (a worker) while the others are killed
            for p in procs:
                with suppress(psutil.NoSuchProcess):
                    p.kill()
            psutil.wait_procs(procs, timeout=10)
            procs = {p for p in procs if _alive(p)} | self.processes()
            if not procs:
                break
        shutil.rmtree(self.root, ignore_errors=True)
        survivors = []
        for p in procs:
            with suppress(psutil.NoSuchProcess):
                survivors.append(f"{p.pid} {p.name()}")
        return survivors


@pytest.fixture
def cluster() -> Iterator[TwoNodeCluster]:
    c = TwoNodeCluster()
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.mark.postgres
def test_a_search_joined_to_a_two_node_cluster_runs_its_trials_on_both_nodes(
    postgres_url: str, unique_name: str, cluster: TwoNodeCluster, tmp_path: Path
) -> None:
    nodes = cluster.alive_nodes()
    assert len(nodes) == 2 and all(n["cpus"] == 1 for n in nodes)
    # Two nodes, one IP: only the node id can tell where a trial ran.
    assert len({n["ip"] for n in nodes}) == 1

    (tmp_path / "space.yaml").write_text(SPACE)
    result = subprocess.run(
        [sys.executable, "-m", "hpsearch", "start", "space.yaml", "--address", cluster.address,
         "--storage", postgres_url, "--study", unique_name, "--no-progress"],
        cwd=tmp_path, env=cluster.env, capture_output=True, text=True, timeout=420,
    )
    assert result.returncode == 0, result.stdout + result.stderr

    df = hpsearch.load(unique_name, storage=postgres_url).trials_dataframe()
    assert sorted(df.per_device_batch_size) == [16, 32, 64, 128]
    assert set(df.state) == {"COMPLETE"}
    assert set(df.node_id) == {n["node_id"] for n in nodes}
    assert set(df.node) == {n["ip"] for n in nodes}
    # One CPU per node and one per trial: trials that trained at the same time trained on
    # different nodes (from their recorded phases: asked to told also holds the wait for devices,
    # and a node's CPU passes to the next trial before the last one is told).
    spans = [(p["asked_at"] + p["training_started"], p["asked_at"] + p["training_ended"], node)
             for p, node in zip(df.phases, df.node_id)]
    overlapping = [(a, b) for i, a in enumerate(spans) for b in spans[i + 1:] if a[0] < b[1] and b[0] < a[1]]
    assert overlapping, "no two trials ran at the same time"
    assert all(a[2] != b[2] for a, b in overlapping)

    assert cluster.stop() == [], "processes of the Ray cluster survived its teardown"
    assert not cluster.root.exists()


# ---- trials that span nodes (resources.span_nodes: auto) ---------------------------------------

#: W 4 on two nodes of 2 CPUs spans both; W 1 and 2 fit one node: a search mixing them.
SPANNING = """\
workload: {name: digits_mlp, epochs: 2}
parameters:
  per_device_batch_size: 16
  world_size: {choices: [4, 2, 1]}
  base_lr: {choices: [0.02, 0.05]}
search: {sampler: grid, seed: 0}
resources: {device: cpu, cpus_per_worker: 1}
"""


@pytest.fixture
def two_by_two() -> Iterator[TwoNodeCluster]:
    c = TwoNodeCluster(cpus=2)
    try:
        # Ray marks a node that stopped answering dead after its health checks fail (by
        # default some 15 s; here 1.5 s): until then it places work there, as on any cluster.
        c.start('--system-config={"health_check_period_ms": 500, "health_check_failure_threshold": 3}')
        yield c
    finally:
        c.stop()


def _start(cluster: TwoNodeCluster, space: str, storage: str, name: str, folder: Path,
           timeout: float = 600) -> subprocess.CompletedProcess[str]:
    (folder / "space.yaml").write_text(space)
    return subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--address", cluster.address,
                           "--storage", storage, "--study", name, "--no-progress"],
                          cwd=folder, env=cluster.env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.postgres
def test_trials_wider_than_a_node_span_two_nodes_beside_trials_that_do_not(
    postgres_url: str, unique_name: str, two_by_two: TwoNodeCluster, tmp_path: Path
) -> None:
    from hpsearch.search_spaces import parse_space
    from hpsearch.trials.launcher import run_trial
    from hpsearch.trials.node.pool import RankPool
    from hpsearch.trials.spec import trial_spec

    nodes = two_by_two.alive_nodes()
    assert sorted(n["cpus"] for n in nodes) == [2, 2]
    result = _start(two_by_two, SPANNING, postgres_url, unique_name, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr  # no deadlock: every trial ran

    df = hpsearch.load(unique_name, storage=postgres_url).trials_dataframe()
    assert len(df) == 6 and set(df.state) == {"COMPLETE"}
    wide, narrow = df[df.world_size == 4], df[df.world_size < 4]
    assert list(wide.nodes) == [2, 2] and list(narrow.nodes) == [1] * 4
    assert all(sorted(ids) == sorted(n["node_id"] for n in nodes) for ids in wide.node_ids)
    assert all(list(ids) == [node] for ids, node in zip(narrow.node_ids, narrow.node_id))
    assert set(wide.emulated_ranks) == {1}  # four real ranks, not emulated on one node's two CPUs

    # The same trial with its four ranks on one node of four CPUs trains the same model.
    space = parse_space(SPANNING)
    pool = RankPool(["hpsearch.trials.workloads.digits"], prestart={None: 4})
    try:
        for _, trial in wide.iterrows():
            spec = trial_spec(space, {"world_size": 4, "base_lr": trial.base_lr, "per_device_batch_size": 16},
                              device="cpu", max_processes=4)
            one = run_trial(spec, tmp_path / f"one-{trial.number}", ranks=pool)
            assert abs(one["val_loss"] - trial.val_loss) <= 1e-3 * abs(one["val_loss"]), trial.number
    finally:
        pool.close()


#: A spanning trial long enough to lose a node under it, then one that fits the node left.
LOSING = """\
workload: {name: "benchmarks.workloads.sleepy:sleepy", epochs: 8, options: {samples: 256, sample_s: 0.01}}
parameters:
  per_device_batch_size: 8
  world_size: {choices: [4, 2]}
  base_lr: 0.01
search: {sampler: grid, max_concurrent: 1}
resources: {device: cpu, cpus_per_worker: 1}
"""


@pytest.mark.slow
@pytest.mark.postgres
def test_a_node_lost_under_a_spanning_trial_fails_it_as_peer_lost_and_the_search_goes_on(
    postgres_url: str, unique_name: str, two_by_two: TwoNodeCluster, tmp_path: Path
) -> None:
    import threading
    import time

    lost: list[int] = []

    def lose_the_worker_node_once_the_wide_trial_trains() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with suppress(Exception):  # the study does not exist yet
                df = hpsearch.load(unique_name, storage=postgres_url).trials_dataframe()
                training = df[(df.world_size == 4) & (df.state == "RUNNING")]
                if len(training) and (training.epochs_completed.fillna(0) >= 1).any():
                    lost.append(two_by_two.lose_worker_node())
                    return
            time.sleep(0.3)

    threading.Thread(target=lose_the_worker_node_once_the_wide_trial_trains, daemon=True).start()
    result = _start(two_by_two, LOSING, postgres_url, unique_name, tmp_path)
    assert lost and lost[0] > 0, "the worker node was never lost"
    # The search ends on its own (4: no trial completed, when the next one was lost too, below).
    assert result.returncode in (0, 4), result.stdout + result.stderr

    df = hpsearch.load(unique_name, storage=postgres_url).trials_dataframe().set_index("world_size")
    assert df.loc[4, "state"] == "FAIL" and df.loc[4, "status_reason"] == "peer_lost", df.loc[4].to_dict()
    # The search went on: the next trial ran on the node left, or, where Tune had already put
    # its light driver process on the lost node before Ray declared the node dead, it ended as
    # ``error`` (the driver's node went) rather than waiting for ever.
    assert df.loc[2, "state"] == "COMPLETE" or df.loc[2, "status_reason"] == "error", df.loc[2].to_dict()
