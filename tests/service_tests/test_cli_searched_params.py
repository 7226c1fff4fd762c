"""The end-of-search table shows every param the study searched besides the core ones (an
optimizer, the workload's own setting): two trials of the same batch and LR at accuracies 0.11
and 0.93 say which optimizer each ran. A param the space fixes is folded away, and a narrow
terminal keeps the searched params before the batch columns."""

from __future__ import annotations

import itertools
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

import hpsearch
from hpsearch.cli import cli
from hpsearch.store import open_storage, study_attrs

#: A grid over the optimizer, the workload's own width and the per-device batch, at one LR rule,
#: base LR and momentum.
SPACE_TEXT = """\
study: sgd-vs-adamw
workload: {name: digits_mlp, epochs: 2}
scaling: {base_batch_size: 16}
parameters:
  per_device_batch_size: {choices: [16, 64]}
  world_size: 1
  grad_accum_steps: 1
  lr_rule: linear
  base_lr: 0.01
  optimizer: {choices: [sgd, adamw]}
  momentum: 0.9
  hidden: {choices: [32, 64]}
objectives:
  - {metric: val_accuracy, direction: maximize}
  - {metric: runtime_s, direction: minimize}
search: {sampler: grid, n_trials: 8, seed: 0}
resources: {device: cpu}
"""
CHOICES = {"per_device_batch_size": [16, 64], "world_size": [1], "grad_accum_steps": [1], "lr_rule": ["linear"],
           "base_lr": [0.01], "optimizer": ["sgd", "adamw"], "momentum": [0.9], "hidden": [32, 64]}
#: Characters rich draws tables with.
_BOX = set("┏┃┡│└━┳╇┴┓┩┫┛┗┣╋─┼")


def write_study(url: str) -> list[optuna.trial.FrozenTrial]:
    """The study ``hpsearch start`` would leave for ``SPACE_TEXT`` (every param recorded, the
    fixed ones with their one choice), with made-up measurements: no trial is run. Returns its
    trials."""
    study = optuna.create_study(study_name="sgd-vs-adamw", storage=open_storage(url),
                                directions=["maximize", "minimize"])
    study.set_metric_names(["val_accuracy", "runtime_s"])
    for key, value in study_attrs(SPACE_TEXT, ["val_accuracy", "runtime_s"], 8).items():
        study.set_user_attr(key, value)
    dists = {name: CategoricalDistribution(choices) for name, choices in CHOICES.items()}
    for b, optimizer, hidden in itertools.product([16, 64], ["sgd", "adamw"], [32, 64]):
        params = {name: choices[0] for name, choices in CHOICES.items()}
        params.update(per_device_batch_size=b, optimizer=optimizer, hidden=hidden)
        accuracy = (0.93 if optimizer == "sgd" else 0.114) + hidden / 10_000
        runtime = 100.0 / b + hidden / 100
        study.add_trial(create_trial(
            params=params, distributions=dists, state=TrialState.COMPLETE, values=[accuracy, runtime],
            user_attrs={"effective_batch_size": b, "lr": 0.01 * b / 16, "val_accuracy": accuracy,
                        "runtime_s": runtime, "device_seconds": runtime, "peak_memory_bytes": 2**20 * b,
                        "epochs_completed": 2}))
    return study.get_trials()


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    write_study(url)
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
