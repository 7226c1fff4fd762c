"""The sections of a space file besides ``parameters``: study, workload, scaling, objectives,
search and resources. Each function checks one section and returns its typed value."""

from __future__ import annotations

import keyword
import math
import re
from collections.abc import Mapping
from typing import Any, Literal, cast

from hpsearch.record import METRICS
from hpsearch.search_spaces._budget_text import parse_budget
from hpsearch.search_spaces._checks import (
    check_bool,
    check_int,
    check_keys,
    check_mapping,
    check_number,
    check_one_of,
    check_string,
    fail,
    is_int,
    is_number,
    kind,
    label_of,
    show,
    suggest,
)
from hpsearch.search_spaces._document import Document, KeyPath
from hpsearch.search_spaces._lightning_section import merge_options, parse_lightning
from hpsearch.search_spaces.space import (
    DATA_PATHS,
    FUSE_MODES,
    LR_SCHEDULES,
    MAX_N_TRIALS,
    ON_OOM_MODES,
    PRECISIONS,
    SAMPLER_CLASS_NAMES,
    SAMPLERS,
    SAVE_MODEL_MODES,
    SWITCHES,
    WARMUP_FROM,
    AnalysisSpec,
    Choice,
    Constraints,
    Fixed,
    Fuse,
    IntRange,
    LoaderSpec,
    Objective,
    Parameter,
    ResourceSpec,
    ScalingSpec,
    SearchSettings,
    Switch,
    TrackingSpec,
    WorkloadSpec,
)

__all__ = [
    "TOP_KEYS",
    "parse_analysis",
    "parse_constraints",
    "parse_objectives",
    "parse_resources",
    "parse_scaling",
    "parse_search",
    "parse_study",
    "parse_tracking",
    "parse_workload",
]

TOP_KEYS = (
    "study",
    "storage",
    "workload",
    "scaling",
    "parameters",
    "objectives",
    "search",
    "resources",
    "constraints",
    "analysis",
    "tracking",
)
_WORKLOAD_KEYS = ("name", "lightning", "epochs", "options", "eval_every_samples", "save_model", "data", "loader",
                  "precision", "compile", "keep_data")
_LOADER_KEYS = ("workers", "pin_memory", "prefetch_factor", "persistent_workers")
_ANALYSIS_KEYS = ("target", "confirm", "confirm_budget")
_CONFIRM_BUDGET_KEYS = ("rounds", "share")
_TRACKING_KEYS = ("mlflow", "experiment")
_SCALING_KEYS = ("base_batch_size", "warmup_epochs", "warmup_from", "schedule")
_OBJECTIVE_KEYS = ("metric", "direction")
_SEARCH_KEYS = ("sampler", "n_trials", "max_concurrent", "scheduler", "seed", "trial_timeout_s", "enqueue",
                "budget", "on_oom", "fuse", "fuse_max")
_RESOURCE_KEYS = ("device", "cpus_per_worker", "gpus_per_worker", "emulate_ranks", "span_nodes", "reuse_workers",
                  "mps", "memory_per_worker")
_SCHEDULER_KEYS = ("name", "grace_epochs", "reduction_factor")
_CONSTRAINT_KEYS = ("max_effective_batch_size", "max_lr", "skip_equivalent", "skip_duplicates")

_STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_STUDY_RULE = "1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
_DEFAULT_OBJECTIVES = (Objective("val_accuracy", "maximize"),)


def _section(
    doc: Document, root: Mapping[str, Any], key: str, allowed: tuple[str, ...]
) -> Mapping[str, Any]:
    # An empty section (``scaling:`` with its lines commented out) reads as null: use defaults.
    value = root.get(key)
    if value is None:
        return {}
    section = check_mapping(doc, value, (key,))
    check_keys(doc, section, (key,), allowed)
    return section


def parse_study(doc: Document, root: Mapping[str, Any], default: str) -> str:
    if "study" not in root:
        if not _STUDY_NAME.fullmatch(default):
            fail(
                doc,
                ("study",),
                f"the study name defaults to the file name {show(default)}, which is not a valid "
                f"study name ({_STUDY_RULE}); set 'study:' in the file",
            )
        return default
    name = check_string(doc, root["study"], ("study",))
    if not _STUDY_NAME.fullmatch(name):
        fail(doc, ("study",), f"study must be {_STUDY_RULE}, got {show(name)}")
    return name


