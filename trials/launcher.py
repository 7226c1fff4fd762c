"""Run one trial's W DDP ranks in warm rank processes and stream rank 0's reports back.

The ranks run in a ``RankPool``'s processes (``hpsearch.trials.node.pool``), which have imported
torch, the loop and the workload before the trial starts and serve trials of any shape; each
trial's ranks meet in a process group of their own (gloo on CPU, nccl on CUDA).

Rank 0 appends its per-epoch reports to ``metrics.jsonl`` in the trial's run folder; the
pool passes them on while the launcher waits for the ranks, so the caller sees each epoch as it
ends. A rank that fails writes ``failure-rank<r>.json`` with its reason before exiting; when any
rank dies, the pool stops the others and the launcher raises ``TrialFailed`` with the first
reason found.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from hpsearch import record
from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.node.pool import local_pool
from hpsearch.trials.node.ranks import Ranks, Status
from hpsearch.trials.spec import TrialSpec
from hpsearch.trials.workloads.base import workload_module_name

__all__ = ["run_trial"]

Report = Callable[[dict[str, Any]], None]

# How long a trial's process waits for its ranks before it looks again: ``wait`` returns as soon
# as rank 0 reports or the ranks end, so this only bounds how late ``timeout_s`` is noticed.
_WAIT_S = 1.0
_SIGNAL_SET = {int(s) for s in signal.Signals}


def run_trial(
    spec: TrialSpec,
    run_dir: str | os.PathLike[str],
    *,
    report: Report | None = None,
    collective_timeout_s: float = 300.0,
    timeout_s: float | None = None,
    ranks: Ranks | None = None,
    gpu_ids: Sequence[str] | None = None,
    phases: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Run one trial: W ranks of the DDP loop, and return rank 0's final metrics.

    Args:
        spec: The trial's configuration.
        run_dir: A folder for this trial's files (created); it keeps ``metrics.jsonl``.
        report: Called in this process with each per-epoch report, as it arrives.
        collective_timeout_s: How long a rank waits in a collective before giving up, so a
            rank that dies cannot leave the others hanging.
        timeout_s: Wall-clock limit of the whole trial (``None``: none); past it the ranks are
            killed and the trial fails with reason ``timeout``.
        ranks: The pool whose processes run the ranks (default: this process's own,
            ``hpsearch.trials.node.pool.local_pool``).
        gpu_ids: On CUDA, the trial's assigned GPUs, one per rank.
        phases: Filled in as the trial goes, also when it fails: the wall-clock times its ranks
            were ``handed`` to workers, every rank was ``ready``, rank 0's loop started and
            ended training (``training_started``, ``training_ended``), and the trial's process
            had the ``last_report`` (``hpsearch.record.PHASE_NAMES``). A trial whose ranks fail
            after training began ends training when they stop. Called again with the same
            ``phases`` (a retry on the same devices), they become this attempt's, and the one
            before counts as a failed attempt (``record.FAILED_ATTEMPTS``, ``FAILED_ATTEMPTS_S``).

    Returns:
        The last epoch's metrics plus the trial's derived measurements (``device_seconds``,
        ``samples_per_s``, ``effective_batch_size``, ``device``...); for a fused group
        (``spec.fused``), each member's (``_group_final``).

    Raises:
        TrialFailed: a rank diverged, raised, or exited, or the trial ran out of time;
            ``reason`` says which.
    """
    if ranks is None:
        module = workload_module_name(spec.workload)
        ranks = local_pool([module] if module else [])
    followed = _Followed(report, _new_attempt({} if phases is None else phases))
    ticket = ranks.start(spec, os.fspath(run_dir), gpu_ids=gpu_ids, collective_timeout_s=collective_timeout_s,
                         sys_path=sys.path)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    codes = None
    try:
        while True:
            status = ranks.wait(ticket, _WAIT_S)
            followed.take(status)
            if (codes := status.codes) is not None:
                break
            if deadline is not None and time.monotonic() > deadline:
                done = followed.reports[-1]["epoch"] if followed.reports else 0
                raise TrialFailed("timeout", f"the trial ran past its {timeout_s:g} s limit "
                                             f"(search.trial_timeout_s) after {done} of {spec.epochs} epochs")
    finally:
        # Reached also when the caller is interrupted or stopped: never leave ranks behind.
        if codes is None:
            ranks.cancel(ticket)
    if any(codes):
        _failed_training(followed.phases, status.failures)
        raise _failure(status.failures, codes)
    if not followed.reports:
        raise TrialFailed(record.REASON_NO_RESULT, "rank 0 finished without reporting any epoch")
    if spec.fused:
        return _group_final(spec, followed.reports, gpu_ids)
    return _final(spec, followed.reports[-1], gpu_ids)


