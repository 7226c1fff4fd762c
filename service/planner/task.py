"""``TrialTask``: one trial as the planner hands it to the trial's process, and where it runs.

Tune carries the task to the trainable (``hpsearch.tune.trainable``) in the trial's config; the
planner builds it without Ray, so it is defined here, beside the report that comes back
(``hpsearch.planner.report``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hpsearch.trials.spec import TrialSpec

__all__ = ["REPORT_EVERY_S", "TrialTask", "trial_folder"]

#: A search without a scheduler passes a trial's reports to Tune at most this often (seconds):
#: the rest ride along with the next result (``TrialReport.earlier``). Each Tune result costs
#: the trial's process and Tune's controller some milliseconds of CPU (a Ray call, Tune's
#: bookkeeping, the study's write); a trial whose evaluations come ten times a second spends more
#: on its reports than on anything else of the search's (``benchmarks/orchestration.py``). A
#: scheduler (ASHA) judges trials on each report, so there every report goes to Tune at once, as
#: Tune's own result buffering does only for schedulers that allow it.
REPORT_EVERY_S = 1.0


def trial_folder(runs_dir: str | os.PathLike[str], number: int) -> str:
    """A trial's run folder in its study's runs folder: ``trial-00012`` (its ranks' output in
    ``ranks.log`` is marked with this name).

    A fused group's folder is its first member's; every other member's is a link to it, so
    each trial's files are found by its number (``hpsearch.tune.trainable``).

    Example:
        >>> trial_folder("hpsearch_runs/my-study", 12)
        'hpsearch_runs/my-study/trial-00012'
    """
    return os.path.join(runs_dir, f"trial-{number:05d}")


@dataclass(frozen=True)
class TrialTask:
    """One trial as the planner hands it to the trainable (Tune's config holds it as ``"trial"``).

    Attributes:
        spec: The trial's configuration (``hpsearch.trials.spec.trial_spec``).
        number: Its number in the study.
        run_dir: Its run folder (``metrics.jsonl``, ``model.pt``, its ranks' failure reports).
        timeout_s: ``search.trial_timeout_s``.
        on_oom: ``search.on_oom``.
        report_every_s: How often its reports go to Tune (``None``: each at once, for a scheduler).
        members: A fused group's members' study numbers, in the group's order (``(number,)``
            for a trial of its own).
    """

    spec: TrialSpec
    number: int
    run_dir: str
    timeout_s: float | None
    on_oom: str
    report_every_s: float | None
    members: tuple[int, ...] = ()
