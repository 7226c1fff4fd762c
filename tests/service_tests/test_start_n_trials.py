"""``hpsearch.start(space, n_trials=N)`` (and ``hpsearch start --n-trials N``) runs N trials
whatever the space's ``search.n_trials``, and the study keeps N as its total for ``status`` and
``resume``. A real search: real Ray, real SQLite, real DDP ranks over gloo, one epoch."""

from __future__ import annotations

from pathlib import Path

import pytest

import hpsearch
from hpsearch.errors import SpaceError

SPACE = """\
study: two-of-ten
workload: {name: digits_mlp, epochs: 1}
parameters:
  per_device_batch_size: {choices: [32, 64]}
  base_lr: {low: 0.01, high: 0.1, log: true}
objectives: [{metric: val_accuracy, direction: maximize}]
search: {sampler: random, n_trials: 10, seed: 0}
analysis: {confirm: off}
resources: {device: cpu}
"""


def test_start_runs_the_n_trials_given_over_the_spaces(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    url = f"sqlite:///{tmp_path / 'hpsearch.db'}"
    search = hpsearch.start(tmp_path / "space.yaml", storage=url, n_trials=2)
    summary = search.summary()
    assert summary["n_trials"] == 2 and summary["finished"] == 2 and summary["target"] == 2


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_start_refuses_an_n_trials_that_is_not_a_count_before_anything_runs(tmp_path: Path, bad: object) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    with pytest.raises(SpaceError, match="n_trials must be an integer >= 1"):
        hpsearch.start(tmp_path / "space.yaml", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}",
                       n_trials=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "hpsearch.db").exists()
