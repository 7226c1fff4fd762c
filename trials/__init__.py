"""What runs inside one trial, by runtime (docs/design.md, "How a trial starts"):

- ``launcher``: the trial's driver (``run_trial``), in the trial's process: hands the W ranks to
  a node's pool and follows them;
- ``node``: the node's warm rank pool, in the process that hosts it;
- ``rank``: one rank, in a warm rank process: the DDP loop and what it uses;
- ``run``: one rank of an exported trial under torchrun, without Ray or a store;

and what they share: ``spec`` (a trial's configuration), ``scaling`` (the LR rules),
``workloads`` (what a trial trains) and ``errors``. Never imports Ray: the same loop runs under
Ray, under torchrun and in a test. The import contract in pyproject.toml keeps the order.
"""
