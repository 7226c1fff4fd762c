"""A LightningModule and its LightningDataModule as a workload, trained by hpsearch's DDP loop.

A space names the two classes (``workload: {lightning: {module: "pkg.mod:Model", datamodule:
"pkg.mod:Data"}}``); every other workload option and workload parameter goes to whichever of
their ``__init__`` takes it, so a module's own settings are searched like any workload's. The
engine then trains the module exactly as it trains any workload:

- the module is the model, wrapped so that DDP's forward calls ``training_step`` (as Lightning's
  own DDP strategy does), whose loss is the micro-batch's loss;
- the datamodule's ``train_dataloader()`` and ``val_dataloader()`` give the data sets (and their
  ``collate_fn``); the engine replaces the batch size (b per rank) and the sampler (a seeded
  ``DistributedSampler`` shuffle), as Lightning's Trainer replaces the sampler under DDP;
- ``configure_optimizers()`` builds the optimizer and the engine sets the trial's LR (the rule,
  warmup and schedule) on every parameter group at every step;
- rank 0 validates with ``validation_step`` and records what it logs under the names the
  engine's record uses (``val_loss``, ``val_accuracy``), averaged over the validation set and
  weighted by batch size, as Lightning does for a value logged in validation.

Why not run Lightning's Trainer inside the trial: the Trainer launches and owns its own process
group, while a trial's ranks are warm processes the engine puts in a fresh group per trial; the
engine's emulated ranks, exact accumulation, ``no_sync`` steps and measurements (communication
share, noise scale) would each need a Trainer callback doing what the loop already does. The
loop only needs a loss per micro-batch, an optimizer and a validation pass, which a
LightningModule defines. docs/workloads.md, "Lightning", says which Lightning features this
supports and which it refuses.
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, SequentialSampler, Subset

from hpsearch import record
from hpsearch.trials.errors import WorkloadError
from hpsearch.trials.workloads.base import Workload, WorkloadHooks, import_user_module, takes_options_from

__all__ = ["RESERVED_OPTIONS", "lightning", "lightning_options"]

#: Options the workload itself reads; every other option goes to the classes' ``__init__``.
RESERVED_OPTIONS = ("module", "datamodule", record.VAL_LOSS, record.VAL_ACCURACY, "loss_reduction")

#: Options that would hand the module something the engine sets itself.
_ENGINE_OWNED = {
    "lr": "the trial's LR is base_lr scaled by lr_rule, set on the optimizer of configure_optimizers at every step",
    "learning_rate": "the trial's LR is base_lr scaled by lr_rule, set on the optimizer of configure_optimizers "
                     "at every step",
    "batch_size": "the batch per rank is the parameter per_device_batch_size; hpsearch sets it on the data loaders",
}

_CLASS_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

#: What each class must define, and how the message says to add it.
_MODULE_NEEDS = {
    "training_step": "def training_step(self, batch, batch_idx) returning the batch's loss",
    "validation_step": "def validation_step(self, batch, batch_idx) calling self.log(\"val_loss\", loss)",
    "configure_optimizers": "def configure_optimizers(self) returning one torch.optim optimizer",
}
_DATAMODULE_NEEDS = {
    "train_dataloader": "def train_dataloader(self) returning a torch DataLoader over a map-style dataset",
    "val_dataloader": "def val_dataloader(self) returning a torch DataLoader over a map-style dataset",
}

#: How many validation samples the factory runs through validation_step to see what it logs.
_PROBE_SAMPLES = 4
_EVAL_BATCH = 1024  # when the validation loader has no batch size of its own


@dataclass(frozen=True)
class _Classes:
    """The two classes a space names, and the ``__init__`` arguments each takes (``None``: it
    takes ``**kwargs``, so any name)."""

    module: type[Any]
    datamodule: type[Any]
    module_args: frozenset[str] | None
    datamodule_args: frozenset[str] | None


def _bases() -> tuple[tuple[type[Any], ...], tuple[type[Any], ...]]:
    """The LightningModule and LightningDataModule classes of whichever Lightning packages are
    installed (``lightning`` and the older ``pytorch_lightning`` define separate classes)."""
    modules: list[type[Any]] = []
    datamodules: list[type[Any]] = []
    for package in ("lightning.pytorch", "pytorch_lightning"):
        try:
            pl = importlib.import_module(package)
        except ImportError:
            continue
        modules.append(pl.LightningModule)
        datamodules.append(pl.LightningDataModule)
    if not modules:
        raise WorkloadError("the lightning workload needs PyTorch Lightning: pip install 'hpsearch[lightning]'")
    return tuple(modules), tuple(datamodules)


def _load_class(options: Mapping[str, Any], key: str, bases: tuple[type[Any], ...], kind: str) -> type[Any]:
    ref = options.get(key)
    if ref is None:
        raise WorkloadError(f"the lightning workload needs workload.lightning.{key}: the {kind} class as "
                            "'package.module:Class'")
    if not isinstance(ref, str) or not _CLASS_REF.match(ref):
        raise WorkloadError(f"workload.lightning.{key} must be 'package.module:Class', got {ref!r}")
    module_name, _, attr = ref.partition(":")
    # Whatever the module raises at import (not only ImportError) is one line naming where.
    module = import_user_module(module_name, f"the {kind}'s module")
    cls = getattr(module, attr, None)
    if cls is None:
        raise WorkloadError(f"module {module_name!r} has no {attr!r} (workload.lightning.{key})")
    if not (isinstance(cls, type) and issubclass(cls, bases)):
        raise WorkloadError(f"workload.lightning.{key} {ref!r} must be a subclass of {kind}, got {cls!r}")
    return cls


def _missing(cls: type[Any], bases: tuple[type[Any], ...], needs: Mapping[str, str]) -> list[str]:
    """The methods of ``needs`` that ``cls`` does not define itself (it inherits Lightning's)."""
    base = next(b for b in bases if issubclass(cls, b))
    return [name for name in needs if getattr(cls, name, None) is getattr(base, name, None)]


def _init_args(cls: type[Any]) -> frozenset[str] | None:
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters if p.kind is not inspect.Parameter.VAR_POSITIONAL)


