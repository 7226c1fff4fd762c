"""The end-of-search table shows every param the study searched besides the core ones (an
optimizer, the workload's own setting): two trials of the same batch and LR at accuracies 0.11
and 0.93 say which optimizer each ran. A param the space fixes is folded away, and a narrow
terminal keeps the searched params before the batch columns."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

import hpsearch
from hpsearch.cli import cli
from hpsearch.testing import searched_study

#: Characters rich draws tables with.
_BOX = set("┏┃┡│└━┳╇┴┓┩┫┛┗┣╋─┼")


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    searched_study(url, "sgd-vs-adamw")
    return url


def _resume(store: str, monkeypatch: pytest.MonkeyPatch, columns: int) -> str:
    """``hpsearch resume`` of the finished study, its output ``columns`` wide: the study has
    nothing left to run, so the search itself (Ray, the workload) is left out and the command
    prints its end-of-search report on the study as it stands."""
    monkeypatch.setattr(hpsearch, "resume", lambda study, storage, **_: hpsearch.load(study, storage=storage))
    result = CliRunner(env={"COLUMNS": str(columns), "HPSEARCH_RUNS_DIR": None}).invoke(
        cli, ["resume", "sgd-vs-adamw", "--storage", store, "--no-progress"])
    assert result.exit_code == 0, result.output
    return result.stdout


def _trials_table(out: str) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the first table printed (the trials; the frontier's comes next)."""
    lines = out.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    end = next(i for i, line in enumerate(lines) if i > top and line.startswith("└"))
    table = lines[top:end + 1]
    header = next(line for line in table if line.startswith("┃"))
    rows = [line for line in table if line.startswith("│")]
    return ([c.strip() for c in header.strip("┃").split("┃")],
            [[c.strip() for c in row.strip("│").split("│")] for row in rows])


def test_the_table_shows_the_searched_optimizer_and_workload_setting_of_each_trial(
        store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _resume(store, monkeypatch, 120)  # the width of a table piped into a file

    assert max(len(line) for line in out.splitlines() if line[:1] in _BOX) <= 120
    header, rows = _trials_table(out)
    assert {"optimizer", "hidden"} <= set(header)
    # After the batch and the LR, in the order the study first saw them.
    assert header.index("lr") < header.index("optimizer") < header.index("hidden")
    trials = {t.number: t.params for t in optuna.load_study(study_name="sgd-vs-adamw", storage=store).trials}
    assert len(rows) == len(trials)
    for row in rows:
        params = trials[int(row[header.index("#")])]
        assert row[header.index("optimizer")] == params["optimizer"]
        assert row[header.index("hidden")] == str(params["hidden"])
    # Two trials of one batch and LR, far apart in accuracy: their optimizer tells them apart.
    same_shape = [r for r in rows if r[header.index("b")] == "16" and r[header.index("hidden")] == "32"]
    assert {(r[header.index("optimizer")], r[header.index("val_accuracy")]) for r in same_shape} == {
        ("sgd", "0.933"), ("adamw", "0.117")}


def test_a_param_fixed_for_every_trial_is_folded_away(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _resume(store, monkeypatch, 120)

    header, _ = _trials_table(out)
    # momentum is a param of every trial, always 0.9: no column, and not named as cut for width.
    assert "momentum" not in header and "momentum" not in out
    assert not {"W", "A", "lr_rule", "base_lr"} & set(header)


def test_a_narrow_terminal_keeps_the_searched_params_before_the_batch_columns(
        store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _resume(store, monkeypatch, 72)

    assert max(len(line) for line in out.splitlines() if line[:1] in _BOX) <= 72
    header, _ = _trials_table(out)
    assert header[:2] == ["#", "state"] and {"val_accuracy", "runtime_s", "optimizer", "hidden"} <= set(header)
    line = next(line for line in out.splitlines() if line.startswith("not shown at this width: "))
    left_out = line.removeprefix("not shown at this width: ").split(" (")[0].split(", ")
    assert "b" in left_out and not {"optimizer", "hidden"} & set(left_out)
