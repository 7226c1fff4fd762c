"""``Recorder``: writes what the search's trials report into the Optuna study.

Every trial ends in exactly one of COMPLETE (the objectives' final values and the measured user
attrs), PRUNED (stopped early, or not run, with its reason) or FAIL (``status_reason``:
``diverged``, ``workload_error``, ``interrupted``, ``budget``...); one the search stopped before
it started goes back to the study's queue. Ray's stock ``OptunaSearch`` corrupts studies
(docs/design.md, "Our own searcher"). Each evaluation adds to its trial's curves and
intermediate values; a trial's end writes its measurements, its phases and its device time
(also for a trial cut short before its final report, so the budget counts every trial that
trained), keeps or removes its saved model, and ends the exact duplicates waiting for it.

It is a module of the planner package, not of ``hpsearch.tune``: it reads typed reports
(``TrialReport``), not Tune's results, and imports no Ray, so a test drives it on a plain
Optuna study exactly as Tune's searcher does; and it shares the search's state with the
planner, whose decisions it writes through the same ``StudyWriter`` (one writer per study).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

from hpsearch import record
from hpsearch.planner.budget import spent_device_seconds, trial_devices
from hpsearch.planner.ceilings import training_ran_out
from hpsearch.planner.report import ReportKind, TrialReport, encode
from hpsearch.planner.state import Member
from hpsearch.planner.writer import StudyWriter, is_finite, phases, write
from hpsearch.record import (
    CURVE_METRICS,
    DEVICE_SECONDS,
    FUSE,
    FUSED_GROUP,
    FUSED_MEMBERS,
    MODEL_PATH,
    PHASES,
    RAN_AS,
    REASON_EXCEEDS_MEMORY,
    RECORDED_METRICS,
    RUNTIME_S,
    STATUS_DETAIL,
    STATUS_REASON,
    TRAINING_STARTED,
)
from hpsearch.study.reasons import REASON_BUDGET, REASON_EARLY_STOPPED, REASON_INTERRUPTED

__all__ = ["Recorder"]

class Recorder(StudyWriter):
    """Writes the search's trials into its study as they report (see the module's docstring)."""

    # ---- a trial's reports ----

    def training_started(self, trial_id: str) -> None:
        """Tune trial ``trial_id`` got its devices and its ranks start: its members are
        ``training_started`` (readers tell waiting from training by it)."""
        s = self.state
        mids = [mid for mid in s.groups.get(trial_id, ()) if mid in s.open]
        if not mids:
            return
        for mid in mids:
            trial = s.open[mid].trial
            s.started.add(mid)
            write(trial, {TRAINING_STARTED: time.time()})  # when its devices were reserved
            s.emit("training", trial.number)
        if s.ledger is not None:
            s.ledger.trial_training(trial_id)

    def on_result(self, trial_id: str, report: TrialReport) -> None:
        """A report of Tune trial ``trial_id`` on its way: evaluations, a member's end, a restart."""
        s = self.state
        if trial_id not in s.groups:
            return
        if report.kind is ReportKind.FUSE_DECLINED:
            self._fuse_declined(trial_id, report)
            return
        if report.kind is ReportKind.RESTARTED:
            # Ran out of memory and trains again halved (on_oom: accumulate), or split from a
            # group that ran out: its curves are the new run's alone (its evaluations come
            # again, at the same samples seen).
            restarted = s.groups[trial_id] if report.members is None else [s.mid(trial_id, k) for k in report.members]
            self._record(trial_id, report, own=False)
            for mid in restarted:
                member = s.open.get(mid)
                if member is not None:
                    member.curves = {k: [] for k in CURVE_METRICS}
                    write(member.trial, {record.CURVES: member.curves})
            return
        if report.member is not None:
            self._fuse_decided(trial_id, report)
            if report.final or report.failed:
                self._end(s.mid(trial_id, report.member), trial_id, report)  # a member ends: the others go on
                return
        if report.failed:
            return
        if report.final:
            s.finals[trial_id] = report
        self._record(trial_id, report)

    def on_complete(self, trial_id: str, report: TrialReport, error: bool = False) -> None:
        """Tune trial ``trial_id`` ended, ``report`` its last result (``error``: its process raised)."""
        s = self.state
        mids = s.groups.pop(trial_id, None)
        if mids is None:
            return
        if mids == [trial_id]:
            self._end(trial_id, trial_id, report, error)
            return
        # A fused group's Tune trial ended: its members' evaluations it carried are recorded, and
        # the members still open (the search stopped, the trial's process died) end with it.
        self._record(trial_id, report, own=report.member is not None and not report.final)
        for mid in mids:
            if mid in s.open:
                self._end(mid, trial_id, TrialReport(ReportKind.PROGRESS), error)
        if s.ledger is not None:
            s.ledger.trial_ended(trial_id, None)

    def _record(self, trial_id: str, report: TrialReport, *, own: bool = True, skip: str | None = None) -> None:
        """Record the evaluations a report carries (those held back, then its own), each with
        the member it is about; ``skip``: a member whose are recorded by the caller."""
        s = self.state
        for mid, reports in self._routed(trial_id, report, own=own).items():
            member = s.open.get(mid)
            if mid == skip or member is None:
                continue
            attrs, intermediates = self._evaluations(member, reports)
            write(member.trial, attrs, intermediates)
            for evaluation in reports:
                s.emit("result", member.trial.number, result=encode(evaluation))

    def _routed(self, trial_id: str, report: TrialReport, *, own: bool = True) -> dict[str, list[TrialReport]]:
        """The evaluations a report carries, per member id, in order."""
        mine = [report] if own and "evaluation" in report.metrics and not report.failed else []
        routed: dict[str, list[TrialReport]] = {}
        for evaluation in [*report.earlier, *mine]:
            routed.setdefault(self.state.mid(trial_id, evaluation.member), []).append(evaluation)
        return routed

    def _evaluations(self, member: Member, reports: list[TrialReport]) -> tuple[dict[str, Any], list[tuple[int, float]]]:
        """What a member's evaluations add to its trial: the attrs (the latest of each) and the
        intermediate values."""
        attrs: dict[str, Any] = {}
        intermediates = []
        for report in reports:
            _note_runtime(member, report)
            new, intermediate = self._evaluation(member, report)
            attrs.update(new)
            if intermediate is not None:
                intermediates.append(intermediate)
        return attrs, intermediates

    def _evaluation(self, member: Member, report: TrialReport) -> tuple[dict[str, Any], tuple[int, float] | None]:
        """What one evaluation adds to the trial: the curves, the progress attrs and the
        intermediate value (nothing when that evaluation was already recorded)."""
        curves = member.curves
        if len(curves[record.SAMPLES_SEEN]) >= report.metrics["evaluation"]:
            return {}, None
        for key in CURVE_METRICS:
            curves[key].append(_finite_or_none(report.get(key)))
        attrs = {record.CURVES: curves, record.EPOCHS_COMPLETED: report.get(record.EPOCHS_COMPLETED),
                 record.SAMPLES_SEEN: report.get(record.SAMPLES_SEEN), "steps": report.get("steps")}
        value = report.get(self.state.metrics[0])
        if not (is_finite(value) and record.SAMPLES_SEEN in report.metrics):
            return attrs, None
        # Intermediate values on a samples-seen axis, so batch sizes compare fairly. Written
        # through the storage: Trial.report refuses multi-objective studies.
        return attrs, (int(report.metrics[record.SAMPLES_SEEN]), float(value))

    def _fuse_declined(self, trial_id: str, report: TrialReport) -> None:
        """A group did not train fused (fusing did not pay, or its model cannot be vectorized):
        its members train on their own, one after another, in the group's Tune trial (on the
        devices it holds), and no later group of that shape is formed, in this search or any
        later one of the study. Said once: a workload's refusal comes from each group of it
        that started before the first refusal came in."""
        s = self.state
        why = str(report.declined)
        mids = [mid for mid in s.groups.get(trial_id, ()) if mid in s.open]
        news = False
        for mid in mids:
            proposal = s.open[mid].proposal
            if report.get(record.FUSED_STEP_S) is not None:  # timed: not at this batch or above
                news |= s.decisions.decline_at(proposal.spec, why)
            else:  # the model itself (vmap refuses it, it trains itself): none of this workload's
                news |= s.decisions.decline_workload(proposal.spec, why)
            write(proposal.trial, {FUSE: f"off: {why}", FUSED_GROUP: None, FUSED_MEMBERS: None,
                                   record.FUSED_STEP_S: report.get(record.FUSED_STEP_S),
                                   record.SOLO_STEP_S: report.get(record.SOLO_STEP_S)})
        if news:
            s.decisions.persist(s.study)
            s.emit("fuse", -1, detail=f"{len(mids)} trials run on their own, one after another: {why}")  # not a record name

    def _fuse_decided(self, trial_id: str, report: TrialReport) -> None:
        """A member's report under ``fuse: auto`` settles its shape: fusing stopped paying on
        the steady steps (no later group of the shape fuses), or, at its end, it paid (later
        groups fuse without timing a decision again)."""
        s = self.state
        member = s.open.get(s.mid(trial_id, report.member))
        if member is None or s.fuse != "auto":
            return
        proposal = member.proposal
        stopped = report.get(record.FUSE_STOPPED_PAYING)
        if isinstance(stopped, str):
            if s.decisions.decline_at(proposal.spec, stopped):
                s.decisions.persist(s.study)
                said = f"later groups of trial {proposal.trial.number}'s shape train on their own: {stopped}"
                s.emit("fuse", -1, detail=said)  # not a record name: the event kind
        elif (report.final and report.get(FUSE) == "on" and report.get(record.FUSED_STEP_S) is not None
              and s.decisions.fuse(proposal.spec, proposal.trial.number)):
            s.decisions.persist(s.study)

    # ---- a trial's end ----

    def _end(self, mid: str, trial_id: str, report: TrialReport, error: bool = False) -> None:
        """Member ``mid`` (of Tune trial ``trial_id``) ended with ``report``: completed, failed,
        stopped early or cut short, as the report says."""
        s = self.state
        member = s.open.get(mid)
        if member is None:
            return
        # Tune hands the report a scheduler stopped the trial on to on_trial_complete only, and
        # a report's held-back evaluations come with it.
        self._record(trial_id, report, skip=mid)
        attrs, intermediates = self._evaluations(member, self._routed(trial_id, report).get(mid, []))
        del s.open[mid]
        trial, proposal = member.trial, member.proposal
        if (s.interrupted or s.budget_ran_out) and s.never_started(mid, trial):
            # Stopped at the desk, waiting for its devices: nothing ran, so it is not cut short.
            self._end_device_time(mid, member, attrs, final=False)
            self.requeue(trial)
            return
        attrs[PHASES] = phases(proposal.asked, report.phases)
        ran_as = dict(report.ran_as) if report.ran_as is not None else None
        if ran_as is not None:  # its own process halved it (search.on_oom: accumulate)
            attrs[RAN_AS] = ran_as
        self._learn_memory(trial, report, ran_as, proposal.spec.per_device_batch_size)
        attrs.update({key: _finite_or_none(report.metrics[key]) for key in RECORDED_METRICS
                      if report.get(key) is not None})
        self._end_device_time(mid, member, attrs, final=report.final)
        write(trial, attrs, intermediates)
        if report.final:
            s.note_peak(proposal.spec, report.metrics)
            self._complete(trial, report)
        elif s.interrupted:
            # Whatever ended it after Ctrl-C (a terminal sends SIGINT to every process of the
            # search) is the interruption, not a fault of the trial.
            self.fail(trial, REASON_INTERRUPTED, "the search was stopped before this trial finished")
        elif s.budget_ran_out:
            # Likewise, whatever ended it once the budget ran out is the budget's stop.
            self.fail(trial, REASON_BUDGET, f"stopped: {s.budget_stop}")
        elif report.not_run:  # a member another of its shape showed cannot fit: skipped, as at the ask
            write(trial, {STATUS_REASON: REASON_EXCEEDS_MEMORY, STATUS_DETAIL: report.detail or ""})
            self.tell(trial, state=TrialState.PRUNED)
            s.launched -= 1  # not counted toward n_trials, as a configuration skipped at the ask
            s.emit("skipped", trial.number, reason=REASON_EXCEEDS_MEMORY, detail=report.detail)
        elif report.failed:
            self.fail(trial, report.reason or "error", report.detail or "")
        elif error:
            self.fail(trial, "error", "the trial process raised; see its error file in the Tune run folder")
        elif s.space.search.scheduler == "asha":
            self._prune(trial, report)
        else:
            self.fail(trial, "stopped", "the trial stopped before its last epoch without a failure report")

    def _learn_memory(self, trial: optuna.Trial, report: TrialReport, ran_as: Mapping[str, Any] | None,
                      batch: int) -> None:
        """A trial that ran out of memory, or ran halved after it did, sets its configuration's
        ceiling (``hpsearch.planner.ceilings``)."""
        ceilings = self.state.ceilings
        if report.final:
            ceilings.fit(trial.params, int((ran_as or {}).get(record.PER_DEVICE_BATCH_SIZE) or batch))
        ignored = None
        if ran_as is not None and isinstance(ran_as.get("out_of_memory_at"), int):
            ignored = ceilings.ran_out(trial.params, ran_as["out_of_memory_at"], trial=trial.number)
        if report.failed and training_ran_out({**report.metrics, STATUS_REASON: report.reason}):
            ignored = ceilings.ran_out(trial.params, batch, trial=trial.number)
        if ignored is not None:  # evidence that contradicts itself: said, not learnt
            self.state.emit("memory", trial.number, detail=ignored)

    def _complete(self, trial: optuna.Trial, report: TrialReport) -> None:
        s = self.state
        values = [report.get(m) for m in s.metrics]
        missing = [m for m, v in zip(s.metrics, values) if v is None]
        if missing:
            self.fail(trial, record.REASON_MISSING_METRIC, f"the trial reported no {', '.join(missing)}")
            return
        if not all(is_finite(v) for v in values):
            self.fail(trial, record.REASON_DIVERGED, f"non-finite objective values {values}")
            return
        finite = [float(v) for v in values if v is not None]
        write(trial, s.models.keep(trial.number, finite, report.get(MODEL_PATH), s.study))
        self.tell(trial, finite)
        s.emit("completed", trial.number, values=finite)

    def _prune(self, trial: optuna.Trial, report: TrialReport) -> None:
        s = self.state
        epochs = report.get("epoch", 0)  # fractional when it stopped between epochs
        samples = report.get(record.SAMPLES_SEEN, 0)
        detail = (f"ASHA stopped it after {epochs:g} of {s.space.workload.epochs} epochs ({samples} samples "
                  f"seen): {s.metrics[0]} {report.get(s.metrics[0])} did not make its rung's cutoff")
        write(trial, {record.EPOCHS_COMPLETED: report.get(record.EPOCHS_COMPLETED, int(epochs)),
                      record.SAMPLES_SEEN: samples, STATUS_REASON: REASON_EARLY_STOPPED, STATUS_DETAIL: detail})
        self.tell(trial, state=TrialState.PRUNED)
        s.emit("pruned", trial.number, reason=REASON_EARLY_STOPPED, detail=detail)

    def _end_device_time(self, mid: str, member: Member, attrs: dict[str, Any], *, final: bool) -> None:
        """Give a trial that ends before its final report the device-seconds it used: its
        devices x (its last evaluation's ``runtime_s`` + the time since that report came; for a
        fused member its share of them), so that the study's device time, and the budget, count
        every trial that trained. A final report brings its own. Tells the budget's account the
        trial ended."""
        s = self.state
        last, member.last_runtime = member.last_runtime, None
        s.finals.pop(mid, None)
        if not final and DEVICE_SECONDS not in attrs and last is not None:
            runtime, at, members = last
            devices = trial_devices(member.trial.params, s.space, s.max_processes)
            attrs[DEVICE_SECONDS] = (runtime + max(0.0, time.monotonic() - at) / members) * devices
        if s.ledger is not None:  # compiling counts in what the budget spent (runtime_s leaves it out)
            s.ledger.trial_ended(mid, spent_device_seconds(attrs))

    # ---- the search stops ----

    def fail_open_trials(self, reason: str, detail: str) -> None:
        """Record every trial still open (the search stopped under it) that ran as FAIL with
        ``reason``; those that never started (asked ahead, or waiting for their devices) go back
        to the study's queue (``requeue``)."""
        s = self.state
        for mid in list(s.open):
            member = s.open.pop(mid)
            attrs: dict[str, Any] = {}
            self._end_device_time(mid, member, attrs, final=False)
            if s.never_started(mid, member.trial):
                self.requeue(member.trial)
                continue
            attrs[PHASES] = phases(member.proposal.asked, None)
            write(member.trial, attrs)
            self.fail(member.trial, reason, detail)
        for proposal in s.held:
            self.unstarted(proposal, reason, detail)
        s.held = []
        # A trial that ran was told above, and the duplicates waiting for it ended with it; those
        # left wait for a configuration that went back to the queue without running: nothing ran
        # for them either, so they go back too (one left waiting would stay RUNNING for good).
        waiting = [trial for trials in s.awaiting.values() for trial in trials]
        s.awaiting.clear()
        for trial in waiting:
            self.requeue(trial)

    def stop_open_trials(self) -> None:
        """Record the open trials as stopped by the budget now, at the limit. Tune stops their
        processes at their next report, or, for a trial still starting, 10 s later
        (``TuneController``'s forced clean-up), and only then tells the searcher; the study
        says when the budget stopped them. A trial whose final report already came completes."""
        s = self.state
        for trial_id in list(s.open):
            final = s.finals.get(trial_id)
            if final is not None:
                self.on_complete(trial_id, final)
        self.fail_open_trials(REASON_BUDGET, f"stopped: {s.budget_stop}")

    def end_run(self) -> None:
        """The end of this run of the search: record the trials still open as cut short, by the
        budget (``budget``) or by a stop (``interrupted``), and write what the run spent."""
        s = self.state
        if s.budget_ran_out and not s.interrupted:
            self.fail_open_trials(REASON_BUDGET, f"stopped: {s.budget_stop}")
        else:
            self.fail_open_trials(REASON_INTERRUPTED, "the search stopped before this trial finished")
        if s.ledger is not None:
            s.ledger.persist(s.study)

def _note_runtime(member: Member, report: TrialReport) -> None:
    # A fused member's device time is its share of the group's (device_share_s), and the
    # time since is shared among the group's members.
    share = report.get(record.DEVICE_SHARE_S)
    runtime = share if is_finite(share) else report.get(RUNTIME_S)
    if is_finite(runtime):
        members = report.get(FUSED_MEMBERS) if is_finite(share) else 1
        member.last_runtime = (float(runtime), time.monotonic(), float(members or 1))


def _finite_or_none(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v
