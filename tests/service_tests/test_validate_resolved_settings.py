"""``hpsearch validate`` prints the settings a search would run with, defaults filled in, in the
space file's own key names: what a bare ``fuse: yes`` (a YAML 1.1 boolean) became, the trial
count, the scaling rule the optimizer picked, the target, the budget, the confirmation."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hpsearch.cli import cli

SPACE = """\
study: resolved
workload: {name: digits_mlp, epochs: 2}
parameters:
  per_device_batch_size: {choices: [16, 32]}
  base_lr: {low: 0.01, high: 0.1, log: true}
  optimizer: adamw
search:
  fuse: yes
resources: {device: cpu}
"""


def _validate(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    (tmp_path / "space.yaml").write_text(SPACE)
    result = CliRunner().invoke(cli, ["validate", str(tmp_path / "space.yaml"), *args])
    return result.exit_code, result.stdout, result.stderr


def test_validate_prints_the_resolved_settings_with_defaults_filled_in(tmp_path: Path) -> None:
    code, out, err = _validate(tmp_path)
    assert code == 0, err
    lines = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in out.splitlines()[1:]
             if ":" in line}
    assert "fuse true" in lines["search"]  # a bare yes is YAML's true
    assert "n_trials 10" in lines["search"] and "sampler tpe" in lines["search"] and "budget none" in lines["search"]
    assert "lr_rule sqrt" in lines["scaling"] and "base_batch_size 8" in lines["scaling"]
    assert "world_size 1" in lines["fixed"] and "optimizer adamw" in lines["fixed"]
    assert "target derived from the study" in lines["analysis"] and "confirm auto" in lines["analysis"]
    assert "device cpu" in lines["resources"] and "gpus_per_worker 0" in lines["resources"]


def test_validate_json_holds_the_resolved_settings(tmp_path: Path) -> None:
    code, out, _ = _validate(tmp_path, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["search"]["fuse"] == "true" and data["search"]["n_trials"] == 10
    assert data["parameters"]["lr_rule"] == {"value": "sqrt"}
