"""Confirmation: the search runs its own answer and says whether it held.

An answer is a prediction until it runs (docs/science.md). After a search's trials, a
``Confirmer`` (the orchestrator's ``next_round``) reads the study's answer for the devices it
was asked for, and runs its exact configuration (``Recommendation.params()``) as new trials,
each with a seed no earlier run of that configuration used (so none repeats a run, an answer
the search already ran included), marked ``role: confirmation`` and counted apart from
``n_trials``. Each round is judged against the interval the answer stated **before** it ran:
it held when every run reached the target and the median of their samples lies in that
interval. The runs are folded into the fits and the answer is given again; rounds go on until
the answer's configuration held, or the confirmation budget is spent (``analysis.confirm_budget``:
at most ``rounds`` rounds and ``share`` of the search's device time, whichever ends first;
``search.budget`` holds them too). The study keeps its rounds (``hpsearch.study.ConfirmationRound``).

On a machine with fewer devices than the answer names, the runs emulate its ranks (exact math of
W, ``resources.emulate_ranks``): they confirm its samples to the target, and say its time was not
measured at that W.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import optuna

from hpsearch import record
from hpsearch.analysis import FITTED, Recommendation, Target, analyze_study, crossing, recommend
from hpsearch.budget import predict_trial
from hpsearch.errors import AnalysisError
from hpsearch.planner.plan import ConfirmationRun as PlannedRun
from hpsearch.planner.plan import SearchPlan
from hpsearch.progress import SearchEvent
from hpsearch.search_spaces import SearchSpace
from hpsearch.store import space_of_study
from hpsearch.study import (
    HELD,
    INCOMPLETE,
    MISSED,
    RUNNING,
    ConfirmationRound,
    ConfirmationRun,
    confirmation_rounds,
    is_confirmation,
    read_attr,
    same_answer,
    study_info,
    trial_params,
)

__all__ = ["AUTO_RUNS", "ConfirmationPolicy", "Confirmer", "judge_rounds"]

#: Runs a round has under ``confirm: auto`` where the confirmation budget fits them (else 1): two
#: seeds give a median, and say more than one of how far a run scatters.
AUTO_RUNS = 2


@dataclass(frozen=True)
class ConfirmationPolicy:
    """How a search confirms its answer (``analysis.confirm``, ``analysis.confirm_budget``).

    Attributes:
        runs: Runs a round has; ``None``: ``auto`` (``AUTO_RUNS`` where the budget fits them, else 1).
        rounds: The most rounds one search (or one ``hpsearch confirm``) runs.
        share: The most of the search's device time its confirmation runs may spend (0.25: a
            quarter); the first round runs at least one run whatever it costs.
    """

    runs: int | None = None
    rounds: int = 2
    share: float = 0.25

    @classmethod
    def of_space(cls, space: SearchSpace, *, runs: int | None = None,
                 enabled: bool | None = None) -> ConfirmationPolicy | None:
        """The space's policy, ``None`` where it is off; ``runs`` and ``enabled`` (``start
        --no-confirm``, ``hpsearch confirm --runs K``) override the space's ``confirm``."""
        confirm = space.analysis.confirm
        if enabled is False or (confirm == "off" and enabled is None and runs is None):
            return None
        count = runs if runs is not None else (confirm if isinstance(confirm, int) else None)
        return cls(count, space.analysis.confirm_rounds, space.analysis.confirm_share)


