"""The README's two set-up commands install what they say: the quickstart the runtime only, the
tests everything, also in a .venv the quickstart made first.

Run as ``make -n`` (print the recipe, run nothing) on a copy of the Makefile and the files its
stamps depend on, so that no package is installed here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEV_INSTALL = "-e '.[dev]'"
RUNTIME_INSTALL = "-e .\n"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    if shutil.which("make") is None:  # pragma: no cover - make is a documented requirement
        pytest.skip("make is not installed")
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "constraints", tmp_path / "constraints")
    return tmp_path


def _dry_run(checkout: Path, target: str) -> str:
    done = subprocess.run(["make", "-n", target], cwd=checkout, capture_output=True, text=True,
                          check=True, env={**os.environ, "CI": ""})
    return done.stdout


def _venv(checkout: Path, *stamps: str) -> None:
    """A .venv as an earlier make left it: its python and the given install stamps, newer than
    pyproject.toml and the pins."""
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (checkout / ".venv" / "bin" / "python").touch()
    newer = (checkout / "pyproject.toml").stat().st_mtime + 10
    for stamp in stamps:
        path = checkout / ".venv" / stamp
        path.touch()
        os.utime(path, (newer, newer))


def test_quickstart_on_a_fresh_clone_installs_the_runtime_without_the_test_tools(checkout: Path) -> None:
    recipe = _dry_run(checkout, "quickstart")
    assert RUNTIME_INSTALL in recipe
    assert DEV_INSTALL not in recipe
    assert "hpsearch start search_spaces/examples/quickstart.yaml" in recipe


def test_make_test_after_the_quickstart_adds_the_test_tools(checkout: Path) -> None:
    _venv(checkout, ".installed-runtime")
    assert "pip install" not in _dry_run(checkout, "quickstart")  # the quickstart's install holds
    recipe = _dry_run(checkout, "test")
    assert DEV_INSTALL in recipe
    assert "pytest" in recipe


def test_the_quickstart_after_make_test_installs_nothing_more(checkout: Path) -> None:
    # `make test`'s install stamps both: the test tools include the runtime.
    recipe = _dry_run(checkout, "install")
    assert "touch .venv/.installed .venv/.installed-runtime" in recipe
    _venv(checkout, ".installed", ".installed-runtime")
    assert "pip install" not in _dry_run(checkout, "quickstart")
    assert "pip install" not in _dry_run(checkout, "test")