def _classes(options: Mapping[str, Any]) -> _Classes:
    """Import and check the classes ``options`` names.

    Raises:
        WorkloadError: a class cannot be imported, is not a LightningModule or
            LightningDataModule, or lacks a method the workload needs (the message says which
            to add).
    """
    module_bases, datamodule_bases = _bases()
    module = _load_class(options, "module", module_bases, "LightningModule")
    datamodule = _load_class(options, "datamodule", datamodule_bases, "LightningDataModule")
    for cls, bases, needs, key in ((module, module_bases, _MODULE_NEEDS, "module"),
                                   (datamodule, datamodule_bases, _DATAMODULE_NEEDS, "datamodule")):
        missing = _missing(cls, bases, needs)
        if missing:
            adds = "; ".join(needs[name] for name in missing)
            raise WorkloadError(f"{cls.__qualname__} (workload.lightning.{key}) does not define "
                                f"{', '.join(missing)}, which hpsearch trains with; add {adds}")
    return _Classes(module, datamodule, _init_args(module), _init_args(datamodule))


def lightning_options(options: Mapping[str, Any]) -> frozenset[str] | None:
    """The option names the ``lightning`` workload takes for these classes: its own
    (``RESERVED_OPTIONS``) and every ``__init__`` argument of the module and the datamodule;
    ``None`` when one of them takes ``**kwargs`` (any name goes).

    Raises:
        WorkloadError: as ``lightning`` would for these classes, before building anything.
    """
    classes = _classes(options)
    _refuse_engine_owned(options)
    if classes.module_args is None or classes.datamodule_args is None:
        return None
    return (frozenset(RESERVED_OPTIONS) | classes.module_args | classes.datamodule_args) - set(_ENGINE_OWNED)


def _refuse_engine_owned(options: Iterable[str]) -> None:
    for name in options:
        if name in _ENGINE_OWNED:
            raise WorkloadError(f"{name!r} cannot be a workload option of a lightning workload: "
                                f"{_ENGINE_OWNED[name]}; remove it")


