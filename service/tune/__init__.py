"""The search engine: a Ray Tune experiment over an Optuna study, where every trial reserves
its devices and runs its ranks.

Where a trial starts, top to bottom (each module imports only those below it; the import
contract in pyproject.toml keeps the order):

1. ``orchestrator``: ``run_search`` / ``resume_search``: check the space and the workload, start
   or join Ray, plan, create or reopen the study, run Tune.
2. ``searcher`` (``StudySearcher``: asks the study's sampler for a configuration, builds its
   ``TrialSpec`` with ``hpsearch.trials.spec.trial_spec``, records every result), ``rungs``
   (ASHA rebuilt from the study) and ``plan`` (the space against the cluster).
3. ``trainable``: what Tune runs per trial: reserve the devices, run the ranks, pass rank 0's
   reports on.
4. ``reservations``: the desk that grants a trial its devices on one node (placement groups).
5. ``pools``: the node's warm rank pool, reached in the search's own process (``LocalRanks``)
   or through a Ray actor (``RayRanks``); both are a ``hpsearch.trials.ranks.Ranks``.

Below the engine, in ``hpsearch.trials``: the launcher hands the ranks to the pool, whose warm
processes (``hpsearch.trials.worker``) run the DDP loop (``hpsearch.trials.loop``).
``ray_session`` starts and ends Ray for the orchestrator.

Import what you need from its module (``hpsearch.tune.orchestrator.run_search``...): importing
this package loads none of them, so the parts that need no Ray (``plan``) load without it.
"""