def parse_workload(doc: Document, root: Mapping[str, Any]) -> WorkloadSpec:
    section = _section(doc, root, "workload", _WORKLOAD_KEYS)
    path: KeyPath = ("workload",)
    name = WorkloadSpec.name
    if "name" in section:
        name = check_string(doc, section["name"], path + ("name",))
        if not _is_workload_name(name):
            fail(
                doc,
                path + ("name",),
                "workload name must be a built-in name (an identifier such as 'digits_cnn') or "
                f"'package.module:function', got {show(name)}",
            )
    epochs = WorkloadSpec.epochs
    if "epochs" in section:
        epochs = check_int(doc, section["epochs"], path + ("epochs",), minimum=1, maximum=100_000)
    options: dict[str, Any] = {}
    if section.get("options") is not None:
        # Passed to the workload untouched, so only the outer shape is checked.
        options = dict(check_mapping(doc, section["options"], path + ("options",)))
    if section.get("lightning") is not None:
        # A LightningModule and its datamodule: the built-in workload "lightning" (_lightning_section.py).
        if "name" in section:
            fail(doc, path + ("lightning",), "set either workload.name or workload.lightning, not both")
        name = "lightning"
        options = merge_options(doc, parse_lightning(doc, section["lightning"], path + ("lightning",)), options, path)
    every = None
    if section.get("eval_every_samples") is not None:
        every = check_int(doc, section["eval_every_samples"], path + ("eval_every_samples",), minimum=1, maximum=2**40)
    save_model = WorkloadSpec.save_model
    if section.get("save_model") is not None:
        save_model = check_one_of(doc, section["save_model"], path + ("save_model",), SAVE_MODEL_MODES)
    data = WorkloadSpec.data
    if section.get("data") is not None:
        data = check_one_of(doc, section["data"], path + ("data",), DATA_PATHS)
    precision = WorkloadSpec.precision
    if section.get("precision") is not None:
        precision = check_one_of(doc, section["precision"], path + ("precision",), PRECISIONS)
    flags = {key: getattr(WorkloadSpec, key) for key in ("compile", "keep_data")}
    for key in flags:
        if section.get(key) is not None:
            flags[key] = check_bool(doc, section[key], path + (key,))
    return WorkloadSpec(name=name, epochs=epochs, options=options, eval_every_samples=every, save_model=save_model,
                        data=data, loader=_loader(doc, section.get("loader"), path + ("loader",)),
                        precision=precision, **flags)


def _loader(doc: Document, raw: Any, path: KeyPath) -> LoaderSpec:
    """``workload.loader``: ``{workers: auto | N, pin_memory: auto | bool, prefetch_factor: N,
    persistent_workers: bool}``, each optional."""
    if raw is None:
        return LoaderSpec()
    section = check_mapping(doc, raw, path)
    check_keys(doc, section, path, _LOADER_KEYS)
    spec = LoaderSpec()
    workers = spec.workers
    if section.get("workers") not in (None, "auto"):
        if not is_int(section["workers"]):
            fail(doc, path + ("workers",), f"workers must be 'auto' or an integer >= 0, got "
                                           f"{kind(section['workers'])}: {show(section['workers'])}")
        workers = check_int(doc, section["workers"], path + ("workers",), minimum=0, maximum=256)
    pin = spec.pin_memory
    if section.get("pin_memory") not in (None, "auto"):
        if not isinstance(section["pin_memory"], bool):
            fail(doc, path + ("pin_memory",), f"pin_memory must be 'auto', true or false, got "
                                              f"{kind(section['pin_memory'])}: {show(section['pin_memory'])}")
        pin = section["pin_memory"]
    prefetch = spec.prefetch_factor
    if section.get("prefetch_factor") is not None:
        prefetch = check_int(doc, section["prefetch_factor"], path + ("prefetch_factor",), minimum=1, maximum=64)
    persistent = spec.persistent_workers
    if section.get("persistent_workers") is not None:
        persistent = check_bool(doc, section["persistent_workers"], path + ("persistent_workers",))
    return LoaderSpec(workers=workers, pin_memory=pin, prefetch_factor=prefetch, persistent_workers=persistent)


