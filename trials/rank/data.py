"""How a trial's batches reach its device: tensor data kept on the device, or a ``DataLoader``.

Two data paths feed the DDP loop (``workload.data``, docs/trials.md "Data on the device"):

- **device**: a workload whose data are tensors (a ``TensorDataset``, or
  ``hpsearch.trials.workloads.tensors.TensorData`` for data
  that needs a transform per batch, such as uint8 images turned into floats) has them copied
  to the rank's device once, and each micro-batch is gathered there by index. Nothing per
  sample runs in Python, nothing crosses the PCIe bus during training.
- **loader**: any map-style dataset, through one ``DataLoader`` per trial with worker
  processes, pinned memory and non-blocking copies (``workload.loader``); a dataset with
  ``__getitems__`` is fetched a batch at a time (the ``DataLoader`` calls it).

Both read each logical rank's samples for the epoch from the same seeded
``DistributedSampler`` (``set_epoch`` every epoch, padded so every rank has as many), cut them
into micro-batches of b in order, the last one short when b does not divide them, and feed
them in the order the loop consumes them (each step's micro-batches, each of this process's
emulated ranks in turn). So the two paths train on the same samples in the same order, and on
the CPU, where gathering rows by index and stacking them one by one give the same bits, to
the same weights. Validation runs in batches of the per-device batch b, at most ``EVAL_BATCH``
(``eval_batch_size``), in both: an evaluation never asks for more memory than a training step
at b did.

``auto`` picks the device path where both data sets are tensors and, on CUDA, fit
``DEVICE_MEMORY_SHARE`` of the memory the rank's share of the GPU has (``gpus_per_worker``);
the trial records the path and why (``data_path``, ``data_path_reason``).
"""

from __future__ import annotations

import math
import multiprocessing
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from hpsearch.record import format_bytes
from hpsearch.trials.errors import WorkloadError
from hpsearch.trials.rank.lifetime import die_with_parent
from hpsearch.trials.workloads.base import Workload
from hpsearch.trials.workloads.tensors import Transform, tensor_parts

__all__ = [
    "DEVICE_MEMORY_SHARE",
    "EVAL_BATCH",
    "DataPath",
    "EpochPlan",
    "Feed",
    "LoaderSettings",
    "choose_data_path",
    "copy_to",
    "eval_batch_size",
    "open_feed",
]

#: The largest validation batch of both paths (the same chunks, so the same sums).
EVAL_BATCH = 1024
#: ``auto`` keeps data on a CUDA device when the training and validation tensors together take
#: at most this share of the memory the rank has there (all the GPU's, or its
#: ``gpus_per_worker`` share of it); the rest is the model's, its activations' and the
#: optimizer's.
DEVICE_MEMORY_SHARE = 0.25


def eval_batch_size(per_device_batch: int) -> int:
    """The validation batch of a trial at per-device batch ``per_device_batch``: that batch, at
    most ``EVAL_BATCH``. Evaluating the whole validation set of a wide model in one batch asked
    a rank for more memory than its training steps did (409 samples x 65536 activations, 102
    MiB, at per-device batch 64), and the trial ran out of memory for a batch that fit.

    Example:
        >>> eval_batch_size(64), eval_batch_size(4096)
        (64, 1024)
    """
    return max(1, min(EVAL_BATCH, per_device_batch))
#: At most this many loader workers per rank with ``workers: auto``.
_AUTO_WORKERS_CAP = 8

@dataclass(frozen=True)
class DataPath:
    """The path a trial's batches take (``device`` or ``loader``) and why, as recorded."""

    kind: str
    reason: str


