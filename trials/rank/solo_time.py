"""What a fused member would take alone (docs/trials.md, "Fused trials"): the probe that times
the group's steps fused and one member's alone on the same batches, whether fusing pays, and the
solo estimate a member's ``runtime_s`` carries (``runtime_basis: solo_estimate``).

On the group's first steps each step is timed fused and, on the same batches, for one member
alone on a scratch copy of the model, and again a quarter into the run, where the steps are
steady (``fused_step_s``, ``solo_step_s``). A member's ``runtime_s`` is then the group's wall
time scaled by ``solo_step_s / fused_step_s``. With ``fuse: auto`` a group whose fused step costs
a member at least its solo step (on the first steps) stops there and says so (``FuseDeclined``).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from hpsearch import record
from hpsearch.trials.rank.compute import synced_time
from hpsearch.trials.rank.loop import StepLayout, build_optimizer
from hpsearch.trials.spec import TrialSpec

__all__ = ["CLEAR_LOSS", "LONG_STEP_S", "PROBE_SECONDS", "PROBE_STEPS", "FuseDeclined", "SoloProbe", "SoloRun",
           "fuse_verdict", "solo_estimate"]

#: Steps timed fused (after two untimed ones, one where the first took ``LONG_STEP_S``) and then
#: alone, one after another on the same batches (after one untimed), at the group's start:
#: ``PROBE_STEPS``, or fewer (three at least) once they took ``PROBE_SECONDS``.
PROBE_STEPS = 8
PROBE_SECONDS = 0.3
#: After a first fused step this long, the next is timed (one untimed step, not two), and under
#: ``auto`` a group whose first timed fused step costs a member ``CLEAR_LOSS`` times its solo step
#: or more declines there (a margin over one step's noise): where one step is large, the first
#: timed one already shows what the further probe steps would, each at several trials' cost.
LONG_STEP_S = 0.02
CLEAR_LOSS = 1.1

#: One step's batches as the probe keeps them: its micro-batches, their order
#: (``EpochPlan.step_order``) and this process's samples in it.
StepBatches = tuple[list[Any], list[tuple[int, int, int]], int]


class FuseDeclined(Exception):
    """A group that will not train fused: why, and the step times that decided it."""

    def __init__(self, why: str, measured: dict[str, Any] | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.measured = measured or {}


def fuse_verdict(fused_step_s: float, solo_step_s: float, members: int) -> bool:
    """Whether fusing pays: a fused step costs each of ``members`` less than its solo step.

    Example:
        >>> fuse_verdict(0.0671, 0.0161, 4), fuse_verdict(0.040, 0.0161, 4)
        (False, True)
    """
    return fused_step_s / members < solo_step_s


def solo_estimate(train_s: float, *, ratio: float, warm_fused_s: float, warm_solo_s: float, evaluations: int = 0,
                  solo_eval_s: float = 0.0) -> float:
    """What a fused member's run would take alone: the group's training time after its first
    step scaled by ``ratio`` (``solo_step_s / fused_step_s``), plus what a solo run's first step
    costs over the others (``warm_solo_s``: the kernels' first calls, which a solo run pays on
    its own first step), plus its own ``evaluations`` at ``solo_eval_s`` each.

    The evaluations are a solo run's own, not the group's scaled by the step ratio: the group
    evaluates every member at once, vectorized, so its evaluations scaled say little of one
    member's. The wall time is scaled as a whole rather than less each step's excess over a solo
    step, since the group's own bookkeeping grows with K.

    Example:
        >>> solo_estimate(2.0, ratio=0.25, warm_fused_s=0.2, warm_solo_s=0.05, evaluations=3, solo_eval_s=0.01)
        0.53
    """
    return round(max(0.0, train_s - warm_fused_s) * ratio + warm_solo_s + evaluations * solo_eval_s, 12)


def _did_not_pay(device: str, fused_s: float, solo_s: float, k: int, timed: str) -> str:
    """The words of a decline: both step times, each member's share, and what was timed."""
    return (f"on {device}: a step of {k} members fused took {fused_s * 1e3:.3g} ms ({fused_s / k * 1e3:.3g} ms a "
            f"member), one member alone {solo_s * 1e3:.3g} ms ({timed})")