def parse_analysis(doc: Document, root: Mapping[str, Any]) -> AnalysisSpec:
    """``analysis: {target: {METRIC: VALUE}, confirm: auto | off | K, confirm_budget: {rounds: R,
    share: S}}``, each optional."""
    section = _section(doc, root, "analysis", _ANALYSIS_KEYS)
    spec = AnalysisSpec()
    path: KeyPath = ("analysis", "target")
    target = spec.target
    if section.get("target") is not None:
        entries = check_mapping(doc, section["target"], path)
        if len(entries) != 1:
            fail(doc, path, "target must name one metric and its value, e.g. {val_accuracy: 0.95}, "
                            f"got {len(entries)} entries")
        (metric, value), = entries.items()
        metric = check_one_of(doc, metric, path, METRICS, label="target metric")
        target = (metric, check_number(doc, value, path + (metric,)))
    confirm: str | int = spec.confirm
    raw = section.get("confirm")
    if raw is not None:
        # YAML 1.1 reads a bare off/on as false/true.
        if raw is False or raw == "off":
            confirm = "off"
        elif raw is True or raw == "auto":
            confirm = "auto"
        elif is_int(raw):
            confirm = check_int(doc, raw, ("analysis", "confirm"), minimum=1, maximum=16)
        else:
            fail(doc, ("analysis", "confirm"), f"confirm must be auto, off or a number of confirmation runs a round "
                                               f"(1 to 16), got {kind(raw)}: {show(raw)}")
    rounds, share = spec.confirm_rounds, spec.confirm_share
    if section.get("confirm_budget") is not None:
        bpath: KeyPath = ("analysis", "confirm_budget")
        budget = check_mapping(doc, section["confirm_budget"], bpath)
        check_keys(doc, budget, bpath, _CONFIRM_BUDGET_KEYS)
        if budget.get("rounds") is not None:
            rounds = check_int(doc, budget["rounds"], bpath + ("rounds",), minimum=1, maximum=10)
        if budget.get("share") is not None:
            share = check_number(doc, budget["share"], bpath + ("share",), above=0.0)
            if share > 1:
                fail(doc, bpath + ("share",), f"share is the part of the search's device time confirmation may "
                                              f"spend, between 0 and 1 (0.25: a quarter), got {show(share)}")
    return AnalysisSpec(target=target, confirm=confirm, confirm_rounds=rounds, confirm_share=share)


def parse_tracking(doc: Document, root: Mapping[str, Any]) -> TrackingSpec:
    """``tracking: {mlflow: URI, experiment: NAME}``. Whether MLflow is installed is not checked
    here: a study's space is parsed again to read it, on machines that need no MLflow
    (``hpsearch validate`` and ``start`` check it, naming this key's line)."""
    section = _section(doc, root, "tracking", _TRACKING_KEYS)
    uri = experiment = None
    if section.get("mlflow") is not None:
        uri = check_string(doc, section["mlflow"], ("tracking", "mlflow")).strip()
        if not uri:
            fail(doc, ("tracking", "mlflow"), "mlflow must be a tracking URI, e.g. http://mlflow.internal:5000 "
                                              "or sqlite:///mlflow.db")
    if section.get("experiment") is not None:
        experiment = check_string(doc, section["experiment"], ("tracking", "experiment")).strip()
        if not experiment:
            fail(doc, ("tracking", "experiment"), "experiment must be a name (default: the study's name)")
    return TrackingSpec(mlflow=uri, experiment=experiment, line=doc.line_of(("tracking", "mlflow")) if uri else None)


def _is_workload_name(name: str) -> bool:
    def dotted(text: str) -> bool:
        parts = text.split(".")
        return all(p.isidentifier() and not keyword.iskeyword(p) for p in parts)

    if name.count(":") == 0:
        return name.isidentifier() and not keyword.iskeyword(name)
    if name.count(":") == 1:
        module, function = name.split(":")
        return dotted(module) and dotted(function)
    return False


