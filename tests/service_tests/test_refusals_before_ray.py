"""A space whose workload cannot run is refused before Ray starts and before any file is written.

``hpsearch start`` checks the workload (its module imports, every name the space hands it, a
batch that fits the data) in the time ``hpsearch validate`` takes, not after a local Ray came
up; a refused search leaves the folder as it found it: no study file, no lock file, no runs
folder. Ray's own files go under ``RAY_TMPDIR``: none there means no Ray process started.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SPACE = """\
study: refused
workload: {{name: {workload}, epochs: 1}}
parameters:
  per_device_batch_size: {{choices: [{batch}]}}
  world_size: 1
  base_lr: 0.01
  {extra}
search: {{sampler: grid, n_trials: 2}}
resources: {{device: cpu}}
"""

BROKEN_MODULE = "import torch\nraise RuntimeError('no data under DATA_DIR')\n"

CASES = {
    "a misspelt workload": (dict(workload="digits_mpl", batch=32, extra=""), "workload must be one of"),
    "a misspelt parameter": (dict(workload="digits_mlp", batch=32, extra="hiden: 16"), "did you mean 'hidden'?"),
    "a batch larger than the data": (dict(workload="digits_mlp", batch=4096, extra=""), "larger than the 1438 training"),
    "a module that fails to import": (dict(workload='"broken_workload:make"', batch=32, extra=""),
                                      "cannot import workload module 'broken_workload': RuntimeError: no data under"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_workload_level_mistake_is_refused_before_ray_and_writes_nothing(tmp_path: Path, case: str) -> None:
    fields, message = CASES[case]
    work = tmp_path / "work"
    work.mkdir()
    (work / "space.yaml").write_text(SPACE.format(**fields))
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "broken_workload.py").write_text(BROKEN_MODULE)
    ray_tmp = tmp_path / "ray"
    env = {**os.environ, "PYTHONPATH": str(modules), "RAY_TMPDIR": str(ray_tmp)}
    env.pop("RAY_ADDRESS", None)
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                            capture_output=True, text=True, cwd=work, env=env, timeout=300)

    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in work.iterdir()) == ["space.yaml"]  # no study, no lock, no runs folder
    assert not ray_tmp.exists()  # Ray never started
