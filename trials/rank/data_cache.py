"""The workload data a warm rank process keeps from one trial to the next.

A grid of trials of one workload trains the same data again and again; building them costs each
trial seconds (``teacher_mlp`` with 65,536 samples: about 4 s on one core), and on a GPU moving
them to the device again. A rank process is reused by trial after trial
(``hpsearch.trials.rank.process``), so it keeps what it built:

- the data of a factory that declares them (``@builds_data``: the built-ins do), keyed by its
  data builder and the values of its data options; the model is still built fresh and seeded
  every trial;
- the device copies of kept tensors (the device path, ``hpsearch.trials.rank.data``), for as long as
  the tensors they copy are kept.

Memory is bounded: at most ``MAX_ENTRIES`` data sets and ``MAX_BYTES`` of their tensors in a
process, least recently used evicted first (a data set larger than that alone is built, used
and let go); device copies at most ``DEVICE_MEMORY_SHARE`` of the memory the rank has on the
device (the GPU's, or the rank's ``gpus_per_worker`` share of it), also least recently used first. A trial whose memory is capped (``resources.memory_per_worker``) or that
runs on a GPU keeps only its own data set (``keep_only_for``): what it measures and what it runs
out of are its own. ``workload.keep_data: false`` turns it all off: every trial builds its
data and copies them anew, as without a warm process.

Keeping never changes a result: the data builder runs with the random generators put back
(``build_data``), and what it returns is what the factory would have built.
"""

from __future__ import annotations

import json
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from hpsearch.trials.rank.data import DEVICE_MEMORY_SHARE, copy_to
from hpsearch.trials.workloads.base import (
    accepted_options,
    build_data,
    check_options,
    check_workload,
    data_builder,
    resolve_workload,
)

if TYPE_CHECKING:
    from hpsearch.trials.workloads.base import Workload

__all__ = ["MAX_BYTES", "MAX_ENTRIES", "DataCache", "keep_only_for", "kept_data", "warm_workload"]

#: Data sets a rank process keeps at most.
MAX_ENTRIES = 4
#: Bytes of kept tensors a rank process holds at most (data of other kinds count as 0).
MAX_BYTES = 4 * 2**30

#: What a trial's ``data_cache`` attr says about its data.
KEPT, BUILT, OFF, NOT_DECLARED = "kept", "built", "off", "not declared"


@dataclass
class _Entry:
    load: Callable[[Mapping[str, Any]], Any]
    data: Any
    nbytes: int