def parse_scaling(doc: Document, root: Mapping[str, Any]) -> ScalingSpec:
    section = _section(doc, root, "scaling", _SCALING_KEYS)
    path: KeyPath = ("scaling",)
    spec = ScalingSpec()
    base = spec.base_batch_size
    if "base_batch_size" in section:
        base = check_int(
            doc, section["base_batch_size"], path + ("base_batch_size",), minimum=1, maximum=2**31
        )
    warmup = spec.warmup_epochs
    if "warmup_epochs" in section:
        warmup = check_number(doc, section["warmup_epochs"], path + ("warmup_epochs",), minimum=0)
    schedule = spec.schedule
    if "schedule" in section:
        schedule = check_one_of(doc, section["schedule"], path + ("schedule",), LR_SCHEDULES)
    warmup_from = spec.warmup_from
    if "warmup_from" in section:
        warmup_from = check_one_of(doc, section["warmup_from"], path + ("warmup_from",), WARMUP_FROM)
    return ScalingSpec(base_batch_size=base, warmup_epochs=warmup, schedule=schedule, warmup_from=warmup_from)


def parse_objectives(doc: Document, root: Mapping[str, Any]) -> tuple[Objective, ...]:
    path: KeyPath = ("objectives",)
    if "objectives" not in root:
        return _DEFAULT_OBJECTIVES
    raw = root["objectives"]
    if not isinstance(raw, (list, tuple)) or not raw:
        fail(
            doc,
            path,
            f"objectives must be a non-empty list of {{metric: ..., direction: ...}}, got {kind(raw)}: {show(raw)}",
        )
    out: list[Objective] = []
    for i, item in enumerate(raw):
        where = path + (i,)
        if isinstance(item, Objective):
            item = {"metric": item.metric, "direction": item.direction}
        if not isinstance(item, Mapping):
            fail(
                doc,
                where,
                f"each objective must be a mapping {{metric: ..., direction: ...}}, got {kind(item)}: {show(item)}",
            )
        item = check_mapping(doc, item, where)
        check_keys(doc, item, where, _OBJECTIVE_KEYS)
        for key in _OBJECTIVE_KEYS:
            if key not in item:
                fail(doc, where + (key,), f"each objective needs '{key}'")
        metric = check_one_of(doc, item["metric"], where + ("metric",), METRICS, label="metric")
        for j, earlier in enumerate(out):
            if earlier.metric == metric:
                fail(
                    doc,
                    where + ("metric",),
                    f"each metric may be an objective once, got {show(metric)} again (objectives[{j}])",
                )
        direction = check_one_of(
            doc,
            item["direction"],
            where + ("direction",),
            ("maximize", "minimize"),
            label="direction",
        )
        out.append(Objective(metric=metric, direction=direction))  # type: ignore[arg-type]
    return tuple(out)


