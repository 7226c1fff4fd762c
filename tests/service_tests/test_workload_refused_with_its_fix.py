"""A workload the search cannot use is refused by ``hpsearch start`` before any trial runs, with
one ``error:`` line that says the fix, exit status 2, no traceback, and no progress line drawn
above it as if trials had begun: a classifier that left out ``num_classes`` (written as
docs/workloads.md's ``@builds_data`` example once was), a misspelt built-in name, a module
without the function the space names.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: A user's workload file as docs/workloads.md shows it ("Data kept warm"), a classifier whose
#: Workload leaves out num_classes.
NO_CLASSES = '''
import torch
from hpsearch.trials.workloads.base import Workload, builds_data, takes_options


def load(options):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(options.get("samples", 256), 8, generator=generator)
    y = (x.sum(dim=1) > 0).long()
    return torch.utils.data.TensorDataset(x[:192], y[:192]), torch.utils.data.TensorDataset(x[192:], y[192:])


@takes_options("samples", "hidden")
@builds_data(load, options=["samples"])
def make_workload(options, data):
    train_set, val_set = data
    model = torch.nn.Sequential(torch.nn.Linear(8, options.get("hidden", 16)), torch.nn.ReLU(),
                                torch.nn.Linear(options.get("hidden", 16), 2))
    return Workload(model, train_set, val_set, torch.nn.functional.cross_entropy, "mean")


def make_wines(options):
    return make_workload(options)
'''

SPACE = """\
study: refused
workload: {{name: {workload}, epochs: 1}}
parameters:
  per_device_batch_size: 16
  base_lr: 0.01
search: {{sampler: random, n_trials: 2}}
resources: {{device: cpu}}
"""

CASES = {
    "a classifier without num_classes": (
        '"wine:make_workload"',
        ["error: objective val_accuracy (objectives[0]): workload 'wine:make_workload' does not record it",
         "num_classes=None, which means regression", "pass num_classes=<the number of classes> to Workload(...)"]),
    # A name that names nothing is the space's to fix: the error says where in it.
    "a misspelt built-in": ("digits_mpl", ["error: space.yaml:2 at 'workload.name': workload must be one of",
                                           "did you mean 'digits_mlp'?"]),
    "a module without the function": (
        '"wine:make_wine"',
        ["error: space.yaml:2 at 'workload.name': workload 'wine:make_wine': module 'wine' has no callable "
         "'make_wine'; did you mean 'make_wines'?"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_start_refuses_an_unusable_workload_with_its_fix_and_no_progress_line(tmp_path: Path, case: str) -> None:
    workload, expected = CASES[case]
    (tmp_path / "wine.py").write_text(NO_CLASSES)
    (tmp_path / "space.yaml").write_text(SPACE.format(workload=workload))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    env.pop("RAY_ADDRESS", None)
    # The progress display is on (no --no-progress): it must not be drawn before the error.
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)

    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and lines[0].startswith("error:"), result.stderr  # nothing before it: no "trials 0/2" line
    assert not any(line.lstrip().startswith("trials") for line in lines), result.stderr
    assert all(part in lines[0] for part in expected), lines[0]
