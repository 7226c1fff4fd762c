"""A trial whose ranks span nodes: one DDP job over several nodes' warm rank pools.

A trial of W ranks that no node of the cluster holds runs across nodes
(``resources.span_nodes: auto``): the search's desk grants it units on as few nodes as it can
(``hpsearch.tune.reservations``), and each node's pool runs that node's share of its ranks, rank
0's node first. ``SpanningRanks`` is the trial driver's handle on them all: the same ``Ranks``
as one node's ``PoolClient``, so a trial runs the same way whether it spans nodes or not
(``hpsearch.trials.launcher.run_trial``).

The ranks meet at rank 0's node address: rank 0 serves a ``torch.distributed.TCPStore`` on a
port its node's pool chose, the other ranks connect to it, and every rank then builds the
process group over the network (gloo on CPU, NCCL on GPU). A rank that cannot reach rank 0
fails within ``HPSEARCH_RENDEZVOUS_TIMEOUT_S`` (60 s) and names the address it tried
(``hpsearch.trials.rank.process``). Each node's ranks are told which network interface carries
their node's address (``hpsearch.trials.node.network``): gloo and NCCL otherwise pick one by the host name
or by their own rules, which on a machine whose name resolves to a loopback address, or with
container bridges beside the real interface, is the wrong one.

A node lost mid-trial (its pool unreachable, its machine gone) fails the trial as ``peer_lost``,
naming the node; the ranks left on the other nodes are stopped.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hpsearch import record
from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.node.pool_server import PoolAddress, PoolClient
from hpsearch.trials.node.ranks import Status
from hpsearch.trials.spec import TrialSpec

__all__ = ["NodeShare", "SpanningRanks"]

@dataclass(frozen=True)
class NodeShare:
    """One node's share of a spanning trial's ranks.

    Attributes:
        node_id: Ray's id of the node.
        node_ip: Its address, as Ray knows it (rank 0's node's is where the ranks meet).
        ranks: How many of the trial's ranks run there (the nodes in rank order: rank 0's first).
        pool: Where the node's warm rank pool is served.
        gpu_ids: On CUDA, the GPUs of its ranks as Ray numbers them on the node, in rank order.
    """

    node_id: str
    node_ip: str
    ranks: int
    pool: PoolAddress
    gpu_ids: tuple[str, ...] | None = None


@dataclass
class _Part:
    share: NodeShare
    client: PoolClient
    first: int  # the trial's first rank on this node
    ticket: int | None = None
    ended: Status | None = None  # its ranks' end (codes and failures), once they all ended
    cancelled: bool = False


class SpanningRanks:
    """A trial's ranks across the nodes of ``shares`` (rank 0's node first): a ``Ranks``
    (``hpsearch.trials.node.ranks``) for one trial at a time. Close it (or use it as a context
    manager): each node's pool stops the ranks it started when its connection closes."""

    def __init__(self, shares: Sequence[NodeShare]) -> None:
        first = 0
        self._parts: list[_Part] = []
        for share in shares:
            self._parts.append(_Part(share, PoolClient(share.pool), first))
            first += share.ranks

    @property
    def lost_nodes(self) -> list[str]:
        """The Ray ids of the nodes whose pools could not be reached, or whose connection broke."""
        return [p.share.node_id for p in self._parts if p.client.lost]

    @property
    def rendezvous(self) -> str | None:
        """Where the trial's ranks meet (``tcp://HOST:PORT``), once started."""
        return getattr(self, "_rendezvous", None)

    def start(self, spec: TrialSpec, run_dir: str, *, gpu_ids: Sequence[str] | None = None,
              collective_timeout_s: float = 300.0, sys_path: Sequence[str] | None = None) -> int:
        """Start each node's ranks in its pool, all meeting at rank 0's node address; the
        trial's ticket is ``0`` (one trial per ``SpanningRanks``). ``gpu_ids`` is ignored: each
        node's share carries its own."""
        total = sum(p.share.ranks for p in self._parts)
        if total != spec.processes:
            raise TrialFailed(record.REASON_RANK_EXITED, f"the trial has {spec.processes} processes but its nodes "
                                                         f"hold {total} of them")
        head = self._parts[0]
        port = self._node_call(head, lambda: head.client.free_port(head.share.node_ip))
        self._rendezvous = f"tcp://{head.share.node_ip}:{port}"
        for part in self._parts:
            ranks = range(part.first, part.first + part.share.ranks)
            part.ticket = self._node_call(part, lambda p=part, r=ranks: p.client.start(
                spec, run_dir, gpu_ids=p.share.gpu_ids, collective_timeout_s=collective_timeout_s,
                sys_path=sys_path, ranks=r, rendezvous=self._rendezvous, span_ip=p.share.node_ip))
        return 0

    def wait(self, ticket: int, timeout: float) -> Status:
        """Rank 0's new reports, waiting up to ``timeout`` seconds for one; once every node's
        ranks have ended, all their exit codes (in rank order) and failure reports. When one
        node's ranks end in failure, the others are stopped, as one node's pool stops a failed
        rank's peers."""
        deadline = time.monotonic() + timeout
        head = self._parts[0]
        news = Status([])
        if head.ended is None:
            status = self._node_call(head, lambda: head.client.wait(_ticket(head), max(0.0, timeout)))
            news = status
            if status.codes is not None:
                head.ended = status
        for part in self._parts[1:]:
            if part.ended is None:
                status = self._node_call(part, lambda p=part: p.client.wait(_ticket(p), 0.0))
                if status.codes is not None:
                    part.ended = status
        if any(p.ended is not None and any(p.ended.codes or ()) for p in self._parts):
            self._cancel_running()
        if all(p.ended is not None for p in self._parts):
            ended = [p.ended for p in self._parts if p.ended is not None]
            return Status(news.reports, [c for s in ended for c in s.codes or ()],
                          [f for s in ended for f in s.failures], report_times=news.report_times,
                          handed_at=news.handed_at, ready_at=news.ready_at)
        if head.ended is not None and not news.reports:  # rank 0's node is done: wait for the others
            time.sleep(max(0.0, min(0.05, deadline - time.monotonic())))
        return Status(news.reports, report_times=news.report_times, handed_at=news.handed_at,
                      ready_at=news.ready_at)

    def cancel(self, ticket: int) -> None:
        """Stop the trial's ranks on every node (a node that is gone has none left)."""
        self._cancel_running()

    def close(self) -> None:
        for part in self._parts:
            part.client.close()

    def __enter__(self) -> SpanningRanks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _cancel_running(self) -> None:
        for part in self._parts:
            if part.ended is None and part.ticket is not None and not part.cancelled:
                part.cancelled = True
                with contextlib.suppress(TrialFailed, RuntimeError):
                    part.client.cancel(part.ticket)

    def _node_call(self, part: _Part, call: Any) -> Any:
        """``call()`` on ``part``'s node; a node that cannot be reached fails the trial as
        ``peer_lost``, naming the node, and the ranks on the other nodes are stopped."""
        try:
            return call()
        except TrialFailed as exc:
            if exc.reason != record.REASON_RANK_EXITED or "rank pool" not in exc.detail:
                raise
            part.ended = Status([], [], [])
            self._cancel_running()
            share = part.share
            ranks = f"rank {part.first}" if share.ranks == 1 else f"ranks {part.first}-{part.first + share.ranks - 1}"
            raise TrialFailed(record.REASON_PEER_LOST, f"the node of the trial's {ranks} ({share.node_ip}, Ray node "
                                                       f"{share.node_id[:12]}) was lost: {exc.detail}") from None


def _ticket(part: _Part) -> int:
    assert part.ticket is not None, "started"
    return part.ticket