def parse_search(
    doc: Document,
    root: Mapping[str, Any],
    objectives: tuple[Objective, ...],
    parameters: Mapping[str, Parameter],
) -> SearchSettings:
    section = _section(doc, root, "search", _SEARCH_KEYS)
    path: KeyPath = ("search",)
    sampler = "tpe" if len(objectives) == 1 else "nsga2"
    if "sampler" in section:
        sampler = _sampler(doc, section["sampler"], path + ("sampler",))
    if sampler == "cmaes" and len(objectives) > 1:
        fail(
            doc,
            path + ("sampler",),
            f"sampler 'cmaes' supports one objective only, got {len(objectives)} objectives",
        )
    if sampler in ("grid", "bruteforce"):
        for name, parameter in parameters.items():
            if not isinstance(parameter, (Fixed, Choice)):
                fail(
                    doc,
                    ("parameters", name),
                    f"sampler '{sampler}' tries every combination of choices, so each searched "
                    f"parameter must be {{choices: [...]}}; got a range for {name}",
                )
    n_trials = SearchSettings.n_trials
    if "n_trials" in section:
        n_trials = check_int(
            doc, section["n_trials"], path + ("n_trials",), minimum=1, maximum=MAX_N_TRIALS
        )
    max_concurrent: int | None = None
    raw = section.get("max_concurrent", "auto")
    if raw != "auto":
        if not is_int(raw):
            fail(
                doc,
                path + ("max_concurrent",),
                f"max_concurrent must be 'auto' or an integer >= 1, got {show(raw)}",
            )
        max_concurrent = check_int(doc, raw, path + ("max_concurrent",), minimum=1, maximum=100_000)
    scheduler, grace_epochs, reduction_factor = _scheduler(doc, section, path, objectives)
    trial_timeout_s = None
    if section.get("trial_timeout_s") is not None:
        trial_timeout_s = check_number(doc, section["trial_timeout_s"], path + ("trial_timeout_s",), above=0)
    seed = SearchSettings.seed
    if "seed" in section:
        # numpy, under every Optuna sampler, takes seeds in [0, 2**32).
        seed = check_int(doc, section["seed"], path + ("seed",), minimum=0, maximum=2**32 - 1)
    enqueue: list[Mapping[str, Any]] = []
    if section.get("enqueue") is not None:
        enqueue = _enqueue(doc, section["enqueue"], path + ("enqueue",), parameters)
    budget = parse_budget(doc, section.get("budget"), path + ("budget",))
    on_oom = SearchSettings.on_oom
    if section.get("on_oom") is not None:
        on_oom = check_one_of(doc, section["on_oom"], path + ("on_oom",), ON_OOM_MODES)
    fuse = SearchSettings.fuse
    if section.get("fuse") is not None:
        fuse = _fuse(doc, section["fuse"], path + ("fuse",))
    if fuse == "true" and scheduler == "asha":
        fail(doc, path + ("fuse",), "ASHA judges each trial on its own reports; fused groups do not run under ASHA "
                                    "yet: set search.fuse to auto or false")
    fuse_max = SearchSettings.fuse_max
    if section.get("fuse_max") is not None:
        fuse_max = check_int(doc, section["fuse_max"], path + ("fuse_max",), minimum=1, maximum=100_000)
    return SearchSettings(
        sampler=sampler,
        n_trials=n_trials,
        max_concurrent=max_concurrent,
        scheduler=scheduler,  # type: ignore[arg-type]
        seed=seed,
        grace_epochs=grace_epochs,
        reduction_factor=reduction_factor,
        trial_timeout_s=trial_timeout_s,
        enqueue=tuple(enqueue),
        budget=budget,
        on_oom=on_oom,
        fuse=fuse,
        fuse_max=fuse_max,
    )


def _enqueue(doc: Document, raw: Any, path: KeyPath, parameters: Mapping[str, Parameter]) -> list[Mapping[str, Any]]:
    """Configurations to run first: each a mapping of parameters of the space to values they allow."""
    if not isinstance(raw, list):
        fail(doc, path, f"enqueue must be a list of configurations (parameter: value), got {kind(raw)}: {show(raw)}")
    out: list[Mapping[str, Any]] = []
    for i, item in enumerate(raw):
        where = path + (i,)
        entry = check_mapping(doc, item, where)
        check_keys(doc, entry, where, tuple(parameters))
        for name, value in entry.items():
            problem = _outside(parameters[name], value)
            if problem:
                fail(doc, where + (name,), f"{name} {problem}, got {show(value)}")
        out.append(entry)
    return out


def _outside(parameter: Parameter, value: Any) -> str | None:
    """Why ``value`` is not one ``parameter`` takes, or ``None``."""
    if isinstance(parameter, Fixed):
        return None if value == parameter.value else f"is fixed at {show(parameter.value)}"
    if isinstance(parameter, Choice):
        return None if value in parameter.choices else f"must be one of its choices {list(parameter.choices)}"
    if not is_number(value) or isinstance(value, bool):
        return "must be a number"
    if isinstance(parameter, IntRange) and not is_int(value):
        return "must be an integer"
    if not parameter.low <= value <= parameter.high:
        return f"must be in [{show(parameter.low)}, {show(parameter.high)}]"
    return None


