"""`hpsearch validate`: what a user sees for a good and a broken space file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpsearch.search_spaces import example_path


def _hpsearch(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], capture_output=True, text=True, cwd=cwd)


def test_validate_accepts_the_quickstart_and_counts_its_grid() -> None:
    result = _hpsearch("validate", str(example_path("quickstart")))
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout
    assert "48 configurations" in result.stdout


def test_validate_names_key_path_and_line_and_exits_2_without_traceback(tmp_path: Path) -> None:
    space = tmp_path / "broken.yaml"
    space.write_text(
        "study: broken\n"
        "parameters:\n"
        "  per_device_batch_size: {choices: [8, 32]}\n"
        "  base_lr: {low: -0.1, high: 0.1}\n"
    )
    result = _hpsearch("validate", str(space))
    assert result.returncode == 2
    assert "broken.yaml:4" in result.stderr
    assert "parameters.base_lr" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_validate_suggests_the_close_name_for_a_misspelt_key(tmp_path: Path) -> None:
    space = tmp_path / "typo.yaml"
    space.write_text("parameters:\n  per_device_batch_size: 8\n  base_lr: 0.1\nobjectivs: []\n")
    result = _hpsearch("validate", str(space))
    assert result.returncode == 2
    assert "typo.yaml:4" in result.stderr and "did you mean 'objectives'" in result.stderr


def test_start_on_a_broken_file_creates_no_study(tmp_path: Path) -> None:
    space = tmp_path / "broken.yaml"
    space.write_text("parameters:\n  per_device_batch_size: 0\n  base_lr: 0.1\n")
    result = _hpsearch("start", str(space), "--storage", f"sqlite:///{tmp_path / 'h.db'}")
    assert result.returncode == 2
    assert "parameters.per_device_batch_size" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "h.db").exists()


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def _space_with_sampler(tmp_path: Path, sampler: str) -> Path:
    space = tmp_path / "sampler.yaml"
    space.write_text(
        "study: sampler\n"
        "parameters:\n"
        "  per_device_batch_size: 8\n"
        "  base_lr: {low: 0.01, high: 0.1}\n"
        "search:\n"
        "  n_trials: 2\n"
        f"  sampler: {sampler}\n"
    )
    return space


@pytest.mark.parametrize("sampler", ["BaseSampler", "PartialFixedSampler"])
def test_validate_refuses_a_sampler_the_search_cannot_build(tmp_path: Path, sampler: str) -> None:
    line = _one_error_line(_hpsearch("validate", str(_space_with_sampler(tmp_path, sampler))))
    assert "sampler.yaml:7 at 'search.sampler'" in line
    assert "one of grid, random, tpe, nsga2, nsga3, cmaes, qmc, gp, bruteforce" in line
    assert f"got '{sampler}'" in line


def test_start_refuses_a_sampler_the_search_cannot_build_before_writing_anything(tmp_path: Path) -> None:
    space = _space_with_sampler(tmp_path, "PartialFixedSampler")
    line = _one_error_line(_hpsearch("start", str(space), "--storage", f"sqlite:///{tmp_path / 'h.db'}",
                                     "--no-progress", cwd=tmp_path))
    assert line == _one_error_line(_hpsearch("validate", str(space)))
    assert not (tmp_path / "h.db").exists()