def _route(classes: _Classes, init: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split the options between the two ``__init__``; a name both take goes to both."""
    _refuse_engine_owned(init)
    module_kw = {k: v for k, v in init.items() if classes.module_args is None or k in classes.module_args}
    data_kw = {k: v for k, v in init.items() if classes.datamodule_args is None or k in classes.datamodule_args}
    unknown = sorted(set(init) - set(module_kw) - set(data_kw))
    if unknown:
        taken = sorted((classes.module_args or frozenset()) | (classes.datamodule_args or frozenset()))
        raise WorkloadError(f"unknown workload options {unknown}: neither {classes.module.__qualname__} nor "
                            f"{classes.datamodule.__qualname__} takes them; their __init__ take {taken}, "
                            f"and the lightning workload {list(RESERVED_OPTIONS)}")
    return module_kw, data_kw


def _instantiate(cls: type[Any], kwargs: Mapping[str, Any], key: str) -> Any:
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    required = [p.name for p in parameters if p.default is inspect.Parameter.empty
                and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    absent = [name for name in required if name not in kwargs]
    if absent:
        owned = [name for name in absent if name in _ENGINE_OWNED]
        hint = (f"; give {', '.join(owned)} a default, since hpsearch sets it itself ({_ENGINE_OWNED[owned[0]]})"
                if owned else "; set them in workload.options or as parameters")
        raise WorkloadError(f"{cls.__qualname__}.__init__ (workload.lightning.{key}) needs {absent}{hint}")
    return _call(cls, f"{cls.__qualname__}()", **kwargs)


def _call(fn: Callable[..., Any], what: str, *args: Any, **kwargs: Any) -> Any:
    """Call a user's hook; what it raises comes back as a ``WorkloadError`` naming the hook."""
    try:
        return fn(*args, **kwargs)
    except WorkloadError:
        raise
    except Exception as exc:  # the user's code: say which hook failed, not a traceback
        raise WorkloadError(f"{what} raised {type(exc).__name__}: {exc}{_trainer_hint(exc)}") from exc


def _trainer_hint(exc: BaseException) -> str:
    """What to change when a hook reached for ``self.trainer`` (LightningModule raises a
    RuntimeError for it without a Trainer)."""
    if "not attached to a `Trainer`" in str(exc):
        return ("; hpsearch trains the module without a Trainer, so self.trainer does not exist: use the module's "
                "own attributes instead")
    return ""


def _loader(datamodule: Any, hook: str, *, train: bool) -> DataLoader[Any]:
    name = f"{type(datamodule).__qualname__}.{hook}()"
    loader = _call(getattr(datamodule, hook), name)
    if not isinstance(loader, DataLoader):
        raise WorkloadError(f"{name} must return one torch.utils.data.DataLoader, got {type(loader).__name__}")
    dataset = loader.dataset
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")) \
            or isinstance(dataset, torch.utils.data.IterableDataset):
        raise WorkloadError(f"{name} must load a map-style dataset (with __getitem__ and __len__): hpsearch "
                            f"shards it across ranks with DistributedSampler; got {type(dataset).__name__}")
    if train and not isinstance(loader.sampler, (RandomSampler, SequentialSampler)):
        raise WorkloadError(f"{name} uses a sampler of its own ({type(loader.sampler).__name__}); hpsearch "
                            "draws each rank's samples with a seeded DistributedSampler shuffle, so return a "
                            "DataLoader with shuffle=True and no sampler")
    return loader


def _batch_size(batch: Any) -> int:
    """The samples in a batch: the first dimension of the first tensor in it (Lightning's rule)."""
    if isinstance(batch, torch.Tensor):
        return 1 if batch.ndim == 0 else int(batch.shape[0])
    if isinstance(batch, Mapping):
        items: Iterable[Any] = batch.values()
    elif isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        items = batch
    else:
        items = ()
    for item in items:
        size = _batch_size(item)
        if size:
            return size
    return 0


def _is_metric(value: Any) -> bool:
    """A torchmetrics ``Metric`` (logged as an object: Lightning computes and resets it at the
    epoch's end)."""
    return callable(getattr(value, "compute", None)) and callable(getattr(value, "reset", None)) \
        and callable(getattr(value, "update", None))


_REDUCTIONS = {"mean": "mean", "avg": "mean", "sum": "sum", "max": "max", "min": "min"}


class _Logged:
    """One name's values over a validation epoch, reduced as ``self.log(reduce_fx=...)`` asks."""

    def __init__(self, reduce_fx: Any) -> None:
        name = reduce_fx if isinstance(reduce_fx, str) else getattr(reduce_fx, "__name__", "")
        if name not in _REDUCTIONS:
            raise WorkloadError(f"self.log(reduce_fx={reduce_fx!r}) is not supported by hpsearch; use mean, sum, "
                                "max or min")
        self.reduce = _REDUCTIONS[name]
        self.total = 0.0
        self.weight = 0.0
        self.values: list[float] = []
        self.metric: Any = None

    def add(self, value: Any, batch_size: int) -> None:
        if _is_metric(value):
            self.metric = value
            return
        number = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
        self.total += number * batch_size
        self.weight += batch_size
        self.values.append(number)

    def result(self) -> float:
        if self.metric is not None:
            value = float(self.metric.compute())
            self.metric.reset()
            return value
        if self.reduce == "mean":
            return self.total / self.weight if self.weight else math.nan
        if not self.values:
            return math.nan
        if self.reduce == "sum":
            return math.fsum(self.values)
        return max(self.values) if self.reduce == "max" else min(self.values)


class _Recorder:
    """Takes the module's ``self.log`` calls: kept during validation, dropped in training (where
    the engine records its own training loss)."""

    def __init__(self) -> None:
        self.active = False
        self.batch_size = 1
        self.logged: dict[str, _Logged] = {}

    def log(self, name: str, value: Any, *args: Any, reduce_fx: Any = "mean", batch_size: int | None = None,
            **kwargs: Any) -> None:
        if not self.active:
            return
        if isinstance(value, Mapping):
            raise WorkloadError(f"self.log({name!r}, ...) got a mapping; log one number, tensor or Metric per name")
        if name not in self.logged:
            self.logged[name] = _Logged(reduce_fx)
        self.logged[name].add(value, batch_size or self.batch_size)

    def start(self) -> None:
        self.active, self.batch_size, self.logged = True, 1, {}

    def finish(self) -> dict[str, float]:
        self.active = False
        return {name: logged.result() for name, logged in self.logged.items()}


def _batch_hooks(module: Any, datamodule: Any) -> Callable[[Any, torch.device], Any]:
    """Lightning's batch transfer: ``on_before_batch_transfer``, ``transfer_batch_to_device`` and
    ``on_after_batch_transfer``, each the datamodule's when it defines one, else the module's."""
    _, datamodule_bases = _bases()
    base = next(b for b in datamodule_bases if isinstance(datamodule, b))

    def pick(hook: str) -> Callable[..., Any]:
        overridden = getattr(type(datamodule), hook, None) is not getattr(base, hook, None)
        hook_of: Callable[..., Any] = getattr(datamodule if overridden else module, hook)
        return hook_of

    before, transfer, after = (pick(h) for h in ("on_before_batch_transfer", "transfer_batch_to_device",
                                                 "on_after_batch_transfer"))

    def move(batch: Any, device: torch.device) -> Any:
        return after(transfer(before(batch, 0), device, 0), 0)

    return move


class _TrainingStep(torch.nn.Module):
    """The model the engine trains: its forward is the module's ``training_step``, so that DDP's
    forward (which prepares the gradient reduction) runs it, as in Lightning's DDP strategy.
    Its state dict is the module's own: ``model.pt`` loads into the LightningModule."""

    def __init__(self, module: torch.nn.Module, move: Callable[[Any, torch.device], Any]) -> None:
        super().__init__()
        self.module = module
        self._move = move

    def forward(self, batch: Any, batch_idx: int) -> torch.Tensor:
        module: Any = self.module
        try:
            out = module.training_step(self._move(batch, module.device), batch_idx)
        except RuntimeError as exc:
            if not _trainer_hint(exc):
                raise
            raise WorkloadError(f"{type(module).__qualname__}.training_step raised RuntimeError: {exc}"
                                f"{_trainer_hint(exc)}") from exc
        if isinstance(out, Mapping):
            out = out.get("loss")
        if not isinstance(out, torch.Tensor):
            raise WorkloadError(
                f"{type(module).__qualname__}.training_step must return the batch's loss (a tensor, or a dict with "
                f"'loss'), got {type(out).__name__}: hpsearch needs a loss for every batch of every rank")
        return out

    def to(self, *args: Any, **kwargs: Any) -> _TrainingStep:
        # The module's own ``to`` keeps its ``device`` property (Lightning's) up to date.
        self.module.to(*args, **kwargs)
        return self

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)


