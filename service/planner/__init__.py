"""The planner: what a search runs next, and what its trials' reports write in the study.

It imports no Ray, so its decisions run and are tested on a plain Optuna study; Ray Tune's
searcher (``hpsearch.tune.searcher``) is a thin adapter over it. Top to bottom (each module
imports only those below it; the import contract in pyproject.toml keeps the order):

1. ``planner``: ``Planner``: given the study, the space, the budget, the memory ceilings
   learnt and the trials running, decides the next trial to start, alone or with the
   configurations of its shape as a fused group, and when the search stops; ``proposals``
   (``Proposer``): the next configuration, from the study's sampler or a confirmation round,
   and those skipped on the way (skip policy, refusals, exact duplicates, memory ceilings).
   Their decisions are typed values (``decisions``).
2. ``recorder``: ``Recorder``: what each trial reports, written into the study (its
   evaluations, its end: complete, pruned, failed; its device time, its saved model); over
   ``writer`` (``StudyWriter``, the study's one writer: a trial told, a skip, a budget refusal,
   an exact duplicate taking on its trial's end, a configuration back in the queue unstarted).
3. ``state``: ``SearchState``, what the running search knows, shared by them all.
4. ``decisions`` (the planner's typed answers), ``report`` (``TrialReport``, what a trial tells
   the search, and its one encoding as a Tune result), ``task`` (``TrialTask``, what a trial is
   told), ``plan`` (the space against the cluster), ``ceilings`` (the out-of-memory ceilings
   the search learns) and ``fuse_decisions`` (what ``fuse: auto`` decided per shape).
5. What the decisions read and the Python API shares: ``sampler`` (the study's sampler and the
   one transaction that asks it), ``constraints`` (the skip policy's caps and equivalences),
   ``budget`` (what the search may spend and has spent), ``saved_models`` (which trials keep
   their weights) and ``confirmation`` (the rounds that run the answer and say whether it
   held; the one module here that reads the analysis).

Import what you need from its module (``hpsearch.planner.plan.plan_search``...): importing this
package loads none of them, so ``hpsearch --help`` and the reading commands, which use ``plan``,
load no Optuna through it.
"""
