"""One rank of a trial, in its own process: the warm rank process (``process``) and the zygote it
is forked from (``zygote``), the DDP loop (``loop``) and what the loop uses: the data path
(``data``, ``data_cache``), precision and compilation (``compute``), the communication and noise
scale measurements (``measure``), the memory cap and peak (``memory``), and the context it
reports through (``context``). The only part of hpsearch that runs torch's training code; it
never imports the node's pool or the trial's driver above it."""