def _single_optimizer(module: Any, out: Any) -> torch.optim.Optimizer:
    """The one optimizer ``configure_optimizers`` returned, or a ``WorkloadError`` that says why
    hpsearch cannot train with what it returned."""
    where = f"{type(module).__qualname__}.configure_optimizers()"
    schedulers: list[Any] = []
    if isinstance(out, Mapping):
        schedulers = [out["lr_scheduler"]] if out.get("lr_scheduler") is not None else []
        out = out.get("optimizer")
    elif isinstance(out, (list, tuple)) and len(out) == 2 and all(isinstance(o, (list, tuple)) for o in out):
        out, schedulers = list(out[0]), list(out[1])
    if isinstance(out, (list, tuple)):
        if len(out) != 1:
            raise WorkloadError(f"{where} returned {len(out)} optimizers; hpsearch trains with one (automatic "
                                "optimization of one loss): return a single optimizer")
        out = out[0]
        if isinstance(out, Mapping):
            return _single_optimizer(module, out)
    if schedulers:
        raise WorkloadError(f"{where} returned a learning-rate scheduler; hpsearch sets the LR at every step "
                            "from base_lr, lr_rule, scaling.warmup_epochs and scaling.schedule: return the "
                            "optimizer alone")
    if not isinstance(out, torch.optim.Optimizer):
        raise WorkloadError(f"{where} must return a torch.optim.Optimizer, got {type(out).__name__}")
    rates = {group["lr"] for group in out.param_groups}
    if len(rates) > 1:
        raise WorkloadError(f"{where} returned parameter groups with different learning rates {sorted(rates)}; "
                            "hpsearch sets the trial's one LR on every group")
    return out


