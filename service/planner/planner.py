"""``Planner``: what a search runs next.

Given the study, the space, the budget, the memory ceilings learnt and the trials running, it
decides the next trial to start: the next proposal (``hpsearch.planner.proposals``), alone or
with the configurations of its shape as one fused group (asking ahead for them), or the end of
the search (``n_trials`` launched, nothing left to propose, interrupted, the budget spent or
unable to fit the next trial). Its answers are typed (``hpsearch.planner.decisions``); what it
decides is written through the recorder, the study's one writer.
"""

from __future__ import annotations

from optuna.trial import TrialState

from hpsearch import record
from hpsearch.planner.budget import predict_trial, trial_devices
from hpsearch.planner.decisions import Ending, Finished, Launch, Proposal
from hpsearch.planner.proposals import Proposer
from hpsearch.planner.recorder import Recorder
from hpsearch.planner.state import Member, SearchState
from hpsearch.planner.task import REPORT_EVERY_S, TrialTask, trial_folder
from hpsearch.planner.writer import write
from hpsearch.record import FUSE, FUSED_GROUP, FUSED_MEMBERS
from hpsearch.search_spaces import Choice, Fixed, Parameter, SearchSpace
from hpsearch.study.reasons import REASON_BUDGET
from hpsearch.trials.spec import MEMBER_FIELDS, MEMBER_HYPERPARAMETERS, TrialSpec, fusion_key, group_spec

__all__ = ["Planner"]


