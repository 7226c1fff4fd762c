"""The planner and the recorder on a real Optuna study, as plain Python: what runs next (a
proposal, an exact duplicate, a skip, a halving after running out of memory, the budget's stop)
and what a trial's reports leave in the study (complete, fail). No Ray: one test runs them all
in a process where ``import ray`` fails, as the planner package promises."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import optuna

from hpsearch import record
from hpsearch.planner.budget import BudgetLedger, BudgetSpent
from hpsearch.planner.decisions import Finished, Launch
from hpsearch.planner.planner import Planner
from hpsearch.planner.recorder import Recorder
from hpsearch.planner.report import ReportKind, TrialReport
from hpsearch.planner.sampler import create_sampler
from hpsearch.planner.state import SearchState
from hpsearch.search_spaces import Budget, parse_space

#: At B = B0 every rule gives base_lr: the three rules train the very same thing.
RULES = """\
study: rules
workload: {name: digits_mlp, epochs: 1}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: 8
  lr_rule: {choices: [constant, linear, sqrt]}
  base_lr: 0.01
search: {sampler: grid, seed: 0, fuse: false}
resources: {device: cpu}
"""
#: Two learning rates of one per-device batch: what one teaches about memory holds for the other.
BIG_BATCH = """\
study: big
workload: {name: digits_mlp, epochs: 1}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: 32
  base_lr: {choices: [0.01, 0.02]}