#: The phases each attempt of a trial records anew.
_ATTEMPT_PHASES = ("handed", "ready", record.TRAINING_STARTED, "training_ended", "last_report")


def _new_attempt(phases: dict[str, float]) -> dict[str, float]:
    """``phases`` made ready for an attempt: one that already holds an attempt's phases is a
    retry, and the attempt before it counts as failed. Mixing two attempts' times would make a
    halved trial's timeline run backwards (``handed`` from the retry, then an earlier ``ready``
    kept from the attempt that ran out of memory)."""
    if "handed" in phases:
        phases[record.FAILED_ATTEMPTS] = phases.get(record.FAILED_ATTEMPTS, 0) + 1
        phases[record.FAILED_ATTEMPTS_S] = phases.get(record.FAILED_ATTEMPTS_S, 0.0) + time.time() - phases["handed"]
    for name in _ATTEMPT_PHASES:
        phases.pop(name, None)
    return phases


def _failed_training(phases: dict[str, float], failures: list[dict[str, Any]]) -> None:
    """The training phases of an attempt whose ranks failed: rank 0 says in its failure report
    when training began (``hpsearch.trials.rank.process``), also when it failed before its first
    report (out of memory in the first step); training ended when the ranks stopped. Without
    them a trial that runs out of memory after 3 s of training would show ``training_started``
    as not reached and all 3 s as the orchestrator's."""
    started = next((f.get(record.TRAINING_STARTED) for f in failures if f.get("rank") == 0), None)
    if record.TRAINING_STARTED not in phases and isinstance(started, (int, float)):
        phases[record.TRAINING_STARTED] = float(started)
    if record.TRAINING_STARTED in phases:
        phases.setdefault("training_ended", time.time())


class _Followed:
    """What a trial's process has heard of its ranks: rank 0's reports, passed on to ``report``
    as they come, and the trial's phases (``run_trial``'s ``phases``)."""

    def __init__(self, report: Report | None, phases: dict[str, float]) -> None:
        self.report = report
        self.phases = phases
        self.reports: list[dict[str, Any]] = []

    def take(self, status: Status) -> None:
        phases = self.phases
        if status.handed_at is not None:
            phases["handed"] = status.handed_at  # the pool's own clock: before any rank began
        if status.ready_at is not None:
            phases.setdefault("ready", status.ready_at)
        for line, at in zip(status.reports, status.report_times or [time.time()] * len(status.reports)):
            if not self.reports and isinstance(line.get(record.RUNTIME_S), (int, float)):
                # The runtime leaves compiling out: the wall time since training began holds it.
                phases[record.TRAINING_STARTED] = at - float(line[record.RUNTIME_S]) - float(line.get(record.COMPILE_S) or 0.0)
            self.reports.append(line)
            if line.get("final"):
                phases["training_ended"] = at
                phases["last_report"] = time.time()
            if self.report is not None:
                self.report(line)


