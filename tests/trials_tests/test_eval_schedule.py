"""When a run evaluates (``hpsearch.trials.rank.schedule``), on step and sample counts given as
inputs: the one schedule of the solo loop and the fused one."""

from __future__ import annotations

from hpsearch.trials.rank.schedule import EvalSchedule, Evaluation


def _run(schedule: EvalSchedule, step_samples: list[int], epochs: int) -> list[tuple[int, int, Evaluation]]:
    """(samples seen, step index in the epoch, evaluation) for each step that evaluates, every
    epoch stepping through ``step_samples`` (over all ranks)."""
    seen, out = 0, []
    for epoch in range(epochs):
        schedule.start_epoch(epoch, seen)
        for step, samples in enumerate(step_samples):
            seen += samples
            point = schedule.after_step(step, seen)
            if point is not None:
                out.append((seen, step, point))
    return out


def test_without_a_cadence_each_epoch_ends_with_an_evaluation_and_the_last_is_final() -> None:
    got = _run(EvalSchedule(epochs=3, steps_per_epoch=5, every_samples=None), [8] * 5, epochs=3)
    assert [p for _, _, p in got] == [Evaluation(1, 1, False), Evaluation(2, 2, False), Evaluation(3, 3, True)]
    assert [step for _, step, _ in got] == [4, 4, 4]
    assert _run(EvalSchedule(epochs=2, steps_per_epoch=5, every_samples=0), [8] * 5, epochs=2) == \
        _run(EvalSchedule(epochs=2, steps_per_epoch=5, every_samples=None), [8] * 5, epochs=2)


def test_a_cadence_evaluates_at_the_first_step_past_each_multiple_counted_from_the_epochs_start() -> None:
    # The digits split: 1438 samples, 32 a step (the last step 30), every 400 samples.
    steps = [32] * 44 + [30]
    got = _run(EvalSchedule(epochs=2, steps_per_epoch=45, every_samples=400), steps, epochs=2)
    seen = [s for s, _, _ in got]
    assert seen == [416, 800, 1216, 1438, 1438 + 416, 1438 + 800, 1438 + 1216, 2876]
    between = [p for _, _, p in got if p.epoch not in (1, 2)]
    assert [p.epochs_completed for p in between] == [0, 0, 0, 1, 1, 1]
    assert between[0].epoch == 0 + 13 / 45 and between[3].epoch == 1 + 13 / 45
    assert [p.final for _, _, p in got] == [False] * 7 + [True]


def test_a_step_past_several_multiples_evaluates_once() -> None:
    got = _run(EvalSchedule(epochs=1, steps_per_epoch=6, every_samples=10), [25] * 6, epochs=1)
    # 25 samples a step passes 10 and 20 at once, then 30 and 40 at 50, then 60 and 70 at 75.
    assert [step for _, step, _ in got] == [0, 1, 2, 3, 5]


def test_an_evaluation_due_one_step_before_the_epochs_end_is_left_to_the_end() -> None:
    # 40 samples a step, every 150: due at 160 (step 3) and at 320 (step 7, the one before the last).
    got = _run(EvalSchedule(epochs=1, steps_per_epoch=9, every_samples=150), [40] * 9, epochs=1)
    assert [step for _, step, _ in got] == [3, 8]
    assert [p for _, _, p in got] == [Evaluation(4 / 9, 0, False), Evaluation(1, 1, True)]


def test_a_cadence_does_not_drift_over_epochs() -> None:
    # 1438-sample epochs at 8 a step (180 steps, the last 6), every 360: four a epoch with its end,
    # none a step or two after an epoch's end.
    steps = [8] * 179 + [6]
    got = _run(EvalSchedule(epochs=10, steps_per_epoch=180, every_samples=360), steps, epochs=10)
    assert len(got) == 40
    assert all(step in (44, 89, 134, 179) for _, step, _ in got)


def test_one_step_epochs_evaluate_every_step() -> None:
    got = _run(EvalSchedule(epochs=3, steps_per_epoch=1, every_samples=5), [8], epochs=3)
    assert [p for _, _, p in got] == [Evaluation(1, 1, False), Evaluation(2, 2, False), Evaluation(3, 3, True)]