class DataCache:
    """Built data and device copies, least recently used evicted first.

    Args:
        max_entries: Data sets kept at most.
        max_bytes: Bytes of their tensors kept at most.
        device_share: Share of a CUDA device's memory its kept copies may take.
    """

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES,
                 device_share: float = DEVICE_MEMORY_SHARE) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.device_share = device_share
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        # (device, id of the kept tensor) -> its copy; dropped when the kept tensor dies.
        self._copies: OrderedDict[tuple[str, int], torch.Tensor] = OrderedDict()

    def data(self, load: Callable[[Mapping[str, Any]], Any], options: Mapping[str, Any]) -> tuple[Any, str]:
        """What ``load(options)`` returns, kept (``"kept"``) or built now (``"built"``)."""
        key = _key(load, options)
        entry = self._entries.get(key)
        # The same function object: a module imported again (another trial's of the same name)
        # has a new one, and its data are built anew.
        if entry is not None and entry.load is load:
            self._entries.move_to_end(key)
            return entry.data, KEPT
        data = build_data(load, options)
        size = _nbytes(data)
        self._entries.pop(key, None)
        if size <= self.max_bytes:
            self._entries[key] = _Entry(load, data, size)
            while len(self._entries) > self.max_entries or self.bytes > self.max_bytes:
                self._entries.popitem(last=False)
        return data, BUILT

    @property
    def bytes(self) -> int:
        """Bytes of tensors the kept data sets hold."""
        return sum(e.nbytes for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def on_device(self, tensors: tuple[torch.Tensor, ...], device: torch.device,
                  gpu_share: float = 1.0) -> tuple[torch.Tensor, ...]:
        """The tensors on ``device``: the copies made for an earlier trial where the tensors are
        the same objects, new copies (kept for the next trial) where not. ``gpu_share``: the
        share of the GPU the rank has (``resources.gpus_per_worker`` below 1); its kept copies
        take at most ``device_share`` of that share's memory."""
        if device.type != "cuda":
            return copy_to(tensors, device)  # the tensors themselves: nothing to keep
        where = str(device)
        wanted = {id(t): t for t in tensors}
        new = sum(t.numel() * t.element_size() for i, t in wanted.items() if (where, i) not in self._copies)
        limit = self.device_share * min(1.0, gpu_share) * torch.cuda.get_device_properties(device).total_memory
        for key in list(self._copies):
            if self._device_bytes(where) + new <= limit:
                break
            if key[0] == where and key[1] not in wanted:
                del self._copies[key]
        out = []
        for t in tensors:
            key = (where, id(t))
            if key not in self._copies:
                self._copies[key] = t.to(device)
                # The copy lives as long as the tensor it copies: an evicted data set frees its
                # device memory with it, and an id is never reused while its copy is kept.
                weakref.finalize(t, self._copies.pop, key, None)
            self._copies.move_to_end(key)
            out.append(self._copies[key])
        return tuple(out)

    def _device_bytes(self, where: str) -> int:
        return sum(c.numel() * c.element_size() for (d, _), c in self._copies.items() if d == where)

    def keep_only(self, load: Callable[[Mapping[str, Any]], Any] | None, options: Mapping[str, Any]) -> None:
        """Drop every kept data set but ``load(options)``'s (all of them where ``load`` is
        ``None``), and with them their device copies."""
        key = None if load is None else _key(load, options)
        for k in list(self._entries):
            if k != key:
                del self._entries[k]

    def forget(self, modules: Iterable[str]) -> None:
        """Drop what the functions of these modules built (the worker forgets modules a trial
        imported from its own path: the next trial may bring other code under their names)."""
        gone = set(modules)
        for key, entry in list(self._entries.items()):
            if getattr(entry.load, "__module__", None) in gone:
                del self._entries[key]

    def clear(self) -> None:
        """Drop everything kept."""
        self._entries.clear()
        self._copies.clear()


def _key(load: Callable[[Mapping[str, Any]], Any], options: Mapping[str, Any]) -> tuple[str, str]:
    return f"{getattr(load, '__module__', '')}:{getattr(load, '__qualname__', repr(load))}", _canonical(options)


def _canonical(options: Mapping[str, Any]) -> str:
    """The data options as one string key (equal values, equal keys: ``1`` and ``1.0`` differ,
    as they may to the builder)."""
    return json.dumps({k: [type(v).__name__, v] for k, v in options.items()}, sort_keys=True, default=repr)


def _nbytes(data: Any, seen: set[int] | None = None) -> int:
    """Bytes of the tensors in ``data`` (datasets, tuples, lists, dicts of them), each once."""
    seen = set() if seen is None else seen
    if id(data) in seen:
        return 0
    seen.add(id(data))
    if isinstance(data, torch.Tensor):
        return data.numel() * data.element_size()
    if isinstance(data, Mapping):
        return sum(_nbytes(v, seen) for v in data.values())
    if isinstance(data, (list, tuple)):
        return sum(_nbytes(v, seen) for v in data)
    tensors = getattr(data, "tensors", None)
    return _nbytes(tensors, seen) if isinstance(tensors, (list, tuple)) else 0


_KEPT = DataCache()


def kept_data() -> DataCache:
    """This process's kept data."""
    return _KEPT


def keep_only_for(name: str, options: Mapping[str, Any]) -> None:
    """Let go of the data kept for other trials than one of workload ``name`` with ``options``,
    before its memory is measured: a trial whose memory is capped, or that runs on a GPU,
    must not run out for data it does not use, nor record them in its peak (and the search
    learn a ceiling from them).

    Raises:
        WorkloadError: as ``hpsearch.trials.workloads.base.resolve_workload``.
    """
    builder = data_builder(resolve_workload(name))
    if builder is None:
        _KEPT.keep_only(None, {})
    else:
        _KEPT.keep_only(builder.load, builder.select(options))


def warm_workload(name: str, options: Mapping[str, Any], *, keep: bool) -> tuple[Workload, str]:
    """Build the workload ``name`` with ``options``, its data from this process's kept data where
    its factory declares them (``builds_data``) and ``keep`` is on; returns the workload and
    how its data came (``kept``, ``built``, ``off`` or ``not declared``).

    Raises:
        WorkloadError: as ``hpsearch.trials.workloads.base.build_workload``.
    """
    factory = resolve_workload(name)
    builder = data_builder(factory)
    if builder is None:
        return check_workload(factory(dict(options)), name), NOT_DECLARED
    taken = accepted_options(factory, options)
    if taken is not None:
        check_options(options, set(taken))  # a misspelt option, before any data are built
    if keep:
        data, how = _KEPT.data(builder.load, builder.select(options))
    else:
        data, how = build_data(builder.load, builder.select(options)), OFF
    # A factory declared with builds_data takes its data as a second argument.
    with_data: Any = factory
    return check_workload(with_data(dict(options), data), name), how
