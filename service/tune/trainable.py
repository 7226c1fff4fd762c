"""The Tune trainable every trial runs: reserve its devices, run its ranks, pass on rank 0's
reports, and report a failure as a result.

Everything it tells the search is a ``TrialReport`` (``hpsearch.planner.report``), encoded
into Tune's result dict there and nowhere else.

Every trial's Tune request is the same (``DRIVER_RESOURCES``: the memory of its light driver
process, no CPU), so Tune always reuses a finished trial's process whatever the trial's shape
(docs/design.md, "Warm rank processes across trial shapes"). The trial reserves its devices
itself (``hpsearch.tune.reservations``), and its grant's pool runs its ranks
(``hpsearch.trials.launcher.run_trial``). On CUDA, rank ``r`` runs in the warm process of the GPU
of its ``r``-th unit.

The trainable imports neither torch nor optuna; it imports Ray Tune, which a trial's process
has loaded anyway (the orchestrator imports this module only once a search runs).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ray import tune

from hpsearch import record
from hpsearch.planner.ceilings import halved
from hpsearch.planner.report import FUSE_DECLINED_KEY, ReportKind, TrialReport, encode
from hpsearch.planner.task import TrialTask, trial_folder
from hpsearch.record import REASON_OUT_OF_MEMORY
from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.launcher import run_trial
from hpsearch.trials.spec import TrialSpec
from hpsearch.tune.reservations import DeskClosed, hand_over, reserved

__all__ = ["DRIVER_RESOURCES", "trainable"]

#: What every trial asks of Tune: the memory of its driver process (no CPU: its ranks' CPUs
#: are in its reservation). The same for all trials, so Tune reuses trial processes.
DRIVER_RESOURCES: dict[str, float] = {"memory": float(256 * 2**20)}


def trainable(config: dict[str, Any]) -> None:
    """One Tune trial: reserve its devices, run its ranks in that node's pool, forward rank 0's
    reports, and record a failure as a result.

    This is the trial driver's error boundary: a failing trial reports its reason instead of
    raising, so the searcher records FAIL with ``status_reason`` and the search goes on.
    """
    task: TrialTask = config["trial"]
    with contextlib.suppress(DeskClosed):  # the search stopped while the trial waited for devices
        _run(task)
        hand_over()  # its devices released: the trials Tune is starting get their own processes


def _run(task: TrialTask) -> None:
    spec = task.spec
    launched = time.time()  # Tune ran the trial in its process, which now asks for its devices
    with reserved(spec.processes) as grant, grant.ranks() as ranks:
        phases = {"launched": launched, "reserved": time.time()}
        if grant.free_at is not None:
            # The desk's clock, which may be another node's: kept between the trial's own two.
            phases["devices_free"] = min(max(grant.free_at, launched), phases["reserved"])
        # The ranks' node's IP and its Ray node id: several nodes may share an IP (containers,
        # or a test cluster on one machine); the id tells them apart.
        where = {"node": grant.node_ip, record.NODE_ID: grant.node_id, record.NODES: len(grant.node_ids),
                 record.NODE_IDS: grant.node_ids}
        tune.report(encode(TrialReport(ReportKind.STARTED, where)))
        run = _Run(task, ranks, grant.gpu_ids, where, grant.mps)
        if spec.fused:
            _link_members(task)
            run.group(spec, task.run_dir, phases)
        else:
            run.solo(spec, task.run_dir, phases)


def _declined_member_phases(group: dict[str, Any], position: int) -> dict[str, Any]:
    """The phases a member of a group that declined to fuse starts its own run with: the group's
    start-up (``launched``), then, for every member after the first, the devices free for it only
    when the member before it ended (waiting for devices, which the group's earlier members held)."""
    now = time.time()
    phases: dict[str, Any] = {k: group[k] for k in ("launched", "devices_free") if k in group}
    if position > 0 and "launched" in phases:
        phases["devices_free"] = now
    return {**phases, "reserved": now}


def _link_members(task: TrialTask) -> None:
    """Give each member of a fused group but the first its ``trial-NNNNN`` in the runs folder:
    a link to the group's folder, relative, so the runs folder can be moved or copied whole. A
    runs folder of 12 group folders for 24 trials named half of them nowhere."""
    os.makedirs(task.run_dir, exist_ok=True)
    runs = os.path.dirname(task.run_dir)
    for number in task.members:
        link = trial_folder(runs, number)
        if number != task.number and not os.path.lexists(link):
            os.symlink(os.path.basename(task.run_dir), link)


def _own_folder(task: TrialTask, member: int) -> str:
    """The run folder of a fused group's ``member`` (its index) when it trains on its own: its
    own ``trial-NNNNN``, no longer a link to the group's (``_link_members``)."""
    number = task.members[member]
    if number == task.number:
        return task.run_dir
    folder = trial_folder(os.path.dirname(task.run_dir), number)
    if os.path.islink(folder):
        os.unlink(folder)
    return folder


class _Run:
    """One trial's run on its reserved devices: a trial of its own, or a fused group's members.
    Every report it sends is a ``TrialReport``, encoded once on its way to Tune (``_Reports.last``)."""

    def __init__(self, task: TrialTask, ranks: Any, gpu_ids: Any, where: dict[str, Any], mps: str | None) -> None:
        self.task, self.ranks, self.gpu_ids, self.where, self.mps = task, ranks, gpu_ids, where, mps
        # Set when a member of a split group ran out of memory alone: the others are not run.
        self.alone_out_of_memory: str | None = None

    def solo(self, spec: TrialSpec, run_dir: str, phases: dict[str, Any], member: int | None = None) -> None:
        """Run ``spec`` alone; ``member``: it is that member of the task's fused group (its
        reports and results say so)."""
        task = self.task
        reports = _Reports(self.where, task.report_every_s, member)
        ran_as: dict[str, Any] | None = None
        # Wall time of the attempts that ran out of memory before the last (search.on_oom:
        # accumulate): their devices were held and worked, so the trial's device-seconds, and the
        # budget, count them.
        failed_s = 0.0
        while True:
            began = time.monotonic()
            try:
                final = run_trial(spec, run_dir, report=reports.forward, timeout_s=task.timeout_s, ranks=self.ranks,
                                  gpu_ids=self.gpu_ids, phases=phases)
                break
            except TrialFailed as exc:
                # search.on_oom: accumulate: the same trial again at half the per-device batch and
                # twice the accumulation (the same effective batch, the same optimisation), on
                # the devices it holds, until it fits (hpsearch.planner.ceilings).
                fits = halved(spec.per_device_batch_size, spec.grad_accum_steps, spec.per_device_batch_size)
                if exc.reason != REASON_OUT_OF_MEMORY or task.on_oom != "accumulate" or fits is None:
                    measured = dict(exc.measured)
                    if member is not None and exc.reason == REASON_OUT_OF_MEMORY:
                        self.alone_out_of_memory = (f"a member of its fused group, of the same shape, ran out of "
                                                    f"memory alone at per-device batch {spec.per_device_batch_size}")
                    if ran_as is not None:  # halved before it failed: how it ran, and where it last ran out
                        measured[record.DEVICE_SECONDS] = (failed_s + time.monotonic() - began) * spec.processes
                        if exc.reason == REASON_OUT_OF_MEMORY:
                            ran_as["out_of_memory_at"] = spec.per_device_batch_size
                    tune.report(reports.last(TrialReport(
                        ReportKind.FAILED, measured, member=member, reason=exc.reason, detail=exc.detail,
                        phases=tuple(phases.items()), ran_as=ran_as)))
                    return
                failed_s += time.monotonic() - began
                ran_as = {record.PER_DEVICE_BATCH_SIZE: fits[0], record.GRAD_ACCUM_STEPS: fits[1],
                          "out_of_memory_at": spec.per_device_batch_size}
                # The one reshaping of a built spec: the trial's own configuration, at the shape
                # its memory allows (trial_spec built it; the effective batch and the LR stay).
                spec = replace(spec, per_device_batch_size=fits[0], grad_accum_steps=fits[1])
                # What it reported is the run that ran out: the searcher starts its curves afresh
                # (the reports held back go with it).
                reports = _Reports(self.where, task.report_every_s, member)
                tune.report(encode(TrialReport(ReportKind.RESTARTED, self.where,
                                               members=None if member is None else (member,))))
        if ran_as is not None:
            final[record.DEVICE_SECONDS] = float(final[record.DEVICE_SECONDS]) + failed_s * spec.processes
        if self.mps is not None:
            final["mps"] = self.mps
        tune.report(reports.last(TrialReport(ReportKind.FINAL, final, member=member, phases=tuple(phases.items()),
                                             ran_as=ran_as)))

    def group(self, spec: TrialSpec, run_dir: str, phases: dict[str, Any]) -> None:
        """Run a fused group (``spec.fused``): each member's reports and its end (final or
        failure) go to Tune tagged with its index (``TrialReport.member``). A group that runs out
        of memory is split in halves, run one after the other on the same devices; a member runs
        out of memory as a trial of its own only alone. A group that did not train fused says
        why (``ReportKind.FUSE_DECLINED``), then trains its members on their own, one after another."""
        task = self.task
        indices = [int(own["member"]) for own in spec.fused]
        reports = _Reports(self.where, task.report_every_s)
        ended: set[int] = set()

        def end(kind: ReportKind, k: int, metrics: dict[str, Any], **fields: Any) -> None:
            """Member ``k``'s end as its own result."""
            own = {name: value for name, value in metrics.items() if name != record.FUSED_MEMBER}
            tune.report(reports.last(TrialReport(kind, own, member=k, phases=tuple(phases.items()), **fields)))

        def forward(line: dict[str, Any]) -> None:
            # A member that diverged leaves now, its metrics final; the others go on.
            if line.get(record.MEMBER_FAILED):
                ended.add(int(line[record.FUSED_MEMBER]))
                share = float(line.get(record.DEVICE_SHARE_S) or 0.0)
                end(ReportKind.FAILED, int(line[record.FUSED_MEMBER]),
                    {**line, record.DEVICE_SECONDS: share * spec.processes}, reason=line[record.MEMBER_FAILED])
            else:
                reports.forward(line)

        try:
            out = run_trial(spec, run_dir, report=forward, timeout_s=task.timeout_s, ranks=self.ranks,
                            gpu_ids=self.gpu_ids, phases=phases)
        except TrialFailed as exc:
            left = tuple(own for own in spec.fused if int(own["member"]) not in ended)
            if exc.reason == REASON_OUT_OF_MEMORY and len(left) > 1:
                # What they reported is the group that ran out: their curves start afresh.
                tune.report(reports.last(TrialReport(ReportKind.RESTARTED, members=tuple(int(own["member"]) for own in left),
                                                     detail=exc.detail)))
                half = len(left) // 2
                for part in (left[:half], left[half:]):
                    # Named by the trials they hold: a half of one trains in that trial's own folder.
                    first, last = (task.members[int(own["member"])] for own in (part[0], part[-1]))
                    folder = os.path.join(run_dir, f"trials-{first:05d}-{last:05d}")
                    if self.alone_out_of_memory is not None:
                        # A member of this shape ran out alone: every member needs what it needed.
                        for own in part:
                            tune.report(reports.last(TrialReport(
                                ReportKind.FAILED, member=int(own["member"]), reason=record.REASON_EXCEEDS_MEMORY,
                                detail=self.alone_out_of_memory, not_run=True)))
                    elif len(part) == 1:
                        self.solo(spec.member(spec.fused.index(part[0])), _own_folder(task, int(part[0]["member"])), {},
                                  member=int(part[0]["member"]))
                    else:
                        self.group(replace(spec, fused=part), folder, {})
                return
            for k in indices:
                if k not in ended:
                    end(ReportKind.FAILED, k, dict(exc.measured), reason=exc.reason, detail=exc.detail)
            return
        if out.get(FUSE_DECLINED_KEY):
            # Its members train on their own, one after another, on the devices the group holds
            # (warm: handing them back to the search costs each a trial's start, and left the
            # b 128 CNN grid 1.24x slower under ``auto`` than unfused).
            declined = {name: value for name, value in out.items() if name != FUSE_DECLINED_KEY}
            tune.report(reports.last(TrialReport(ReportKind.FUSE_DECLINED, declined, declined=out[FUSE_DECLINED_KEY],
                                                 members=tuple(indices), phases=tuple(phases.items()))))
            for position, k in enumerate(indices):
                self.solo(spec.member(position), _own_folder(task, k), _declined_member_phases(phases, position),
                          member=k)
            return
        for k in indices:
            member_end = out["members"].get(k)
            if k in ended:
                continue
            if member_end is None:
                end(ReportKind.FAILED, k, {}, reason=record.REASON_NO_RESULT,
                    detail="the fused group finished without this member's final report")
            elif member_end.get("failed"):
                end(ReportKind.FAILED, k, member_end, reason=member_end[record.MEMBER_FAILED])
            else:
                end(ReportKind.FINAL, k, member_end)


class _Reports:
    """A trial's reports on their way to Tune: each at once, or, with ``every_s``, at most one
    result that often, the reports between riding along with it (``TrialReport.earlier``)."""

    def __init__(self, where: dict[str, Any], every_s: float | None, member: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.where = where
        self.member = member
        self.every_s = every_s
        self.held: list[TrialReport] = []
        self.sent = self._clock()

    def forward(self, metrics: dict[str, Any]) -> None:
        """One of rank 0's reports. The last evaluation goes out once, merged into the final
        report (``last``): a scheduler that stops a trial on that report would otherwise cut
        off its final measurements."""
        if metrics.get("final") or metrics.get(record.MEMBER_FAILED) or metrics.get(FUSE_DECLINED_KEY):
            return  # the member's end goes out once, as its own result
        self.held.append(TrialReport(ReportKind.PROGRESS, metrics, member=self.member))
        if self.every_s is None or self._clock() - self.sent >= self.every_s:
            latest = self.held.pop()
            tune.report(self.last(latest))
            self.sent = self._clock()

    def last(self, report: TrialReport) -> dict[str, Any]:
        """``report`` as Tune gets it: with the trial's node, and the reports held back."""
        earlier, self.held = tuple(self.held), []
        return encode(replace(report, metrics={**report.metrics, **self.where}, earlier=earlier))
