"""The study store against every back end: SQLite and PostgreSQL."""

from __future__ import annotations

import optuna
import pytest
from hpsearch.errors import StoreError, StudyNotFoundError
from hpsearch.store import list_studies, load_study, open_storage, redact_url


def test_listed_study_shows_its_states_and_best_value(storage_url: str, unique_name: str) -> None:
    study = optuna.create_study(study_name=unique_name, storage=open_storage(storage_url), direction="maximize")
    study.set_metric_names(["val_accuracy"])
    for value in (0.5, 0.9):
        trial = study.ask()
        study.tell(trial, value)
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)

    summary = next(s for s in list_studies(storage_url) if s.name == unique_name)
    assert summary.states == {"COMPLETE": 2, "FAIL": 1}
    assert summary.best_values == (0.9,)
    assert summary.objectives == ("val_accuracy",)


def test_loading_a_missing_study_names_it(storage_url: str, unique_name: str) -> None:
    with pytest.raises(StudyNotFoundError, match=unique_name):
        load_study(unique_name, storage_url)


def test_malformed_url_is_a_store_error_with_exit_code_2() -> None:
    with pytest.raises(StoreError) as info:
        open_storage("not a url")
    assert info.value.exit_code == 2


def test_passwords_never_appear_in_redacted_urls() -> None:
    assert "secret" not in redact_url("postgresql+psycopg://me:secret@db.example/hp")
