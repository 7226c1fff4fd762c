"""``hpsearch export-trial`` of a workload of the user's own (the documented plugin example): the
command says that its module must be importable and where it was found, the written
``launch.sh`` stops with one line (exit 2) where it is not, and exporting over an earlier run
says so. The study is written as ``hpsearch start`` writes it, without running a search."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from hpsearch.cli import cli
from hpsearch.search_spaces import parse_space
from hpsearch.store import open_storage, study_attrs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "my_workload"


@pytest.fixture
def plugin_study(tmp_path: Path) -> str:
    """A store holding one COMPLETE trial of the plugin example's space."""
    text = (EXAMPLE / "space.yaml").read_text()
    space = parse_space(text)
    url = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    study = optuna.create_study(study_name=space.study, storage=open_storage(url), direction="minimize")
    study.set_metric_names(["val_loss"])
    for key, value in study_attrs(text, ["val_loss"], space.search.n_trials).items():
        study.set_user_attr(key, value)
    # Every parameter of the space, as the searcher records them: b 16, hidden 16, the fixed ones.
    params = {name: getattr(p, "value", None) for name, p in space.parameters.items()}
    params.update(per_device_batch_size=16, hidden=16)
    study.add_trial(create_trial(params=params, distributions={k: CategoricalDistribution([v]) for k, v in params.items()},
                                 values=[0.5], user_attrs={"device": "cpu", "val_loss": 0.5}))
    return url


@pytest.fixture
def without_the_example(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's module neither on the path nor imported (another test may have imported it)."""
    monkeypatch.delitem(sys.modules, "my_workload", raising=False)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != EXAMPLE])


def _export(url: str, folder: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["export-trial", "my-workload-example", "0", "-o", str(folder), "--storage", url,
                                      *args])
    return result.exit_code, result.stdout, result.stderr


def _launch(script: Path, pythonpath: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # torchrun from the environment hpsearch is installed in, as on a user's PATH.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=300)


def test_export_trial_says_where_the_workloads_module_must_be_importable(
        plugin_study: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))  # as with PYTHONPATH=examples/my_workload
    code, out, err = _export(plugin_study, tmp_path / "job")
    assert code == 0, err
    launch = tmp_path / "job" / "launch.sh"
    assert f"  the workload's module 'my_workload' must be importable where it runs: PYTHONPATH={EXAMPLE} bash {launch}\n" in out
    assert err == ""
    assert f"my_workload in {EXAMPLE}" in launch.read_text()  # the script's own comment says so too


def test_launch_stops_with_one_line_when_the_workloads_module_is_not_importable(
        plugin_study: str, tmp_path: Path, without_the_example: None) -> None:
    code, _, err = _export(plugin_study, tmp_path / "job", "--json")
    assert code == 0
    assert err == ("warning: the workload's module 'my_workload' is not importable here: put the folder that holds "
                   "it on PYTHONPATH where the job runs (launch.sh checks and stops if it is not)\n")

    launched = _launch(tmp_path / "job" / "launch.sh", pythonpath=None)
    assert launched.returncode == 2
    assert launched.stderr == ("error: the workload's module 'my_workload' is not importable: put the folder that "
                               "holds it on PYTHONPATH\n")
    assert not (tmp_path / "job" / "metrics.jsonl").exists()  # no rank started


def test_launch_names_the_folder_to_add_when_the_module_was_found_at_export(
        plugin_study: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    assert _export(plugin_study, tmp_path / "job")[0] == 0
    launch = tmp_path / "job" / "launch.sh"
    launched = _launch(launch, pythonpath=None)
    assert launched.returncode == 2
    assert launched.stderr == (f"error: the workload's module 'my_workload' is not importable: "
                               f"PYTHONPATH={EXAMPLE} bash {launch}\n")


def test_the_line_launch_prints_runs_the_job(plugin_study: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    assert _export(plugin_study, tmp_path / "job")[0] == 0
    launched = _launch(tmp_path / "job" / "launch.sh", pythonpath=str(EXAMPLE))
    assert launched.returncode == 0, launched.stderr[-3000:]
    assert json.loads((tmp_path / "job" / "metrics.json").read_text())["epochs_completed"] == 2


def test_exporting_into_a_folder_with_an_earlier_run_warns(plugin_study: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    job = tmp_path / "job"
    for _ in range(2):  # the files of an export alone are no earlier run
        code, _, err = _export(plugin_study, job)
        assert (code, err) == (0, "")
    for name in ("metrics.json", "model.pt"):
        (job / name).write_text("from an earlier run")
    code, _, err = _export(plugin_study, job)
    assert code == 0
    assert err == (f"warning: {job} holds an earlier run (metrics.json, model.pt): the new run replaces these files "
                   "as it writes them; export into another folder to keep both\n")
