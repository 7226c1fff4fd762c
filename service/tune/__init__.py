"""The search engine: a Ray Tune experiment over an Optuna study, where every trial reserves
its devices and runs its ranks.

Where a trial starts, top to bottom (each module imports only those below it; the import
contract in pyproject.toml keeps the order; docs/design.md, "How a trial starts", draws it):

1. ``orchestrator``: ``run_search`` / ``resume_search``: check the space and the workload, start
   this machine's warm rank pool (``pools.LocalPool``) before Ray, create or reopen the study.
2. ``experiment``: the Ray side, loaded while the workload is checked: start or join Ray
   (``ray_session``), start the reservation desk, run Tune with the ``StudySearcher``
   (``searcher``: Tune's adapter over the planner, ``hpsearch.planner``, which decides what runs
   next, hands the trial a ``TrialTask`` and records every ``TrialReport``) and ASHA rebuilt
   from the study (``rungs``).
3. ``trainable``: what Tune runs per trial: reserve the devices, run the ranks, pass rank 0's
   reports on, each a ``TrialReport``.
4. ``reservations``: the desk that grants a trial its devices on one node, and owns the nodes'
   pools; a ``Grant`` carries the address of its node's pool.
5. ``pools``: what every node's pool starts with, and the search's own.

What needs no Ray is in ``hpsearch.planner``: the space against the cluster (``plan``), the
out-of-memory ceilings the search learns (``ceilings``), what ``fuse: auto`` decided
(``fuse_decisions``), the planner and the recorder. Below the engine, in ``hpsearch.trials``: the
trial's driver (``launcher.run_trial``) reaches the node's pool (``node``) through the grant,
whose warm processes run the DDP loop (``rank``).

Import what you need from its module (``hpsearch.tune.orchestrator.run_search``...): importing
this package loads none of them, so ``pools`` loads without Ray.
"""
