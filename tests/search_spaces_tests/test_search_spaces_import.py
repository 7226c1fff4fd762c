"""``import hpsearch.search_spaces`` stays light and exports what its ``__all__`` promises."""

from __future__ import annotations

import subprocess
import sys

import hpsearch.search_spaces


def test_importing_search_spaces_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, hpsearch.search_spaces\n"
        "heavy = [m for m in ('torch', 'ray', 'plotly', 'optuna', 'pandas') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )

    assert result.stdout.strip() == ""


def test_every_name_in_all_is_importable() -> None:
    for name in hpsearch.search_spaces.__all__:
        assert getattr(hpsearch.search_spaces, name) is not None
