"""A node's warm rank pool: the processes that run the ranks of every trial on the node
(``pool``), how they are started (``spawn``), how a trial reaches them from another process
(``pool_server``), what a trial's driver sees of them (``ranks``), and the node's CUDA MPS daemon
(``mps``). Imports no torch: it starts the rank's modules by name."""
