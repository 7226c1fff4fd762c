"""``hpsearch export-trial`` of a trial whose ranks spanned nodes: ``launch.sh`` runs torchrun's
c10d rendezvous on as many nodes, each node's process count and the endpoint taken from
``NODE_RANK`` and ``RDZV_ENDPOINT`` (or ``MASTER_ADDR``/``MASTER_PORT``); without them it stops
with one line (exit 2). A single-node trial keeps its ``--standalone`` launch, and ``--nodes``
sets the layout at another world size.

Most tests run the written ``launch.sh`` against a stand-in ``torchrun`` that prints its
arguments: what each node would run, without training. The last one runs the job for real,
as two nodes on this machine. The studies are written as ``hpsearch start`` writes them,
without running a search."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from click.testing import CliRunner
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from hpsearch import record
from hpsearch.cli import cli
from hpsearch.search_spaces import parse_space
from hpsearch.store import open_storage, study_attrs

SPACE = """\
study: nodes
workload: {name: digits_mlp, epochs: 1}
scaling: {base_batch_size: 32}
parameters:
  per_device_batch_size: 32
  world_size: {choices: [1, 2, 3, 4]}
  lr_rule: linear
  base_lr: 0.05
search: {sampler: grid, n_trials: 4, seed: 0}
resources: {device: cpu, cpus_per_worker: 1}
"""

#: The variables a node's launch reads, kept out of the launches' environment unless a test sets them.
NODE_VARIABLES = ("NODE_RANK", "RDZV_ENDPOINT", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A store of the space above holding, by number: #0 W 4 on 2 nodes, #1 W 3 on 2 nodes,
    #2 W 2 on 1 node, #3 W 2 recorded before trials could span nodes (no nodes attrs)."""
    space = parse_space(SPACE)
    url = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    study = optuna.create_study(study_name=space.study, storage=open_storage(url), direction="maximize")
    study.set_metric_names(["val_accuracy"])
    for key, value in study_attrs(SPACE, ["val_accuracy"], space.search.n_trials).items():
        study.set_user_attr(key, value)
    for world_size, nodes in ((4, 2), (3, 2), (2, 1), (2, None)):
        params = {name: getattr(p, "value", None) for name, p in space.parameters.items()}
        params[record.WORLD_SIZE] = world_size
        attrs: dict[str, Any] = {"device": "cpu", "val_accuracy": 0.9}
        if nodes is not None:
            attrs.update({record.NODES: nodes, record.NODE_IDS: [f"node-{i}" for i in range(nodes)]})
        distributions = {k: CategoricalDistribution([v]) for k, v in params.items()}
        distributions[record.WORLD_SIZE] = CategoricalDistribution([1, 2, 3, 4])
        study.add_trial(create_trial(params=params, distributions=distributions, values=[0.9], user_attrs=attrs))
    return url


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    """A folder holding a ``torchrun`` that prints its arguments, and the ``python`` beside it
    that ``launch.sh`` checks the modules with (this environment's, where hpsearch imports)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "torchrun").write_text('#!/bin/sh\necho "$@"\n')
    (folder / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    for name in ("torchrun", "python"):
        (folder / name).chmod(0o755)
    return folder


def _export(url: str, number: int, folder: Path, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["export-trial", "nodes", str(number), "-o", str(folder), "--storage", url,
                                      "--json", *args])
    assert result.exit_code == 0, result.output
    written: dict[str, Any] = json.loads(result.stdout)
    return written


def _launch(script: Path, bin_folder: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in NODE_VARIABLES}
    env["PATH"] = os.pathsep.join([str(bin_folder), os.environ.get("PATH", "")])
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, env={**env, **variables},
                          timeout=400)


def test_a_trial_that_spanned_nodes_exports_a_launch_for_as_many_nodes(store: str, tmp_path: Path,
                                                                       stand_in: Path) -> None:
    job = _export(store, 0, tmp_path / "job")
    assert (job["nodes"], job["processes_per_node"], job["trial_nodes"], job["nodes_from"]) == (2, [2, 2], 2, "trial")
    config = json.loads((tmp_path / "job" / "trial.json").read_text())
    assert config["layout"]["nodes"] == 2
    assert config["layout"]["processes_per_node"] == [2, 2]
    assert config["layout"]["nodes_from"] == "trial"
    assert (config["trial_nodes"], config["recorded"][record.NODE_IDS]) == (2, ["node-0", "node-1"])
    script = tmp_path / "job" / "launch.sh"
    assert "NODE_RANK=1 RDZV_ENDPOINT=node0.example:29400 bash launch.sh" in script.read_text()  # how to run it

    config_path = tmp_path / "job" / "trial.json"
    for node, host in ((0, "true"), (1, "false")):
        launched = _launch(script, stand_in, NODE_RANK=str(node), RDZV_ENDPOINT="node0.example:29500")
        assert launched.returncode == 0, launched.stderr
        assert launched.stdout == (
            "--nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint node0.example:29500 "
            f"--rdzv-id nodes-trial-0 --rdzv-conf is_host={host} -m hpsearch.trials.run {config_path}\n")


def test_ranks_that_do_not_divide_among_the_nodes_put_the_larger_share_on_node_0(
        store: str, tmp_path: Path, stand_in: Path) -> None:
    assert _export(store, 1, tmp_path / "job")["processes_per_node"] == [2, 1]
    script = tmp_path / "job" / "launch.sh"
    processes = []
    for node in (0, 1):
        # MASTER_ADDR and MASTER_PORT, as a cluster's scheduler sets them, stand in for RDZV_ENDPOINT.
        launched = _launch(script, stand_in, NODE_RANK=str(node), MASTER_ADDR="10.0.0.5", MASTER_PORT="29500")
        assert launched.returncode == 0, launched.stderr
        assert "--rdzv-endpoint 10.0.0.5:29500 " in launched.stdout
        processes.append(int(launched.stdout.split("--nproc-per-node ")[1].split()[0]))
    assert processes == [2, 1]  # 3 ranks in all


@pytest.mark.parametrize("number", [2, 3], ids=["one-node", "recorded-before-spanning"])
def test_a_single_node_trial_keeps_the_standalone_launch(number: int, store: str, tmp_path: Path,
                                                         stand_in: Path) -> None:
    job = _export(store, number, tmp_path / "job")
    assert (job["nodes"], job["processes_per_node"], job["trial_nodes"]) == (1, [2], 1)
    script = tmp_path / "job" / "launch.sh"
    assert "NODE_RANK" not in script.read_text()
    launched = _launch(script, stand_in)  # no node variables needed
    assert launched.returncode == 0, launched.stderr
    assert launched.stdout == f"--standalone --nproc-per-node 2 -m hpsearch.trials.run {tmp_path / 'job' / 'trial.json'}\n"


@pytest.mark.parametrize(("variables", "message"), [
    ({"RDZV_ENDPOINT": "node0:29500"},
     "error: NODE_RANK is not set: this node's rank among the job's 2 nodes, 0 to 1 (0 on the node RDZV_ENDPOINT "
     "names)"),
    ({"NODE_RANK": "2", "RDZV_ENDPOINT": "node0:29500"},
     "error: NODE_RANK is '2': it must be this node's rank among the job's 2 nodes, 0 to 1"),
    ({"NODE_RANK": "0"},
     "error: RDZV_ENDPOINT is not set: node 0's HOST:PORT, the same on every node (or set MASTER_ADDR and "
     "MASTER_PORT)"),
    ({"NODE_RANK": "1", "MASTER_ADDR": "node0"},
     "error: MASTER_PORT is not set: the port of node 0's rendezvous, the same on every node (or set "
     "RDZV_ENDPOINT=HOST:PORT)"),
], ids=["no-node-rank", "node-rank-out-of-range", "no-endpoint", "no-master-port"])
def test_a_multi_node_launch_without_its_variables_stops_with_one_line(
        variables: dict[str, str], message: str, store: str, tmp_path: Path, stand_in: Path) -> None:
    _export(store, 0, tmp_path / "job")
    launched = _launch(tmp_path / "job" / "launch.sh", stand_in, **variables)
    assert (launched.returncode, launched.stderr, launched.stdout) == (2, message + "\n", "")  # torchrun not run


def test_the_nodes_option_sets_the_layout_and_another_world_size_defaults_to_one_node(
        store: str, tmp_path: Path) -> None:
    # The trial ran W 4 on 2 nodes: at W 8 its node count says nothing of the new job's.
    other = _export(store, 0, tmp_path / "w8", "--world-size", "8")
    assert (other["nodes"], other["processes_per_node"], other["nodes_from"]) == (1, [8], "other world size")
    assert "--standalone --nproc-per-node 8 " in (tmp_path / "w8" / "launch.sh").read_text()
    asked = _export(store, 0, tmp_path / "w8x2", "--world-size", "8", "--nodes", "2")
    assert (asked["nodes"], asked["processes_per_node"], asked["nodes_from"]) == (2, [4, 4], "option")
    assert json.loads((tmp_path / "w8x2" / "trial.json").read_text())["layout"]["nodes_from"] == "option"
    single = _export(store, 0, tmp_path / "one", "--nodes", "1")  # the spanning trial, on one node
    assert (single["nodes"], single["processes_per_node"]) == (1, [4])
    human = CliRunner().invoke(cli, ["export-trial", "nodes", "2", "-o", str(tmp_path / "w2x2"), "--storage", store,
                                     "--nodes", "2"])
    assert human.exit_code == 0, human.output
    assert "cpu, 2 nodes (1 + 1 processes)" in human.stdout
    assert (f"  run it on each node, with the same endpoint (node 0's address and a free port): "
            f"NODE_RANK=<0 to 1> RDZV_ENDPOINT=HOST:PORT bash {tmp_path / 'w2x2' / 'launch.sh'}\n") in human.stdout


def test_more_nodes_than_ranks_is_refused(store: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["export-trial", "nodes", "0", "-o", str(tmp_path / "job"), "--storage", store,
                                      "--nodes", "5"])
    assert result.exit_code == 2
    assert result.stderr == ("error: a job runs on 1 to world size nodes (each node runs at least one rank): got 5 "
                             "nodes for world size 4\n")
    assert not (tmp_path / "job").exists()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_the_exported_job_runs_as_two_nodes_of_one_process(store: str, tmp_path: Path) -> None:
    # The W 2 trial exported for 2 nodes, each node a launch.sh on this machine, meeting at a
    # free local port: torchrun's own rendezvous, gloo between the two processes.
    _export(store, 2, tmp_path / "job", "--nodes", "2")
    env = {k: v for k, v in os.environ.items() if k not in NODE_VARIABLES}
    # torchrun from the environment hpsearch is installed in, as on a user's PATH.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    endpoint = f"127.0.0.1:{_free_port()}"
    nodes = [subprocess.Popen(["bash", str(tmp_path / "job" / "launch.sh")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**env, "NODE_RANK": str(node), "RDZV_ENDPOINT": endpoint}) for node in (0, 1)]
    try:
        ended = [node.communicate(timeout=300) for node in nodes]
    finally:
        for node in nodes:  # torchrun stops its workers on SIGTERM (SIGKILL would orphan them)
            if node.poll() is None:
                node.terminate()
                node.wait(timeout=60)
    assert [node.returncode for node in nodes] == [0, 0], [err[-3000:] for _, err in ended]
    final = json.loads((tmp_path / "job" / "metrics.json").read_text())
    assert (final["world_size"], final["processes"], final["epochs_completed"]) == (2, 2, 1)
