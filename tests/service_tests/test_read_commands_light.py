"""The commands that only read a study (``ls``, ``status``, ``best``, ``export``) never import torch,
Ray or plotly: seconds each on a loaded machine, for nothing a read needs (docs/design.md,
"Imports"). A real SQLite study, the real command in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpsearch.testing import synthetic_study

PROBE = """\
import sys
from hpsearch.cli import cli
try:
    cli(sys.argv[1:], prog_name="hpsearch")
except SystemExit as exc:
    assert not exc.code, exc.code
print(sorted(m for m in ("torch", "ray", "plotly") if m in sys.modules))
"""


@pytest.mark.parametrize("command", [["ls"], ["status", "demo"], ["best", "demo"], ["export", "demo", "-o", "t.csv"]])
def test_a_read_command_imports_neither_torch_nor_ray_nor_plotly(tmp_path: Path, command: list[str]) -> None:
    url = f"sqlite:///{tmp_path / 'hp.db'}"
    synthetic_study(url, "demo", n_trials=20)
    done = subprocess.run([sys.executable, "-c", PROBE, *command, "--storage", url], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]", done.stdout
