"""The package as users install it: every module in the wheel, a light top-level import."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"service": "hpsearch", "trials": "hpsearch/trials", "search_spaces": "hpsearch/search_spaces",
           "dashboards": "hpsearch/dashboards"}


def _expected_files() -> set[str]:
    expected = set()
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".yaml") and "__pycache__" not in path.parts:
                expected.add(f"{package}/{path.relative_to(ROOT / folder).as_posix()}")
    expected.add("hpsearch/py.typed")
    return expected


def test_wheel_contains_every_module_and_example_space(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, text=True,
    )
    wheel = next(tmp_path.glob("hpsearch-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(_expected_files() - names)
    assert missing == [], f"missing from the wheel: {missing}"
    assert any(n.endswith("entry_points.txt") for n in names)


def test_import_hpsearch_loads_neither_torch_nor_ray_nor_plotly() -> None:
    code = ("import sys, hpsearch, hpsearch.cli; "
            "heavy = [m for m in ('torch', 'ray', 'plotly', 'optuna', 'pandas') if m in sys.modules]; "
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()
    assert out == ""


def test_help_lists_the_commands_and_stays_light() -> None:
    out = subprocess.run([sys.executable, "-m", "hpsearch", "--help"], check=True, capture_output=True, text=True).stdout
    # The dashboard's commands come from its entry points, which --help lists without loading
    # numpy, pandas or plotly.
    for command in ("start", "validate", "ls", "status", "best", "export", "recommend", "dashboard", "frontier"):
        assert command in out
    code = ("import sys; from hpsearch.cli import cli\n"
            "try:\n    cli(['--help'], prog_name='hpsearch')\nexcept SystemExit:\n    pass\n"
            "print('HEAVY=' + ','.join(m for m in ('torch', 'ray', 'plotly', 'optuna', 'pandas', 'numpy', 'scipy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.splitlines()[-1] == "HEAVY="
