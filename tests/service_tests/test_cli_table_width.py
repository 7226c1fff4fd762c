"""The end of ``hpsearch start`` in an 80-column terminal: the trials table shows whole columns
(rich used to cut every one short, "0.0…"), names in one line the ones left out, which
``hpsearch export`` has; and the search leaves no lock file beside the store."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "my_workload"
#: Characters rich draws tables with.
_BOX = set("┏┃┡│└━┳╇┴┓┩┫┛┗┣╋─┼")


def test_the_end_of_search_table_fits_an_80_column_terminal_whole(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(EXAMPLE)}
    env.pop("HPSEARCH_STORAGE", None)
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", str(EXAMPLE / "space.yaml"), "--no-progress"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]

    table = [line for line in result.stdout.splitlines() if line[:1] in _BOX]
    assert table and max(map(len, table)) <= 80
    assert "…" not in result.stdout  # no cell cut short
    header = next(line for line in table if line.startswith("┃"))
    shown = [cell.strip() for cell in header.strip("┃").split("┃")]
    # The trial's number and state and the study's objective come first; the batch and LR next.
    assert shown[:2] == ["#", "state"] and {"val_loss", "runtime_s", "b", "B", "lr", "hidden"} <= set(shown)
    # What did not fit is named (the device-seconds, and the peak memory where the trials record it).
    left_out = next(line for line in result.stdout.splitlines() if line.startswith("not shown at this width: "))
    assert left_out.endswith(" (every column: hpsearch export my-workload-example)")
    assert set(left_out[len("not shown at this width: "):].split(" (")[0].split(", ")) <= {"device_seconds",
                                                                                          "peak memory"}
    assert "device_seconds" in left_out

    exported = subprocess.run([sys.executable, "-m", "hpsearch", "export", "my-workload-example"],
                              capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert "device_seconds" in next(csv.reader(io.StringIO(exported.stdout)))
    assert not (tmp_path / "hpsearch.db.lock").exists()
