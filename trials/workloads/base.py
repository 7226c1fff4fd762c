"""The workload contract: what a trial trains.

A workload factory takes a mapping of options and returns a ``Workload``. The options are the
space file's ``workload.options`` with every parameter the engine does not own (``hidden``,
``dropout``...) merged over them, so a search can vary the model's own settings. Built-ins are
registered by name; a user's own factory is named as ``"my_pkg.module:function"`` and gets the
same DDP loop, scaling rules and measurements. A factory decorated with ``@takes_options(...)``
says which options it takes, so a misspelt name in a space file is refused before any trial runs.
A factory decorated with ``@builds_data(load, options=...)`` builds its data apart from its
model, from the options named there only, so that a warm rank process can keep the data for the
next trial with the same data options (``hpsearch.trials.rank.data_cache``) while the model is built
fresh every trial. A workload whose model computes its own loss from whole batches (a
LightningModule's ``training_step``) brings ``WorkloadHooks``: its own validation and optimizer.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from hpsearch import record
from hpsearch.search_spaces._checks import suggest  # the space loader's did-you-mean, for the same names
from hpsearch.trials.errors import UnknownWorkloadError, WorkloadError

if TYPE_CHECKING:
    import torch
    from torch.utils.data import Dataset

__all__ = [
    "DataBuilder",
    "Workload",
    "WorkloadFactory",
    "WorkloadHooks",
    "accepted_options",
    "build_data",
    "build_workload",
    "builds_data",
    "builtin_workloads",
    "check_data_fingerprint",
    "check_options",
    "check_workload",
    "data_builder",
    "describe_failure",
    "import_user_module",
    "resolve_workload",
    "takes_options",
    "takes_options_from",
    "workload_module_name",
]


@dataclass(frozen=True)
class WorkloadHooks:
    """How a workload trains and validates when its batches are not ``(input, target)`` pairs.

    With hooks, the engine calls ``model(batch, batch_idx)`` for each micro-batch and takes what
    it returns as that micro-batch's loss (reduced over the batch as ``Workload.loss_reduction``
    says). ``batch`` is what ``collate_fn`` made of the samples, still on the CPU (the model
    moves it), and ``batch_idx`` its index in the rank's epoch. DDP, accumulation, the LR rule
    and every measurement stay the engine's.

    Attributes:
        evaluate: ``evaluate(model, device)`` on rank 0: the validation metrics over the whole
            validation set, ``val_loss`` always and ``val_accuracy`` for a classifier.
        optimizer: Builds the optimizer, called once the model is on its device; the engine sets
            the LR of every parameter group at every step. ``None``: the engine builds its own
            from the optimizer keys.
        collate_fn: Turns a list of samples into a training batch (``None``: torch's default).
        metrics: The names ``evaluate`` returns, for checks before any trial runs.
    """

    evaluate: Callable[[torch.nn.Module, torch.device], dict[str, float]]
    optimizer: Callable[[], torch.optim.Optimizer] | None = None
    collate_fn: Callable[[list[Any]], Any] | None = None
    metrics: tuple[str, ...] = (record.VAL_LOSS,)


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
        hooks: For a model that computes its own loss from whole batches (``WorkloadHooks``);
            ``loss_fn`` and ``num_classes`` are then not used.
        data_fingerprint: A hash naming the data the workload reads (``text_lm``: the sha256
            of its pinned text), the same for every configuration of a space. The search
            records the one its check builds on the study; a resume whose build gives another
            stops before anything runs, and a rank that builds another fails its trial
            (``check_data_fingerprint``). ``None``: nothing is checked.
        tokens_per_sample: For a language model, the tokens each sample's targets hold: each
            report then carries ``tokens_seen`` (``samples_seen`` x this) and
            ``val_perplexity`` (``exp(val_loss)``, the loss being a mean per token).
    """

    model: torch.nn.Module
    train_set: Dataset[Any]
    val_set: Dataset[Any]
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    loss_reduction: Literal["mean", "sum"] = "mean"
    num_classes: int | None = None
    hooks: WorkloadHooks | None = None
    data_fingerprint: str | None = None
    tokens_per_sample: int | None = None


WorkloadFactory = Callable[[Mapping[str, Any]], Workload]
_Factory = TypeVar("_Factory", bound=Callable[..., Any])

_PLUGIN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

#: The attribute ``takes_options`` sets on a factory: the option names it takes.
_OPTIONS_ATTR = "hpsearch_options"
#: A factory whose options depend on the options it is given (the ``lightning`` workload's are
#: its classes' init arguments) carries a function ``options -> names | None`` here instead.
_OPTIONS_OF_ATTR = "hpsearch_options_of"
#: The attribute ``builds_data`` sets on a factory: its ``DataBuilder``.
_DATA_ATTR = "hpsearch_data"
_NO_DATA: Any = object()


def check_options(options: Mapping[str, Any], known: set[str]) -> None:
    """Reject option names a workload does not take, listing the ones it does.

    Raises:
        WorkloadError: ``options`` holds a name outside ``known``.
    """
    unknown = set(options) - known
    if unknown:
        raise WorkloadError(f"unknown workload options {sorted(unknown)}; this workload takes {sorted(known)}")


def takes_options(*names: str) -> Callable[[_Factory], _Factory]:
    """Declare the options a workload factory takes.

    The factory then refuses any other option with a ``WorkloadError`` that lists these, and
    ``hpsearch validate`` (and ``start``) refuse a space whose ``workload.options`` or
    parameters hand it a name that neither the engine nor the factory takes, before any trial
    runs. Without it, the names a space passes are the factory's own business: hpsearch can
    only warn that it cannot check them.

    Example:
        >>> @takes_options("hidden", "samples")
        ... def make_workload(options):
        ...     return options["hidden"]
        >>> sorted(accepted_options(make_workload))
        ['hidden', 'samples']
        >>> make_workload({"hiden": 4})
        Traceback (most recent call last):
        ...
        hpsearch.errors.WorkloadError: unknown workload options ['hiden']; this workload takes ['hidden', 'samples']
    """
    known = frozenset(names)

    def decorate(factory: _Factory) -> _Factory:
        @functools.wraps(factory)
        def checked(options: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
            check_options(options, set(known))
            return factory(options, *args, **kwargs)

        setattr(checked, _OPTIONS_ATTR, known)
        return cast("_Factory", checked)

    return decorate


def takes_options_from(options_of: Callable[[Mapping[str, Any]], Iterable[str] | None]) -> Callable[[_Factory], _Factory]:
    """Declare the options a factory takes as a function of the options it is given: for a
    factory whose options are another object's (the ``lightning`` workload takes its classes'
    ``__init__`` arguments). ``options_of(workload_options)`` returns the names, or ``None``
    when it cannot say; ``hpsearch validate`` and ``start`` check the space's names against them.
    The factory checks what it receives itself.
    """

    def decorate(factory: _Factory) -> _Factory:
        setattr(factory, _OPTIONS_OF_ATTR, options_of)
        return factory

    return decorate


@dataclass(frozen=True)
class DataBuilder:
    """How a factory's data are built apart from its model (``builds_data``).

    Attributes:
        load: ``load(data_options) -> data``: what the factory receives as its ``data``.
        options: The names of the options the data depend on; ``load`` gets only those.
    """

    load: Callable[[Mapping[str, Any]], Any]
    options: frozenset[str]

    def select(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The data options among ``options``."""
        return {k: v for k, v in options.items() if k in self.options}


def builds_data(load: Callable[[Mapping[str, Any]], Any], *, options: Iterable[str]) -> Callable[[_Factory], _Factory]:
    """Declare that a factory's data depend on ``options`` only and are built by ``load``.

    The decorated factory is written as ``factory(options, data)``: ``data`` is what
    ``load(data_options)`` returned, ``data_options`` being the entries of ``options`` named in
    ``options=``. Called as a plain factory, ``factory(options)``, it builds its data itself
    first. A trial gets the data from its rank process, which keeps what it built for the next
    trial with the same data options (``workload.keep_data``, docs/workloads.md "Data kept
    warm"), so a grid builds its data once per process instead of once per trial.

    The promises that make keeping the data safe: ``load`` depends on those options only (not
    on the trial's seed, nor on torch's global random generator: it runs with the random
    generators restored after it, so the model's initial weights do not depend on whether the
    data were built or kept), and the factory does not change ``data`` in place.

    Example:
        >>> def load(options):
        ...     return list(range(options.get("samples", 3)))
        >>> @builds_data(load, options=["samples"])
        ... def make(options, data):
        ...     return (options["hidden"], data)
        >>> make({"samples": 2, "hidden": 8})
        (8, [0, 1])
        >>> sorted(data_builder(make).options)
        ['samples']
    """
    builder = DataBuilder(load, frozenset(options))

    def decorate(factory: _Factory) -> _Factory:
        @functools.wraps(factory)
        def with_data(options_: Mapping[str, Any], data: Any = _NO_DATA) -> Any:
            if data is _NO_DATA:
                data = build_data(builder.load, builder.select(options_))
            return factory(options_, data)

        setattr(with_data, _DATA_ATTR, builder)
        return cast("_Factory", with_data)

    return decorate


def data_builder(factory: Callable[..., Any]) -> DataBuilder | None:
    """The ``DataBuilder`` a factory declared with ``builds_data``, or ``None``."""
    builder = getattr(factory, _DATA_ATTR, None)
    return builder if isinstance(builder, DataBuilder) else None


def build_data(load: Callable[[Mapping[str, Any]], Any], options: Mapping[str, Any]) -> Any:
    """``load(options)`` with torch's (CPU), Python's and NumPy's global random generators put
    back as they were: building the data, or taking a kept copy, leaves the same state for the
    model's initialisation."""
    import random

    import torch

    python_state = random.getstate()
    numpy = sys.modules.get("numpy")
    numpy_state = numpy.random.get_state() if numpy is not None else None
    try:
        with torch.random.fork_rng(devices=[]):
            return load(dict(options))
    finally:
        random.setstate(python_state)
        if numpy is not None:
            numpy.random.set_state(numpy_state)


def accepted_options(factory: Callable[..., Any], options: Mapping[str, Any] | None = None) -> frozenset[str] | None:
    """The options a factory declared with ``takes_options``, or ``None`` when it declared none.

    A factory whose options depend on what it is given (the ``lightning`` workload's) answers
    for ``options``, the space's ``workload.options``; it may raise ``WorkloadError`` when those
    name something it cannot load.
    """
    options_of = getattr(factory, _OPTIONS_OF_ATTR, None)
    if callable(options_of):
        names = options_of(dict(options or {}))
        return None if names is None else frozenset(names)
    names = getattr(factory, _OPTIONS_ATTR, None)
    return frozenset(names) if isinstance(names, Iterable) and not isinstance(names, str) else None


def check_workload(value: object, name: str) -> Workload:
    """``value`` when it is a ``Workload`` a trial can train, else a ``WorkloadError`` that names
    what was expected and what the factory ``name`` returned.

    Example:
        >>> check_workload({"model": None}, "my_pkg.mod:make")
        Traceback (most recent call last):
        ...
        hpsearch.errors.WorkloadError: workload 'my_pkg.mod:make' must return a hpsearch.trials.workloads.base.Workload, got a dict with keys ['model']
    """
    expected = f"{Workload.__module__}.{Workload.__qualname__}"
    if not isinstance(value, Workload):
        raise WorkloadError(f"workload {name!r} must return a {expected}, got {_describe(value)}")
    import torch

    if not isinstance(value.model, torch.nn.Module):
        raise WorkloadError(f"workload {name!r}: Workload.model must be a torch.nn.Module, got {_describe(value.model)}")
    if value.hooks is not None and not callable(value.hooks.evaluate):
        raise WorkloadError(f"workload {name!r}: WorkloadHooks.evaluate must be callable, got "
                            f"{_describe(value.hooks.evaluate)}")
    if not callable(value.loss_fn):
        raise WorkloadError(f"workload {name!r}: Workload.loss_fn must be callable, got {_describe(value.loss_fn)}")
    if value.loss_reduction not in ("mean", "sum"):
        raise WorkloadError(f"workload {name!r}: Workload.loss_reduction must be 'mean' or 'sum', "
                            f"got {value.loss_reduction!r}")
    tokens = value.tokens_per_sample
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise WorkloadError(f"workload {name!r}: Workload.tokens_per_sample must be a positive int or None, "
                            f"got {tokens!r}")
    for field_name in ("train_set", "val_set"):
        data = getattr(value, field_name)
        if not (hasattr(data, "__getitem__") and hasattr(data, "__len__")):
            raise WorkloadError(f"workload {name!r}: Workload.{field_name} must be a map-style dataset "
                                f"(with __getitem__ and __len__), got {_describe(data)}")
    return value


def check_data_fingerprint(workload: Workload, expected: str | None, name: str) -> None:
    """Refuse to train on other data than the search checked: ``expected`` is the
    ``data_fingerprint`` the study recorded (``TrialSpec.data_fingerprint``; ``None``: nothing
    to check), ``workload`` what this process built.

    Raises:
        WorkloadError: the fingerprints differ, naming both, this host and its Python.

    Example:
        >>> import torch
        >>> built = Workload(torch.nn.Linear(1, 1), [], [], torch.nn.functional.mse_loss, data_fingerprint="ab12")
        >>> check_data_fingerprint(built, "ab12", "mine:make")
        >>> check_data_fingerprint(built, "cd34", "mine:make")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        hpsearch.errors.WorkloadError: workload 'mine:make' built data with fingerprint ab12 on ... (Python ...), but the study's data have fingerprint cd34 ...
    """
    if expected is None or workload.data_fingerprint == expected:
        return
    import platform
    import socket

    raise WorkloadError(
        f"workload {name!r} built data with fingerprint {workload.data_fingerprint} on {socket.gethostname()} "
        f"(Python {platform.python_version()}), but the study's data have fingerprint {expected} (recorded when "
        "its search started): this node reads other data, and training on them would mix two data sets in one "
        "study; run every node on the same data (for text_lm: the same Python version)")


def build_workload(name: str, options: Mapping[str, Any]) -> Workload:
    """Resolve the factory ``name``, call it with ``options`` and check what it returned.

    What the factory raises goes through as it is, so that a trial's log shows its traceback
    (``hpsearch.workload_check.build_first``, the check before a search, makes it one line).

    Raises:
        WorkloadError: the factory cannot be found or imported, or returned something other
            than a ``Workload``.
    """
    return check_workload(resolve_workload(name)(dict(options)), name)


def _describe(value: object) -> str:
    """What a value is, for a message: ``None``, ``a dict with keys [...]``, ``a Linear``..."""
    if value is None:
        return "None (does the function return its Workload?)"
    if isinstance(value, Mapping):
        return f"a {type(value).__name__} with keys {sorted(map(str, value))[:8]}"
    return f"a {type(value).__module__}.{type(value).__qualname__}" if type(value).__module__ != "builtins" \
        else f"a {type(value).__name__}"


# Name -> (module, factory) of the workloads shipped with hpsearch, imported on first use.
_BUILTINS: dict[str, tuple[str, str]] = {
    "digits_cnn": ("hpsearch.trials.workloads.digits", "digits_cnn"),
    "digits_mlp": ("hpsearch.trials.workloads.digits", "digits_mlp"),
    "teacher_mlp": ("hpsearch.trials.workloads.teacher", "teacher_mlp"),
    "text_lm": ("hpsearch.trials.workloads.text_lm", "text_lm"),
    "cifar10": ("hpsearch.trials.workloads.cifar10", "cifar10"),
    "lightning": ("hpsearch.trials.workloads.lightning", "lightning"),
}


def builtin_workloads() -> dict[str, WorkloadFactory]:
    """Name -> factory of the workloads shipped with hpsearch."""
    return {name: getattr(importlib.import_module(module), factory) for name, (module, factory) in _BUILTINS.items()}


def workload_module_name(name: str) -> str | None:
    """The module a workload name points to, without importing anything (``None`` for a name
    that is neither built in nor ``"pkg.module:function"``): what rank processes import ahead.
    A name that resolves to no module is reported by whoever builds the workload (the search's
    workload check; a trial's rank)."""
    if name in _BUILTINS:
        return _BUILTINS[name][0]
    return name.partition(":")[0] if _PLUGIN.match(name) else None


def resolve_workload(name: str) -> WorkloadFactory:
    """The factory for a built-in name or a ``"pkg.module:function"`` plugin reference.

    Raises:
        UnknownWorkloadError: unknown built-in, or no such callable in the module.
        WorkloadError: the module is not importable (whatever its import raised: a missing
            dependency, a ``SyntaxError``, an exception of its own).

    Example:
        >>> resolve_workload("digits_cnn").__name__
        'digits_cnn'
    """
    builtins = builtin_workloads()
    if name in builtins:
        return builtins[name]
    if not _PLUGIN.match(name):
        raise UnknownWorkloadError(
            f"workload must be one of {', '.join(sorted(builtins))} or 'pkg.module:function', got {name!r}"
            + suggest(name, sorted(builtins), prefix=False)
        )
    module_name, _, attr = name.partition(":")
    module = import_user_module(module_name)
    factory = getattr(module, attr, None)
    if not callable(factory):
        # The space's own word first: the bare "module 'wine' has no callable 'nosuchfn'" did not
        # say which setting named it.
        callables = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
                           and getattr(v, "__module__", None) == module.__name__)
        raise UnknownWorkloadError(f"workload {name!r}: module {module_name!r} has no callable {attr!r}"
                            + suggest(attr, callables, prefix=False))
    return cast("Callable[[Mapping[str, Any]], Workload]", factory)


def import_user_module(module_name: str, what: str = "workload module") -> ModuleType:
    """Import a module of the user's (a workload's, a LightningModule's), turning whatever its
    import raises into one ``WorkloadError`` line: the exception, and where in the user's code
    it came from.

    A module that raises at import is input to fix (exit status 2), not a traceback.

    Args:
        module_name: The dotted module name.
        what: What the module is, for the message (``"workload module"``).

    Raises:
        WorkloadError: ``cannot import <what> '<module_name>': <exception> (<file>:<line>)``.

    Example:
        >>> import_user_module("not_installed_anywhere")
        Traceback (most recent call last):
        ...
        hpsearch.errors.WorkloadError: cannot import workload module 'not_installed_anywhere': No module named 'not_installed_anywhere'
    """
    try:
        return importlib.import_module(module_name)
    # The user's code: any exception (a SyntaxError too) and sys.exit() are its import failing.
    except (Exception, SystemExit) as exc:
        # An ImportError's own message says what is missing ("No module named 'x'").
        reason = describe_failure(exc, with_type=not isinstance(exc, ImportError))
        raise WorkloadError(f"cannot import {what} {module_name!r}: {reason}") from exc


#: Frames of the import machinery, skipped when saying where a user's code failed.
_IMPORTLIB = os.path.dirname(importlib.__file__)


def describe_failure(exc: BaseException, *, with_type: bool = True) -> str:
    """One line for an exception raised by a user's code, caught by hpsearch: its type and
    message, then where it came from: the line of the user's code (the first frame after the
    catching one, past the import machinery and this module's wrappers) and, when elsewhere,
    the line that raised it. A ``SyntaxError`` is placed at its own file and line.

    Example:
        >>> try:
        ...     int("twelve")
        ... except ValueError as exc:
        ...     describe_failure(exc)
        "ValueError: invalid literal for int() with base 10: 'twelve'"
    """
    message = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if isinstance(exc, SyntaxError):
        message = exc.msg or "invalid syntax"
    text = f"{type(exc).__name__}: {message}" if with_type else message
    # The first frame is the one that caught it (hpsearch's); a decorated factory passes
    # through this module's wrapper.
    frames = [f for f in traceback.extract_tb(exc.__traceback__)[1:]
              if not (f.filename.startswith("<frozen") or os.path.dirname(f.filename) == _IMPORTLIB
                      or f.filename == __file__)]
    places = [f"{f.filename}:{f.lineno}" for f in frames[:1] + frames[-1:]]
    if isinstance(exc, SyntaxError) and exc.filename:
        places.append(f"{exc.filename}:{exc.lineno}")
    places = list(dict.fromkeys(places))  # once each, in order
    if not places:
        return text
    return f"{text} (at {places[0]}" + "".join(f", raised in {p}" for p in places[1:]) + ")"
