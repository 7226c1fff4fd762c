"""Packing trials onto a cluster: whole reservations, concurrency from resources, early refusal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpsearch.errors import ResourceError, SpaceError
from hpsearch.planner.plan import plan_search
from hpsearch.search_spaces import parse_space
from hpsearch.settings import Settings

SPACE = """\
parameters:
  per_device_batch_size: 32
  world_size: {choices: WORLD}
  base_lr: 0.01
resources: {device: DEVICE, cpus_per_worker: CPUS, emulate_ranks: EMULATE, span_nodes: SPAN}
"""


def _space(world: str = "[1, 2]", device: str = "cpu", cpus: int = 1, emulate: str = "auto", span: str = "auto"):
    return parse_space(SPACE.replace("WORLD", world).replace("DEVICE", device).replace("CPUS", str(cpus))
                       .replace("EMULATE", emulate).replace("SPAN", span))


def _plan(space, *nodes: dict[str, float]):
    return plan_search(space, "s", Settings(storage="sqlite:///x.db"), {"alive_nodes": list(nodes)})


def test_concurrency_is_as_many_of_the_smallest_trials_as_every_node_holds() -> None:
    assert _plan(_space(), {"CPU": 2}).max_concurrent == 2
    assert _plan(_space(), {"CPU": 8}, {"CPU": 3}).max_concurrent == 11
    assert _plan(_space("[2, 4]", cpus=2), {"CPU": 8}, {"CPU": 6}).max_concurrent == 2 + 1
    gpu = _space("[1, 2]", device="cuda")
    assert _plan(gpu, {"CPU": 32, "GPU": 4}, {"CPU": 32, "GPU": 2}).max_concurrent == 6
    assert _plan(gpu, {"CPU": 32, "GPU": 4}).device == "cuda"


def test_a_trial_bigger_than_every_node_spans_nodes_or_is_refused_before_the_search() -> None:
    # span_nodes: false, emulate_ranks: off: a trial no node holds is refused, saying what would run it.
    with pytest.raises(ResourceError) as caught:
        _plan(_space("[1, 8]", emulate="off", span="false"), {"CPU": 4}, {"CPU": 6})
    assert "a trial with world_size 8 needs 8 CPU on one node, but the largest node has 6 CPU" in str(caught.value)
    assert "set resources.span_nodes: auto" in str(caught.value)
    assert "set resources.emulate_ranks: auto" in str(caught.value)
    # span_nodes: auto (the default): it runs across the nodes, 8 real ranks on 4 + 6 CPUs.
    spanning = _plan(_space("[1, 8]", emulate="off"), {"CPU": 4}, {"CPU": 6})
    assert (spanning.devices, spanning.node_devices) == (10, 6)
    # More ranks than the whole cluster holds: refused, naming what the cluster holds.
    with pytest.raises(ResourceError, match=r"needs 16 CPU, but the cluster's 2 nodes hold 10 processes"):
        _plan(_space("[16]", emulate="off"), {"CPU": 4}, {"CPU": 6})

    with pytest.raises(ResourceError, match="no node of the Ray cluster has a GPU"):
        _plan(_space(device="cuda"), {"CPU": 64})
    with pytest.raises(ResourceError, match=r"needs 4 CPU, 4 GPU on as many GPUs .* on one node"):
        _plan(_space("[4]", device="cuda", emulate="off", span="false"), {"CPU": 64, "GPU": 2}, {"CPU": 64, "GPU": 3})
    # emulate_ranks: auto (the default): ranks are played by fewer processes only where the
    # cluster has fewer devices than the world size (one node's, with span_nodes: false).
    assert _plan(_space("[1, 8]"), {"CPU": 4}, {"CPU": 6}).devices == 10
    assert _plan(_space("[1, 16]"), {"CPU": 4}, {"CPU": 6}).devices == 10
    assert _plan(_space("[1, 8]", span="false"), {"CPU": 4}, {"CPU": 6}).devices == 6
    assert _plan(_space("[4]", device="cuda"), {"CPU": 64, "GPU": 2}, {"CPU": 64, "GPU": 3}).devices == 5
    # One rank that fits on no node is refused even so.
    with pytest.raises(ResourceError, match="needs 8 CPU on one node"):
        _plan(_space("[1, 2]", cpus=8), {"CPU": 4}, {"CPU": 6})


def test_span_nodes_is_auto_or_false() -> None:
    assert _space().resources.span_nodes == "auto"
    for raw in ("false", "off", "no", "False"):
        assert _space(span=raw).resources.span_nodes == "false"
    with pytest.raises(SpaceError) as caught:
        _space(span="always")
    assert caught.value.key_path == "resources.span_nodes" and caught.value.line == 5
    assert "must be 'auto'" in caught.value.reason and "'always'" in caught.value.reason


def test_start_refuses_a_space_this_machine_can_never_run_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(
        "study: too-big\n" + SPACE.replace("WORLD", "[1, 32]").replace("DEVICE", "cpu").replace("CPUS", "1")
        .replace("EMULATE", "off").replace("SPAN", "auto"))
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)

    assert result.returncode == 2, result.stdout + result.stderr
    assert "error: a trial with world_size 32 needs 32 CPU on one node" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "hpsearch.db").exists()  # nothing written


def test_an_address_where_no_cluster_answers_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on once the socket closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "space.yaml").write_text(
        "study: nowhere\n" + SPACE.replace("WORLD", "[1]").replace("DEVICE", "cpu").replace("CPUS", "1")
        .replace("EMULATE", "auto").replace("SPAN", "auto"))
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--address",
                             f"127.0.0.1:{port}", "--no-progress"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)

    assert result.returncode == 2, result.stdout + result.stderr
    assert f"error: cannot join the Ray cluster at 127.0.0.1:{port}: nothing answers there" in result.stderr
    assert "Traceback" not in result.stderr