def choose_data_path(requested: str, workload: Workload, device: torch.device, gpu_share: float = 1.0) -> DataPath:
    """Where ``workload``'s batches come from for ``requested`` (``auto``, ``device``, ``loader``);
    ``gpu_share`` is the share of the GPU the rank has (``resources.gpus_per_worker`` below 1).

    Raises:
        WorkloadError: ``device`` was asked for data the device path cannot hold.
    """
    if requested == "loader":
        return DataPath("loader", "workload.data is loader")
    why_not = None
    if workload.hooks is not None:
        why_not = "the workload makes its own batches (collate_fn) and validates itself (WorkloadHooks)"
    else:
        for name in ("train_set", "val_set"):
            data = getattr(workload, name)
            if tensor_parts(data) is None:
                why_not = (f"its {name} is a {type(data).__module__}.{type(data).__qualname__}, not tensors (a "
                           "TensorDataset, or hpsearch.trials.workloads.tensors.TensorData)")
                break
    if why_not is not None:
        if requested == "device":
            raise WorkloadError(f"workload.data is device, but {why_not}; use data: auto or loader")
        return DataPath("loader", why_not)
    size = _data_bytes(workload)
    if requested == "device":
        return DataPath("device", f"workload.data is device ({format_bytes(size)} of tensors)")
    if device.type != "cuda":
        return DataPath("device", f"the data are tensors ({format_bytes(size)}), used where they are on the {device.type}")
    total = torch.cuda.get_device_properties(device).total_memory
    gpu_share = min(1.0, gpu_share)
    # Four trials on one GPU (gpus_per_worker 0.25) each kept a quarter of the GPU's memory of
    # data: all of it between them, with nothing left for their models.
    share = f"{DEVICE_MEMORY_SHARE:.0%} of the GPU's {format_bytes(total)}" + (
        f" x gpus_per_worker {gpu_share:g}" if gpu_share < 1 else "")
    if size <= DEVICE_MEMORY_SHARE * gpu_share * total:
        return DataPath("device", f"the data are tensors ({format_bytes(size)}), within {share}")
    return DataPath("loader", f"the data are tensors of {format_bytes(size)}, more than {share}")


def _data_bytes(workload: Workload) -> int:
    seen: dict[int, int] = {}
    for data in (workload.train_set, workload.val_set):
        parts = tensor_parts(data)
        for t in parts[0] if parts is not None else ():
            seen[id(t)] = t.numel() * t.element_size()
    return sum(seen.values())


class EpochPlan:
    """Which samples each micro-batch of this process holds, epoch by epoch: the one source of
    the sample order for both data paths.

    Logical rank r of W reads the indices ``DistributedSampler(num_replicas=W, rank=r,
    shuffle=True, seed=seed)`` gives after ``set_epoch(epoch)`` (r, r+W, r+2W... of a seeded
    shuffle, padded); this process plays ranks ``first_rank .. first_rank + virtual_ranks - 1``.
    Each rank's indices are cut into micro-batches of ``batch_size`` in order (the last one
    short when it does not divide them), ``accum`` micro-batches to a step.

    Example:
        >>> plan = EpochPlan(10, world_size=2, first_rank=0, virtual_ranks=2, batch_size=2, accum=2, seed=0)
        >>> plan.micro_sizes, plan.steps_per_epoch, plan.step_order(0)
        ([2, 2, 1], 2, [(0, 0, 2), (1, 0, 2), (0, 1, 2), (1, 1, 2)])
    """

    def __init__(self, dataset: Any, *, world_size: int, first_rank: int, virtual_ranks: int, batch_size: int,
                 accum: int, seed: int) -> None:
        self.samples = dataset if isinstance(dataset, int) else len(dataset)
        self.world_size, self.seed = world_size, seed
        self.ranks = range(first_rank, first_rank + virtual_ranks)
        self.batch_size = batch_size
        self.accum = accum
        self.virtual_ranks = virtual_ranks
        # DistributedSampler (drop_last=False) pads, so every logical rank gets as many.
        per_rank = math.ceil(self.samples / world_size)
        self.micro_sizes = [min(batch_size, per_rank - i) for i in range(0, per_rank, batch_size)]
        self.steps_per_epoch = math.ceil(len(self.micro_sizes) / accum)

    def step_order(self, step: int) -> list[tuple[int, int, int]]:
        """The step's micro-batches as ``(virtual rank, index in the rank's epoch, size)``, in
        the order the loop runs them: each micro-batch index, then each virtual rank."""
        micro = range(step * self.accum, min((step + 1) * self.accum, len(self.micro_sizes)))
        return [(v, i, self.micro_sizes[i]) for i in micro for v in range(self.virtual_ranks)]

    def index_tensors(self, epoch: int) -> list[torch.Tensor]:
        """Each virtual rank's sample indices for ``epoch``, as tensors on the CPU: what
        ``DistributedSampler`` yields after ``set_epoch(epoch)`` (its seeded permutation, padded
        by repeating it, every W-th from the rank), computed on tensors: through its Python
        lists the order costs many times the permutation itself (docs/benchmarks.md, section 11),
        paid while the device waits at each epoch's start."""
        n, W = self.samples, self.world_size
        total = math.ceil(n / W) * W
        generator = torch.Generator()
        generator.manual_seed(self.seed + epoch)
        order = torch.randperm(n, generator=generator)
        if total > n:
            order = torch.cat([order, order.repeat(math.ceil((total - n) / n))[:total - n]])
        return [order[rank:total:W] for rank in self.ranks]

    def indices(self, epoch: int) -> list[list[int]]:
        """Each virtual rank's sample indices for ``epoch``."""
        return [t.tolist() for t in self.index_tensors(epoch)]

    def batches(self, epoch: int) -> Iterator[list[int]]:
        """The epoch's micro-batches as index lists, in the loop's order."""
        indices, b = self.indices(epoch), self.batch_size
        for step in range(self.steps_per_epoch):
            for v, i, n in self.step_order(step):
                yield indices[v][i * b: i * b + n]

    def __len__(self) -> int:
        return len(self.micro_sizes) * self.virtual_ranks


