"""Where the time went for a trial that ran out of memory: its timeline shows the training it did
before it failed (not all of it as the orchestrator's), and a trial retried halved on the same
devices (``search.on_oom: accumulate``) shows its last attempt's phases in order, with the attempt
that failed counted apart: never a phase before the one it follows.

Real ranks under a real memory cap: the workload's activations grow with the batch
(``benchmarks.workloads.activations``): at 600 MiB per rank a batch of 512 runs out, 256 fits.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from hpsearch import record
from hpsearch.search_spaces import parse_space
from hpsearch.study import phase_timeline
from hpsearch.trials.errors import TrialFailed
from hpsearch.trials.launcher import run_trial
from hpsearch.trials.spec import TrialSpec, trial_spec

SPACE = """\
study: oom-phases
workload:
  name: "benchmarks.workloads.activations:wide_mlp"
  epochs: 1
  options: {samples: 1024}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: 512
  base_lr: 0.001
search: {sampler: random, n_trials: 1, seed: 0}
resources: {device: cpu, memory_per_worker: 600MiB}
"""


def _spec() -> TrialSpec:
    space = parse_space(SPACE)
    return trial_spec(space, {"per_device_batch_size": 512, "base_lr": 0.001})


def _recorded(asked: float, reserved: float, seen: dict[str, float]) -> dict[str, object]:
    """The phases attr as the study keeps it: seconds since asked, the attempts' count and seconds
    as they are (``hpsearch.planner.writer.phases``)."""
    told = time.time()
    times = {"asked": asked, "reserved": reserved, **seen, "told": told}
    phases: dict[str, object] = {"asked_at": asked}
    phases.update({n: times[n] - asked for n in record.PHASE_NAMES if n in times})
    phases.update({n: seen[n] for n in (record.FAILED_ATTEMPTS, record.FAILED_ATTEMPTS_S) if n in seen})
    return {record.PHASES: phases}


def test_a_trial_that_ran_out_of_memory_shows_its_training_before_it_failed(tmp_path: Path) -> None:
    asked = time.time()
    seen = {"reserved": time.time()}
    with pytest.raises(TrialFailed) as failed:
        run_trial(_spec(), tmp_path / "run", phases=seen)
    assert failed.value.reason == record.REASON_OUT_OF_MEMORY
    # It ran out in its first step, before any report: its rank says when training began.
    assert record.TRAINING_STARTED in seen and "training_ended" in seen, seen
    timeline = phase_timeline(_recorded(asked, seen.pop("reserved"), seen))
    assert timeline is not None
    assert record.TRAINING_STARTED not in timeline.missing
    assert [p.name for p in timeline.phases] == ["asked", "reserved", "handed", "ready", "training_started",
                                                 "training_ended", "told"]
    assert timeline.training_s is not None and timeline.training_s > 0
    assert "training" in timeline.describe() and "no training" not in timeline.describe()


def test_a_trial_retried_halved_shows_its_last_attempt_in_order_and_the_failed_one_apart(tmp_path: Path) -> None:
    asked = time.time()
    spec = _spec()
    seen = {"reserved": time.time()}
    # What the trial driver does with search.on_oom: accumulate: the same phases, a second run
    # at half the batch and twice the accumulation.
    with pytest.raises(TrialFailed):
        run_trial(spec, tmp_path / "run", phases=seen)
    first_handed = seen["handed"]
    halved = dataclasses.replace(spec, per_device_batch_size=256, grad_accum_steps=2)
    run_trial(halved, tmp_path / "run", phases=seen)
    # Every attempt phase is the last attempt's, none from the one that ran out.
    assert seen["handed"] > first_handed and seen["ready"] >= seen["handed"]
    assert seen[record.FAILED_ATTEMPTS] == 1 and seen[record.FAILED_ATTEMPTS_S] > 0

    timeline = phase_timeline(_recorded(asked, seen.pop("reserved"), seen))
    assert timeline is not None
    # What the trial driver records before the ranks run (hpsearch.tune.trainable) aside, every phase.
    assert [p.name for p in timeline.phases] == [n for n in record.PHASE_NAMES if n not in ("launched", "devices_free")]
    assert all(p.gap_s is None or p.gap_s >= 0 for p in timeline.phases), timeline.phases
    assert timeline.failed_attempts == 1
    assert "1 failed attempt" in timeline.describe()
    # The failed attempt is not the orchestrator's time.
    assert timeline.rest_s is not None and timeline.rest_s < timeline.at("told") - timeline.at("reserved") - \
        (timeline.training_s or 0.0) - 0.9 * (timeline.failed_attempts_s or 0.0)


def test_the_timeline_of_a_retried_trial_counts_the_failed_attempt_apart_from_the_rest() -> None:
    timeline = phase_timeline({record.PHASES: {
        "asked_at": 1.7e9, "asked": 0.0, "reserved": 0.05, "handed": 0.813, "ready": 0.85,
        "training_started": 0.9, "training_ended": 2.9, "last_report": 2.91, "told": 3.0,
        record.FAILED_ATTEMPTS: 1, record.FAILED_ATTEMPTS_S: 0.7}})
    assert timeline is not None
    assert (timeline.startup_s, timeline.training_s, timeline.failed_attempts_s, timeline.rest_s) == \
        (None, 2.0, 0.7, 0.25)
    assert timeline.describe().endswith("; after its devices were reserved: "
                                        "1 failed attempt 0.700 s, then training 2.000 s, the rest 0.250 s")
    assert timeline.to_dict()[record.FAILED_ATTEMPTS] == 1


def test_a_record_that_mixed_two_attempts_shows_no_negative_gap() -> None:
    # As a release before attempts were kept apart wrote it: the retry's handed, the failed
    # attempt's ready.
    timeline = phase_timeline({record.PHASES: {
        "asked_at": 1.7e9, "asked": 0.0, "reserved": 0.05, "handed": 0.813, "ready": 0.095,
        "training_started": 0.9, "training_ended": 2.9, "last_report": 2.91, "told": 3.0}})
    assert timeline is not None
    assert all(p.gap_s is None or p.gap_s >= 0 for p in timeline.phases), timeline.phases
    assert [p.name for p in timeline.phases] == ["asked", "reserved", "handed", "training_started", "training_ended",
                                                 "last_report", "told"]