class Confirmer:
    """The confirmation rounds of one search or one ``hpsearch confirm``: called by the
    orchestrator with the study and its plan once the trials are done and after each round
    (``NextRound``), it judges the rounds that ended and gives the next round's runs, or none.

    Args:
        policy: How many runs and rounds, and how much of the search's device time.
        devices: The devices the answer is for; default: the plan's (what the cluster offers one
            trial, as ``hpsearch start`` answers for).
        devices_per_node: The devices a node holds; default: the plan's.
        on_event: Told what each round does (``confirmation`` events, for the progress display).
    """

    def __init__(self, policy: ConfirmationPolicy, *, devices: int | None = None, devices_per_node: int | None = None,
                 on_event: Callable[[SearchEvent], None] | None = None) -> None:
        self.policy = policy
        self.devices = devices
        self.devices_per_node = devices_per_node
        self.on_event = on_event
        #: The rounds this one started, by number.
        self.started: list[int] = []
        self._said: set[int] = set()

    def __call__(self, study: optuna.Study, plan: SearchPlan) -> list[PlannedRun]:
        rounds = judge_rounds(study)
        for judged in rounds:
            if judged.round in self.started and judged.verdict != RUNNING and judged.round not in self._said:
                self._said.add(judged.round)
                self._say(judged.describe())
        if len(self.started) >= self.policy.rounds:
            return []
        devices = self.devices or plan.devices
        per_node = self.devices_per_node or (plan.node_devices if self.devices is None else None)
        try:
            analysis = analyze_study(study._storage, study_info(study._storage, study.study_name))
            answer = recommend(analysis, devices, devices_per_node=per_node)
        except AnalysisError as exc:
            self._say(f"no answer to confirm: {exc}")
            return []
        if answer.basis != FITTED or answer.samples_interval is None or answer.target is None:
            self._say(f"nothing to confirm: the answer is a measured trial ({answer.basis}), not a prediction")
            return []
        params = answer.params()
        held = [r for r in rounds if r.verdict == HELD and same_answer(r.params, params)]
        if held:
            self._say(f"the answer is confirmed: round {held[-1].round} ran it and held")
            return []
        runs = self._count(study, answer, params)
        if runs == 0:
            return []
        space = space_of_study(study)
        seeds = _new_seeds(study.get_trials(deepcopy=False), params, space.search.seed, runs)
        number = len(rounds) + 1
        predicted_time = None if answer.time_interval is None else (
            answer.time_interval.low, answer.time_s, answer.time_interval.high)
        goal = (answer.target.metric, answer.target.value, answer.target.direction)
        planned = ConfirmationRound(number, devices, str(answer.target), params, _configuration(answer), answer.lr,
                                    (answer.samples_interval.low, answer.samples, answer.samples_interval.high),
                                    predicted_time, goal=goal)
        _write_rounds(study, [*rounds, planned])
        self.started.append(number)
        emulated = answer.world_size > plan.devices
        self._say(f"confirming the answer (round {number}): {planned.configuration} on {devices} device"
                  f"{'' if devices == 1 else 's'}, {runs} run{'' if runs == 1 else 's'} with new seeds "
                  f"{', '.join(map(str, seeds))}; predicted {answer.samples:,.0f} [{answer.samples_interval.low:,.0f}, "
                  f"{answer.samples_interval.high:,.0f}] samples to reach {answer.target}"
                  + (f" (its {answer.world_size} ranks emulated on {plan.devices} device(s): samples confirmed, time "
                     "not measured at that W)" if emulated else ""), runs=runs)
        entry = {"round": number, "devices": devices, "target": str(answer.target), "goal": list(goal),
                 "predicted": {"samples": list(planned.predicted_samples),
                               "time_s": None if predicted_time is None else list(predicted_time)}}
        return [PlannedRun(params, seed, entry) for seed in seeds]

    def _count(self, study: optuna.Study, answer: Recommendation, params: dict[str, Any]) -> int:
        """How many runs the next round has: the policy's, within what is left of the
        confirmation budget (0: nothing left; the first round runs at least one)."""
        trials = study.get_trials(deepcopy=False)
        searched = sum(_device_seconds(t) for t in trials if not is_confirmation(t.user_attrs))
        spent = sum(_device_seconds(t) for t in trials if is_confirmation(t.user_attrs)
                    and (t.user_attrs.get(record.CONFIRMATION) or {}).get("round") in self.started)
        left = self.policy.share * searched - spent
        done = [t for t in trials if not is_confirmation(t.user_attrs)]
        predicted = predict_trial(done, params, answer.world_size)
        cost = predicted.device_s if predicted is not None else answer.time_s * answer.world_size
        wanted = self.policy.runs or AUTO_RUNS
        fits = int(left // cost) if cost > 0 else wanted
        runs = min(wanted, fits)
        if runs < 1 and not self.started:
            runs = 1  # the first round runs the answer once, whatever it costs
        if runs < 1:
            self._say(f"confirmation budget spent: a run of the answer costs about {cost:.3g} device-seconds, "
                      f"{max(left, 0.0):.3g} of the {self.policy.share:.0%} of the search's {searched:.3g} are left "
                      "(analysis.confirm_budget)")
            return 0
        return runs

    def _say(self, detail: str, runs: int = 0) -> None:
        if self.on_event is not None:
            self.on_event(SearchEvent("confirmation", -1, {"detail": detail, "runs": runs}))  # not a record name: the event kind


def judge_rounds(study: optuna.Study) -> tuple[ConfirmationRound, ...]:
    """The study's rounds, each one whose runs have all ended judged (and written back): held,
    missed or incomplete, against the interval it stated before it ran."""
    rounds = confirmation_rounds(study.user_attrs)
    open_rounds = [r for r in rounds if r.verdict == RUNNING]
    if not open_rounds:
        return rounds
    trials = [t for t in study.get_trials(deepcopy=False) if is_confirmation(t.user_attrs)]
    changed = False
    out = []
    for current in rounds:
        if current.verdict != RUNNING:
            out.append(current)
            continue
        mine = [t for t in trials if (t.user_attrs.get(record.CONFIRMATION) or {}).get("round") == current.round]
        if not mine or any(not t.state.is_finished() for t in mine):
            out.append(current)
            continue
        out.append(_judged(study, current, mine))
        changed = True
    if changed:
        _write_rounds(study, out)
    return tuple(out)


def _judged(study: optuna.Study, current: ConfirmationRound, trials: Sequence[optuna.trial.FrozenTrial]) -> ConfirmationRound:
    """A round whose runs ended, judged: each run against the interval stated before the round."""
    goal = current.goal
    assert goal is not None
    target = Target(goal[0], goal[1], "minimize" if goal[2] == "minimize" else "maximize")
    curves = read_attr(study._storage, study.study_name, record.CURVES, numbers=[t.number for t in trials])
    low, _, high = current.predicted_samples
    runs = []
    for t in sorted(trials, key=lambda t: t.number):
        batch = t.user_attrs.get(record.EFFECTIVE_BATCH_SIZE)
        hit = crossing(curves.get(t.number), target, batch_size=float(batch) if batch else None)
        trained = t.user_attrs.get(record.SAMPLES_SEEN)
        own_end = t.state.name == "COMPLETE" or (t.state.name == "FAIL" and t.user_attrs.get(record.STATUS_REASON)
                                                  not in record.RERUN_REASONS)
        inside = None if not own_end else (hit.reached and low <= float(hit.samples or 0.0) <= high)
        measured = int(t.user_attrs.get(record.EMULATED_RANKS) or 1) == 1
        time = current.predicted_time_s
        time_hit = None if not (measured and hit.train_s is not None and time is not None) else (
            time[0] <= hit.train_s <= time[2])
        runs.append(ConfirmationRun(t.number, _int(t.user_attrs.get(record.SEED)), t.state.name, hit.reached,
                                    hit.samples, None if trained is None else float(trained), hit.train_s, inside,
                                    measured, time_hit))
    judged = replace(current, trials=tuple(r.trial for r in runs), runs=tuple(runs))
    ended = [run for run in runs if run.hit is not None]
    if not ended:
        return replace(judged, verdict=INCOMPLETE, note="its runs were cut short before they could say")
    missed = [run for run in ended if not run.reached]
    if missed:
        first = missed[0]
        why = (f"trial #{first.trial} did not reach {current.target}"
               + (f" in the {first.samples_trained:,.0f} samples it trained" if first.samples_trained else ""))
        return replace(judged, verdict=MISSED, note=why)
    median = judged.measured_samples
    assert median is not None
    if low <= median <= high:
        return replace(judged, verdict=HELD, note=f"the median of {len(ended)} run{'' if len(ended) == 1 else 's'} "
                                                   "lies in the interval stated before it ran")
    side = "above" if median > high else "below"
    return replace(judged, verdict=MISSED, note=f"the median, {median:,.0f}, lies {side} the interval "
                                                f"[{low:,.0f}, {high:,.0f}] stated before it ran")


def _new_seeds(trials: Sequence[optuna.trial.FrozenTrial], params: dict[str, Any], search_seed: int,
               count: int) -> list[int]:
    """``count`` seeds no earlier run of ``params``' configuration used (a trial recorded before
    seeds were kept ran with the space's ``search.seed``), the smallest after the search's."""
    used = {_int(t.user_attrs.get(record.SEED)) if t.user_attrs.get(record.SEED) is not None else search_seed
            for t in trials if same_answer(trial_params(t), params)}
    used.add(search_seed)
    seeds: list[int] = []
    candidate = search_seed + 1
    while len(seeds) < count:
        if candidate not in used:
            seeds.append(candidate)
        candidate += 1
    return seeds


def _configuration(answer: Recommendation) -> str:
    """The answer's configuration in a phrase: ``b 32 x W 1 x A 1 = B 32, lr 0.0348``."""
    rule = f" ({answer.rule} rule from base_lr {answer.base_lr:.4g})" if answer.rule and answer.base_lr else ""
    return (f"b {answer.per_device_batch_size} x W {answer.world_size} x A {answer.grad_accum_steps} = B "
            f"{answer.effective_batch_size}, lr {answer.lr:.4g}{rule}")


def _write_rounds(study: optuna.Study, rounds: Sequence[ConfirmationRound]) -> None:
    study.set_user_attr(record.ATTR_CONFIRMATIONS, [r.to_dict() for r in rounds])


def _device_seconds(trial: optuna.trial.FrozenTrial) -> float:
    value = trial.user_attrs.get(record.DEVICE_SECONDS)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
