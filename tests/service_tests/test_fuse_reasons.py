"""Why a trial ran on its own, as its ``fuse`` attr says it: the count in "no partner of its
shape" is the configurations it could have been grouped with; summaries count the reasons by
kind, not by their text.

A quickstart cut to four trials of four shapes recorded its first trial's reason as "none among
the 6 asked ahead": the three proposals asked ahead were counted once as asked and again as
waiting, in a study of four trials.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pandas as pd

from hpsearch import record
from hpsearch.search_spaces import parse_space
from hpsearch.study import fused_summary
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


def test_the_summary_counts_trials_without_a_partner_as_one_reason(tmp_path: Path) -> None:
    # Each trial's reason counts the configurations it could have joined, so no two read alike:
    # counted whole, the summary said "1 because no partner of its shape (the most common of 4 reasons)".
    # Four shapes and one configuration each: no two share a shape, so none is asked ahead.
    space = parse_space(SPACE.replace("  base_lr: {choices: [0.02, 0.05]}\n", "  base_lr: 0.02\n"))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = _create_study(optuna.storages.InMemoryStorage(), "reasons", space)
    searcher = StudySearcher(study, space, 4, "cpu", tmp_path, max_processes=1, slots=2)
    for i in range(4):
        assert isinstance(searcher.suggest(f"t{i}"), dict)
    summary = fused_summary(pd.DataFrame({record.FUSE: [t.user_attrs.get(record.FUSE) for t in study.trials]}))
    (kind, count), = summary.off.items()
    assert count == 4
    assert summary.lines() == [f"not fused: 4 trials on their own, 4 because {kind}"]


def test_the_summary_groups_reasons_by_kind_most_common_first() -> None:
    fuse = ["on", "on",
            "off: fusing did not pay on cpu: a step of 3 members fused took 40.2 ms (13.4 ms a member), one member "
            "alone 9.1 ms (timed on 8 steps)",
            "off: fusing did not pay at per-device batch 32 of this shape, so not at 64 (on cpu: a step of 3 members "
            "fused took 30 ms (10 ms a member), one member alone 9.8 ms (timed on 8 steps))",
            "off: fusing did not pay on cpu: a step of 4 members fused took 50 ms (12.5 ms a member), one member "
            "alone 9.2 ms (timed on 1 step)",
            "off: the model cannot be vectorized over members: RuntimeError: vmap: It looks like you're calling "
            ".item() on a Tensor",
            "off: no partner of its shape: no other configuration was waiting to start", None]
    summary = fused_summary(pd.DataFrame({record.FUSE: fuse}))
    assert summary.off == {"fusing did not pay": 3, "no partner of its shape": 1,
                           "the model cannot be vectorized over members": 1}
    assert summary.lines() == ["not fused: 5 trials on their own, 3 because fusing did not pay, 1 because no "
                               "partner of its shape, 1 because the model cannot be vectorized over members"]
