"""The search's reservation desk: each trial's devices, reserved all at once on one node, and
the way to the ranks that run on them.

Every trial asks Tune for the same small request (its driver process's memory, no CPU), so Tune
reuses trial processes across trial shapes (``hpsearch.tune.trainable``); the trial then
reserves its devices here. ``Reservations`` (one actor per search) grants each trial W units on
one node, a unit being a placement-group bundle of one rank's CPUs and GPUs, in the order
trials asked (first come, first served: a two-rank trial is not starved by one-rank trials that
keep taking a freed CPU). Ray's accounting holds every unit a trial runs on for as long as it
runs; a finished trial's units go back to the desk, which hands them to the next trial at once
(a new placement group right after a removed one waits about a second in Ray) and gives Ray back
those no trial asks for within a few seconds. A finished trial's process waits at the desk
until the trials Tune is starting have processes of their own (``hand_over``), so that each trial
slot keeps one process.

The desk also owns the nodes' warm rank pools (``hpsearch.tune.pools``): it starts a pool actor
on every node but the one the search's own process serves (``LocalPool``), so they end with it,
and each ``Grant`` carries the address of its node's pool. A trial reaches its ranks one way,
through ``Grant.ranks``, whichever node and device they are on. A pool actor is a threaded Ray
actor pinned to its node, with the search's CUDA MPS daemon of the node where asked for
(``hpsearch.trials.node.mps``); it serves its pool on the node's address, so a trial whose
process runs on another node reaches it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import ray
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from hpsearch.errors import ResourceError
from hpsearch.planner.plan import trial_bundle
from hpsearch.trials.node.mps import MpsDaemon, MpsError
from hpsearch.trials.node.pool import RankPool
from hpsearch.trials.node.pool_server import PoolAddress, PoolClient, PoolServer
from hpsearch.trials.node.span import NodeShare, SpanningRanks
from hpsearch.tune.pools import LocalPool, PoolOptions, cpu_prestart

__all__ = ["ACTOR_THREADS", "HAND_OVER_S", "DeskClosed", "Grant", "Reservations", "hand_over", "reserved"]

# Named actors of the search's Ray job; names are per job (namespace), so concurrent searches on
# one cluster each find their own.
_RESERVATIONS_NAME = "hpsearch-reservations"
_POOL_NAME = "hpsearch-ranks-{node_id}"

#: Calls to the desk and to a pool actor wait at most a second or so (a grant's first warm-up
#: aside), so one actor thread per running trial is plenty.
ACTOR_THREADS = 256

# How long units no trial holds stay reserved for the next trial before going back to Ray.
_IDLE_S = 5.0
#: The longest a finished trial's process waits for the Tune trials still starting to have processes
#: of their own (``hand_over``): a cold trial process starts in 1-3 s on 2 idle CPU cores. Longer,
#: Tune could not place them (its resources are short): the desk waits no more in that search.
HAND_OVER_S = 30.0
# A spanning trial's node share before the desk knows where its node's pool is served.
_NO_POOL = PoolAddress("", b"")
# How long a grant waits for its node's pool to be warm (its rank processes then start on
# demand, and the trial says so if they cannot).
_WARM_WAIT_S = 120.0


class DeskClosed(Exception):
    """The search is stopping (Ctrl-C, SIGTERM, its budget): the desk grants no more devices, and
    a trial still waiting for them ends without running."""


@dataclass
class Grant:
    """What ``reserve`` gives a trial: one reserved unit (a placement-group bundle of one rank's
    CPUs and GPUs) per rank, on one node, or, for a trial no node holds, on as few nodes as
    hold it (``spans``); on CUDA, the GPU ids of each unit in rank order; and where each node's
    warm rank pool is served (``ranks``). ``node_id``, ``node_ip``, ``pool`` and ``mps`` are
    rank 0's node's."""

    units: list[tuple[int, int]]  # (group, bundle index), in rank order
    node_id: str
    node_ip: str
    gpu_ids: list[str] | None
    pool: PoolAddress | None = None  # set by the desk once the node's pool is warm
    #: When its devices were free for it (wall clock, seconds since the epoch): when it came to
    #: the desk, or, where a trial that held devices released them while it waited, that release.
    #: Before it, the trial waited for devices; after it, placing them and warming the node's
    #: rank processes is start-up (``hpsearch.study.PHASE_SPANS``).
    free_at: float | None = None
    mps: str | None = None  # CUDA MPS on the node: "on", or "off: <why>" (None on CPU)
    #: A trial that spans nodes: each node's share of its ranks, rank 0's node first (the desk
    #: sets their pools); empty for a trial on one node.
    spans: list[NodeShare] = field(default_factory=list)
    #: The connection ``ranks`` made, asked at the trial's end which nodes it lost.
    _ranks: PoolClient | SpanningRanks | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def node_ids(self) -> list[str]:
        """The nodes of the trial's ranks, rank 0's first."""
        return [s.node_id for s in self.spans] or [self.node_id]

    def ranks(self) -> PoolClient | SpanningRanks:
        """A connection to the node's pool (to the pools of every node the trial spans), to run
        the trial's ranks on these units (close it, or use it as a context manager: the ranks it
        started stop when it closes)."""
        ranks: PoolClient | SpanningRanks
        if self.spans:
            ranks = SpanningRanks(self.spans)
        else:
            assert self.pool is not None, "a grant from the desk carries its node's pool"
            ranks = PoolClient(self.pool)
        self._ranks = ranks
        return ranks

    def lost_nodes(self) -> list[str]:
        """The nodes whose pools the trial could not reach through ``ranks`` (their machines
        are likely gone): the desk hears of them as the trial ends, before Ray's health checks
        declare them dead."""
        if isinstance(self._ranks, SpanningRanks):
            return self._ranks.lost_nodes
        return [self.node_id] if self._ranks is not None and self._ranks.lost else []


@dataclass
class _Group:
    pg: Any
    nodes: list[str]  # each bundle's node (a group placed for a spanning trial has several)
    ips: list[str]
    gpu_ids: list[list[str]] | None
    free: list[bool]


class _ReservationsActor:
    """Grants trials their units, one trial at a time in the order asked (``asyncio.Lock`` wakes
    its waiters first in, first out), and owns the nodes' rank pools (started with it on every
    alive node, and on a node that joins later when a unit first lands there), so they end
    with it.

    A trial's units go back to the desk when it ends, not to Ray: the next trial, whatever its
    world size, takes free units of one node at once, where creating a placement group right
    after removing one waits about a second for Ray to see the freed resources. Units nobody
    asks for are returned to Ray after ``_IDLE_S``, so an idle search does not sit on devices,
    and a trial that cannot be served from free units gets a new group of its size (idle groups
    that could never serve it are returned first, so that they make room for it).
    """

    def __init__(self, options: PoolOptions, local: tuple[str, PoolAddress] | None, node_units: int | None) -> None:
        self._node_units = node_units  # a trial of more processes spans nodes (None: none does)
        self._turn = asyncio.Lock()
        self._released = asyncio.Event()
        self._options = options
        self._pools: dict[str, Any] = {}  # each node's pool actor (None: served by the search's process)
        self._groups: dict[int, _Group] = {}
        self._ids = itertools.count()
        self._idle_check: asyncio.TimerHandle | None = None
        self._warm: dict[str, PoolAddress] = {}  # nodes whose pools are warm: where they are served
        self._mps: dict[str, str | None] = {}  # each node's CUDA MPS state, as its trials record it
        self._stopping = False  # ``stop_granting``: the search is ending
        self._lost: set[str] = set()  # nodes a trial could not reach, before Ray placed anew there
        self._released_at = 0.0  # when a trial last gave its units back (wall clock)
        self._none_starting = asyncio.Event()  # no Tune trial waits for its process (``hand_over``)
        self._none_starting.set()
        self._hand_over = True  # False once a hand-over waited in vain: trials then do not wait
        if local is not None:  # the node whose pool the search's own process serves (``LocalPool``)
            self._pools[local[0]] = None
            self._warm[local[0]] = local[1]
        for node in ray.nodes():
            if node.get("Alive"):
                self._pool(node["NodeID"], node["Resources"])

    async def reserve(self, processes: int) -> Grant:
        o = self._options
        unit = trial_bundle(1, o.device, o.cpus_per_worker, o.gpus_per_worker)
        arrived = time.time()
        async with self._turn:
            if self._stopping:
                raise DeskClosed("the search is stopping")
            self._forget_lost_nodes()
            pending = None
            # Groups Ray placed for this trial: kept while it waits, even where they cannot serve
            # it alone. Ray places fractional GPU units first-fit, so the units of a two-rank
            # trial at half a GPU come on one GPU; the next group goes to the next GPU, and the
            # trial takes one unit of each (``_apart``). What it leaves goes back when idle.
            placed_now: set[int] = set()
            try:
                while (grant := self._take(processes)) is None:
                    if self._stopping:
                        raise DeskClosed("the search is stopping")
                    self._return_idle(keep_for=processes, keep=placed_now)
                    if pending is None:
                        # On as few nodes as hold it, placed all at once: trials of several
                        # nodes and of one share the cluster without deadlock.
                        spans = self._node_units is not None and processes > self._node_units
                        pending = placement_group([unit] * processes, strategy="PACK" if spans else "STRICT_PACK")
                        placed = asyncio.ensure_future(self._placed(pending))
                    self._released.clear()
                    released = asyncio.ensure_future(self._released.wait())
                    await asyncio.wait({placed, released}, return_when=asyncio.FIRST_COMPLETED)
                    released.cancel()
                    if placed.done():
                        gid = next(self._ids)
                        self._groups[gid] = placed.result()
                        placed_now.add(gid)
                        pending = None
            finally:
                if pending is not None:  # served from units another trial freed meanwhile
                    placed.cancel()
                    remove_placement_group(pending)
            self._schedule_idle_return()
        # A trial that came while the devices it could use were held waited for a trial to end
        # (behind the trials ahead of it in line, too); one that came to free devices did not,
        # however long Ray takes to place them. Placed first-fit, a slow placement beside a
        # trial that ends meanwhile is counted as waiting up to that end: never more.
        grant.free_at = max(arrived, self._released_at)
        grant.pool = await self._pool_warm(grant.node_id)
        grant.mps = self._mps.get(grant.node_id)
        if grant.spans:
            pools = await asyncio.gather(*(self._pool_warm(share.node_id) for share in grant.spans))
            grant.spans = [replace(share, pool=pool) for share, pool in zip(grant.spans, pools)]
        return grant

    def _forget_lost_nodes(self) -> None:
        """Drop what the desk holds on nodes that are gone (a machine lost mid-search), as Ray
        says or as a trial found (``release``): their free units would be granted to the next
        trial, which could never reach their pool. Their groups go back to Ray and a new trial
        gets units on the nodes alive. A node a trial found lost gets no more units from the
        desk's free ones, until Ray places a new group there (its raylet answered)."""
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")} - self._lost
        for gid, g in list(self._groups.items()):
            if any(node not in alive for node in g.nodes) and all(g.free):
                with contextlib.suppress(Exception):
                    remove_placement_group(g.pg)
                del self._groups[gid]
        for node in [n for n in self._pools if n not in alive and self._pools[n] is not None]:
            del self._pools[node]
            self._warm.pop(node, None)

    async def _pool_warm(self, node_id: str) -> PoolAddress:
        """Where the node's pool is served, once it has its rank processes warm (the first
        trials on a node only wait), so a trial is granted devices when its ranks can start on
        them (docs/design.md, "A reservation desk between trials")."""
        warm = self._warm.get(node_id)
        if warm is not None:
            return warm
        actor = self._pools[node_id]
        self._mps[node_id] = (await actor.mps_state.remote())[0]
        address: PoolAddress = await actor.address.remote()
        if await actor.ready.remote(_WARM_WAIT_S):
            self._warm[node_id] = address
        return address

    async def stop_granting(self) -> None:
        """Grant nothing more: the trials waiting for devices, and those that ask from now on,
        end without running (``DeskClosed``)."""
        self._stopping = True
        self._released.set()
        self._none_starting.set()

    async def trials_starting(self, count: int) -> None:
        """How many Tune trials wait for a process of their own to start (``hand_over``)."""
        if count > 0 and not self._stopping:
            self._none_starting.clear()
        else:
            self._none_starting.set()

    async def handed_over(self, timeout: float) -> None:
        """Return once the Tune trials that were starting have their processes, or after
        ``timeout`` seconds; at once when none is starting, and from the first hand-over that
        waited in vain on (Tune could not place them)."""
        if self._hand_over:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._none_starting.wait(), timeout)
            self._hand_over = self._none_starting.is_set()

    async def mps_refusals(self) -> list[str]:
        """Why CUDA MPS could not start on the nodes where ``resources.mps: on`` asked for it."""
        states = await asyncio.gather(*(a.mps_state.remote() for a in self._pools.values() if a is not None))
        return [error for _, error in states if error is not None]

    async def release(self, units: list[tuple[int, int]], lost: Collection[str] = ()) -> None:
        """A trial's units are free again; ``lost``: the nodes whose pools it could not reach,
        forgotten now (``_forget_lost_nodes``), so that the next trial is not granted their units
        in the seconds before Ray's health checks declare them dead."""
        for group, index in units:
            self._groups[group].free[index] = True
        self._released_at = time.time()
        if lost:
            self._lost.update(lost)
            self._forget_lost_nodes()
        self._released.set()
        self._schedule_idle_return()

    def _schedule_idle_return(self) -> None:
        if self._idle_check is not None:
            self._idle_check.cancel()

        def check() -> None:
            if not self._turn.locked():  # else the waiting trial returns what it cannot use
                self._return_idle()

        self._idle_check = asyncio.get_running_loop().call_later(_IDLE_S, check)

    def _free_by_node(self) -> dict[str, list[tuple[int, int]]]:
        """Each node's free units; of each node, the busiest groups' first, so that idle ones
        empty out and can go back to Ray."""
        by_node: dict[str, list[tuple[int, int]]] = {}
        order = sorted(self._groups.items(), key=lambda item: item[1].free.count(True))
        for gid, g in order:
            for i, free in enumerate(g.free):
                if free and g.nodes[i] not in self._lost:
                    by_node.setdefault(g.nodes[i], []).append((gid, i))
        return by_node

    def _take(self, processes: int) -> Grant | None:
        """``processes`` free units of one node, on as many different GPUs, or ``None``. A trial
        larger than a node (``_node_units``) takes them from as few nodes as hold them, those
        with the most free units first."""
        by_node = self._free_by_node()
        if self._node_units is not None and processes > self._node_units:
            return self._take_across(by_node, processes)
        picked = ((n, self._apart(units, processes)) for n, units in by_node.items())
        node_id, units = next(((n, u) for n, u in picked if len(u) == processes), (None, None))
        if node_id is None or units is None:
            return None
        return self._granted(units)

    def _take_across(self, by_node: dict[str, list[tuple[int, int]]], processes: int) -> Grant | None:
        apart = sorted(((n, self._apart(units, processes)) for n, units in by_node.items()), key=lambda nu: -len(nu[1]))
        units: list[tuple[int, int]] = []
        for _, mine in apart:
            units.extend(mine[:processes - len(units)])
            if len(units) == processes:
                return self._granted(units)
        return None

    def _granted(self, units: list[tuple[int, int]]) -> Grant:
        """A grant of ``units`` (in rank order, grouped by node), now taken."""
        for gid, i in units:
            self._groups[gid].free[i] = False
        gpu_ids = None
        if self._groups[units[0][0]].gpu_ids is not None:
            gpu_ids = [g for gid, i in units for g in self._groups[gid].gpu_ids[i]]  # type: ignore[index]
        nodes = [self._groups[gid].nodes[i] for gid, i in units]
        first = self._groups[units[0][0]]
        grant = Grant(units, nodes[0], first.ips[units[0][1]], gpu_ids)
        if len(set(nodes)) > 1:
            for node in dict.fromkeys(nodes):
                mine = [(gid, i) for gid, i in units if self._groups[gid].nodes[i] == node]
                ip = self._groups[mine[0][0]].ips[mine[0][1]]
                gpus = None if gpu_ids is None else tuple(
                    g for gid, i in mine for g in self._groups[gid].gpu_ids[i])  # type: ignore[index]
                grant.spans.append(NodeShare(node, ip, len(mine), _NO_POOL, gpus))
        return grant

    def _apart(self, units: list[tuple[int, int]], processes: int) -> list[tuple[int, int]]:
        """Up to ``processes`` of ``units`` (of one node) whose GPUs all differ (two ranks of one
        trial never share a GPU: NCCL refuses a GPU twice in one group). Ray places fractional
        GPU bundles first-fit: a group of two half-GPU units lands on one GPU, so a two-rank
        trial is served from units of several groups."""
        chosen: list[tuple[int, int]] = []
        taken: set[str] = set()
        for gid, i in units:
            ids = self._groups[gid].gpu_ids
            gpus = set(ids[i]) if ids is not None else set()
            if gpus & taken:
                continue
            chosen.append((gid, i))
            taken |= gpus
            if len(chosen) == processes:
                break
        return chosen

    def _return_idle(self, keep_for: int = 0, keep: Collection[int] = ()) -> None:
        """Give Ray back the groups no trial holds, except ``keep`` and, with ``keep_for``, those
        on a node where the desk holds enough units for a trial of that many ranks once they
        free up."""
        held: dict[str, list[tuple[int, int]]] = {}
        for gid, g in self._groups.items():
            for i, node in enumerate(g.nodes):
                held.setdefault(node, []).append((gid, i))
        serves = {node: bool(keep_for) and len(self._apart(units, keep_for)) == keep_for
                  for node, units in held.items()}
        for gid, g in list(self._groups.items()):
            if all(g.free) and not any(serves[n] for n in g.nodes) and gid not in keep:
                remove_placement_group(g.pg)
                del self._groups[gid]

    async def _placed(self, pg: Any) -> _Group:
        await pg.ready()
        n = len(pg.bundle_specs)
        placed = placement_group_table(pg)["bundles_to_node_id"]
        node_ids = [str(placed[i]) for i in range(n)]
        nodes: dict[str, dict[str, Any]] = {n["NodeID"]: n for n in ray.nodes() if n["NodeID"] in set(node_ids)}
        self._lost.difference_update(node_ids)  # Ray placed work there: its raylet answers
        for node_id in dict.fromkeys(node_ids):
            if node_id not in self._pools:
                self._pool(node_id, nodes.get(node_id, {}).get("Resources", {}))
        gpus = pg.bundle_specs[0].get("GPU", 0)
        gpu_ids = list(await asyncio.gather(*(_bundle_gpus(pg, i, gpus) for i in range(n)))) if gpus else None
        ips = [str(nodes.get(node_id, {}).get("NodeManagerAddress", "?")) for node_id in node_ids]
        return _Group(pg, node_ids, ips, gpu_ids, [True] * n)

    def _pool(self, node_id: str, resources: dict[str, float]) -> None:
        if node_id not in self._pools:
            self._pools[node_id] = start_pool_actor(node_id, resources, self._options)

    def close(self) -> None:
        for g in self._groups.values():
            with contextlib.suppress(Exception):
                remove_placement_group(g.pg)
        self._groups.clear()
        for actor in self._pools.values():
            if actor is None:
                continue
            with contextlib.suppress(Exception):  # already gone with its node: nothing to stop
                ray.get(actor.close.remote(), timeout=15)


