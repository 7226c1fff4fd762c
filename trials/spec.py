"""``TrialSpec``: everything one trial needs, as one frozen, picklable value, and
``trial_spec``, the one place a configuration of a space becomes one.

Every caller that needs a trial's spec builds it with ``trial_spec(space, params, ...)``: the
searcher for each proposed configuration, the grid's constraint check, the budget's device
count, ``hpsearch export-trial``. The launcher hands the spec to every rank. It holds plain data
only, so it crosses process boundaries unchanged.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from hpsearch import record
from hpsearch.search_spaces.space import (
    CORE_PARAMETERS,
    DATA_PATHS,
    MAX_GRAD_NORM,
    OPTIMIZER_PARAMETERS,
    PRECISIONS,
    TRAINING_PARAMETERS,
    WARMUP_FROM,
    WARMUP_FROM_BASE_LR,
)
from hpsearch.trials.scaling import effective_batch_size, scaled_lr

if TYPE_CHECKING:
    from hpsearch.search_spaces.space import SearchSpace

__all__ = ["MEMBER_FIELDS", "MEMBER_HYPERPARAMETERS", "TrialSpec", "duplicate_key", "fusion_key", "group_spec",
           "processes_for", "ran_shape", "trial_spec"]

#: What the members of a fused group may differ in (``search.fuse``): their own ``TrialSpec``
#: fields, and in ``hyperparameters`` the optimizer's settings in ``MEMBER_HYPERPARAMETERS``.
#: Everything else shapes the computation (the workload, its options and searched settings, b,
#: W, A, epochs, seed, precision, compile, device, data path, the optimizer's kind, the schedule).
MEMBER_FIELDS: tuple[str, ...] = (record.BASE_LR, record.LR_RULE, record.WARMUP_EPOCHS, "hyperparameters")
MEMBER_HYPERPARAMETERS: tuple[str, ...] = ("momentum", "nesterov", "weight_decay", "betas", "eps", MAX_GRAD_NORM)


@dataclass(frozen=True)
class TrialSpec:
    """One trial's configuration.

    Attributes:
        per_device_batch_size: b, samples per rank per micro-step.
        world_size: W, DDP ranks.
        grad_accum_steps: A, micro-steps per optimizer step.
        lr_rule: ``constant``, ``linear`` or ``sqrt``.
        base_lr: The LR tuned for ``base_batch_size``.
        base_batch_size: B0.
        warmup_epochs: Linear warmup to the scaled LR over these epochs.
        warmup_from: Where the warmup starts: ``base_lr`` (Goyal et al.) or ``zero``
            (``scaling.lr_at``). A spec written before the setting existed reads ``base_lr``.
        schedule: After warmup: ``none``, ``cosine`` or ``step`` (see ``scaling.lr_at``).
        workload: Built-in workload name or ``"pkg.module:function"``.
        workload_options: The space's ``workload.options``.
        epochs: Passes over the training set.
        hyperparameters: Every other parameter: the optimizer's (``optimizer``, ``momentum``,
            ``nesterov``, ``weight_decay``) and the workload's own (``hidden``...), which reach
            the factory through ``factory_options``.
        device: ``cpu`` or ``cuda`` (already resolved, never ``auto``).
        cpus_per_worker: torch threads per rank.
        seed: Seeds model init, data order and the train/validation split.
        emulated_ranks: Virtual ranks per process (V). The trial runs W / V processes, each
            playing V ranks as gradient accumulation in the sample order those ranks would
            read, so fewer devices preview a W-device run with identical math.
        save_model: Rank 0 writes the final weights to ``model.pt`` in the run folder.
        eval_every_samples: Rank 0 also evaluates each time this many more samples were seen
            (``None``: at the end of each epoch only).
        data: How batches reach the device: ``auto``, ``device`` (tensor data kept on the
            device, micro-batches gathered there by index) or ``loader`` (a ``DataLoader``).
        loader: The loader path's ``DataLoader`` settings: ``workers``, ``pin_memory`` (``None``
            or absent: auto), ``prefetch_factor``, ``persistent_workers``.
        precision: ``fp32``, ``tf32`` or ``bf16`` (autocast, float32 weights). A ``precision``
            in ``hyperparameters`` (a searched parameter) sets it.
        compile: ``torch.compile`` the model; the compiling steps' time is ``compile_s``.
        keep_data: A warm rank process keeps the data it built for the next trial with the same
            workload and data options (``False``: build it every trial).
        memory_limit_bytes: The memory one rank may hold on the CPU (``resources.memory_per_worker``);
            past it the trial fails as ``out_of_memory``. ``None``: no cap (always on CUDA, where
            the GPU's own memory is the limit).
        gpu_share: The share of a GPU one rank has on CUDA (``resources.gpus_per_worker``, at
            most 1): the data it keeps on the device take at most ``DEVICE_MEMORY_SHARE`` of
            that share's memory (``hpsearch.trials.rank.data``). 1 on the CPU.
        fused: A fused group's members (``search.fuse``, ``hpsearch.trials.rank.fused``): per
            member, the fields it has of its own (``MEMBER_FIELDS``) and its ``member`` index
            in the group; every other field is the group's. Empty: a trial of its own.
        fuse: ``auto`` (a group times its fused steps against solo ones on its first steps and
            declines where fusing does not pay) or ``true`` (it fuses where it can).
        data_fingerprint: The ``Workload.data_fingerprint`` the study recorded when its search
            started; a rank whose workload builds another fails the trial (``None``: unchecked).
    """

    per_device_batch_size: int
    base_lr: float
    world_size: int = 1
    grad_accum_steps: int = 1
    lr_rule: str = "linear"
    base_batch_size: int = 8
    warmup_epochs: float = 0.0
    warmup_from: str = WARMUP_FROM_BASE_LR
    schedule: str = "none"
    workload: str = "digits_cnn"
    workload_options: Mapping[str, Any] = field(default_factory=dict)
    epochs: int = 10
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    cpus_per_worker: int = 1
    seed: int = 0
    emulated_ranks: int = 1
    save_model: bool = False
    eval_every_samples: int | None = None
    data: str = "auto"
    loader: Mapping[str, Any] = field(default_factory=dict)
    precision: str = "fp32"
    compile: bool = False
    keep_data: bool = True
    memory_limit_bytes: int | None = None
    gpu_share: float = 1.0
    fused: tuple[Mapping[str, Any], ...] = ()
    fuse: str = "auto"
    data_fingerprint: str | None = None

    @property
    def effective_batch_size(self) -> int:
        """B = b x W x A."""
        return effective_batch_size(self.per_device_batch_size, self.world_size, self.grad_accum_steps)

    @property
    def processes(self) -> int:
        """Real processes (devices) the trial uses: W / emulated_ranks."""
        return self.world_size // self.emulated_ranks

    @property
    def max_grad_norm(self) -> float | None:
        """The L2 norm each step's gradient is clipped to (the ``max_grad_norm`` parameter), or
        ``None``: no clipping."""
        value = self.hyperparameters.get(MAX_GRAD_NORM)
        return None if value is None else float(value)

    @property
    def warms_from_base_lr(self) -> bool:
        """Whether ``base_lr`` itself shapes the LR curve (a warmup that starts from it), not
        only through the peak it scales to."""
        return self.warmup_epochs > 0 and self.warmup_from == WARMUP_FROM_BASE_LR

    @property
    def factory_options(self) -> dict[str, Any]:
        """What the workload factory receives: ``workload_options`` with every parameter the
        engine does not own merged over them (a parameter wins over the option of its name).

        Example:
            >>> TrialSpec(per_device_batch_size=8, base_lr=0.1, workload_options={"hidden": 8, "samples": 64},
            ...           hyperparameters={"hidden": 32, "momentum": 0.9}).factory_options
            {'hidden': 32, 'samples': 64}
        """
        owned = OPTIMIZER_PARAMETERS + TRAINING_PARAMETERS
        workload_parameters = {k: v for k, v in self.hyperparameters.items() if k not in owned}
        return {**self.workload_options, **workload_parameters}

    @property
    def lr(self) -> float:
        """The applied peak LR, ``rule(base_lr, B / B0)``."""
        return scaled_lr(self.lr_rule, self.base_lr, self.effective_batch_size, self.base_batch_size)

    def member(self, k: int) -> TrialSpec:
        """The ``k``-th member of a fused group as a trial of its own (what it trains solo).

        Example:
            >>> group = TrialSpec(per_device_batch_size=8, base_lr=0.1, fused=(
            ...     {"member": 0, "base_lr": 0.1, "lr_rule": "linear", "warmup_epochs": 0.0, "hyperparameters": {}},
            ...     {"member": 1, "base_lr": 0.2, "lr_rule": "sqrt", "warmup_epochs": 0.0, "hyperparameters": {}}))
            >>> group.member(1).base_lr, group.member(1).lr_rule, group.member(1).fused
            (0.2, 'sqrt', ())
        """
        own = {key: value for key, value in self.fused[k].items() if key in MEMBER_FIELDS}
        return replace(self, fused=(), **own)

    @property
    def members(self) -> list[TrialSpec]:
        """A fused group's members as trials of their own (``[self]`` for a trial of its own)."""
        return [self.member(k) for k in range(len(self.fused))] if self.fused else [self]

    def __post_init__(self) -> None:
        # A spec read back from JSON (export-trial's trial.json) holds a list.
        object.__setattr__(self, "fused", tuple(self.fused))
        if self.emulated_ranks < 1 or self.world_size % self.emulated_ranks:
            raise ValueError(f"emulated_ranks must divide world_size {self.world_size}, got {self.emulated_ranks}")
        if "precision" in self.hyperparameters:
            # A searched precision is a parameter like the optimizer's keys (recorded with the
            # trial's params, compared by skip_equivalent); the field follows it.
            object.__setattr__(self, "precision", str(self.hyperparameters["precision"]))
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.warmup_from not in WARMUP_FROM:
            raise ValueError(f"warmup_from must be one of {', '.join(WARMUP_FROM)}, got {self.warmup_from!r}")
        if self.data not in DATA_PATHS:
            raise ValueError(f"data must be one of {', '.join(DATA_PATHS)}, got {self.data!r}")

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (for logs and the trial's record)."""
        return asdict(self)


def processes_for(world_size: int, emulate: str, max_processes: int | None) -> int:
    """How many processes play a trial's ``world_size`` ranks (``resources.emulate_ranks``): all of
    them in one (``on``), one each (``off``), or, with ``auto``, one each where a node holds
    that many (``max_processes``: its devices, one GPU per rank), else the most that divide the
    world size and fit, each playing its share of the ranks (a one-GPU user studies W devices).

    Example:
        >>> processes_for(8, "auto", 1), processes_for(8, "auto", 4), processes_for(6, "auto", 4), processes_for(2, "auto", 2)
        (1, 4, 3, 2)
        >>> processes_for(8, "on", 8), processes_for(8, "off", 1)
        (1, 8)
    """
    if emulate == "on":
        return 1
    if emulate == "off" or max_processes is None or world_size <= max_processes:
        return world_size
    return max(d for d in range(1, max(1, max_processes) + 1) if world_size % d == 0)


def ran_shape(ran_as: Mapping[str, Any] | None) -> dict[str, Any]:
    """The parameters a trial halved by ``search.on_oom: accumulate`` ran at instead of its own
    (its ``ran_as`` record: per-device batch and accumulation), to lay over its parameters.

    Example:
        >>> ran_shape({"per_device_batch_size": 128, "grad_accum_steps": 2, "out_of_memory_at": 256})
        {'per_device_batch_size': 128, 'grad_accum_steps': 2}
        >>> ran_shape(None)
        {}
    """
    if not isinstance(ran_as, Mapping):
        return {}
    return {k: ran_as[k] for k in (record.PER_DEVICE_BATCH_SIZE, record.GRAD_ACCUM_STEPS)}


def trial_spec(space: SearchSpace, params: Mapping[str, Any], *, device: str = "cpu",
               max_processes: int | None = None, **overrides: Any) -> TrialSpec:
    """The ``TrialSpec`` of one configuration of ``space``: the one place a configuration
    becomes a spec.

    The sampled ``params`` give the searched and fixed parameters (``per_device_batch_size``,
    ``world_size``, ``lr_rule``... and any other, which reach the optimizer or the workload's
    factory); the space gives everything else (workload, epochs, scaling, seed, threads per
    rank); ``resources.emulate_ranks`` says how many processes play its ranks
    (``processes_for``).

    Args:
        space: The validated space.
        params: One configuration, as sampled.
        device: ``cpu`` or ``cuda``, already resolved from ``resources.device``.
        max_processes: The most processes one trial can have on a node of the cluster (its
            GPUs, or CPU slots), once known; ``None``: no limit (``emulate_ranks: auto`` then
            runs one process per rank).
        **overrides: ``TrialSpec`` fields to set instead of the space's (``hpsearch
            export-trial`` trains real ranks, ``emulated_ranks=1``, and keeps the weights,
            ``save_model=True``).

    Example:
        >>> from hpsearch.search_spaces import parse_space
        >>> space = parse_space("parameters: {per_device_batch_size: 8, base_lr: 0.1, momentum: 0.9}")
        >>> spec = trial_spec(space, {"per_device_batch_size": 32, "world_size": 2, "base_lr": 0.01,
        ...                           "momentum": 0.9, "lr_rule": "linear"})
        >>> spec.effective_batch_size, spec.lr, dict(spec.hyperparameters)
        (64, 0.08, {'momentum': 0.9})
    """
    core = {k: params[k] for k in CORE_PARAMETERS if k in params}
    others = {k: v for k, v in params.items() if k not in CORE_PARAMETERS}
    world_size = int(core.get(record.WORLD_SIZE, 1))
    fields: dict[str, Any] = dict(
        base_batch_size=space.scaling.base_batch_size,
        warmup_epochs=space.scaling.warmup_epochs,
        warmup_from=space.scaling.warmup_from,
        schedule=space.scaling.schedule,
        workload=space.workload.name,
        workload_options=dict(space.workload.options),
        epochs=space.workload.epochs,
        eval_every_samples=space.workload.eval_every_samples,
        save_model=space.workload.save_model != "none",
        data=space.workload.data,
        loader=asdict(space.workload.loader),
        precision=space.workload.precision,
        compile=space.workload.compile,
        keep_data=space.workload.keep_data,
        device=device,
        cpus_per_worker=space.resources.cpus_per_worker,
        memory_limit_bytes=space.resources.memory_per_worker if device == "cpu" else None,
        gpu_share=min(1.0, float(space.resources.gpus_per_worker)) if device == "cuda" else 1.0,
        seed=space.search.seed,
        emulated_ranks=world_size // processes_for(world_size, space.resources.emulate_ranks, max_processes),
    )
    fields.update(core, hyperparameters=others)
    fields.update(overrides)
    return TrialSpec(**fields)


def fusion_key(spec: TrialSpec) -> Hashable:
    """What trials must share to train fused (``search.fuse``): every field of the spec but
    those its members may differ in (``MEMBER_FIELDS``), with the hyperparameters that are not
    the optimizer's own settings (its kind, the workload's searched settings).

    Example:
        >>> a = TrialSpec(per_device_batch_size=8, base_lr=0.1, hyperparameters={"momentum": 0.9, "hidden": 32})
        >>> b = TrialSpec(per_device_batch_size=8, base_lr=0.3, lr_rule="sqrt", hyperparameters={"momentum": 0.5, "hidden": 32})
        >>> fusion_key(a) == fusion_key(b), fusion_key(a) == fusion_key(replace(b, per_device_batch_size=16))
        (True, False)
    """
    # The data fingerprint is the study's, the same for every trial: left out, so the keys a study
    # kept its fuse decisions under before specs carried it still match.
    shape = {k: v for k, v in spec.to_dict().items()
             if k not in MEMBER_FIELDS and k not in ("fused", "fuse", "data_fingerprint")}  # not a record name
    shaping = {k: v for k, v in spec.hyperparameters.items() if k not in MEMBER_HYPERPARAMETERS}
    return repr(sorted({**shape, "hyperparameters": sorted(shaping.items(), key=lambda kv: kv[0])}.items()))


def duplicate_key(spec: TrialSpec) -> Hashable:
    """What two trials must share to train the very same thing (``constraints.skip_duplicates``):
    every field of the spec, the per-device batch, world size, accumulation, seed, epochs,
    warmup, schedule, workload, its options and every other parameter included, with the rule
    and the base LR counted through the applied LR they give (the base LR itself too with a
    warmup from ``base_lr``, which starts from it). Nothing is rounded: two LRs are the same only as the same
    float. At B = B0 every rule gives ``base_lr``, so a rules grid's three trials there share a
    key; ``b 32, W 2`` and ``b 64, W 1`` do not (``constraints.skip_equivalent`` merges those).

    Example:
        >>> at_b0 = TrialSpec(per_device_batch_size=8, base_lr=0.01, base_batch_size=8)
        >>> duplicate_key(at_b0) == duplicate_key(replace(at_b0, lr_rule="sqrt"))
        True
        >>> duplicate_key(at_b0) == duplicate_key(replace(at_b0, lr_rule="sqrt", seed=1))
        False

    With a warmup from ``base_lr`` two base LRs that scale to one LR still differ; from zero
    they do not:

        >>> linear = TrialSpec(per_device_batch_size=32, base_lr=0.005, base_batch_size=8, warmup_epochs=1.0)
        >>> sqrt = replace(linear, base_lr=0.01, lr_rule="sqrt")
        >>> linear.lr == sqrt.lr, duplicate_key(linear) == duplicate_key(sqrt)
        (True, False)
        >>> duplicate_key(replace(linear, warmup_from="zero")) == duplicate_key(replace(sqrt, warmup_from="zero"))
        True
    """
    fields = {k: v for k, v in spec.to_dict().items() if k not in (record.LR_RULE, "fused", "fuse")}  # not a record name
    fields[record.LR] = spec.lr
    if not spec.warms_from_base_lr:
        # Without a warmup from base_lr the loop sets an LR from the rule's peak alone at every
        # step: base_lr reaches nothing else (the optimizer is built with it and its LR
        # replaced before the first step).
        fields[record.BASE_LR] = None
    return _frozen(fields)


def _frozen(value: Any) -> Hashable:
    """``value`` as a hashable key that compares as the values do: mappings by their sorted
    items, sequences item by item, numbers as floats (``record.param_value_key``)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return record.param_value_key(value)


def group_spec(members: Sequence[TrialSpec], fuse: str = "auto") -> TrialSpec:
    """One spec for a fused group of ``members`` (which share a ``fusion_key``): the first
    member's, with every member's own fields in ``fused``."""
    if len({fusion_key(m) for m in members}) != 1:
        raise ValueError("the members of a fused group must share everything but MEMBER_FIELDS")
    own = tuple({"member": k, **{f: getattr(m, f) for f in MEMBER_FIELDS}} for k, m in enumerate(members))
    return replace(members[0], fused=own, fuse=fuse)
