"""The published DDP check, as a workload plugin and as the raw DDP script it comes from.

The check (docs/science.md, "Loss reduction and raw DDP"): a linear model 8 -> 1 without bias, its
weights all 1, the sum of its outputs as the loss, the data ``torch.rand(8, 8)`` drawn after
``torch.manual_seed(0)``, SGD with lr 0.01 and momentum 0.9, a per-rank batch of 4 on 2 ranks,
2 epochs. Raw DDP ends at weights [0.9472, 0.9440, 0.9527, 0.9687, 0.9570, 0.9343, 0.9411, 0.9186].

Each rank sums its 4 outputs and DDP averages the 2 ranks' gradients, so a step's gradient is
(the sum over the 8 samples) / 2. That is what the engine computes for a loss declared ``mean``
(each process's loss weighted by its share of the step's samples, then averaged by DDP); a
``sum`` declaration asks for the gradient of one process on all 8 samples, twice as large.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpsearch.trials.workloads.base import Workload, takes_options

PUBLISHED = [0.9472, 0.9440, 0.9527, 0.9687, 0.9570, 0.9343, 0.9411, 0.9186]


def data() -> torch.Tensor:
    """``torch.rand(8, 8)`` after seed 0, from a generator of its own (the same numbers)."""
    return torch.rand(8, 8, generator=torch.Generator().manual_seed(0))


@takes_options("loss_reduction")
def make_workload(options: Mapping[str, Any]) -> Workload:
    """The check's model, data and summed loss; ``loss_reduction`` is what the loss is declared as."""
    x = data()
    model = nn.Linear(8, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    dataset = TensorDataset(x, torch.zeros(8))
    return Workload(model, dataset, dataset, loss_fn=lambda out, _y: out.sum(),
                    loss_reduction=options.get("loss_reduction", "mean"))


def raw_ddp_rank(rank: int, world: int, port: int, out: str) -> None:
    """One rank of the article's own script: plain DDP, in-order DistributedSampler."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    dataset = TensorDataset(torch.rand(8, 8), torch.zeros(8))
    model = nn.Linear(8, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=False)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, _ in DataLoader(dataset, batch_size=4, sampler=sampler):
            optimizer.zero_grad()
            ddp(x).sum().backward()
            optimizer.step()
    if rank == 0:
        torch.save(model.state_dict(), out)
    dist.destroy_process_group()
    # Leave without the interpreter's finalization (not in the article; the weights are saved):
    # there, gloo's threads can still hold work that touches Python objects, and about one rank
    # in ten aborted ("terminate called without an active exception", SIGABRT), which failed the
    # spawn and the test (pytorch/pytorch#179291 describes the same teardown).
    os._exit(0)