def _validate(module: Any, dataset: Dataset[Any], batch_size: int, collate: Any, device: torch.device,
              move: Callable[[Any, torch.device], Any], recorder: _Recorder) -> dict[str, float]:
    """One validation epoch as Lightning runs it on one device: eval mode, no gradients,
    ``on_validation_epoch_start``, ``validation_step`` per batch, ``on_validation_epoch_end``;
    returns what the module logged, each name reduced over the epoch."""
    name = type(module).__qualname__
    was_training = module.training
    module.eval()
    recorder.start()
    try:
        with torch.no_grad():
            _call(module.on_validation_epoch_start, f"{name}.on_validation_epoch_start()")
            for batch_idx, batch in enumerate(DataLoader(dataset, batch_size=batch_size, collate_fn=collate)):
                recorder.batch_size = _batch_size(batch) or 1
                _call(module.validation_step, f"{name}.validation_step()", move(batch, device), batch_idx)
            recorder.batch_size = 1
            _call(module.on_validation_epoch_end, f"{name}.on_validation_epoch_end()")
        return recorder.finish()
    finally:
        recorder.active = False
        module.train(was_training)


@takes_options_from(lightning_options)
def lightning(options: Mapping[str, Any]) -> Workload:
    """A LightningModule and LightningDataModule as a workload (``workload: {lightning: ...}``).

    Options:
        module ("pkg.mod:Class"): the LightningModule; defines ``training_step``,
            ``validation_step`` (logging the validation loss) and ``configure_optimizers``.
        datamodule ("pkg.mod:Class"): the LightningDataModule; defines ``train_dataloader`` and
            ``val_dataloader``, each a DataLoader over a map-style dataset.
        val_loss (str, "val_loss"): the name the module logs its validation loss under.
        val_accuracy (str, "val_accuracy"): the name of its validation accuracy, if it logs one.
        loss_reduction ("mean" or "sum", "mean"): how ``training_step``'s loss reduces over the batch.
        any other: an ``__init__`` argument of the module, the datamodule, or both.

    Raises:
        WorkloadError: the classes cannot be loaded, lack what the workload needs, reject their
            options, or return something hpsearch cannot train with; the message says what to
            change.
    """
    classes = _classes(options)
    reduction = options.get("loss_reduction", "mean")
    if reduction not in ("mean", "sum"):
        raise WorkloadError(f"loss_reduction must be mean or sum, got {reduction!r}")
    loss_name = str(options.get(record.VAL_LOSS, record.VAL_LOSS))
    accuracy_name = str(options.get(record.VAL_ACCURACY, record.VAL_ACCURACY))
    module_kw, data_kw = _route(classes, {k: v for k, v in options.items() if k not in RESERVED_OPTIONS})

    # Built in the order of a plain Lightning script (module, datamodule, then the Trainer's
    # setup hooks), so the module draws the same initial weights from the seeded RNG.
    module = _instantiate(classes.module, module_kw, "module")
    datamodule = _instantiate(classes.datamodule, data_kw, "datamodule")
    mname = classes.module.__qualname__
    if not module.automatic_optimization:
        raise WorkloadError(f"{mname} sets automatic_optimization = False; hpsearch runs the backward pass and the "
                            "optimizer step itself (gradient accumulation, DDP's no_sync, the scaled LR), so "
                            "training_step must return the loss and leave optimization to it")
    for obj, hook, arg in ((datamodule, "prepare_data", ()), (module, "prepare_data", ()),
                           (datamodule, "setup", ("fit",)), (module, "setup", ("fit",)),
                           (module, "configure_model", ())):
        _call(getattr(obj, hook), f"{type(obj).__qualname__}.{hook}()", *arg)
    train_loader = _loader(datamodule, "train_dataloader", train=True)
    val_loader = _loader(datamodule, "val_dataloader", train=False)
    move = _batch_hooks(module, datamodule)
    recorder = _Recorder()
    # The module logs through us: without a Trainer, LightningModule.log only warns.
    module.log = recorder.log
    _single_optimizer(module, _call(module.configure_optimizers, f"{mname}.configure_optimizers()"))

    val_set = val_loader.dataset
    val_batch = val_loader.batch_size or _EVAL_BATCH
    metrics = _probe(module, val_set, val_loader.collate_fn, move, recorder, loss_name, accuracy_name)

    def evaluate(model: torch.nn.Module, device: torch.device) -> dict[str, float]:
        logged = _validate(module, val_set, val_batch, val_loader.collate_fn, device, move, recorder)
        if loss_name not in logged:
            raise WorkloadError(f"{mname}.validation_step logged no {loss_name!r} this time "
                                f"(it logged: {', '.join(sorted(logged)) or 'nothing'})")
        result = {record.VAL_LOSS: logged[loss_name]}
        if record.VAL_ACCURACY in metrics and accuracy_name in logged:
            result[record.VAL_ACCURACY] = logged[accuracy_name]
        return result

    def optimizer() -> torch.optim.Optimizer:
        return _single_optimizer(module, _call(module.configure_optimizers, f"{mname}.configure_optimizers()"))

    return Workload(
        model=_TrainingStep(module, move),
        train_set=train_loader.dataset,
        val_set=val_set,
        loss_fn=_loss_is_the_output,
        loss_reduction=reduction,
        hooks=WorkloadHooks(evaluate=evaluate, optimizer=optimizer, collate_fn=train_loader.collate_fn,
                            metrics=metrics),
    )


