"""A fused member's ``runtime_s`` estimates what its configuration takes alone
(``runtime_basis: solo_estimate``): the arithmetic, on step and evaluation times given as inputs."""

from __future__ import annotations

import pytest

from hpsearch.trials.rank.fused import solo_estimate


def test_the_training_time_scales_by_the_step_ratio_and_the_first_step_is_the_solo_runs() -> None:
    # 4 s of group training, its first step 0.4 s over the others; a member alone steps at a
    # third of a fused step, and a solo run's first step costs 0.1 s over its others.
    assert solo_estimate(4.0, ratio=1 / 3, warm_fused_s=0.4, warm_solo_s=0.1) == pytest.approx(1.3)


def test_each_evaluation_costs_what_one_member_alone_takes_not_the_groups_scaled() -> None:
    # The b 8 digits MLP case: 540 steps, 3 evaluations. Scaled by the step ratio, the group's
    # evaluations of every member at once were counted at a fraction of one solo evaluation.
    training = solo_estimate(1.0, ratio=0.25, warm_fused_s=0.0, warm_solo_s=0.0)
    with_evaluations = solo_estimate(1.0, ratio=0.25, warm_fused_s=0.0, warm_solo_s=0.0, evaluations=3,
                                     solo_eval_s=0.02)
    assert with_evaluations - training == pytest.approx(0.06)


def test_the_estimate_is_never_negative() -> None:
    assert solo_estimate(0.1, ratio=0.5, warm_fused_s=0.3, warm_solo_s=0.0) == 0.0
