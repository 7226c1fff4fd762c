"""The ``optimizer`` parameter: only optimizers the trial loop builds pass validation, refused
like any other bad value (file:line, key path, the choices, a did-you-mean), before a search
writes anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpsearch.search_spaces import OPTIMIZERS, SpaceError, parse_space

BASE = "parameters:\n  per_device_batch_size: 8\n  base_lr: 0.1\n"


def test_an_unknown_optimizer_is_refused_at_its_line_with_the_choices() -> None:
    with pytest.raises(SpaceError) as caught:
        parse_space(BASE + "  optimizer: rmsprop\n", source="space.yaml")
    message = str(caught.value)
    assert message.startswith("space.yaml:4 at 'parameters.optimizer':")
    assert "'sgd', 'adam', 'adamw'" in message and "'rmsprop'" in message


def test_a_misspelt_optimizer_gets_a_did_you_mean() -> None:
    with pytest.raises(SpaceError, match="did you mean 'sgd'"):
        parse_space(BASE + "  optimizer: sdg\n")


def test_each_choice_of_a_searched_optimizer_is_checked() -> None:
    with pytest.raises(SpaceError) as caught:
        parse_space(BASE + "  lr_rule: sqrt\n  optimizer: {choices: [adam, rmsprop]}\n", source="space.yaml")
    assert "at 'parameters.optimizer.choices[1]'" in str(caught.value)


def test_an_optimizer_cannot_be_a_range() -> None:
    with pytest.raises(SpaceError, match="optimizer names an optimizer"):
        parse_space(BASE + "  optimizer: {low: 1, high: 2}\n")


@pytest.mark.parametrize("name", ["AdamW", "SGD", "adam"])
def test_the_known_optimizers_are_accepted_in_any_case(name: str) -> None:
    space = parse_space(BASE + f"  optimizer: {name}\n")
    assert space.parameters["optimizer"].value == name  # type: ignore[union-attr]
    assert name.lower() in OPTIMIZERS


def test_start_refuses_an_unknown_optimizer_with_status_2_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text("study: rms\n" + BASE + "  optimizer: rmsprop\n"
                                         "search: {n_trials: 2}\nresources: {device: cpu}\n")
    result = subprocess.run([sys.executable, "-m", "hpsearch", "start", "space.yaml", "--no-progress"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "space.yaml:5 at 'parameters.optimizer'" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["space.yaml"]  # no study, no runs folder
