"""The workload contract: what a trial trains.

A workload factory takes the ``workload.options`` mapping from the space file and returns a
``Workload``. Built-ins are registered by name; a user's own factory is named as
``"my_pkg.module:function"`` and gets the same DDP loop, scaling rules and measurements.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from hpsearch.trials.errors import WorkloadError

if TYPE_CHECKING:
    import torch
    from torch.utils.data import Dataset

__all__ = ["Workload", "WorkloadFactory", "builtin_workloads", "check_options", "resolve_workload"]


@dataclass(frozen=True)
class Workload:
    """A model, its data and its loss.

    Attributes:
        model: A freshly initialised ``torch.nn.Module`` (the engine seeds torch before calling
            the factory, so every rank builds the same weights).
        train_set: Map-style dataset of ``(input, target)`` pairs, sharded by
            ``DistributedSampler``.
        val_set: Map-style dataset evaluated after every epoch.
        loss_fn: ``loss_fn(outputs, targets) -> scalar tensor``.
        loss_reduction: ``"mean"`` or ``"sum"`` over the batch: the engine needs it to make a
            B-sample step's gradient equal one process's gradient on those B samples.
        num_classes: For classification workloads (accuracy is computed by argmax); ``None``
            for regression, where ``val_accuracy`` is not recorded.
    """

    model: torch.nn.Module
    train_set: Dataset[Any]
    val_set: Dataset[Any]
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    loss_reduction: Literal["mean", "sum"] = "mean"
    num_classes: int | None = None


WorkloadFactory = Callable[[Mapping[str, Any]], Workload]

_PLUGIN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def check_options(options: Mapping[str, Any], known: set[str]) -> None:
    """Reject option names a workload does not take, listing the ones it does.

    Raises:
        WorkloadError: ``options`` holds a name outside ``known``.
    """
    unknown = set(options) - known
    if unknown:
        raise WorkloadError(f"unknown workload options {sorted(unknown)}; this workload takes {sorted(known)}")


def builtin_workloads() -> dict[str, WorkloadFactory]:
    """Name -> factory of the workloads shipped with hpsearch."""
    from hpsearch.trials.workloads import cifar10, digits, teacher

    return {
        "digits_cnn": digits.digits_cnn,
        "digits_mlp": digits.digits_mlp,
        "teacher_mlp": teacher.teacher_mlp,
        "cifar10": cifar10.cifar10,
    }


def resolve_workload(name: str) -> WorkloadFactory:
    """The factory for a built-in name or a ``"pkg.module:function"`` plugin reference.

    Raises:
        WorkloadError: unknown built-in, module not importable, or attribute missing.

    Example:
        >>> resolve_workload("digits_cnn").__name__
        'digits_cnn'
    """
    builtins = builtin_workloads()
    if name in builtins:
        return builtins[name]
    if not _PLUGIN.match(name):
        raise WorkloadError(
            f"workload must be one of {', '.join(sorted(builtins))} or 'pkg.module:function', got {name!r}"
        )
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise WorkloadError(f"cannot import workload module {module_name!r}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise WorkloadError(f"module {module_name!r} has no callable {attr!r}")
    return cast("Callable[[Mapping[str, Any]], Workload]", factory)