def _final(spec: TrialSpec, last: dict[str, Any], gpu_ids: Sequence[str] | None) -> dict[str, Any]:
    """Rank 0's last report plus the trial's derived measurements."""
    final = dict(last)
    runtime = float(final[record.RUNTIME_S])
    final.update(
        effective_batch_size=spec.effective_batch_size,
        world_size=spec.world_size,
        emulated_ranks=spec.emulated_ranks,
        device_seconds=runtime * spec.processes,
        samples_per_s=final[record.SAMPLES_SEEN] / runtime if runtime > 0 else float("nan"),
        device=final.get("device") or "cpu",
    )
    if gpu_ids is not None and spec.device.startswith("cuda"):
        final[record.GPU_IDS] = [str(g) for g in gpu_ids[: spec.processes]]
    if spec.world_size * spec.grad_accum_steps == 1:
        # One process, one micro-batch per step: no two batch sizes to compare (docs/science.md).
        final[record.NOISE_SCALE] = None
        final[record.NOISE_SCALE_NOTE] = "not measurable: world_size x grad_accum_steps = 1"
    return final


def _group_final(spec: TrialSpec, reports: list[dict[str, Any]], gpu_ids: Sequence[str] | None) -> dict[str, Any]:
    """A fused group's outcome (``hpsearch.trials.rank.fused``): ``members`` maps each member's
    index to its final metrics (as ``_final`` gives a trial's), or to its failure (``reason``,
    ``detail``, its metrics so far); a group that did not train fused says why
    (``record.FUSE_DECLINED``) with the step times that decided it.

    A member's ``device_seconds`` is its share of the group's: each stretch of the group's wall
    time shared among the members training in it, times the group's devices.
    """
    last = reports[-1]
    if last.get(record.FUSE_DECLINED):
        return {key: last.get(key) for key in (record.FUSE_DECLINED, record.FUSED_STEP_S, record.SOLO_STEP_S)}
    members: dict[int, dict[str, Any]] = {}
    position = {int(own["member"]): k for k, own in enumerate(spec.fused)}
    for line in reports:
        index = line.get(record.FUSED_MEMBER)
        if index is None or index not in position:
            continue
        if line.get(record.MEMBER_FAILED):
            members[index] = {**line, "failed": True}
        elif line.get("final"):
            final = _final(spec.member(position[index]), line, gpu_ids)
            final[record.DEVICE_SECONDS] = float(line.get(record.DEVICE_SHARE_S) or 0.0) * spec.processes
            members[index] = final
    return {"members": members}


def _failure(reports: list[dict[str, Any]], exit_codes: list[int]) -> TrialFailed:
    """The root cause of a failed trial, in order of evidence:

    1. a rank killed by a signal (the OOM killer, a user's kill -9, a segfault; SIGTERM and
       SIGABRT excepted, see below): the survivors' own reports
       then only describe the hole it left, and how they describe it depends on where they
       were (a ``DistBackendError`` in a collective, or a ``RuntimeError`` re-raised from a
       communication hook's future), so they cannot outrank it;
    2. a rank's own failure report (diverged, workload error...), except ``peer_lost``, which a
       rank writes when another rank vanished under a collective;
    3. the exit codes.
    """
    killed = [(rank, signal.Signals(-code)) for rank, code in enumerate(exit_codes)
              if code < 0 and -code in _SIGNAL_SET]
    # SIGTERM is how the pool stops the surviving ranks; SIGABRT is what a C++
    # runtime raises in a rank whose peer went away mid-collective: symptoms, not causes.
    for rank, sig in killed:
        if sig not in (signal.SIGTERM, signal.SIGABRT):
            return TrialFailed(record.REASON_RANK_EXITED, f"rank {rank} was killed by {sig.name}")
    for info in reports:
        if info["reason"] != record.REASON_PEER_LOST:
            return TrialFailed(info["reason"], info["detail"], info.get("measured"))
    for rank, sig in killed:
        if sig != signal.SIGTERM:
            return TrialFailed(record.REASON_RANK_EXITED, f"rank {rank} was killed by {sig.name}")
    if reports:
        return TrialFailed(reports[0]["reason"], reports[0]["detail"])
    rank, code = next((r, c) for r, c in enumerate(exit_codes) if c)
    how = f"was stopped by {signal.Signals(-code).name}" if -code in _SIGNAL_SET else f"exited with code {code}"
    return TrialFailed(record.REASON_RANK_EXITED, f"rank {rank} {how} without reporting why")
