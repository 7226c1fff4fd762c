"""The workload contract as a user meets it through the CLI: a searched name the workload does
not take, a module that does not import, a factory that returns the wrong thing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from hpsearch.errors import WorkloadError
from hpsearch.planner.constraints import equivalence_key
from hpsearch.search_spaces import parse_space
from hpsearch.trials.node.pool import RankPool
from hpsearch.trials.spec import trial_spec
from hpsearch.workload_check import check_for_search, check_space_workload

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "my_workload"

SPACE = """\
study: contract
workload:
  name: "{name}"
  epochs: 1
parameters:
  per_device_batch_size: 16
  base_lr: 0.001
  {extra}
search: {{sampler: grid, n_trials: 1}}
resources: {{device: cpu}}
"""


def _hpsearch(*args: str, cwd: Path, path: Path = EXAMPLE) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(path), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def _space(tmp_path: Path, name: str = "my_workload:make_workload", extra: str = "") -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(SPACE.format(name=name, extra=extra))
    return path


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_a_misspelt_searched_name_is_refused_with_the_options_the_workload_takes(tmp_path: Path) -> None:
    space = _space(tmp_path, extra="hiden: {choices: [1, 64]}")
    line = _one_error_line(_hpsearch("validate", str(space), cwd=tmp_path))
    assert "space.yaml:8 at 'parameters.hiden'" in line
    assert "did you mean 'hidden'?" in line
    assert "make_workload takes: features, hidden, noise, samples" in line
    # start refuses it too, in the same words, before anything is written
    started = _one_error_line(_hpsearch("start", str(space), "--storage", f"sqlite:///{tmp_path / 'h.db'}",
                                        cwd=tmp_path))
    assert started == line
    assert not (tmp_path / "h.db").exists() or not optuna.get_all_study_names(f"sqlite:///{tmp_path / 'h.db'}")


def test_a_misspelt_workload_option_is_refused_too(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("workload: {name: digits_mlp, options: {hiddden: 8}}\n"
                     "parameters: {per_device_batch_size: 8, base_lr: 0.1}\n")
    line = _one_error_line(_hpsearch("validate", str(space), cwd=tmp_path))
    assert "'workload.options.hiddden'" in line and "did you mean 'hidden'?" in line


def test_validate_says_which_parameters_reach_the_workload(tmp_path: Path) -> None:
    result = _hpsearch("validate", str(_space(tmp_path, extra="hidden: {choices: [0, 16]}")), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "passed to the workload as options: hidden" in result.stdout
    assert "warning" not in result.stderr


def test_a_module_that_does_not_import_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    space = _space(tmp_path, name="not_installed_anywhere:make_workload")
    line = _one_error_line(_hpsearch("validate", str(space), cwd=tmp_path))
    assert line == ("error: cannot import workload module 'not_installed_anywhere': "
                    "No module named 'not_installed_anywhere'")


def test_a_workload_that_does_not_say_its_options_gets_a_warning_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "silent.py").write_text(
        "from my_workload import make_workload as declared\n"
        "def make_workload(options):\n"
        "    return declared.__wrapped__(options)\n")
    space = _space(tmp_path, name="silent:make_workload", extra="hidden: {choices: [0, 16]}")
    result = _hpsearch("validate", str(space), cwd=tmp_path, path=Path(f"{tmp_path}{os.pathsep}{EXAMPLE}"))
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("warning: workload 'silent:make_workload' does not say which options it takes, "
                                    "so parameters hidden reach its factory unchecked")


def test_a_factory_returning_the_wrong_type_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "wrong.py").write_text(
        "def make_workload(options):\n"
        "    return {'model': None, 'train_set': [], 'val_set': []}\n")
    space = _space(tmp_path, name="wrong:make_workload")
    result = _hpsearch("start", str(space), "--storage", f"sqlite:///{tmp_path / 'h.db'}", "--no-progress",
                       cwd=tmp_path, path=tmp_path)
    line = _one_error_line(result)
    assert line == ("error: workload 'wrong:make_workload' must return a hpsearch.trials.workloads.base.Workload, "
                    "got a dict with keys ['model', 'train_set', 'val_set']")


@pytest.mark.parametrize(("a", "b", "same"), [(0, 16, False), (16, 16, True)])
def test_a_workload_parameter_counts_in_the_equivalence_of_trials(a: int, b: int, same: bool) -> None:
    space = parse_space(SPACE.format(name="digits_mlp", extra="hidden: {choices: [0, 16]}"))
    key = {h: equivalence_key(trial_spec(space, {**space.fixed, "hidden": h})) for h in (a, b)}
    assert (key[a] == key[b]) is same
    assert check_space_workload(space).passed == ("hidden",)


BROKEN_MODULES = {
    # module text, what the one error line says after "cannot import workload module 'broken': "
    "raises": ("import os\nraise RuntimeError('no data under ' + 'DATA_DIR')\n",
               "RuntimeError: no data under DATA_DIR (at {dir}/broken.py:2)"),
    "syntax": ("def make_workload(options):\n    return (options\n",
               "SyntaxError: '(' was never closed (at {dir}/broken.py:2)"),
    "exits": ("import sys\nsys.exit('set DATA_DIR first')\n",
              "SystemExit: set DATA_DIR first (at {dir}/broken.py:2)"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_MODULES))
def test_a_module_that_raises_at_import_is_one_error_line_with_its_place_and_exit_2(tmp_path: Path,
                                                                                      case: str) -> None:
    text, expected = BROKEN_MODULES[case]
    (tmp_path / "broken.py").write_text(text)
    space = _space(tmp_path, name="broken:make_workload")
    line = _one_error_line(_hpsearch("validate", str(space), cwd=tmp_path, path=tmp_path))
    assert line == "error: cannot import workload module 'broken': " + expected.format(dir=tmp_path)


def test_start_refuses_a_module_that_raises_at_import_in_one_line_and_creates_no_study(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text(BROKEN_MODULES["raises"][0])
    space = _space(tmp_path, name="broken:make_workload")
    started = _hpsearch("start", str(space), "--storage", f"sqlite:///{tmp_path / 'h.db'}", "--no-progress",
                        cwd=tmp_path, path=tmp_path)
    assert _one_error_line(started) == _one_error_line(_hpsearch("validate", str(space), cwd=tmp_path,
                                                                 path=tmp_path))
    assert not (tmp_path / "h.db").exists() or not optuna.get_all_study_names(f"sqlite:///{tmp_path / 'h.db'}")


def test_start_refuses_a_factory_that_raises_in_one_line_naming_its_line(tmp_path: Path) -> None:
    (tmp_path / "raising.py").write_text(
        "def make_workload(options):\n"
        "    samples = options.get('samples', 0)\n"
        "    raise ValueError(f'need more than {samples} samples')\n")
    space = _space(tmp_path, name="raising:make_workload")
    # validate builds nothing, so only start meets the factory
    assert _hpsearch("validate", str(space), cwd=tmp_path, path=tmp_path).returncode == 0
    line = _one_error_line(_hpsearch("start", str(space), "--storage", f"sqlite:///{tmp_path / 'h.db'}",
                                     "--no-progress", cwd=tmp_path, path=tmp_path))
    assert line == (f"error: workload 'raising:make_workload' failed to build: ValueError: need more than 0 samples "
                    f"(at {tmp_path}/raising.py:3)")
    assert not (tmp_path / "h.db").exists() or not optuna.get_all_study_names(f"sqlite:///{tmp_path / 'h.db'}")


def test_the_check_in_a_warm_rank_process_raises_the_same_workload_error(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # start checks the workload in a process of the local rank pool: its failure crosses back
    # as the WorkloadError it is, not as whatever the module raised.
    (tmp_path / "broken.py").write_text(BROKEN_MODULES["raises"][0])
    monkeypatch.syspath_prepend(str(tmp_path))
    space = parse_space(SPACE.format(name="broken:make_workload", extra=""))
    with pytest.raises(WorkloadError) as here:
        check_for_search(space)
    pool = RankPool(["broken"], prestart={None: 1})
    try:
        with pytest.raises(WorkloadError) as there:
            pool.call("hpsearch.workload_check:check_for_search", space)
    finally:
        pool.close()
    assert str(there.value) == str(here.value) == (
        f"cannot import workload module 'broken': RuntimeError: no data under DATA_DIR (at {tmp_path}/broken.py:2)")
