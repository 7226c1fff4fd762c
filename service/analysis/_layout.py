"""The nodes a recommendation's devices sit on: "16 devices on 2 nodes of 8".

A DDP run of W ranks that no node holds spans nodes, and its all-reduce then crosses the link
between nodes, the ring's slowest (``hpsearch.analysis.ThroughputModel``, ``t_ar_inter``). The
answer for N devices therefore assumes how many devices a node holds, G: the one given
(``--devices-per-node``), or by default the most devices any trial of the study ran on one node
(a trial that did not span nodes: its world size over its emulated ranks, as the analysis counts
devices), said as an assumption with the trial it comes from. A run of W ranks then takes
ceil(W / G) nodes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpsearch import record
from hpsearch.errors import AnalysisError

__all__ = ["NodeLayout", "node_layout"]


@dataclass(frozen=True)
class NodeLayout:
    """N devices on nodes of G devices each, and where G comes from.

    Attributes:
        devices: N, the devices the answer may use.
        devices_per_node: G, the devices one node holds.
        assumed: G was not given but read off the study's trials (``source`` says how).
        source: Where G comes from, in a phrase.

    Example:
        >>> layout = NodeLayout(16, 8, assumed=False, source="given")
        >>> str(layout), layout.nodes, layout.nodes_of(12), layout.nodes_of(4)
        ('16 devices on 2 nodes of 8', 2, 2, 1)
    """

    devices: int
    devices_per_node: int
    assumed: bool
    source: str

    @property
    def nodes(self) -> int:
        """The nodes N devices take: ceil(N / G)."""
        return self.nodes_of(self.devices)

    def nodes_of(self, world_size: int) -> int:
        """The nodes a run of ``world_size`` ranks takes: ceil(W / G)."""
        return max(1, math.ceil(world_size / self.devices_per_node))

    def __str__(self) -> str:
        return (f"{_count(self.devices, 'device')} on {_count(self.nodes, 'node')} of "
                f"{self.devices_per_node}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data: the layout's numbers, its text and where G comes from."""
        return {"devices": self.devices, record.NODES: self.nodes, "devices_per_node": self.devices_per_node,
                "assumed": self.assumed, "source": self.source, "text": str(self)}


def node_layout(trials: Sequence[Mapping[str, Any]], devices: int, devices_per_node: int | None = None,
                device_kind: str | None = None) -> NodeLayout:
    """The layout of ``devices`` devices: on nodes of ``devices_per_node``, or by default of the
    most devices a trial of ``device_kind`` ran on one node.

    Args:
        trials: The study's trials as the analysis has them (``StudyAnalysis.trials``: each with
            its ``device``, its ``devices`` and its ``nodes``).
        devices: N.
        devices_per_node: G; ``None`` reads it off the trials.
        device_kind: The device kind the answer is for: the trials of that kind tell G (all the
            trials where none ran on it).

    Raises:
        AnalysisError: ``devices`` or ``devices_per_node`` below 1.

    Example:
        >>> trials = [{"number": 0, "device": "cpu", "devices": 4.0, "nodes": 1},
        ...           {"number": 1, "device": "cpu", "devices": 8.0, "nodes": 2}]
        >>> print(node_layout(trials, 8))
        8 devices on 2 nodes of 4
        >>> node_layout(trials, 8).source
        'assumed from trial #0: 4 devices on one node, the most any trial of the study ran'
    """
    if devices < 1:
        raise AnalysisError(f"devices must be 1 or more, got {devices}")
    if devices_per_node is not None:
        if isinstance(devices_per_node, bool) or not isinstance(devices_per_node, int) or devices_per_node < 1:
            raise AnalysisError(f"devices per node must be a whole number of 1 or more, got {devices_per_node!r}")
        return NodeLayout(devices, devices_per_node, assumed=False, source="given")
    ran = [t for t in trials if t.get("device") is not None]
    of_kind = [t for t in ran if t["device"] == device_kind] or ran
    within = [t for t in of_kind if _nodes(t) == 1]
    if within:
        most = max(within, key=lambda t: (_devices(t), -int(t["number"])))
        return NodeLayout(devices, _devices(most), assumed=True,
                          source=f"assumed from trial #{most['number']}: {_count(_devices(most), 'device')} on one "
                                 "node, the most any trial of the study ran")
    if of_kind:
        # Only trials that spanned nodes: an even share of each is a lower bound on what a
        # node held.
        most = max(of_kind, key=lambda t: (math.ceil(_devices(t) / _nodes(t)), -int(t["number"])))
        share = math.ceil(_devices(most) / _nodes(most))
        return NodeLayout(devices, share, assumed=True,
                          source=f"assumed from trial #{most['number']}: {_count(_devices(most), 'device')} on "
                                 f"{_nodes(most)} nodes, the most per node of any trial (every trial spanned nodes)")
    return NodeLayout(devices, devices, assumed=True,
                      source="assumed: one node holds them all, as no trial recorded its devices")


def _devices(trial: Mapping[str, Any]) -> int:
    return max(1, int(trial.get("devices") or 1))


def _nodes(trial: Mapping[str, Any]) -> int:
    return max(1, int(trial.get(record.NODES) or 1))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