def _scheduler(
    doc: Document, section: Mapping[str, Any], path: KeyPath, objectives: tuple[Objective, ...]
) -> tuple[str, float, int]:
    """``scheduler: none | asha`` or ``scheduler: {name: asha, grace_epochs: 1, reduction_factor: 3}``."""
    raw = section.get("scheduler", "none")
    path = path + ("scheduler",)
    options: Mapping[str, Any] = {}
    if isinstance(raw, Mapping):
        # Keys checked as strings first: otherwise {1: asha} is reported at
        # 'search.scheduler[1]', a list index, instead of the key '1'.
        options = check_mapping(doc, raw, path)
        check_keys(doc, options, path, _SCHEDULER_KEYS)
        if "name" not in options:
            fail(doc, path, "scheduler needs a 'name' (none or asha)")
        name = check_one_of(doc, options["name"], path + ("name",), ("none", "asha"), label="scheduler")
    else:
        name = check_one_of(doc, raw, path, ("none", "asha"), label="scheduler")
    grace, factor = SearchSettings.grace_epochs, SearchSettings.reduction_factor
    if name == "asha":
        if len(objectives) > 1:
            fail(
                doc,
                path,
                "scheduler 'asha' stops trials on one metric, so it needs a single objective; "
                f"this space has {len(objectives)} ({', '.join(o.metric for o in objectives)}). "
                "A multi-objective study runs every trial to its full budget",
            )
        if "grace_epochs" in options:
            grace = check_number(doc, options["grace_epochs"], path + ("grace_epochs",), above=0)
        if "reduction_factor" in options:
            factor = check_int(doc, options["reduction_factor"], path + ("reduction_factor",), minimum=2, maximum=100)
    elif set(options) - {"name"}:
        extra = sorted(set(options) - {"name"})[0]
        fail(doc, path + (extra,), f"{extra} applies to scheduler 'asha' only, got scheduler {show(name)}")
    return name, grace, factor


def parse_constraints(doc: Document, root: Mapping[str, Any]) -> Constraints:
    section = _section(doc, root, "constraints", _CONSTRAINT_KEYS)
    path: KeyPath = ("constraints",)
    max_batch = None
    if section.get("max_effective_batch_size") is not None:
        max_batch = check_int(doc, section["max_effective_batch_size"], path + ("max_effective_batch_size",),
                              minimum=1, maximum=2**40)
    max_lr = None
    if section.get("max_lr") is not None:
        max_lr = check_number(doc, section["max_lr"], path + ("max_lr",), above=0)
    skip = False
    if "skip_equivalent" in section:
        skip = check_bool(doc, section["skip_equivalent"], path + ("skip_equivalent",))
    duplicates = True
    if "skip_duplicates" in section:
        duplicates = check_bool(doc, section["skip_duplicates"], path + ("skip_duplicates",))
    return Constraints(max_effective_batch_size=max_batch, max_lr=max_lr, skip_equivalent=skip,
                       skip_duplicates=duplicates)


def _sampler(doc: Document, raw: Any, path: KeyPath) -> str:
    """The sampler's short name. Only samplers the search can build from the space alone (the
    space's parameters and a seed) are accepted, by short name or Optuna class name; another
    Optuna class (``BaseSampler``, ``PartialFixedSampler``) is refused here, not as a
    ``TypeError`` once ``start`` has started Ray."""
    name = check_string(doc, raw, path, label="sampler")
    by_class = {cls.lower(): short for short, cls in SAMPLER_CLASS_NAMES.items()}
    if name.lower() in SAMPLERS:
        return name.lower()
    if name.lower() in by_class:
        return by_class[name.lower()]
    accepted = f"sampler must be one of {', '.join(SAMPLERS)} or the Optuna class name of one (TPESampler...)"
    why = _UNBUILDABLE.get(name.lower())
    if why is not None:
        fail(doc, path, f"{accepted}; got {show(name)}: {why}")
    options = list(SAMPLERS) + list(SAMPLER_CLASS_NAMES.values())
    fail(doc, path, f"{accepted}; got {show(name)}{suggest(name, options)}")