class Reservations:
    """The search's reservation desk and the nodes' rank pools (an actor); ``close`` ends them all.

    Args:
        options: What every node's pool is started with.
        local: The pool the search's process already runs for its own node, if any: no pool
            actor is started there, and trials on that node use this one.
        node_units: The most units one node holds (``SearchPlan.node_devices``): a trial of more
            processes spans nodes (``resources.span_nodes``). ``None``: no trial does.
    """

    def __init__(self, options: PoolOptions, local: LocalPool | None = None, node_units: int | None = None) -> None:
        here = None if local is None else (ray.get_runtime_context().get_node_id(), local.address)
        self.actor: Any = ray.remote(_ReservationsActor).options(
            num_cpus=0, max_concurrency=ACTOR_THREADS, name=_RESERVATIONS_NAME).remote(options, here, node_units)
        self._closed = False

    def trials_starting(self, count: int) -> None:
        """Tune has ``count`` trials waiting for their processes to start (``hand_over``). Does
        not wait."""
        if not self._closed:
            self.actor.trials_starting.remote(count)

    def refuse_without_mps(self) -> None:
        """Raise ``ResourceError`` when ``resources.mps: on`` and a node's daemon could not start."""
        refusals = ray.get(self.actor.mps_refusals.remote())
        if refusals:
            raise ResourceError(refusals[0])

    def stop_granting(self) -> None:
        """The search is stopping: grant no more devices, and let the trials that wait for them
        end at once. Ctrl-C once took 12-13 s to return, all of it Tune waiting for the
        processes of trials that sat at the desk for devices to stop (a process runs one call
        at a time, so Tune's stop waited behind the wait for devices until Tune killed it after
        10 s). Does not wait."""
        if not self._closed:
            self.actor.stop_granting.remote()

    def close(self) -> None:
        """End the nodes' pools (their rank processes, MPS daemons) and the desk. Called again,
        does nothing: ``run_tune`` closes the desk after its trials, and the orchestrator closes
        it whatever happened between its start and Tune's."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            ray.get(self.actor.close.remote(), timeout=30)
        ray.kill(self.actor)


@contextlib.contextmanager
def reserved(processes: int) -> Iterator[Grant]:
    """Hold a trial's devices, on one node, for the block's duration.

    Raises:
        DeskClosed: the search is stopping; the trial has no devices and runs nothing.
    """
    desk = ray.get_actor(_RESERVATIONS_NAME)
    try:
        grant: Grant = ray.get(desk.reserve.remote(processes))
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, DeskClosed):
            raise DeskClosed(str(exc.cause)) from None
        raise
    try:
        yield grant
    finally:
        with contextlib.suppress(ray.exceptions.RayError):  # the search is ending: nothing to return to
            ray.get(desk.release.remote(grant.units, grant.lost_nodes()))


def hand_over(timeout: float = HAND_OVER_S) -> None:
    """A finished trial's process, its devices released: wait until the Tune trials still starting
    have processes of their own (at most ``timeout``), then return to Tune.

    Tune gives a finished trial's process (``reuse_actors``) to a trial still waiting for the one
    it started for it, and stops that one. Where a trial trains faster than a trial process
    starts, every new trial then waited for a new process that was stopped as it came up: on 2
    CPU cores, in one search of 24 sub-second digits trials in three, the trials ran one at a
    time with a process starting beside each (24 processes, a 25 s span against 7 s, and each
    trial's ``runtime_s`` up to 2x its own). Waiting here lets the starting process take its trial;
    this one goes back to Tune for the next.
    """
    with contextlib.suppress(ray.exceptions.RayError, ValueError):  # no desk (the search ended): nothing to wait for
        ray.get(ray.get_actor(_RESERVATIONS_NAME).handed_over.remote(timeout))


async def _bundle_gpus(group: Any, index: int, gpus: float) -> list[str]:
    """The ids of the GPUs in a bundle, as Ray assigns them to work placed in it."""
    probe = ray.remote(num_cpus=0, num_gpus=gpus)(ray.get_gpu_ids).options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index))
    return [str(g) for g in await probe.remote()]


class _PoolActor:
    """A node's ``RankPool`` and its server, as a threaded Ray actor (``start_pool_actor``), with
    the search's CUDA MPS daemon of the node where asked for."""

    def __init__(self, options: PoolOptions, prestart: dict[str | None, int], mps: str | None, shared: bool) -> None:
        self.mps_error: str | None = None
        self.mps: MpsDaemon | None = None
        if mps is not None:
            try:
                self.mps = MpsDaemon(mps, shared=shared)
            except MpsError as exc:
                self.mps_error = str(exc)
        env = self.mps.env if self.mps is not None else {}
        self.pool = RankPool(options.preload, prestart=prestart, reuse=options.reuse, sys_path=options.sys_path,
                             env=env)
        self.server = PoolServer(self.pool, host=ray.util.get_node_ip_address())

    def address(self) -> PoolAddress:
        return self.server.address

    def ready(self, timeout: float) -> bool:
        """Whether the pool's workers started ahead are warm, waiting up to ``timeout`` seconds."""
        return self.pool.wait_ready(timeout)

    def mps_state(self) -> tuple[str | None, str | None]:
        """What this node's trials record as ``mps`` (``None`` on a CPU node), and, for
        ``resources.mps: on``, why the daemon could not start."""
        return (self.mps.state if self.mps is not None else None), self.mps_error

    def close(self) -> None:
        self.server.close()
        self.pool.close()
        if self.mps is not None:
            self.mps.stop()


def start_pool_actor(node_id: str, resources: dict[str, float], options: PoolOptions) -> Any:
    """Start the pool actor of ``node_id`` (resources: the node's, as Ray reports them). It ends
    with the search's Ray job."""
    prestart: dict[str | None, int]
    per_rank = float(options.gpus_per_worker)
    if options.device == "cuda":
        # The ids Ray gives a node's GPUs are 0..n-1; a GPU shared by ranks of several trials
        # (gpus_per_worker 0.5, 0.25...) has a warm process for each; a rank on several GPUs
        # starts its process when a trial first asks (its GPUs are known then).
        gpus = int(resources.get("GPU", 0))
        prestart = {str(g): round(1 / per_rank) for g in range(gpus)} if per_rank <= 1 else {}
    else:
        prestart = {None: cpu_prestart(resources.get("CPU", 0), options.cpus_per_worker, options.ranks_at_once)}
    # MPS only where there are GPUs: a cluster's head node often has none.
    mps = options.mps if options.device == "cuda" and resources.get("GPU", 0) > 0 else None
    return ray.remote(_PoolActor).options(
        num_cpus=0, max_concurrency=ACTOR_THREADS, name=_POOL_NAME.format(node_id=node_id),
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote(options, prestart, mps, per_rank < 1)