@dataclass
class SoloRun:
    """One member alone, for timing its steps: a scratch copy of the model (the members' weights
    are not touched) and the optimizer of the group's first member at its first step
    (``first_member``: a member may have left the group by then)."""

    model: torch.nn.Module
    first_member: Callable[[], TrialSpec]
    loss_fn: Callable[..., torch.Tensor]
    autocast: Callable[[], contextlib.AbstractContextManager[Any]]
    optimizer: torch.optim.Optimizer | None = None

    def step(self, batches: StepBatches, layout: StepLayout, device: torch.device) -> tuple[float, float | None]:
        """Time one step on ``batches``: its seconds, and its all-reduce's under several
        processes (its one gradient, as a member's solo run sends it; else ``None``)."""
        micro_batches, order, step_samples = batches
        solo, P = self.model, layout.processes
        if self.optimizer is None:
            self.optimizer = build_optimizer(solo.parameters(), self.first_member())
        start = synced_time(device)
        for (_, _, n), (x, y) in zip(order, micro_batches):
            with self.autocast():
                loss = self.loss_fn(solo(x), y)
            scale = n / step_samples if layout.mean_loss else float(P)
            (loss * scale if scale != 1.0 else loss).backward()  # type: ignore[no-untyped-call]
            if layout.check_every_step:
                float(loss.detach())  # a solo step on the CPU reads its loss
        comm_s = None
        if P > 1:
            flat = torch.cat([p.grad.reshape(-1) for p in solo.parameters() if p.grad is not None])
            reducing = synced_time(device)
            dist.all_reduce(flat.div_(P))
            comm_s = synced_time(device) - reducing
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return synced_time(device) - start, comm_s