#: Optuna sampler classes a space file might name that cannot be built from a space, and why.
_UNBUILDABLE: Mapping[str, str] = {
    "basesampler": "BaseSampler is the abstract base of Optuna's samplers, not one that proposes trials",
    "basegasampler": "BaseGASampler is the abstract base of Optuna's genetic samplers; nsga2 and nsga3 are two",
    "partialfixedsampler": ("PartialFixedSampler needs the fixed values and a sampler for the rest; give a "
                            "parameter a single value under parameters to fix it"),
}


def parse_resources(doc: Document, root: Mapping[str, Any]) -> ResourceSpec:
    section = _section(doc, root, "resources", _RESOURCE_KEYS)
    path: KeyPath = ("resources",)
    device = check_one_of(
        doc,
        section.get("device", "auto"),
        path + ("device",),
        ("auto", "cpu", "cuda"),
        label="device",
    )
    cpus = ResourceSpec.cpus_per_worker
    if "cpus_per_worker" in section:
        cpus = check_int(
            doc, section["cpus_per_worker"], path + ("cpus_per_worker",), minimum=1, maximum=4096
        )
    # A CPU-only space would otherwise reserve the default one GPU per rank and never start on
    # a machine without GPUs.
    gpus = 0.0 if device == "cpu" else ResourceSpec.gpus_per_worker
    if "gpus_per_worker" in section:
        gpus = _gpus(doc, section["gpus_per_worker"], path + ("gpus_per_worker",), device)
    emulate = ResourceSpec.emulate_ranks
    if section.get("emulate_ranks") is not None:
        emulate = _switch(doc, section["emulate_ranks"], path + ("emulate_ranks",))
    span = ResourceSpec.span_nodes
    if "span_nodes" in section:
        span = _span(doc, section["span_nodes"], path + ("span_nodes",))
    reuse = True
    if "reuse_workers" in section:
        reuse = check_bool(doc, section["reuse_workers"], path + ("reuse_workers",))
    mps = ResourceSpec.mps
    if section.get("mps") is not None:
        mps = _switch(doc, section["mps"], path + ("mps",))
        if mps == "on" and device == "cpu":
            fail(doc, path + ("mps",), "mps 'on' asks for CUDA MPS, which serves GPUs; this space has device 'cpu'")
    memory = None
    if section.get("memory_per_worker") is not None:
        if device == "cuda":
            fail(doc, path + ("memory_per_worker",),
                 "memory_per_worker caps a rank's memory on the CPU; with device 'cuda' the GPU's own memory is "
                 "the limit (a trial that runs out of it is recorded as out_of_memory)")
        memory = _size(doc, section["memory_per_worker"], path + ("memory_per_worker",))
    return ResourceSpec(device=device, cpus_per_worker=cpus, gpus_per_worker=gpus,  # type: ignore[arg-type]
                        emulate_ranks=emulate, span_nodes=span, reuse_workers=reuse, mps=mps,
                        memory_per_worker=memory)


# A GPU shared by more ranks than this is more processes (each with its CUDA context) than
# work; Ray's GPU accounting is exact to 1e-4.
_MOST_SHARES = 64


def _gpus(doc: Document, raw: Any, path: KeyPath, device: str) -> float:
    """``gpus_per_worker``: a whole number of GPUs (0 with device ``cpu``), or the share ``1 / k``
    of one (0.5, 0.25, 0.125...), kept as exactly ``1 / k``."""
    if not is_number(raw) or not math.isfinite(raw):
        fail(doc, path, f"gpus_per_worker must be a number of GPUs (an integer, or a share of one such as 0.5 or "
                        f"0.25), got {kind(raw)}: {show(raw)}")
    value = float(raw)
    if value < 0:
        fail(doc, path, f"gpus_per_worker must be >= 0, got {show(raw)}")
    if value == int(value):
        gpus = float(check_int(doc, int(value), path, minimum=0, maximum=64))
    elif value > 1:
        fail(doc, path, f"gpus_per_worker above 1 must be a whole number of GPUs (a rank never spans part of one "
                        f"GPU), got {show(raw)}")
    else:
        shares = round(1 / value)
        if abs(1 / value - shares) > 0.01:
            fail(doc, path, f"gpus_per_worker below 1 must be a share that divides one GPU evenly, 1/k (0.5, 0.25, "
                            f"0.2, 0.125...), so that k ranks fill it; got {show(raw)}, which is 1/{1 / value:.3g}")
        if shares > _MOST_SHARES:
            fail(doc, path, f"gpus_per_worker must be at least 1/{_MOST_SHARES} of a GPU ({_MOST_SHARES} ranks on "
                            f"one GPU), got {show(raw)}")
        gpus = 1 / shares
    if device == "cpu" and gpus > 0:
        fail(doc, path, f"gpus_per_worker must be 0 with device 'cpu', got {show(raw)}")
    if device == "cuda" and gpus == 0:
        fail(doc, path, "gpus_per_worker must be > 0 with device 'cuda', got 0")
    return gpus


