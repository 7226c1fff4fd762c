"""A space's workload, checked from the orchestrator's side before anything runs.

Three promises of the workload contract (docs/workloads.md) are kept here, for ``hpsearch
validate``, ``start`` and ``resume`` alike:

- a plugin's module imports (checked without building any data);
- every name the space hands the workload (its ``workload.options`` and each parameter the
  engine does not own) is one the workload takes, when its factory says which it takes
  (``@takes_options``; the built-ins do); otherwise each such name is a warning, since nothing
  can check it;
- the factory returns a ``Workload`` (checked when ``start`` builds it once), and one that records
  no accuracy (``num_classes=None``: regression) is not asked for a ``val_accuracy`` objective.

A ``lightning`` workload builds its optimizer in ``configure_optimizers``, so the engine's
optimizer keys are refused for it, and each objective on a validation metric must be one its
module logs (checked when ``start`` builds it).
"""

from __future__ import annotations

import difflib
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpsearch import record
from hpsearch.errors import UnknownWorkloadError, WorkloadError
from hpsearch.search_spaces import (
    ENGINE_PARAMETERS,
    OPTIMIZER_PARAMETERS,
    Choice,
    Fixed,
    FloatRange,
    IntRange,
    SearchSpace,
    SpaceError,
    space_error,
)
from hpsearch.trials.workloads.base import (
    Workload,
    accepted_options,
    check_workload,
    describe_failure,
    resolve_workload,
)

__all__ = ["SearchCheck", "WorkloadCheck", "build_first", "check_for_search", "check_space_workload", "check_study_data",
           "first_options"]


@dataclass(frozen=True)
class WorkloadCheck:
    """What checking a space's workload found.

    Attributes:
        name: The workload's name in the space.
        options: The options its factory takes (``None``: it does not say).
        passed: The parameters of the space that reach the factory as options, in file order.
        warnings: What could not be checked, one sentence each.
    """

    name: str
    options: frozenset[str] | None
    passed: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def check_space_workload(space: SearchSpace) -> WorkloadCheck:
    """Import the space's workload and check the names the space hands it, building nothing.

    Raises:
        WorkloadError: the workload is not a built-in and its module cannot be imported, or it
            has no such function.
        SpaceError: a parameter or ``workload.options`` entry names an option that neither the
            engine nor the workload takes (the workload declared its options); the message
            lists what each takes.

    Example:
        >>> from hpsearch.search_spaces import parse_space
        >>> space = parse_space("parameters: {per_device_batch_size: 8, base_lr: 0.1, hidden: {choices: [16, 64]}}"
        ...                     "\\nworkload: {name: digits_mlp}")
        >>> check_space_workload(space).passed
        ('hidden',)
        >>> space = parse_space("parameters: {per_device_batch_size: 8, base_lr: 0.1, hiden: 16}"
        ...                     "\\nworkload: {name: digits_mlp}")
        >>> check_space_workload(space)
        Traceback (most recent call last):
        ...
        hpsearch.errors.SpaceError: <space> at 'parameters.hiden': 'hiden' is neither a parameter of the engine nor an option of workload 'digits_mlp'; did you mean 'hidden'? digits_mlp takes: hidden, loss_reduction, split_seed, val_fraction; the engine takes: per_device_batch_size, world_size, grad_accum_steps, lr_rule, base_lr, optimizer, momentum, nesterov, weight_decay, precision, max_grad_norm
    """
    name = space.workload.name
    try:
        factory = resolve_workload(name)
    except UnknownWorkloadError as exc:
        raise space_error(space, ("workload", "name"), str(exc)) from exc
    if name == "lightning":
        _check_lightning_parameters(space)
    taken = accepted_options(factory, space.workload.options)
    passed = tuple(p for p in space.parameters if p not in ENGINE_PARAMETERS)
    if taken is None:
        warnings: tuple[str, ...] = ()
        if passed:
            warnings = (f"workload {name!r} does not say which options it takes, so parameters "
                        f"{', '.join(passed)} reach its factory unchecked: a misspelt name there is only "
                        "noticed by the factory (decorate it with hpsearch.trials.workloads.base.takes_options "
                        "to have such names refused before anything runs)",)
        return WorkloadCheck(name, None, passed, warnings)
    for parameter in passed:
        if parameter not in taken:
            raise space_error(space, ("parameters", parameter), _unknown(parameter, name, taken, "parameter"))
    for option in space.workload.options:
        if option not in taken:
            raise space_error(space, ("workload", "options", option), _unknown(option, name, taken, "option"))
    return WorkloadCheck(name, taken, passed)


