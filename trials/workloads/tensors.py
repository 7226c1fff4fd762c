"""``TensorData``: a workload's data held as tensors, with a transform per batch; what the
device path of the DDP loop keeps on the device and gathers there by index
(``hpsearch.trials.rank.data``, docs/workloads.md "Data as tensors").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.utils.data import Dataset, TensorDataset

__all__ = ["TensorData", "Transform", "tensor_parts"]

Transform = Callable[..., Sequence[torch.Tensor]]


class TensorData(Dataset[tuple[torch.Tensor, ...]]):
    """A map-style dataset held as tensors that share their first dimension, with an optional
    transform: the data contract of the device path for data a ``TensorDataset`` cannot hold
    as the model takes it.

    Sample ``i`` is ``transform(*(t[i] for t in tensors))``; on the device path the transform
    runs on a whole gathered batch instead, on the device, so it must treat each sample on its
    own (a dtype conversion, a scaling, a normalisation by fixed constants; no batch
    statistics, no randomness): then a batch is the stack of its samples, bit for bit on the
    CPU. The data stay compact where they live (uint8 images: a quarter of float32's bytes).

    Args:
        *tensors: The columns, e.g. ``(images, labels)``.
        transform: ``transform(*columns) -> columns``, applied to one sample or one batch.

    Example:
        >>> images = torch.tensor([[0, 255], [51, 102]], dtype=torch.uint8)
        >>> data = TensorData(images, torch.tensor([0, 1]), transform=lambda x, y: (x.float() / 255, y))
        >>> data[1]
        (tensor([0.2000, 0.4000]), tensor(1))
    """

    def __init__(self, *tensors: torch.Tensor, transform: Transform | None = None) -> None:
        if not tensors:
            raise ValueError("TensorData needs at least one tensor")
        sizes = {int(t.shape[0]) for t in tensors}
        if len(sizes) != 1:
            raise ValueError(f"TensorData's tensors must share their first dimension, got sizes {sorted(sizes)}")
        self.tensors = tuple(tensors)
        self.transform = transform

    def __len__(self) -> int:
        return int(self.tensors[0].shape[0])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        sample = tuple(t[index] for t in self.tensors)
        return tuple(self.transform(*sample)) if self.transform is not None else sample


def tensor_parts(dataset: object) -> tuple[tuple[torch.Tensor, ...], Transform | None] | None:
    """The tensors and transform of a dataset the device path can hold, or ``None``: a
    ``TensorDataset`` or ``TensorData`` whose class keeps their own ``__getitem__`` (a subclass
    that changes what a sample is cannot be gathered by index)."""
    if isinstance(dataset, TensorData) and type(dataset).__getitem__ is TensorData.__getitem__:
        return dataset.tensors, dataset.transform
    if isinstance(dataset, TensorDataset) and type(dataset).__getitem__ is TensorDataset.__getitem__:
        return tuple(dataset.tensors), None
    return None