def _switch(doc: Document, raw: Any, path: KeyPath) -> Switch:
    """``auto``, ``on`` or ``off``; ``true`` and ``false`` mean ``on`` and ``off`` (YAML 1.1 also
    reads a bare ``on`` or ``off`` as one of them)."""
    if isinstance(raw, bool):
        return "on" if raw else "off"
    if not isinstance(raw, str) or raw not in SWITCHES:
        listed = ", ".join(f"'{o}'" for o in SWITCHES)
        fail(doc, path, f"{label_of(path)} must be one of {listed} (true and false mean 'on' and 'off'), got "
                        f"{show(raw)}{suggest(raw, SWITCHES)}")
    return cast(Switch, raw)


def _span(doc: Document, raw: Any, path: KeyPath) -> Literal["auto", "false"]:
    """``resources.span_nodes``: ``auto`` or ``false`` (YAML's bare ``false``, ``off`` and ``no``
    are booleans, read as ``false``)."""
    if raw is False or (isinstance(raw, str) and raw.lower() in ("false", "off")):
        return "false"
    if isinstance(raw, str) and raw.lower() == "auto":
        return "auto"
    fail(doc, path, "span_nodes must be 'auto' (a trial no node holds runs across nodes) or false (such a trial "
                    f"is refused), got {kind(raw)}: {show(raw)}")


def _fuse(doc: Document, raw: Any, path: KeyPath) -> Fuse:
    """``search.fuse``: ``auto``, ``true`` or ``false``, in any case. A bare ``true`` or ``false``
    is a YAML boolean, and so are ``on``, ``off``, ``yes`` and ``no`` (YAML 1.1): all are read as
    the setting they name."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if not isinstance(raw, str) or raw.lower() not in FUSE_MODES:
        listed = ", ".join(f"'{o}'" for o in FUSE_MODES)
        fail(doc, path, f"fuse must be one of {listed} (bare on and off, yes and no mean true and false), got "
                        f"{kind(raw)}: {show(raw)}{suggest(raw, FUSE_MODES)}")
    return cast(Fuse, raw.lower())


_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)?\s*")
# Below this a rank could not even hold the interpreter and torch it runs in.
_LEAST_MEMORY = 2**20


def _size(doc: Document, raw: Any, path: KeyPath) -> int:
    """A size in bytes: an integer, or a number and a unit (``1.5GiB``, ``512MiB``, ``2GB``)."""
    rule = "a size: bytes as an integer, or a number and a unit such as 1.5GiB, 512MiB or 2GB"
    if is_number(raw) and math.isfinite(raw) and float(raw) == int(raw):
        size = int(raw)
    elif isinstance(raw, str) and (match := _SIZE.fullmatch(raw)) is not None:
        unit = (match.group(2) or "B").lower()
        if unit not in _UNITS:
            units = ("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")
            fail(doc, path, f"{label_of(path)} must be {rule}; got {show(raw)}: the unit must be one of "
                            f"{', '.join(units)}{suggest(match.group(2), units)}")
        size = int(float(match.group(1)) * _UNITS[unit])
    else:
        fail(doc, path, f"{label_of(path)} must be {rule}, got {kind(raw)}: {show(raw)}")
    if size < _LEAST_MEMORY:
        fail(doc, path, f"{label_of(path)} must be at least 1MiB (a rank holds the interpreter and torch), got "
                        f"{show(raw)}")
    return size