def _loss_is_the_output(outputs: torch.Tensor, _targets: torch.Tensor) -> torch.Tensor:
    """The model's output is ``training_step``'s loss already."""
    return outputs


def _probe(module: Any, val_set: Dataset[Any], collate: Any, move: Callable[[Any, torch.device], Any],
           recorder: _Recorder, loss_name: str, accuracy_name: str) -> tuple[str, ...]:
    """Run validation on the first few samples to learn what the module logs, leaving no trace:
    the RNG is restored and logged torchmetrics reset. Returns the record names it will give.

    Raises:
        WorkloadError: the module logs no validation loss under ``loss_name``.
    """
    mname = type(module).__qualname__
    head = Subset(val_set, range(min(_PROBE_SAMPLES, len(val_set))))  # type: ignore[arg-type]
    with torch.random.fork_rng(devices=[]):
        logged = _validate(module, head, _PROBE_SAMPLES, collate, torch.device("cpu"), move, recorder)
    for child in module.modules():
        if _is_metric(child) and type(child).__module__.startswith("torchmetrics"):
            child.reset()
    if loss_name not in logged:
        names = ", ".join(sorted(logged)) or "nothing"
        raise WorkloadError(
            f"{mname}.validation_step logs no {loss_name!r} (it logs: {names}); hpsearch records the validation "
            f"loss the module logs as val_loss: add self.log({loss_name!r}, loss) to validation_step, or name what "
            "it logs with workload.lightning.val_loss")
    return (record.VAL_LOSS, record.VAL_ACCURACY) if accuracy_name in logged else (record.VAL_LOSS,)