class Feed(Protocol):
    """A trial's batches, whichever path brings them."""

    path: DataPath

    def epoch(self, epoch: int) -> Iterator[Any]:
        """The epoch's training micro-batches of this process, in the loop's order: on the device,
        except a hooks workload's, which its model moves itself."""

    eval_batch: int

    def evaluation(self) -> Iterable[Any]:
        """The validation set in batches of ``eval_batch`` (``eval_batch_size``), on the device."""

    def close(self) -> None:
        """Stop whatever the feed started (loader worker processes)."""


# ---- the device path ------------------------------------------------------------------------


class _OnDevice:
    """A data set's tensors on the device, and its transform."""

    def __init__(self, tensors: tuple[torch.Tensor, ...], transform: Transform | None) -> None:
        self.tensors = tensors
        self.transform = transform

    def gather(self, index: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # index_select copies: the model gets a batch of its own, never a view of the kept data.
        batch = tuple(t.index_select(0, index) for t in self.tensors)
        return tuple(self.transform(*batch)) if self.transform is not None else batch


class _DeviceFeed:
    def __init__(self, train: _OnDevice, val: _OnDevice, plan: EpochPlan, device: torch.device,
                 path: DataPath) -> None:
        self.train, self.val, self.plan, self.device, self.path = train, val, plan, device, path
        self.eval_batch = eval_batch_size(plan.batch_size)

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, ...]]:
        # A few thousand ints per rank, put on the device once an epoch; every micro-batch is
        # then a slice of them and a gather, queued without waiting for the device.
        b = self.plan.batch_size
        indices = [rank.to(self.device) for rank in self.plan.index_tensors(epoch)]
        for step in range(self.plan.steps_per_epoch):
            for v, i, n in self.plan.step_order(step):
                yield self.train.gather(indices[v][i * b: i * b + n])

    def evaluation(self) -> Iterator[tuple[torch.Tensor, ...]]:
        size = int(self.val.tensors[0].shape[0])
        everything = torch.arange(size, device=self.device)
        for start in range(0, size, self.eval_batch):
            yield self.val.gather(everything[start: start + self.eval_batch])

    def close(self) -> None:
        pass


# ---- the loader path ------------------------------------------------------------------------


@dataclass(frozen=True)
class LoaderSettings:
    """The loader path's ``DataLoader`` settings, resolved for one rank (``workload.loader``).

    Example:
        >>> LoaderSettings.resolve({"workers": None}, torch.device("cpu"), cpus=4)
        LoaderSettings(workers=0, pin_memory=False, prefetch_factor=2, persistent_workers=True)
    """

    workers: int
    pin_memory: bool
    prefetch_factor: int
    persistent_workers: bool

    @classmethod
    def resolve(cls, spec: Mapping[str, Any], device: torch.device, cpus: int) -> LoaderSettings:
        """``auto`` (``None``) made concrete: workers are the rank's other CPUs on CUDA
        (``cpus - 1``, at most 8) and none on the CPU, whose cores train; memory is pinned
        for CUDA only."""
        cuda = device.type == "cuda"
        workers = spec.get("workers")
        if workers is None:
            workers = min(_AUTO_WORKERS_CAP, max(cpus - 1, 0)) if cuda else 0
        pin = spec.get("pin_memory")
        # Pinning needs an accelerator to pin for (torch warns and ignores it without one).
        pin = cuda if pin is None else bool(pin) and cuda
        return cls(int(workers), pin, int(spec.get("prefetch_factor") or 2),
                   bool(spec.get("persistent_workers", True)))


class _PlannedBatches(Sampler[list[int]]):
    """The plan's micro-batches as a ``batch_sampler``: the loader fetches exactly those
    indices, in the loop's order, one epoch per iteration (``epoch`` set before each)."""

    def __init__(self, plan: EpochPlan) -> None:
        self.plan = plan
        self.epoch = 0

    def __iter__(self) -> Iterator[list[int]]:
        return self.plan.batches(self.epoch)

    def __len__(self) -> int:
        return len(self.plan)


