"""What ``fuse: auto`` decides for a shape holds for the study: said once, kept in the study, and
followed by the rest of the search and by a resume, rather than timed again into another answer.

The searcher is driven as Ray Tune drives it (``suggest``, ``on_trial_result``) with the reports
a fused group's rank 0 sends, their step times given as inputs: the decisions read the times,
never measure them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest

from hpsearch import record
from hpsearch.planner.report import FINAL_KEY, FUSE_DECLINED_KEY, MEMBER_KEY
from hpsearch.progress import SearchEvent
from hpsearch.search_spaces import parse_space
from hpsearch.trials.rank.fused import fuse_verdict
from hpsearch.tune.orchestrator import _create_study
from hpsearch.tune.searcher import StudySearcher

SPACE = """\
study: decisions
workload: {name: digits_mlp, epochs: 1}
parameters:
  per_device_batch_size: {choices: [8, 16, 32]}
  base_lr: {choices: [0.01, 0.02]}
search: {sampler: grid, n_trials: 6, seed: 0, fuse: auto}
resources: {device: cpu, cpus_per_worker: 1}
"""
VMAP = "the model cannot be vectorized over members: RuntimeError: vmap: It looks like you're calling .item()"
#: The char-LM group of the issue: 4 members fused 67.1 ms a step, one member alone 16.1 ms.
STOPPED = ("fusing stopped paying on cpu: a step of 4 members fused took 67.1 ms (16.8 ms a member), one member "
           "alone 16.1 ms (timed again on 8 steps a quarter into the run)")


def _searcher(study: optuna.Study, tmp_path: Path, events: list[SearchEvent]) -> StudySearcher:
    return StudySearcher(optuna.load_study(study_name=study.study_name, storage=study._storage), parse_space(SPACE),
                         6, "cpu", tmp_path, on_event=events.append, max_processes=1, slots=2)


@pytest.fixture
def study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return _create_study(optuna.storages.InMemoryStorage(), "decisions", parse_space(SPACE))


def _task(config: Any) -> Any:
    assert isinstance(config, dict)
    return config["trial"]


def _fuse_events(events: list[SearchEvent]) -> list[str]:
    return [e.data["detail"] for e in events if e.kind == "fuse"]


def _fuse_attrs(study: optuna.Study) -> dict[int, Any]:
    return {t.number: t.user_attrs.get(record.FUSE) for t in study.get_trials()}


def test_a_workloads_vmap_refusal_is_said_once_per_search_and_kept_for_a_resume(study: optuna.Study,
                                                                                 tmp_path: Path) -> None:
    events: list[SearchEvent] = []
    searcher = _searcher(study, tmp_path, events)
    b8, b16 = _task(searcher.suggest("t0")), _task(searcher.suggest("t1"))
    assert len(b8.spec.fused) == len(b16.spec.fused) == 2  # both groups started before either refused
    for trial_id in ("t0", "t1"):
        searcher.on_trial_result(trial_id, {FUSE_DECLINED_KEY: VMAP, FINAL_KEY: True})
    assert _fuse_events(events) == [f"2 trials run on their own, one after another: {VMAP}"]
    # The last shape is not tried: its trials run on their own, for the recorded reason.
    b32 = _task(searcher.suggest("t2"))
    assert not b32.spec.fused
    assert _fuse_attrs(study)[b32.number] == f"off: {VMAP}"
    # A resume of the study reads the refusal back: it does not form a group to find it again.
    again = _searcher(study, tmp_path, [])
    assert again.planner.unfusable(b32.spec) == VMAP


def test_a_group_whose_steady_steps_stop_paying_fuses_no_later_group_of_its_shape(study: optuna.Study,
                                                                                   tmp_path: Path) -> None:
    events: list[SearchEvent] = []
    searcher = _searcher(study, tmp_path, events)
    b8 = _task(searcher.suggest("t0"))
    assert len(b8.spec.fused) == 2 and b8.spec.fuse == "auto"
    # A member's evaluation a quarter into the run: the steady step times no longer pay.
    searcher.on_trial_result("t0", {MEMBER_KEY: 0, "evaluation": 1, record.SAMPLES_SEEN: 256, record.FUSE: "on",
                                    record.FUSED_STEP_S: 0.0671, record.SOLO_STEP_S: 0.0161,
                                    record.FUSE_STOPPED_PAYING: STOPPED})
    assert _fuse_events(events) == [f"later groups of trial {b8.number}'s shape train on their own: {STOPPED}"]
    # A trial of the shape at the same or a larger batch is not fused, and says why with the times
    # that decided (the grid's order of shapes is the sampler's: read from the spec).
    b = b8.spec.per_device_batch_size
    larger = replace(b8.spec, fused=(), per_device_batch_size=2 * b)
    assert searcher.planner.unfusable(larger) == (
        f"fusing did not pay at per-device batch {b} of this shape, so not at {2 * b} (fusing stopped paying on cpu: "
        "a step of 4 members fused took 67.1 ms (16.8 ms a member), one member alone 16.1 ms (timed again on 8 "
        "steps a quarter into the run))")
    assert searcher.planner.unfusable(replace(b8.spec, fused=())) == STOPPED
    assert searcher.planner.unfusable(replace(b8.spec, fused=(), per_device_batch_size=b // 2)) is None
    assert _searcher(study, tmp_path, []).planner.unfusable(larger) is not None  # and after a resume


def test_a_shape_that_paid_fuses_on_a_resume_without_a_new_timing_to_decline(study: optuna.Study,
                                                                              tmp_path: Path) -> None:
    searcher = _searcher(study, tmp_path, [])
    b8 = _task(searcher.suggest("t0"))
    for k in range(2):  # each member's final report: fused, at times that paid
        searcher.on_trial_result("t0", {MEMBER_KEY: k, FINAL_KEY: True, "evaluation": 1, record.SAMPLES_SEEN: 1438,
                                        record.FUSE: "on", record.FUSED_STEP_S: 0.004, record.SOLO_STEP_S: 0.003,
                                        record.VAL_ACCURACY: 0.9, record.RUNTIME_S: 1.0})
    assert study.user_attrs[record.ATTR_FUSE_DECISIONS]["fused"]  # kept in the study
    # A later search of the study: the shape's next group fuses as decided (fuse: true for it),
    # so a noisy timing cannot turn the same space's answer around.
    resumed = _searcher(study, tmp_path, [])
    assert resumed.state.decisions.paid(b8.spec)
    assert not resumed.state.decisions.paid(_task(searcher.suggest("t1")).spec)  # b 16 decided nothing yet


@pytest.mark.parametrize(("fused_ms", "solo_ms", "members", "pays"), [
    (67.1, 16.1, 4, False),  # the char-LM group: 16.8 ms a member against 16.1 alone
    (6.03 * 3, 5.37, 3, False),  # the BatchNorm group: 6.03 ms a member against 5.37
    (40.0, 16.1, 4, True),
    (64.4, 16.1, 4, False),  # exactly its solo step: nothing gained, so not fused
])
def test_the_verdict_reads_the_step_times_it_is_given(fused_ms: float, solo_ms: float, members: int,
                                                      pays: bool) -> None:
    assert fuse_verdict(fused_ms / 1e3, solo_ms / 1e3, members) is pays
