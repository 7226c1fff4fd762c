"""``workload.lightning``: a LightningModule and LightningDataModule as the workload.

```yaml
workload:
  lightning: {module: "pkg.mod:Model", datamodule: "pkg.mod:Data"}
```

is the built-in workload ``lightning`` with those two classes among its options
(``hpsearch.trials.workloads.lightning``). The section is checked here, with the file's line
numbers: the class references' form, the metric names, and ``strategy``, which says what a
Lightning user would otherwise pass to the Trainer: hpsearch trains with DDP, so only the DDP
strategies are taken, and the others are refused with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpsearch import record
from hpsearch.search_spaces._checks import check_keys, check_mapping, check_one_of, check_string, fail, show
from hpsearch.search_spaces._document import Document, KeyPath

__all__ = ["LIGHTNING_KEYS", "LIGHTNING_STRATEGIES", "REFUSED_STRATEGIES", "merge_options", "parse_lightning"]

LIGHTNING_KEYS = ("module", "datamodule", record.VAL_LOSS, record.VAL_ACCURACY, "loss_reduction", "strategy")

#: The Trainer strategies whose training hpsearch's trials reproduce: DDP, however its processes
#: start (hpsearch starts them itself: warm rank processes, one per device).
LIGHTNING_STRATEGIES = ("ddp", "auto", "ddp_spawn", "ddp_fork", "ddp_notebook")

#: Strategies hpsearch does not run, each with why.
REFUSED_STRATEGIES = {
    "dp": "DataParallel splits one batch across the devices (effective batch b), while hpsearch's trials are DDP "
          "(effective batch b x W x A, the unit of its LR rules): use strategy ddp and a per_device_batch_size of "
          "your DP batch / W",
    "deepspeed": "DeepSpeed shards optimizer state and parameters across devices, and hpsearch's DDP trials "
                 "keep a whole replica per rank; search the batch and LR with ddp on a model that fits one device",
    "fsdp": "FSDP shards parameters across devices, and hpsearch's DDP trials keep a whole replica per rank; "
            "search the batch and LR with ddp on a model that fits one device",
    "ddp_find_unused_parameters_true": "hpsearch's DDP expects every parameter to get a gradient in every step; "
                                       "make training_step use every parameter (or freeze the unused ones)",
}


def _refused(strategy: str) -> str | None:
    for name, why in REFUSED_STRATEGIES.items():
        if strategy == name or strategy.startswith(name + "_"):
            return why
    return None


def parse_lightning(doc: Document, value: Any, path: KeyPath) -> dict[str, Any]:
    """The options the ``lightning`` workload gets from ``workload.lightning`` (every key but
    ``strategy``, which only has to be one hpsearch runs)."""
    section = check_mapping(doc, value, path)
    check_keys(doc, section, path, LIGHTNING_KEYS)
    options: dict[str, Any] = {}
    for key, kind in (("module", "LightningModule"), ("datamodule", "LightningDataModule")):
        if section.get(key) is None:
            fail(doc, path + (key,), f"workload.lightning needs '{key}': the {kind} class as 'package.module:Class'")
        ref = check_string(doc, section[key], path + (key,))
        module, _, attr = ref.partition(":")
        if not (module and attr.isidentifier() and all(p.isidentifier() for p in module.split("."))):
            fail(doc, path + (key,), f"{key} must be 'package.module:Class', got {show(ref)}")
        options[key] = ref
    for key in (record.VAL_LOSS, record.VAL_ACCURACY):
        if section.get(key) is not None:
            options[key] = check_string(doc, section[key], path + (key,))
    if section.get("loss_reduction") is not None:
        options["loss_reduction"] = check_one_of(doc, section["loss_reduction"], path + ("loss_reduction",),
                                                 ("mean", "sum"))
    strategy = section.get("strategy")
    if strategy is not None:
        strategy = check_string(doc, strategy, path + ("strategy",))
        why = _refused(strategy)
        if why:
            fail(doc, path + ("strategy",), f"strategy {show(strategy)} is not supported: {why}")
        check_one_of(doc, strategy, path + ("strategy",), LIGHTNING_STRATEGIES)
    return options


def merge_options(doc: Document, lightning: Mapping[str, Any], options: Mapping[str, Any],
                  path: KeyPath) -> dict[str, Any]:
    """``workload.options`` with the section's entries, which may not also be set there."""
    for key in lightning:
        if key in options:
            fail(doc, path + ("options", key), f"'{key}' is set in workload.lightning; remove it from "
                                               "workload.options")
    return {**lightning, **options}
