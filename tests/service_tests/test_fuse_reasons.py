"""Why a trial ran on its own, as its ``fuse`` attr says it: the count in "no partner of its
shape" is the configurations it could have been grouped with.

A quickstart cut to four trials of four shapes recorded its first trial's reason as "none among
the 6 asked ahead": the three proposals asked ahead were counted once as asked and again as
waiting, in a study of four trials.
"""

from __future__ import annotations

from pathlib import Path

import optuna

from hpsearch import record
from hpsearch.search_spaces import parse_space
from hpsearch.tune.orchestrator import _create_study
from hpsearch.tune.searcher import StudySearcher

SPACE = """\
study: reasons
workload: {name: digits_mlp, epochs: 1}
parameters:
  per_device_batch_size: {choices: [8, 16, 32, 64]}
  base_lr: {choices: [0.02, 0.05]}
search: {sampler: grid, n_trials: 4, seed: 0, fuse: true}
resources: {device: cpu, cpus_per_worker: 1}
"""


def test_a_trial_without_partner_counts_the_configurations_it_could_have_joined(tmp_path: Path) -> None:
    space = parse_space(SPACE)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = _create_study(optuna.storages.InMemoryStorage(), "reasons", space)
    # The four batch sizes at one LR run first (search.enqueue): none has a partner of its shape,
    # in a space where some could fuse.
    for b in (8, 16, 32, 64):
        study.enqueue_trial({"per_device_batch_size": b, "base_lr": 0.02})
    searcher = StudySearcher(study, space, 4, "cpu", tmp_path, max_processes=1, slots=2)
    for i in range(4):
        config = searcher.suggest(f"t{i}")
        assert isinstance(config, dict)
    reasons = [t.user_attrs.get(record.FUSE) for t in sorted(study.trials, key=lambda t: t.number)]
    # Four shapes (one per per-device batch): the first waited with three others, each next one
    # with one fewer, the last with none.
    assert reasons == [
        "off: no partner of its shape among the 3 other configurations waiting to start",
        "off: no partner of its shape among the 2 other configurations waiting to start",
        "off: no partner of its shape among the 1 other configuration waiting to start",
        "off: no partner of its shape: no other configuration was waiting to start",
    ]