def _check_lightning_parameters(space: SearchSpace) -> None:
    """A LightningModule's ``configure_optimizers`` builds its optimizer: an engine optimizer key
    in the space would be silently ignored, so it is refused."""
    for parameter in space.parameters:
        if parameter in OPTIMIZER_PARAMETERS:
            raise space_error(space, ("parameters", parameter), (
                f"'{parameter}' sets the optimizer the engine builds, but a lightning workload's optimizer comes "
                "from its module's configure_optimizers; make it an __init__ argument of the module under another "
                f"name (say 'sgd_{parameter}') and search that, or remove it"))


def _unknown(word: str, workload: str, taken: frozenset[str], kind: str) -> str:
    engine = list(ENGINE_PARAMETERS)
    close = difflib.get_close_matches(word, sorted(taken) + engine, n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else "."
    short = workload.rpartition(":")[2]
    if kind == "option":
        return (f"'{word}' is not an option of workload {workload!r}{hint} {short} takes: "
                f"{', '.join(sorted(taken)) or 'no options'}")
    return (f"'{word}' is neither a parameter of the engine nor an option of workload {workload!r}{hint} "
            f"{short} takes: {', '.join(sorted(taken)) or 'no options'}; the engine takes: {', '.join(engine)}")


def first_options(space: SearchSpace) -> dict[str, Any]:
    """The options the factory gets for the space's first configuration: ``workload.options``
    with each workload parameter at its fixed value, first choice or lower bound.

    Example:
        >>> from hpsearch.search_spaces import parse_space
        >>> space = parse_space("parameters: {per_device_batch_size: 8, base_lr: 0.1, hidden: {choices: [16, 64]}}"
        ...                     "\\nworkload: {name: digits_mlp, options: {hidden: 4, split_seed: 1}}")
        >>> first_options(space)
        {'hidden': 16, 'split_seed': 1}
    """
    options: dict[str, Any] = dict(space.workload.options)
    for name, parameter in space.parameters.items():
        if name in ENGINE_PARAMETERS:
            continue
        if isinstance(parameter, Fixed):
            options[name] = parameter.value
        elif isinstance(parameter, Choice):
            options[name] = parameter.choices[0]
        elif isinstance(parameter, (IntRange, FloatRange)):
            options[name] = parameter.low
    return options


def build_first(space: SearchSpace, options: Mapping[str, Any] | None = None) -> Workload:
    """Build the space's workload once (with ``first_options`` unless ``options`` are given)
    and check what its factory returns.

    Raises:
        WorkloadError: the factory cannot be found, raised, or returned something other than a
            ``Workload`` (the message names the expected type and what came back); or an
            objective is a validation metric the workload does not record (``val_accuracy`` of a
            workload without ``num_classes``).
    """
    name = space.workload.name
    factory = resolve_workload(name)
    try:
        built = factory(dict(first_options(space) if options is None else options))
    except WorkloadError:
        raise
    # A user's factory: what it raised and where, in one line, not a traceback; sys.exit()
    # inside it would otherwise end the search's process with the factory's status.
    except (Exception, SystemExit) as exc:
        raise WorkloadError(f"workload {name!r} failed to build: {describe_failure(exc)}") from exc
    workload = check_workload(built, name)
    if workload.hooks is not None:
        # A workload that validates itself (a LightningModule) says which metrics it records.
        for i, objective in enumerate(space.objectives):
            if objective.metric in (record.VAL_LOSS, record.VAL_ACCURACY) and objective.metric not in workload.hooks.metrics:
                raise WorkloadError(
                    f"objective {objective.metric} (objectives[{i}]): workload {name!r} does not record it: its "
                    f"validation logs no {objective.metric} (it records {', '.join(workload.hooks.metrics)}); log "
                    f"it in validation_step (self.log({objective.metric!r}, ...)), name what the module logs with "
                    f"workload.lightning.{objective.metric}, or choose another objective")
    elif workload.num_classes is None:
        # num_classes=None is a regression workload: the loop records val_loss only. A classifier
        # that left it out passed validate, then every trial failed missing_metric and start
        # exited 4 after the whole search.
        for i, objective in enumerate(space.objectives):
            if objective.metric == record.VAL_ACCURACY:
                raise WorkloadError(
                    f"objective {objective.metric} (objectives[{i}]): workload {name!r} does not record it: its "
                    "Workload has num_classes=None, which means regression (val_loss only, no accuracy); for a "
                    "classifier pass num_classes=<the number of classes> to Workload(...), or choose the "
                    f"objective {record.VAL_LOSS} (direction: minimize)")
    return workload


@dataclass(frozen=True)
class SearchCheck:
    """What ``check_for_search`` found.

    Attributes:
        warnings: What could not be checked (``WorkloadCheck.warnings``).
        train_size: The training set's size (ASHA's budget unit).
        data_fingerprint: The workload's ``data_fingerprint`` as built here (``None``: it names
            no data).
        python: The Python version that built it.
    """

    warnings: tuple[str, ...]
    train_size: int
    data_fingerprint: str | None = None
    python: str = ""

    def fingerprint_attr(self) -> dict[str, str] | None:
        """The study's ``hpsearch.data_fingerprint`` attr for what was built, or ``None``."""
        if self.data_fingerprint is None:
            return None
        return {"sha256": self.data_fingerprint, "python": self.python}


def check_for_search(space: SearchSpace) -> SearchCheck:
    """Everything ``start`` and ``resume`` check of the workload before anything is written:
    ``check_space_workload``, then the workload built once (``build_first``), so that a workload
    that cannot be found or built, or a batch larger than its training set, is an error now
    rather than a study full of failed trials.

    Runs wherever torch may be imported: the search runs it in a warm rank process of its own
    machine when it has one (``hpsearch.tune.pools.LocalPool.check``), otherwise in its own.

    Raises:
        WorkloadError: the workload cannot be found or built.
        SpaceError: a name the space hands the workload is not one it takes, or some
            configuration's effective batch is larger than the training set.
    """
    found = check_space_workload(space)
    workload = build_first(space)
    try:
        size = len(workload.train_set)  # type: ignore[arg-type]
    except Exception as exc:  # the user's dataset: one line, as for its factory
        raise WorkloadError(f"workload {space.workload.name!r}: len(train_set) failed: {describe_failure(exc)}") \
            from exc
    largest = _largest(space, record.PER_DEVICE_BATCH_SIZE) * space.max_world_size() * _largest(space, record.GRAD_ACCUM_STEPS)
    cap = space.constraints.max_effective_batch_size
    if min(largest, cap if cap is not None else largest) > size:
        raise SpaceError(
            f"the largest effective batch of this space, {largest} (b x W x A), is larger than the "
            f"{size} training samples of workload {space.workload.name!r}; lower the batch choices or "
            "set constraints.max_effective_batch_size",
            key_path="parameters.per_device_batch_size", source=space.source_path or "<space>")
    return SearchCheck(found.warnings, size, workload.data_fingerprint, platform.python_version())


def check_study_data(study_name: str, recorded: object, found: SearchCheck, workload: str) -> None:
    """Refuse to go on with a study on other data than it started on: ``recorded`` is the
    study's ``hpsearch.data_fingerprint`` attr (``None`` for a study that recorded none), ``found``
    what this interpreter built (``check_for_search``).

    Raises:
        WorkloadError: the fingerprints differ; the message names both and both Pythons.

    Example:
        >>> now = SearchCheck((), 100, "b" * 64, "3.12.1")
        >>> check_study_data("lm", {"sha256": "b" * 64, "python": "3.12.1"}, now, "text_lm")
        >>> check_study_data("lm", {"sha256": "a" * 64, "python": "3.11.7"}, now, "text_lm")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        hpsearch.errors.WorkloadError: study 'lm' trained workload 'text_lm' on data with fingerprint aaaa... (built by Python 3.11.7), but this Python (3.12.1) builds bbbb...: ...
    """
    if not isinstance(recorded, Mapping) or "sha256" not in recorded:
        return
    expected = str(recorded["sha256"])
    if found.data_fingerprint == expected:
        return
    raise WorkloadError(
        f"study {study_name!r} trained workload {workload!r} on data with fingerprint {expected} (built by Python "
        f"{recorded.get('python', '?')}), but this Python ({found.python}) builds {found.data_fingerprint}: its "
        "trials would train on other data than the study's (for text_lm: another Python's standard library "
        "source); resume it with the Python it started with, or start a new study")


def _largest(space: SearchSpace, name: str) -> int:
    p = space.parameters[name]
    if isinstance(p, Fixed):
        return int(p.value)
    if isinstance(p, Choice):
        return max(int(c) for c in p.choices)
    return int(p.high)