search: {sampler: grid, seed: 0, fuse: false, on_oom: accumulate}
resources: {device: cpu}
"""


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _planner(text: str, n_trials: int, tmp: Path, ledger: BudgetLedger | None = None
             ) -> tuple[optuna.Study, Planner, Recorder]:
    space = parse_space(text)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=space.study, storage=optuna.storages.InMemoryStorage(),
                                directions=[o.direction for o in space.objectives], sampler=create_sampler(space))
    state = SearchState(study, space, n_trials, "cpu", tmp, ledger=ledger)
    recorder = Recorder(state)
    return study, Planner(state, recorder), recorder


def _launched(decision: Launch | Finished) -> Launch:
    assert isinstance(decision, Launch), decision
    return decision


def _final(accuracy: float) -> TrialReport:
    return TrialReport(ReportKind.FINAL, {record.VAL_ACCURACY: accuracy, record.RUNTIME_S: 2.0,
                                          record.DEVICE_SECONDS: 2.0, record.SAMPLES_SEEN: 1000, "evaluation": 1},
                       phases=(("launched", 1.0),))


def propose_and_take_on_a_duplicate(tmp: Path) -> dict[str, Any]:
    """A proposal runs; the other rules at B0 are its exact duplicates: not run, they end as it
    completes."""
    study, planner, recorder = _planner(RULES, 3, tmp)
    launch = _launched(planner.next_trial("t0"))
    [proposal] = launch.members
    ended = planner.next_trial("t1")  # the two duplicates are recorded on the way
    recorder.training_started("t0")
    recorder.on_complete("t0", _final(0.9))
    return {"ran": launch.task.number, "fused": launch.fused, "lr": proposal.derived[record.LR],
            "ended": ended.ending.value if isinstance(ended, Finished) else None,
            "trials": [(t.state.name, t.values, t.user_attrs.get(record.DUPLICATE_OF),
                        record.TRAINING_STARTED in t.user_attrs) for t in study.trials]}


def skip_a_configuration_run_before(tmp: Path) -> dict[str, Any]:
    """A configuration the search ran comes back from the queue: skipped as the same, not run."""
    study, planner, recorder = _planner(RULES + "constraints: {skip_duplicates: false}\n", 3, tmp)
    first = _launched(planner.next_trial("t0"))
    recorder.on_complete("t0", _final(0.8))
    study.enqueue_trial(dict(study.trials[first.task.number].params))
    second = _launched(planner.next_trial("t1"))
    skipped = study.trials[first.task.number + 1]
    return {"second": second.task.number, "skipped": (skipped.state.name, skipped.user_attrs.get(record.STATUS_REASON),
                                                      skipped.user_attrs.get(record.STATUS_DETAIL))}


def halve_after_running_out_of_memory(tmp: Path) -> dict[str, Any]:
    """A trial that ran out of memory in training fails; the next of its per-device batch runs halved."""
    study, planner, recorder = _planner(BIG_BATCH, 2, tmp)
    _launched(planner.next_trial("t0"))
    recorder.training_started("t0")
    recorder.on_complete("t0", TrialReport(ReportKind.FAILED, {record.OUT_OF_MEMORY_PHASE: "training"},
                                           reason=record.REASON_OUT_OF_MEMORY, detail="CUDA out of memory"))
    halved = _launched(planner.next_trial("t1"))
    ran_out = study.trials[0]
    return {"ran_out": (ran_out.state.name, ran_out.user_attrs.get(record.STATUS_REASON)),
            "halved": (halved.task.spec.per_device_batch_size, halved.task.spec.grad_accum_steps),
            "ran_as": study.trials[1].user_attrs.get(record.RAN_AS)}


def stop_when_the_budget_is_spent(tmp: Path) -> dict[str, Any]:
    """The wall-clock budget runs out while a trial trains: it fails ``budget``, and no trial starts."""
    clock = _Clock()
    ledger = BudgetLedger(Budget(wall_s=60), BudgetSpent(), started=0.0, clock=clock)
    study, planner, recorder = _planner(RULES.replace("constant, ", ""), 3, tmp, ledger)
    _launched(planner.next_trial("t0"))
    recorder.training_started("t0")
    before = planner.check_budget()
    clock.now = 61.0
    after = planner.check_budget()
    ended = planner.next_trial("t1")
    [trial] = study.trials
    return {"before": before, "after": after, "ended": ended.ending.value if isinstance(ended, Finished) else None,
            "trial": (trial.state.name, trial.user_attrs.get(record.STATUS_REASON),
                      trial.user_attrs.get(record.STATUS_DETAIL))}


def record_a_failure(tmp: Path) -> dict[str, Any]:
    """A trial that diverged: FAIL with its reason and detail, its measurements kept."""
    study, planner, recorder = _planner(RULES, 1, tmp)
    _launched(planner.next_trial("t0"))
    recorder.training_started("t0")
    recorder.on_result("t0", TrialReport(ReportKind.PROGRESS, {"evaluation": 1, record.SAMPLES_SEEN: 100,
                                                              record.VAL_ACCURACY: 0.3, record.RUNTIME_S: 1.0}))
    recorder.on_complete("t0", TrialReport(ReportKind.FAILED, {record.RUNTIME_S: 1.5}, reason=record.REASON_DIVERGED,
                                           detail="loss nan at step 3"))
    [trial] = study.trials
    return {"trial": (trial.state.name, trial.user_attrs.get(record.STATUS_REASON),
                      trial.user_attrs.get(record.STATUS_DETAIL), trial.user_attrs.get(record.RUNTIME_S)),
            "curve": trial.user_attrs[record.CURVES][record.VAL_ACCURACY], "intermediate": trial.intermediate_values}


SCENARIOS = (propose_and_take_on_a_duplicate, skip_a_configuration_run_before, halve_after_running_out_of_memory,
             stop_when_the_budget_is_spent, record_a_failure)


def _check(seen: dict[str, dict[str, Any]]) -> None:
    """What a user of the study would notice, scenario by scenario (JSON-shaped: lists for tuples)."""
    dup = seen["propose_and_take_on_a_duplicate"]
    assert dup["ran"] == 0 and dup["fused"] is False and dup["lr"] == 0.01 and dup["ended"] == "n_trials"
    assert dup["trials"] == [["COMPLETE", [0.9], None, True], ["COMPLETE", [0.9], 0, False],
                             ["COMPLETE", [0.9], 0, False]]
    skip = seen["skip_a_configuration_run_before"]
    assert skip["second"] == 2
    assert skip["skipped"] == ["PRUNED", "equivalent", "the same configuration as trial #0, which ran with the same seed"]
    oom = seen["halve_after_running_out_of_memory"]
    assert oom["ran_out"] == ["FAIL", "out_of_memory"]
    assert oom["halved"] == [16, 2]
    assert oom["ran_as"] == {"per_device_batch_size": 16, "grad_accum_steps": 2, "out_of_memory_at": 32}
    budget = seen["stop_when_the_budget_is_spent"]
    assert budget["before"] is False and budget["after"] is True and budget["ended"] == "budget"
    assert budget["trial"] == ["FAIL", "budget", "stopped: the wall-clock budget of 1m is spent"]
    failed = seen["record_a_failure"]
    assert failed["trial"] == ["FAIL", "diverged", "loss nan at step 3", 1.5]
    assert failed["curve"] == [0.3] and failed["intermediate"] == {"100": 0.3}


def _run_all(tmp: Path) -> dict[str, dict[str, Any]]:
    # Through JSON, as the process without Ray hands them back: tuples become lists, keys strings.
    return json.loads(json.dumps({scenario.__name__: scenario(tmp) for scenario in SCENARIOS}))


def test_the_planner_decides_and_the_recorder_records_on_a_real_study(tmp_path: Path) -> None:
    _check(_run_all(tmp_path))


def test_the_planner_runs_where_ray_cannot_be_imported(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import importlib.abc, json, sys
        from pathlib import Path

        class NoRay(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "ray" or name.startswith("ray."):
                    raise ImportError(f"{{name}} is blocked: the planner must not import Ray")
                return None

        sys.meta_path.insert(0, NoRay())
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import test_planner_decisions as scenarios
        seen = scenarios._run_all(Path({str(tmp_path)!r}))
        assert not [m for m in sys.modules if m == "ray" or m.startswith("ray.")]
        print(json.dumps(seen))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    _check(json.loads(done.stdout.strip().splitlines()[-1]))