class _LoaderFeed:
    def __init__(self, workload: Workload, plan: EpochPlan, device: torch.device, settings: LoaderSettings,
                 seed: int, path: DataPath) -> None:
        self.device, self.settings, self.path = device, settings, path
        self.hooks = workload.hooks is not None
        self.sampler = _PlannedBatches(plan)
        self.eval_batch = eval_batch_size(plan.batch_size)
        collate = workload.hooks.collate_fn if workload.hooks is not None else None
        self.train = self._loader(workload.train_set, seed, batch_sampler=self.sampler, collate_fn=collate)
        self.val = self._loader(workload.val_set, seed, batch_size=self.eval_batch) if workload.hooks is None else None
        self._live: dict[int, Iterator[Any]] = {}

    def _loader(self, dataset: Dataset[Any], seed: int, **kwargs: Any) -> DataLoader[Any]:
        s = self.settings
        workers = s.workers > 0
        return DataLoader(
            dataset, num_workers=s.workers, pin_memory=s.pin_memory,
            persistent_workers=s.persistent_workers and workers, prefetch_factor=s.prefetch_factor if workers else None,
            worker_init_fn=_die_with_rank if workers else None,
            multiprocessing_context=_START_METHOD if workers else None,
            # Each iterator draws its workers' base seed from this generator, not from torch's
            # global one: the model's random draws (dropout) are then the same on both paths.
            generator=torch.Generator().manual_seed(seed), **kwargs)

    def _iterate(self, loader: DataLoader[Any]) -> Iterator[Any]:
        with warnings.catch_warnings():
            # Python 3.12 warns on every fork of a process with threads (a rank has gloo's and
            # the pin thread's); the workers only read the dataset and exit with the rank.
            warnings.filterwarnings("ignore", message=r".*fork\(\) may lead to deadlocks", category=DeprecationWarning)
            it = iter(loader)
        self._live[id(it)] = it  # a persistent loader hands out the same iterator every epoch
        return it

    def _moved(self, batch: Any) -> Any:
        if self.hooks:
            return batch  # the workload's model moves its own batches
        return tuple(t.to(self.device, non_blocking=self.settings.pin_memory) for t in batch)

    def epoch(self, epoch: int) -> Iterator[Any]:
        self.sampler.epoch = epoch
        for batch in self._iterate(self.train):
            yield self._moved(batch)

    def evaluation(self) -> Iterator[Any]:
        if self.val is None:
            raise WorkloadError("a workload with hooks validates itself")
        for batch in self._iterate(self.val):
            yield self._moved(batch)

    def close(self) -> None:
        # Loader workers never outlive their trial: the rank process is reused by the next one.
        for it in self._live.values():
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
        self._live.clear()
        for loader in (self.train, self.val):
            if loader is not None:
                loader._iterator = None  # a persistent iterator, shut down above


#: Loader workers are forked from the rank process (its imports and data are already there:
#: no second import of torch, no pickled dataset); where fork is not offered, the default.
_START_METHOD = "fork" if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods() \
    else None


def _die_with_rank(_worker_id: int) -> None:
    """In each loader worker: ask Linux to kill it when its rank process ends, however it ends
    (a rank that fails leaves with ``os._exit``; the pool SIGKILLs a stuck one)."""
    die_with_parent()


# ---- either ---------------------------------------------------------------------------------


DeviceCopy = Callable[[tuple[torch.Tensor, ...], torch.device], tuple[torch.Tensor, ...]]


def copy_to(tensors: tuple[torch.Tensor, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
    """The tensors on ``device`` (the same objects where they already are); a tensor given twice
    is copied once."""
    copies: dict[int, torch.Tensor] = {}
    for t in tensors:
        if id(t) not in copies:
            copies[id(t)] = t.to(device)
    return tuple(copies[id(t)] for t in tensors)


def open_feed(path: DataPath, workload: Workload, plan: EpochPlan, device: torch.device, *,
              loader: Mapping[str, Any], cpus: int, seed: int, to_device: DeviceCopy = copy_to) -> Feed:
    """The trial's batches along ``path``. ``to_device`` puts tensors on the device (the warm
    process's kept copies, ``hpsearch.trials.rank.data_cache``, or a fresh copy)."""
    if path.kind == "device":
        train, val = tensor_parts(workload.train_set), tensor_parts(workload.val_set)
        if train is None or val is None:
            raise WorkloadError("the device path needs tensor data")  # choose_data_path said so first
        columns = to_device(train[0] + val[0], device)
        return _DeviceFeed(_OnDevice(columns[:len(train[0])], train[1]), _OnDevice(columns[len(train[0]):], val[1]),
                           plan, device, path)
    return _LoaderFeed(workload, plan, device, LoaderSettings.resolve(loader, device, cpus), seed, path)

