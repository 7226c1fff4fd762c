"""The read model's trials table: the bulk reader of SQL stores gives exactly the table Optuna's
own trial objects give, and a store of an untested schema version is read through Optuna."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from hpsearch.search import _NOT_COLUMNS, Search
from hpsearch.store import open_storage
from hpsearch.study import TESTED_SCHEMA_VERSIONS, direct_sql, read_trials
from hpsearch.study._table import trial_attr, trial_rows
from hpsearch.testing import synthetic_study


def _through_optuna(search: Search, hidden: frozenset[str]) -> pd.DataFrame:
    rows = []
    for t in search.study.get_trials(deepcopy=False):
        row = {"number": t.number, "state": t.state.name, **t.params,
               **{k: v for k, v in t.user_attrs.items() if k not in hidden}}
        if t.values is not None:
            row.update(dict(zip(search.objectives, t.values)))
        row.update(datetime_start=t.datetime_start, datetime_complete=t.datetime_complete,
                   duration_s=(t.datetime_complete - t.datetime_start).total_seconds()
                   if t.datetime_start and t.datetime_complete else None)
        rows.append(row)
    return pd.DataFrame(rows)


@pytest.mark.parametrize("hidden", [frozenset(), frozenset(_NOT_COLUMNS)])
def test_a_synthetic_study_reads_the_same_both_ways(storage_url: str, unique_name: str, hidden: frozenset[str]) -> None:
    search = synthetic_study(storage_url, unique_name, n_trials=120, seed=3)

    fast = pd.DataFrame(trial_rows(open_storage(storage_url), unique_name, search.objectives, hidden=hidden))

    # Column order follows attr order, which Optuna leaves to the database: compare by name.
    pd.testing.assert_frame_equal(fast, _through_optuna(search, hidden), check_like=True)
    assert set(fast["state"]) >= {"COMPLETE", "FAIL"}


def test_odd_values_read_the_same_both_ways(storage_url: str, unique_name: str) -> None:
    study = optuna.create_study(study_name=unique_name, storage=open_storage(storage_url),
                                directions=["maximize", "minimize"])
    study.set_metric_names(["val_accuracy", "runtime_s"])
    dists = {"lr_rule": CategoricalDistribution(["linear", "sqrt"]), "base_lr": FloatDistribution(1e-4, 1.0, log=True)}
    study.add_trial(create_trial(params={"lr_rule": "sqrt", "base_lr": 0.003}, distributions=dists,
                                 values=[0.5, math.inf], user_attrs={"note": "ünïcode", "nested": {"a": [1, None]}}))
    study.add_trial(create_trial(params={"lr_rule": "linear", "base_lr": 0.1}, distributions=dists,
                                 state=TrialState.FAIL, user_attrs={"status_reason": "diverged"}))
    study.enqueue_trial({"lr_rule": "linear", "base_lr": 0.2})

    search = Search(unique_name, storage_url)
    fast = search.trials_dataframe(all_attrs=True)

    pd.testing.assert_frame_equal(fast, _through_optuna(search, frozenset()), check_like=True)
    assert fast.loc[0, "runtime_s"] == math.inf
    assert fast.loc[0, "nested"] == {"a": [1, None]}
    assert list(fast["state"]) == ["COMPLETE", "FAIL", "WAITING"]


def test_one_attr_reads_as_optuna_has_it_whole_or_in_part(storage_url: str, unique_name: str) -> None:
    search = synthetic_study(storage_url, unique_name, n_trials=60, seed=4)
    study = search.study
    # A series that is not finite (JSON's NaN): a database JSON function may refuse that text.
    nan = study.ask()
    study._storage.set_trial_user_attr(nan._trial_id, "curves", {"samples_seen": [8], "val_accuracy": [math.nan]})
    study.tell(nan, [0.5, 1.0])
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    whole = {n: t.user_attrs["curves"] for n, t in trials.items() if "curves" in t.user_attrs}

    backend = open_storage(storage_url)
    got = trial_attr(backend, unique_name, "curves")
    assert got.keys() == whole.keys() and all(got[n] == whole[n] for n in whole if n != nan.number)
    assert math.isnan(got[nan.number]["val_accuracy"][0])
    done = {n for n, t in trials.items() if t.state == TrialState.COMPLETE and n in whole}
    part = trial_attr(backend, unique_name, "curves", states=["COMPLETE"], fields=["samples_seen", "val_loss"])
    assert part.keys() == done
    assert all(part[n] == {"samples_seen": whole[n]["samples_seen"], "val_loss": whole[n].get("val_loss")}
               for n in done if n != nan.number)
    first, second = sorted(whole)[2:4]
    assert list(trial_attr(backend, unique_name, "curves", numbers=[second, first, 999])) == [first, second]
    assert len(trial_attr(backend, unique_name, "curves", limit=1)) == 1


def test_a_trial_written_while_the_table_is_read_waits_for_the_next_read(storage_url: str, unique_name: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The table is read in several queries; a search that writes a trial between them (the
    dashboard reads while searches run) leaves it for the next read, and the read succeeds.
    The write is timed by wrapping the query runner: only the timing is forced, the write and
    the reads are real."""
    from hpsearch.study import _table, trial_configurations

    search = synthetic_study(storage_url, unique_name, n_trials=6, seed=5)
    study = search.study
    first = study.trials[0]
    backend = open_storage(storage_url)
    queries = 0
    run_query = _table._plain_rows

    def write_a_trial_after_the_first_query(conn, query):  # type: ignore[no-untyped-def]
        nonlocal queries
        rows = run_query(conn, query)
        queries += 1
        if queries == 1:  # the trials have been read; their params, attrs and values have not
            study.add_trial(create_trial(params=first.params, distributions=first.distributions,
                                         values=[0.5, 2.0], user_attrs={"epochs_completed": 3}))
        return rows

    monkeypatch.setattr(_table, "_plain_rows", write_a_trial_after_the_first_query)
    rows = trial_rows(backend, unique_name, search.objectives)
    queries = 0
    configurations = trial_configurations(backend, study._study_id, after=0)
    monkeypatch.undo()

    assert [r["number"] for r in rows] == list(range(6))
    assert [params for _, _, params, _ in configurations[:6]] == [t.params for t in study.trials[:6]]
    assert len(configurations) == 7  # with the trial written during the table's read, not the one after
    assert [r["number"] for r in trial_rows(backend, unique_name, search.objectives)] == list(range(8))
    assert trial_configurations(backend, study._study_id, after=0)[-1][2] == first.params


def test_a_store_of_an_untested_schema_version_is_read_through_optuna(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    import sqlite3

    url = f"sqlite:///{tmp_path / 'store.db'}"
    search = synthetic_study(url, "s", n_trials=30, seed=1)
    known = search.trials_dataframe(all_attrs=True)
    # As if a later Optuna had migrated the file: our SQL must not guess at its tables.
    with sqlite3.connect(tmp_path / "store.db") as con:
        con.execute("update alembic_version set version_num = 'v9.0.0.a'")
    later = optuna.storages.RDBStorage(url, skip_compatibility_check=True)

    with caplog.at_level("WARNING", logger="hpsearch"):
        assert not direct_sql(later)
        again = read_trials(later, "s", search.objectives)

    assert "v9.0.0.a" in caplog.text and all(v in caplog.text for v in TESTED_SCHEMA_VERSIONS)
    pd.testing.assert_frame_equal(again, read_trials(open_storage(url), "s", search.objectives), check_like=True)
    pd.testing.assert_frame_equal(read_trials(later, "s", search.objectives, hidden=frozenset()), known,
                                  check_like=True)