class Planner:
    """Decides what the search runs next (see the module's docstring).

    Args:
        state: What the running search knows.
        recorder: The study's writer, for what the planner decides.
    """

    def __init__(self, state: SearchState, recorder: Recorder) -> None:
        self.state = state
        self.recorder = recorder
        self.proposer = Proposer(state, recorder)
        # Why no two of the space's configurations can share a shape (None: some may), so that
        # nothing is asked ahead for partners that cannot exist.
        self.shapeless = no_shared_shape(state.space)

    def next_trial(self, trial_id: str) -> Launch | Finished:
        """What Tune trial ``trial_id`` runs, or why no more trials start."""
        s = self.state
        if s.interrupted:
            return Finished(Ending.INTERRUPTED)
        if s.budget_stop is not None:
            return Finished(Ending.BUDGET)
        if s.launched >= s.n_trials:
            return Finished(Ending.N_TRIALS)
        if s.ledger is not None and s.ledger.exhausted() is not None:
            return Finished(Ending.BUDGET)  # nothing asked: the stopper records why
        first = self.proposer.next_held() or self.proposer.propose()
        if isinstance(first, Finished):
            return first
        why = self.unfusable(first.spec)
        if why is not None:
            return self._launch(trial_id, [first], why)
        return self._launch(trial_id, *self._gather(first))

    def unfusable(self, spec: TrialSpec) -> str | None:
        """Why a trial of ``spec`` runs on its own whatever its partners (``None``: it may fuse)."""
        s = self.state
        if s.fuse == "false":
            return "search.fuse is false"
        if self.shapeless is not None:
            return self.shapeless
        if s.space.search.scheduler == "asha":
            return "ASHA judges each trial on its own reports"
        if spec.compile:
            return "a torch.compile'd model is not fused"
        # fuse: true fuses whatever the timing says, not what the model cannot do.
        return s.decisions.why_not(spec, timed=s.fuse == "auto")

    def _gather(self, first: Proposal) -> tuple[list[Proposal], str | None]:
        """``first`` and the configurations of its shape (``fusion_key``) the search has asked,
        asking ahead for more (at most twice ``search.fuse_max``, never past ``n_trials``): the
        group, and why it is only ``first`` where it is."""
        s = self.state
        key = fusion_key(first.spec)
        cap, capped = self._fuse_cap(first)
        cap = min(cap, s.group_size.get(key, cap))
        group = [first]
        for held in list(s.held):
            if len(group) < cap and fusion_key(held.spec) == key:
                s.held.remove(held)
                fresh = self.proposer.refreshed(held)
                if fresh is not None and fusion_key(fresh.spec) == key:
                    group.append(fresh)
                elif fresh is not None:
                    s.held.append(fresh)
        asked = 0
        while len(group) < cap and asked < 2 * s.fuse_max and s.launched + len(group) + len(s.held) < s.n_trials:
            proposal = self.proposer.propose(taken=len(group))
            if isinstance(proposal, Finished):
                break
            asked += 1
            (group if fusion_key(proposal.spec) == key else s.held).append(proposal)
        if key not in s.group_size and len(group) > 1:
            # Keep the search's trial slots busy: a shape with more configurations than one group
            # needs is split into as many groups as the slots the other shapes and the trials
            # running leave (one group of twelve on one core of two, the other idle, takes twice
            # as long when fusing does not pay; the digits CNN grid's b 8 split in two beside its
            # running b 32 group would leave a third group to run alone at the end).
            others = len({fusion_key(p.spec) for p in s.held} - {key})
            parts = max(1, min(len(group), s.slots - others - len(s.groups)))
            s.group_size[key] = size = -(-len(group) // parts)
            s.held[:0] = group[size:]
            group = group[:size]
        if len(group) > 1:
            return group, None
        if capped is not None:
            return group, capped
        # Those asked here and not of its shape wait in held: they are the configurations it
        # could have been grouped with (counting ``asked`` too would count them twice).
        waiting = len(s.held)
        if not waiting:
            return group, "no partner of its shape: no other configuration was waiting to start"
        return group, (f"no partner of its shape among the {waiting} other configuration"
                       f"{'' if waiting == 1 else 's'} waiting to start")

    def _fuse_cap(self, first: Proposal) -> tuple[int, str | None]:
        """The most members a group of ``first``'s shape may hold: ``search.fuse_max``, and on
        the CPU under ``resources.memory_per_worker`` as many as one member's peak memory (the
        largest of the completed trials of that shape) fits K times; with why it is 1 where it is."""
        s = self.state
        limit = first.spec.memory_limit_bytes
        peak = s.peaks.get(fusion_key(first.spec)) if limit is not None else None
        if limit is None or peak is None:
            return s.fuse_max, None
        fits = max(1, int(limit // peak))
        why = (f"one member's peak memory ({record.format_bytes(peak)}) fits "
               f"resources.memory_per_worker ({record.format_bytes(limit)}) once") if fits == 1 else None
        return min(s.fuse_max, fits), why

    def _launch(self, trial_id: str, group: list[Proposal], why: str | None) -> Launch | Finished:
        """Start ``group`` as one Tune trial: a trial of its own, or the members of a fused group
        (each still a trial of the study: ``fused_group``, ``fused_members``). ``why``: why a
        trial of its own is not fused."""
        s = self.state
        leader = group[0]
        if self._over_budget(trial_id, leader):
            # The trial that does not fit says why the search stopped; the configurations asked
            # with it never started: back to the queue, for a resume with budget left.
            for proposal in group[1:] + s.held:
                self.recorder.unstarted(proposal, REASON_BUDGET, s.budget_stop or "")
            s.held = []
            return Finished(Ending.BUDGET)
        fused = len(group) > 1
        mids = [f"{trial_id}#{k}" for k in range(len(group))] if fused else [trial_id]
        s.groups[trial_id] = mids
        for mid, proposal in zip(mids, group):
            attrs = dict(proposal.derived)
            if fused:
                attrs.update({FUSED_GROUP: leader.trial.number, FUSED_MEMBERS: len(group), FUSE: "on"})
            elif why is not None and s.fuse != "false":
                attrs[FUSE] = f"off: {why}"
            write(proposal.trial, attrs)
            s.open[mid] = Member(proposal)
            if proposal.trial.number not in s.announced:
                s.announced.add(proposal.trial.number)
                s.emit("started", proposal.trial.number, params=proposal.params)
        s.launched += len(group)
        # A shape whose timing already found that fusing pays is not timed into another answer.
        fuse = "true" if s.fuse == "auto" and s.decisions.paid(leader.spec) else s.fuse
        spec = group_spec([p.spec for p in group], fuse=fuse) if fused else leader.spec
        search = s.space.search
        return Launch(TrialTask(
            spec, leader.trial.number, trial_folder(s.runs_dir, leader.trial.number),
            timeout_s=search.trial_timeout_s, on_oom=s.on_oom,
            # A scheduler judges trials on every report (hpsearch.planner.task.REPORT_EVERY_S).
            report_every_s=None if search.scheduler == "asha" else REPORT_EVERY_S,
            members=tuple(p.trial.number for p in group)), tuple(group))

    def _over_budget(self, trial_id: str, proposal: Proposal) -> bool:
        """Whether the budget left cannot fit this proposed trial, predicted from the completed
        ones. If so it never starts: it is recorded FAIL ``budget`` (``resume`` with budget left
        runs it first) and the search proposes no more trials; the running ones go on."""
        s = self.state
        if s.ledger is None:
            return False
        devices = trial_devices(proposal.params, s.space, s.max_processes)
        prediction = refusal = None
        if s.ledger.budget.limited:
            done = s.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            prediction = predict_trial(done, proposal.params, devices)
            refusal = s.ledger.refusal(prediction)
        if refusal is None:
            s.ledger.trial_proposed(trial_id, devices, prediction)
            return False
        s.budget_stop = refusal
        self.recorder.over_budget(proposal.trial, proposal.derived, refusal)
        return True

    def check_budget(self) -> bool:
        """Whether the budget ran out, so the running trials must stop (the stopper asks about
        ten times a second). Writes what was spent to the study every few seconds, and tells the
        progress display every second."""
        s = self.state
        if s.ledger is None:
            return False
        persist, emit = s.ledger.due()
        if persist:
            s.ledger.persist(s.study)
        if emit and s.ledger.budget.limited:
            s.emit("budget", -1, status=s.ledger.status())
        if not s.budget_ran_out:
            spent = s.ledger.exhausted()
            if spent is not None:
                s.budget_ran_out = True
                s.budget_stop = s.budget_stop or spent
                s.emit("budget_stop", -1, detail=f"{spent}: stopping the running trials")
                self.recorder.stop_open_trials()
        return s.budget_ran_out


def no_shared_shape(space: SearchSpace) -> str | None:
    """Why no two configurations of ``space`` can share a shape (``hpsearch.trials.spec.fusion_key``),
    ``None`` where some may: it searches none of the settings fused members may differ in, so
    configurations of one shape are one configuration, which runs once. The planner then asks
    ahead for none: asking for partners, a search of four batch sizes and two slots would ask
    all twelve of its configurations at its first trial.

    Example:
        >>> from hpsearch.search_spaces import parse_space
        >>> text = "workload: {name: digits_mlp}\\nparameters:\\n  per_device_batch_size: {choices: [8, 16]}\\n"
        >>> no_shared_shape(parse_space(text + "  base_lr: 0.01\\n"))[:52]
        'no two configurations of the space share a shape: it'
        >>> no_shared_shape(parse_space(text + "  base_lr: {choices: [0.01, 0.1]}\\n")) is None
        True
    """
    own = (*(f for f in MEMBER_FIELDS if f != "hyperparameters"), *MEMBER_HYPERPARAMETERS)  # not a record name
    if any(name in own and _varies(p) for name, p in space.parameters.items()):
        return None
    return (f"no two configurations of the space share a shape: it searches none of {', '.join(own)}, "
            "which fused members may differ in")


def _varies(parameter: Parameter) -> bool:
    """Whether a searched parameter takes more than one value."""
    if isinstance(parameter, Fixed):
        return False
    if isinstance(parameter, Choice):
        return len(set(map(repr, parameter.choices))) > 1
    return parameter.low < parameter.high
