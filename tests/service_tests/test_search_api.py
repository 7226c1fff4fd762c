"""The Python API's verbs that the CLI calls: a study's space and budget, its frontier on its own
objective, and the analysis's two kinds of "no": bad input (exit 2) and a study that cannot
answer (exit 5, with what the analysis found)."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

import hpsearch
from hpsearch.errors import AnalysisError, NoAnswerError, SpaceError
from hpsearch.record import ATTR_BUDGET, ATTR_BUDGET_SPENT
from hpsearch.testing import synthetic_study


@pytest.fixture(scope="module")
def search() -> hpsearch.Search:
    return synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=300, seed=4)


def test_a_study_gives_back_the_space_it_was_started_with(search: hpsearch.Search) -> None:
    space = search.space
    assert space.study == "demo" and [o.metric for o in space.objectives] == search.objectives
    assert "lr_rule" in space.searched


def test_a_study_not_started_by_hpsearch_has_no_space() -> None:
    storage = optuna.storages.InMemoryStorage()
    optuna.create_study(study_name="plain", storage=storage)
    with pytest.raises(SpaceError, match="not started by hpsearch"):
        _ = hpsearch.load("plain", storage).space


def test_budget_status_is_the_studys_budget_spent_and_left() -> None:
    search = synthetic_study(optuna.storages.InMemoryStorage(), "budgeted", n_trials=4)
    assert not search.budget_status().budget.limited
    search.study.set_user_attr(ATTR_BUDGET, {"wall_s": 120.0, "device_hours": None})
    search.study.set_user_attr(ATTR_BUDGET_SPENT, {"wall_s": 90.0, "device_s": 0.0})
    status = search.budget_status()
    assert status.budget.limited and status.wall_left_s == 30.0 and not status.spent_out


def test_the_frontier_of_a_study_without_val_accuracy_follows_its_own_objective() -> None:
    # The plugin example minimises val_loss: a frontier of runtime against val_accuracy raised.
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(study_name="loss", storage=storage, direction="minimize")
    study.set_metric_names(["val_loss"])
    dists = {"per_device_batch_size": CategoricalDistribution([16, 64])}
    for b, loss, runtime in ((16, 0.2, 9.0), (64, 0.4, 3.0), (64, 0.5, 4.0)):
        study.add_trial(create_trial(params={"per_device_batch_size": b}, distributions=dists, values=[loss],
                                     user_attrs={"runtime_s": runtime}))
    front = hpsearch.load("loss", storage).frontier()
    assert list(front["number"]) == [1, 0]  # trial 2 is slower and worse than trial 1
    assert list(front["val_loss"]) == [0.4, 0.2]


def test_a_malformed_question_is_bad_input(search: hpsearch.Search) -> None:
    for call in (lambda: search.recommend(0), lambda: search.recommend(2, minimize="money"),
                 lambda: search.recommend(2, target="val_accuracy"),
                 lambda: search.recommend(2, target="val_accuracy=0.9", analysis=search.analyze("val_accuracy=0.9"))):
        with pytest.raises(AnalysisError) as caught:
            call()
        assert not isinstance(caught.value, NoAnswerError) and caught.value.exit_code == 2


def test_a_study_that_cannot_answer_says_why_with_what_the_analysis_found(search: hpsearch.Search) -> None:
    with pytest.raises(NoAnswerError, match="reached the target") as caught:
        search.recommend(4, target="val_accuracy=0.999")
    assert caught.value.exit_code == 5
    assert caught.value.analysis is not None and caught.value.analysis.n_trials == 300
    with pytest.raises(NoAnswerError, match="no trial with an effective batch size") as caught:
        synthetic_study(optuna.storages.InMemoryStorage(), "empty", n_trials=0).analyze()
    assert caught.value.analysis is None


def test_one_analysis_answers_for_several_device_counts(search: hpsearch.Search) -> None:
    analysis = search.analyze("val_accuracy=0.9")
    answers = [search.recommend(n, analysis=analysis) for n in (1, 4)]
    assert [a.world_size <= n for a, n in zip(answers, (1, 4))] == [True, True]
    assert answers[1].to_dict() == search.recommend(4, target="val_accuracy=0.9").to_dict()
