"""The Ray side of one search: the reservation desk and the Tune experiment.

The orchestrator (``hpsearch.tune.orchestrator``) loads this module once a search is sure to
run, in a thread while the workload is checked: Ray Tune and what imports it take 1-2 s. It
then calls, in order: ``ray_session`` (start or join Ray), ``start_desk`` (the reservation desk
and the nodes' warm rank pools) and ``run_tune`` (the Tune experiment: the ``StudySearcher``
asks and tells the study, every trial runs ``hpsearch.tune.trainable.trainable``).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import optuna
from ray import tune
from ray.tune import Callback

from hpsearch.budget import BudgetLedger
from hpsearch.errors import SearchInterrupted, StoreLostError
from hpsearch.planner.plan import ConfirmationRun, SearchPlan
from hpsearch.progress import SearchEvent
from hpsearch.search_spaces import SearchSpace
from hpsearch.tune.pools import LocalPool, PoolOptions
from hpsearch.tune.ray_session import ray_session
from hpsearch.tune.reservations import Reservations
from hpsearch.tune.rungs import asha_scheduler
from hpsearch.tune.searcher import InterruptStopper, StudySearcher, TrainingStarted
from hpsearch.tune.trainable import DRIVER_RESOURCES, trainable

__all__ = ["TrialsStarting", "ray_session", "run_tune", "start_desk"]


def start_desk(space: SearchSpace, plan: SearchPlan, local: LocalPool | None) -> Reservations:
    """Start the search's reservation desk and the nodes' warm rank pools
    (``hpsearch.tune.reservations``) as soon as Ray runs, so their processes import torch and the
    workload while the search writes the study and sets Tune up. They end with the Ray session
    (and the orchestrator closes them after the trials and their confirmation rounds, for a
    cluster that outlives the search).
    ``local``: this machine's pool, already started by the orchestrator (CPU searches).

    Raises:
        ResourceError: ``resources.mps: on`` and a node's MPS daemon could not start.
    """
    desk = Reservations(PoolOptions.of_space(space, plan.device, sys.path),
                        local=local if plan.device == "cpu" else None,
                        node_units=plan.node_devices if space.resources.span_nodes == "auto" else None)
    if space.resources.mps == "on" and plan.device == "cuda":
        try:
            desk.refuse_without_mps()  # before the study is written
        except BaseException:
            desk.close()
            raise
    return desk


def run_tune(space: SearchSpace, study: optuna.Study, plan: SearchPlan,
             on_event: Callable[[SearchEvent], None] | None, samples_per_epoch: int, desk: Reservations,
             confirmations: Sequence[ConfirmationRun] = ()) -> None:
    """Run the search's trials as one Tune experiment: ``plan.n_trials`` of the sampler's, or a
    confirmation round's runs (``confirmations``). The desk stays open for the next round; the
    orchestrator closes it.

    Raises:
        StoreLostError: the store stopped answering (resume marks the open trials interrupted).
        SearchInterrupted: Ctrl-C or SIGTERM stopped the search.
    """
    plan.runs_dir.mkdir(parents=True, exist_ok=True)
    ledger = BudgetLedger(plan.budget, plan.spent, plan.run_started if plan.run_started is not None else time.monotonic())
    searcher = StudySearcher(study, space, plan.n_trials, plan.device, plan.runs_dir, max_processes=plan.devices,
                             on_event=on_event, ledger=ledger, slots=plan.max_concurrent, confirmations=confirmations)

    stopper = InterruptStopper(searcher, on_stop=desk.stop_granting)
    tuner = tune.Tuner(
        # The same request for every trial, so Tune always reuses a finished trial's process;
        # each trial then reserves its own devices (hpsearch.tune.trainable).
        tune.with_resources(trainable, tune.PlacementGroupFactory([DRIVER_RESOURCES])),
        tune_config=tune.TuneConfig(
            # Fused groups are one Tune trial each, and the members of a group that declined to fuse
            # run as one more each: twice n_trials bounds the Tune trials, the searcher ends the run.
            search_alg=searcher, num_samples=2 * plan.n_trials, max_concurrent_trials=plan.max_concurrent,
            scheduler=_scheduler(space, samples_per_epoch, study),
            # A new trial runs in the process of a finished one: no Ray worker to start.
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name="tune", storage_path=str(plan.runs_dir), verbose=0, stop=stopper,
            callbacks=[TrainingStarted(searcher), TrialsStarting(desk)],
            failure_config=tune.FailureConfig(max_failures=0),
        ),
    )
    try:
        with _stop_on_signals(searcher):
            tuner.fit()
    except StoreLostError:
        raise  # nothing more can be written; resume marks the open trials interrupted
    finally:
        if searcher.store_lost is None:
            searcher.end_run()  # open trials: 'budget' or 'interrupted'; what the run spent
    if searcher.store_lost is not None:
        raise searcher.store_lost
    if searcher.interrupted:
        raise SearchInterrupted(
            f"search interrupted; finished trials are kept and the ones cut short are marked "
            f"'interrupted': run 'hpsearch resume {plan.study_name}' to finish the study"
        )


class TrialsStarting(Callback):
    """Tells the desk how many of Tune's trials wait for their processes to start (Tune's
    ``PENDING``), after each of Tune's steps where it changed: a finished trial's process waits
    for them before it goes back to Tune (``hpsearch.tune.reservations.hand_over``)."""

    def __init__(self, desk: Reservations) -> None:
        self.desk = desk
        self.told = 0

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        starting = sum(t.status == "PENDING" for t in trials)
        if starting != self.told:
            self.desk.trials_starting(starting)
            self.told = starting

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.desk.trials_starting(0)  # the desk outlives the experiment (a confirmation round follows)
        self.told = 0


def _scheduler(space: SearchSpace, samples_per_epoch: int, study: optuna.Study) -> Any:
    """ASHA on the first objective with its budget in samples seen, its rungs rebuilt from the
    study's earlier trials (``hpsearch.tune.rungs``), or ``None``."""
    if space.search.scheduler != "asha":
        return None
    return asha_scheduler(space, samples_per_epoch, study.get_trials(deepcopy=False))


@contextmanager
def _stop_on_signals(searcher: StudySearcher) -> Iterator[None]:
    """On the first Ctrl-C or SIGTERM, stop the search cleanly: running trials end as
    ``interrupted``. A second Ctrl-C interrupts at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: Any) -> None:
        searcher.interrupted = True  # InterruptStopper ends the Tune experiment on its next step
        for sig, old in previous.items():
            signal.signal(sig, old)

    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