class SoloProbe:
    """A fused group's step times, fused and one member alone, and what they make of its
    members' runtimes: the ratio of the solo estimate and, under ``auto``, whether to go on.

    Every rank times its own steps and takes the slowest process's (``slowest``), so every rank
    decides alike.

    Args:
        spec: The group (``fuse``, ``epochs``).
        steps_per_epoch: The group's optimizer steps in an epoch.
        layout: The group's steps' layout.
        device: The rank's device.
        solo: One member alone, on a scratch model; ``None`` times no solo step.
    """

    def __init__(self, spec: TrialSpec, steps_per_epoch: int, layout: StepLayout, device: torch.device,
                 solo: SoloRun | None) -> None:
        self.fuse = spec.fuse
        self.total_steps = spec.epochs * steps_per_epoch
        self.layout, self.device, self.solo = layout, device, solo
        self.seconds = 0.0  # the solo steps' and evaluations' timing: not the group's training
        self.ratio: float | None = None  # solo step / fused step, once timed
        self.fused_step_s: float | None = None
        self.solo_step_s: float | None = None
        self.solo_comm_share: float | None = None
        self.retime_at: int | None = None  # the step the steady steps are timed from (``retime``)
        # Why the steady steps say fusing no longer pays (``retime``), in every report from then on.
        self.stopped_paying: str | None = None
        # One member's evaluation timed alone, at the first evaluation (``solo_estimate``).
        self.solo_eval_s: float | None = None
        self.solo_eval_timing_s = 0.0  # the wall time of timing it, not the group's
        self.fused_times: list[float] = []
        self.solo_times: list[float] = []
        self.fetch_times: list[float] = []  # the fetching of each timed step's batches
        # The all-reduce of each solo step timed (its one gradient, as a member's solo run sends it).
        self.solo_comm: list[float] = []
        self.late_fused: list[float] = []  # the steady fused steps' times, and their fetching
        self.late_fetch: list[float] = []
        self.batches: list[StepBatches] = []  # the steps the next solo steps run on
        self.first_fused_s = self.first_solo_s = self.warm_fused_s = self.warm_solo_s = 0.0
        self.untimed = 2  # fused steps before the first timed one

    def times(self, steps: int) -> bool:
        """Whether the step after ``steps`` steps is timed (the first steps, or the steady ones)."""
        return self.probing(steps) or self.retiming(steps)

    def probing(self, steps: int) -> bool:
        return self.ratio is None and steps <= PROBE_STEPS + 1

    def retiming(self, steps: int) -> bool:
        return self.retime_at is not None and steps >= self.retime_at

    def timed_step(self, fused_s: float, fetch_s: float, batches: StepBatches, steps: int, members: int) -> None:
        """A timed fused step of ``members`` members took ``fused_s`` (``fetch_s`` of it fetching
        ``batches``), after ``steps`` steps."""
        if self.retiming(steps):
            self.retime(fused_s, fetch_s, batches, members)
        elif self.probing(steps):
            self.probe(fused_s, fetch_s, batches, steps, members)

    def probe(self, fused_s: float, fetch_s: float, batches: StepBatches, steps: int, members: int) -> None:
        """Time the group's first steps: fused as they train (the first two untimed), then one
        member alone on the same batches, one step after another (the first untimed: timed
        between fused steps, a solo step finds its caches cold and takes longer than in a solo
        run), and decide (``decide``). A step's time holds the fetching of its batches
        (``fetch_s``), which a solo step pays as well. Under ``auto``, where the first step was
        long (``LONG_STEP_S``), the first timed step is set against one solo step at once, and a
        fused step that already costs a member ``CLEAR_LOSS`` times it declines."""
        if steps == 0:
            self.first_fused_s = fused_s
            self.untimed = 1 if self.slowest(fused_s)[0] >= LONG_STEP_S else 2
        if steps >= self.untimed - 1:
            self.batches.append(batches)
        if steps >= self.untimed:
            self.fused_times.append(fused_s)
            self.fetch_times.append(fetch_s)
        if len(self.fused_times) == 1 and self.untimed == 1 and self.fuse == "auto" and members > 1:
            # One solo step timed twice on the same batch, the faster kept: the first after fused
            # steps can find its caches cold, and one cold step alone would decline a group that pays.
            self.batches.append(batches)
            self.solo_times += self.time_solo()
            fused, solo = self.slowest(fused_s, min(self.solo_times) + fetch_s)
            if fused / members >= CLEAR_LOSS * solo:
                self.decide(steps, members)  # it declines
        if steps < PROBE_STEPS + self.untimed - 1 and not self._timed_enough():
            return
        self.solo_times += self.time_solo()
        self.decide(steps, members)

    def before_evaluation(self, steps: int, members: int) -> None:
        """An evaluation before the probe's last step (an epoch of few steps, a short evaluation
        cadence): decide on the steps timed so far, before any member reports."""
        if self.ratio is None and self.fused_times:
            self.solo_times += self.time_solo()
            if self.solo_times:
                self.decide(steps, members)

    def slowest(self, *seconds: float) -> list[float]:
        """Each of ``seconds`` on the slowest process (every rank decides alike)."""
        if self.layout.processes == 1:
            return list(seconds)
        t = torch.tensor(seconds, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def _timed_enough(self) -> bool:
        """Whether the fused steps timed so far suffice: three, taking ``PROBE_SECONDS`` or more
        (a large step is timed on fewer: each costs several trials' worth of steps). Every rank
        decides alike (the slowest process's seconds)."""
        return len(self.fused_times) >= 3 and self.slowest(sum(self.fused_times))[0] >= PROBE_SECONDS

    def time_solo(self) -> list[float]:
        """One member alone on the kept batches: the times of its steps after the first
        (untimed: the first of a run is its ``first_solo_s``)."""
        began = time.perf_counter()
        times = []
        for batches in self.batches:
            assert self.solo is not None, "the solo run is dropped once the step times are in"
            seconds, comm_s = self.solo.step(batches, self.layout, self.device)
            if comm_s is not None:
                self.solo_comm.append(comm_s)
            times.append(seconds)
        if times and not self.first_solo_s:
            self.first_solo_s = times[0]
        self.batches = []
        self.seconds += time.perf_counter() - began
        return times[1:]

    def set_step_times(self, fused: list[float], solo: list[float], fetch: list[float]) -> tuple[float, float]:
        """``fused_step_s`` (the median fused step), ``solo_step_s`` (the median solo step and
        the median fetching of a step's batches), each the slowest process's, and their ratio."""
        fused_s, solo_s = self.slowest(statistics.median(fused), statistics.median(solo) + statistics.median(fetch))
        self.fused_step_s, self.solo_step_s = fused_s, solo_s
        if self.solo_comm:
            # A member's share of communication is its solo run's, as its runtime is: the group
            # all-reduces every member's gradient at once, so its own share says nothing of one.
            comm_s, = self.slowest(statistics.median(self.solo_comm))
            self.solo_comm_share = min(1.0, comm_s / solo_s) if solo_s > 0 else None
        self.ratio = solo_s / fused_s if fused_s > 0 else 1.0
        return fused_s, solo_s

    def decide(self, steps: int, members: int) -> None:
        """The step times are in, after ``steps`` steps of ``members`` members: the solo
        estimate's ratio, and with ``auto`` whether to go on (``FuseDeclined`` if not)."""
        fused_s, solo_s = self.set_step_times(self.fused_times, self.solo_times, self.fetch_times)
        # A run's first step costs more than the others (the kernels' first calls, the
        # allocator): a solo run pays its own first step, not the group's scaled.
        self.warm_fused_s = max(0.0, self.first_fused_s - statistics.median(self.fused_times))
        self.warm_solo_s = max(0.0, self.first_solo_s - statistics.median(self.solo_times))
        total = self.total_steps
        at = total // 4
        self.retime_at = at if at > steps + 1 and at + PROBE_STEPS + 1 < total else None
        if self.retime_at is None:
            self.solo = None
        # One member left (the others diverged): it trains on where it is rather than again alone.
        timed = len(self.fused_times)
        if self.fuse == "auto" and members > 1 and not fuse_verdict(fused_s, solo_s, members):
            raise FuseDeclined(
                "fusing did not pay " + _did_not_pay(self.device.type, fused_s, solo_s, members,
                                                     f"timed on {timed} step{'' if timed == 1 else 's'}"),
                {record.FUSED_STEP_S: fused_s, record.SOLO_STEP_S: solo_s})

    def retime(self, fused_s: float, fetch_s: float, batches: StepBatches, members: int) -> None:
        """Time the steps again a quarter into the run, fused as they train and one member alone
        on the same batches (the first untimed), for the solo estimate (not for ``auto``'s
        decision, taken on the first steps). A run's first steps are slower than its steady
        ones, and unevenly between a fused and a solo run, so the first steps alone would skew
        the ratio."""
        self.batches.append(batches)
        if len(self.batches) > 1:
            self.late_fused.append(fused_s)
            self.late_fetch.append(fetch_s)
        if len(self.late_fused) < PROBE_STEPS:
            return
        fused, solo = self.set_step_times(self.late_fused, self.time_solo(), self.late_fetch)
        self.retime_at = None
        self.solo = None
        if self.fuse == "auto" and members > 1 and not fuse_verdict(fused, solo, members):
            # Fusing paid on the first steps and no longer does on the steady ones. The group
            # finishes fused: its members alone from the start would spend the quarter run again
            # to save a loss the first steps found under one member's solo step. It says so in
            # its reports, and the search fuses no later group of this shape (docs/search.md).
            self.stopped_paying = "fusing stopped paying " + _did_not_pay(
                self.device.type, fused, solo, members,
                f"timed again on {len(self.late_fused)} steps a quarter into the run")

    def time_evaluation(self, evaluate_one: Callable[[], Any]) -> None:
        """At the first evaluation, what a solo run pays for one: ``evaluate_one`` (one member's,
        alone) timed twice, the faster kept, since the first call of the unvectorized model finds
        its caches cold. The group evaluates every member at once, and its step ratio says
        nothing of an evaluation."""
        if self.solo_eval_s is not None:
            return
        timed = time.perf_counter()
        times = []
        for _ in range(2):
            began_one = time.perf_counter()
            evaluate_one()
            times.append(time.perf_counter() - began_one)
        self.solo_eval_s = min(times)
        self.solo_eval_timing_s = time.perf_counter() - timed
        self.seconds += self.solo_eval_timing_s

    def estimate(self, train_s: float, evaluations: int, eval_seconds: float) -> float:
        """What the group's ``train_s`` of training and ``evaluations`` take one member alone
        (``solo_estimate``); the group's own wall time (its evaluations' ``eval_seconds`` in it)
        until the step times are in."""
        if self.ratio is None:
            return train_s + eval_seconds * (evaluations > 0)
        return solo_estimate(train_s, ratio=self.ratio, warm_fused_s=self.warm_fused_s, warm_solo_s=self.warm_solo_s,
                             evaluations=evaluations, solo_eval_s=self.solo_eval_s or 0.0)

    def comm_fraction(self, group_comm_s: float, epoch_seconds: float) -> float:
        """A member's communication share: its solo steps' (the all-reduce of its own gradient
        over the solo step, the basis of its ``runtime_s``), where the probe timed them; else,
        before that, the group's (``group_comm_s`` over the epoch's ``epoch_seconds``)."""
        if self.layout.processes == 1:
            return 0.0
        if self.solo_comm_share is not None:
            return self.solo_comm_share
        return min(1.0, group_comm_s / epoch_seconds) if epoch_seconds > 0 else 0.0
