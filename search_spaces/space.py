"""The typed, validated form of a space file.

Everything here is a frozen value: a ``SearchSpace`` is built once by
``hpsearch.search_spaces.load_space`` and then only read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from hpsearch import record

__all__ = [
    "CORE_PARAMETERS",
    "DATA_PATHS",
    "ENGINE_PARAMETERS",
    "FUSE_MODES",
    "LR_RULES",
    "LR_SCHEDULES",
    "MAX_GRAD_NORM",
    "MAX_N_TRIALS",
    "ON_OOM_MODES",
    "OPTIMIZERS",
    "OPTIMIZER_PARAMETERS",
    "PRECISIONS",
    "SAVE_MODEL_MODES",
    "SWITCHES",
    "TRAINING_PARAMETERS",
    "WARMUP_FROM",
    "WARMUP_FROM_BASE_LR",
    "WARMUP_FROM_ZERO",
    "AnalysisSpec",
    "Budget",
    "Choice",
    "Constraints",
    "Fixed",
    "FloatRange",
    "Fuse",
    "IntRange",
    "LoaderSpec",
    "Objective",
    "Parameter",
    "ResourceSpec",
    "ScalingSpec",
    "SearchSettings",
    "SearchSpace",
    "Switch",
    "TrackingSpec",
    "WorkloadSpec",
]

#: Learning-rate scaling rules in the effective batch size (docs/science.md).
LR_RULES: tuple[str, ...] = ("constant", "linear", "sqrt")

#: LR schedules after warmup: constant peak, cosine decay to 0, or x0.1 at 50% and 75% of training.
LR_SCHEDULES: tuple[str, ...] = ("none", "cosine", "step")

#: Where warmup starts (``scaling.warmup_from``): Goyal et al.'s gradual warmup from ``base_lr`` to
#: the scaled LR, or from (about) zero to it, as transformer recipes warm up (docs/trials.md).
#: (Named apart from the ``base_lr`` parameter: the value says where the LR starts, not which LR.)
WARMUP_FROM_BASE_LR = "base_lr"  # not a record name
WARMUP_FROM_ZERO = "zero"
WARMUP_FROM: tuple[str, ...] = (WARMUP_FROM_BASE_LR, WARMUP_FROM_ZERO)

#: Parameters the trial engine itself interprets: the batch, the world size and the LR rule.
CORE_PARAMETERS: tuple[str, ...] = (
    record.PER_DEVICE_BATCH_SIZE,
    record.WORLD_SIZE,
    record.GRAD_ACCUM_STEPS,
    record.LR_RULE,
    record.BASE_LR,
)

#: The optimizers the engine builds from the ``optimizer`` parameter (PyTorch's), in any case
#: (``AdamW`` is ``adamw``). The space validator and the trial loop read this one list, so a
#: name the loop cannot build fails validation, not every trial of its search
#: (``workload_error``, after Ray has started).
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam", "adamw")

#: The most trials one search may be asked for (``search.n_trials``, ``start --n-trials``): past
#: this a number is a typo.
MAX_N_TRIALS = 1_000_000

#: Parameters the engine hands to the optimizer it builds (docs/workloads.md lists their defaults).
OPTIMIZER_PARAMETERS: tuple[str, ...] = ("optimizer", "momentum", "nesterov", "weight_decay")

#: Clip each optimizer step's gradient to this L2 norm over all the model's parameters
#: (``torch.nn.utils.clip_grad_norm_``), after DDP's all-reduce and the last micro-step, as
#: language-model recipes do (GPT-2/3, nanoGPT: 1.0). Absent: no clipping.
MAX_GRAD_NORM = "max_grad_norm"

#: Parameters of how the engine computes, searchable like any parameter: ``precision`` (the
#: space's ``workload.precision`` otherwise) and ``max_grad_norm`` (gradient clipping).
TRAINING_PARAMETERS: tuple[str, ...] = ("precision", MAX_GRAD_NORM)

#: Every parameter the engine owns. Any other parameter of a space is a workload setting: it
#: reaches the workload factory as an option, over the same-named entry of ``workload.options``.
ENGINE_PARAMETERS: tuple[str, ...] = CORE_PARAMETERS + OPTIMIZER_PARAMETERS + TRAINING_PARAMETERS

#: How a trial's batches reach its device (``workload.data``): ``device`` keeps tensor data on
#: the device and gathers each micro-batch there by index; ``loader`` loads them through a
#: ``DataLoader``; ``auto`` picks ``device`` where the data is tensors and fits
#: (docs/trials.md, "Data on the device").
DATA_PATHS: tuple[str, ...] = ("auto", "device", "loader")

#: The arithmetic of training and evaluation (``workload.precision``): float32 throughout,
#: float32 with TF32 matrix products on CUDA, or bfloat16 autocast with float32 weights.
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16")

#: Which finished trials keep their final weights (``workload.save_model``): none, every
#: COMPLETE trial, or only the trials no other COMPLETE trial beats on every objective.
SAVE_MODEL_MODES: tuple[str, ...] = ("none", "all", "best")

#: What a search does with a configuration at or above a per-device batch that ran out of
#: memory for the same configuration (``search.on_oom``): not start it (``exceeds_memory``), or
#: run it at half the per-device batch and twice the accumulation, the same effective batch.
ON_OOM_MODES: tuple[str, ...] = ("skip", "accumulate")

#: Whether trials that differ only in their optimizer's numbers train as one vectorized model
#: (``search.fuse``): where timing shows it pays, always where they can, or never. A space file
#: may write ``true`` and ``false`` bare (YAML 1.1 also reads ``on``, ``off``, ``yes``, ``no`` so).
FUSE_MODES: tuple[str, ...] = ("auto", "true", "false")

#: The settings of ``resources.emulate_ranks`` and ``resources.mps``; ``true`` and ``false`` in
#: a space file mean ``on`` and ``off`` (YAML 1.1 reads a bare ``on`` as ``true``).
SWITCHES: tuple[str, ...] = ("auto", "on", "off")

Switch = Literal["auto", "on", "off"]
Fuse = Literal["auto", "true", "false"]
Scalar = int | float | str | bool


@dataclass(frozen=True)
class Fixed:
    """A parameter held at one value (``grad_accum_steps: 1``)."""

    value: Scalar


@dataclass(frozen=True)
class Choice:
    """A categorical parameter (``{choices: [8, 32, 128]}``)."""

    choices: tuple[Scalar, ...]


@dataclass(frozen=True)
class FloatRange:
    """A float in ``[low, high]`` (``{low: 1e-3, high: 1e-1, log: true}``)."""

    low: float
    high: float
    log: bool = False
    step: float | None = None


@dataclass(frozen=True)
class IntRange:
    """An integer in ``[low, high]`` (``{low: 1, high: 8, type: int}``)."""

    low: int
    high: int
    log: bool = False
    step: int = 1


Parameter = Fixed | Choice | FloatRange | IntRange


@dataclass(frozen=True)
class LoaderSpec:
    """The ``DataLoader`` of the loader path (``workload.loader``), for data that is not tensors.

    ``None`` means ``auto``: ``workers`` is the rank's other CPUs on CUDA (``cpus_per_worker``
    - 1, at most 8) and 0 on the CPU, whose cores train; ``pin_memory`` is on for CUDA.
    ``prefetch_factor`` batches per worker are loaded ahead; ``persistent_workers`` keeps the
    workers from one epoch to the next (never from one trial to the next).
    """

    workers: int | None = None
    pin_memory: bool | None = None
    prefetch_factor: int = 2
    persistent_workers: bool = True


@dataclass(frozen=True)
class WorkloadSpec:
    """What each trial trains: a built-in workload name or ``"pkg.module:function"``.

    ``eval_every_samples`` makes rank 0 evaluate each time this many more training samples
    (over all ranks) of an epoch have been seen, counted from the epoch's start, besides at
    every epoch's end (``None``: at epoch ends only). Time-to-target is interpolated between evaluations, so a finer cadence gives it a
    finer resolution, at the cost of the evaluations' time.

    ``save_model`` (one of ``SAVE_MODEL_MODES``) makes rank 0 of each trial write its final
    weights to ``model.pt`` in the trial's run folder: ``all`` keeps every COMPLETE trial's,
    ``best`` only those of the trials no other COMPLETE trial beats on every objective (the
    Pareto front; the best trial of a single-objective study), deleting the others' as they fall
    behind.

    ``data`` (one of ``DATA_PATHS``) says how batches reach the device, ``loader`` how the
    ``DataLoader`` of the loader path runs; ``precision`` (one of ``PRECISIONS``) and
    ``compile`` (``torch.compile`` of the model) how the trial computes; ``keep_data: false``
    makes every trial build its workload's data afresh instead of taking the copy a warm rank
    process kept from an earlier trial (docs/trials.md, "Data on the device").
    """

    name: str = "digits_cnn"
    epochs: int = 10
    options: Mapping[str, Any] = field(default_factory=dict)
    eval_every_samples: int | None = None
    save_model: str = "none"
    data: str = "auto"
    loader: LoaderSpec = LoaderSpec()
    precision: str = "fp32"
    compile: bool = False
    keep_data: bool = True


@dataclass(frozen=True)
class AnalysisSpec:
    """What the analysis of the study answers for (``hpsearch recommend``, the dashboard), and
    how the search confirms its answer.

    ``target`` is a metric and the value a trial must reach (at least that for a maximised
    metric, at most for a minimised one), e.g. ``("val_accuracy", 0.95)``; ``None`` lets the
    analysis derive one from the study (docs/analysis.md).

    ``confirm`` says how many confirmation runs a round has: ``auto`` (2 where the confirmation
    budget fits them, else 1), ``off`` (none), or K. After its trials, the search runs its own
    answer as new trials with new seeds and says whether it held, in rounds, until a round holds
    or ``confirm_rounds`` rounds or ``confirm_share`` of the search's device time are spent,
    whichever ends first (docs/analysis.md, "Confirmation").
    """

    target: tuple[str, float] | None = None
    confirm: str | int = "auto"
    confirm_rounds: int = 2
    confirm_share: float = 0.25


@dataclass(frozen=True)
class TrackingSpec:
    """Where the search also logs its trials (``tracking:``; docs/tracking.md).

    ``mlflow`` is an MLflow tracking URI (``http://host:5000``, ``sqlite:///mlflow.db``, a
    folder), or ``None``: no MLflow unless ``--mlflow`` or ``MLFLOW_TRACKING_URI`` says where.
    ``experiment`` names the MLflow experiment (default: the study's name). ``line`` is where
    ``tracking.mlflow`` sits in the space file, for the message that MLflow is not installed.
    """

    mlflow: str | None = None
    experiment: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class ScalingSpec:
    """How the learning rate follows the effective batch.

    ``base_batch_size`` is B0, the batch ``base_lr`` is meant for; the applied peak LR is
    ``rule(base_lr, B / B0)``, reached by linear warmup over ``warmup_epochs`` from
    ``warmup_from`` (``base_lr`` or ``zero``); after warmup the ``schedule`` (``none``,
    ``cosine``, ``step``) runs over the remaining epochs.
    """

    base_batch_size: int = 8
    warmup_epochs: float = 0.0
    schedule: str = "none"
    warmup_from: str = WARMUP_FROM_BASE_LR


@dataclass(frozen=True)
class Objective:
    """One metric the study optimises."""

    metric: str
    direction: Literal["maximize", "minimize"]


@dataclass(frozen=True)
class Budget:
    """What a whole search may spend, over ``start`` and every ``resume`` of its study.

    ``wall_s`` is wall-clock seconds of the search (each run counted from its beginning, Ray's
    start-up included, to its end), ``device_hours`` the trials' device time (the sum of their
    ``device_seconds``); ``None``: no limit of that kind. A search starts no trial that the
    budget left cannot fit, and stops its running trials at the limit (docs/search.md,
    "Budgets").

    Example:
        >>> Budget(wall_s=7200).merged(Budget(device_hours=4.0))
        Budget(wall_s=7200, device_hours=4.0)
        >>> Budget(wall_s=7200).merged(Budget()).limited   # an empty override lifts every limit
        False
    """

    wall_s: float | None = None
    device_hours: float | None = None

    @property
    def limited(self) -> bool:
        """Whether any limit is set."""
        return self.wall_s is not None or self.device_hours is not None

    def merged(self, override: Budget | None) -> Budget:
        """This budget with the limits ``override`` names replaced; an override that names
        none (``--budget none``) lifts every limit, ``None`` changes nothing."""
        if override is None:
            return self
        if not override.limited:
            return override
        return Budget(wall_s=override.wall_s if override.wall_s is not None else self.wall_s,
                      device_hours=override.device_hours if override.device_hours is not None
                      else self.device_hours)


@dataclass(frozen=True)
class SearchSettings:
    """How trials are proposed and scheduled.

    ``max_concurrent`` is ``None`` for ``auto``: as many trials as the cluster's resources fit.
    ``scheduler: asha`` stops unpromising trials early (single-objective studies only). Its
    budget is counted in samples seen, so trials of different batch sizes compare at equal
    data: the first rung is at ``grace_epochs`` epochs' worth of samples, and each rung keeps
    the best ``1 / reduction_factor`` of the trials that reach it. ``trial_timeout_s`` stops a
    trial that runs longer (a hung data loader, a deadlock) as FAIL ``timeout``; ``None``: no
    limit. ``enqueue`` holds configurations (parameter name -> value) that run first, before
    the sampler proposes any (``hpsearch recommend --space`` puts its recommendation there).
    ``budget`` caps what the whole search spends (``Budget``); the search ends at
    ``n_trials`` or at the budget, whichever comes first. ``on_oom`` (one of ``ON_OOM_MODES``)
    says what becomes of a configuration at or above a per-device batch that ran out of memory
    for the same configuration (every parameter but the LR, the rule and the seed): ``skip``
    records it as not run (``exceeds_memory``), ``accumulate`` runs it at half the per-device
    batch and twice the accumulation, halving until it fits.

    ``fuse`` (one of ``FUSE_MODES``) runs fused trials: trials that share everything that shapes
    the computation (the workload, its options and its own searched settings, b, W, A, epochs,
    seed, precision, compile, device, data path, optimizer kind and schedule kind) and differ
    only in ``base_lr``, ``lr_rule``, warmup, ``momentum``, ``nesterov`` and ``weight_decay``
    train as one model vectorized over the members. ``auto`` fuses where timing shows it pays on
    the device, ``true`` always where trials are fusable, ``false`` never; ``true`` is refused
    under ``scheduler: asha``, which judges each trial on its own reports (under ASHA ``auto``
    runs every trial solo). ``fuse_max`` is the most members one fused group may hold
    (docs/search.md, "Fused trials").
    """

    sampler: str = "tpe"
    n_trials: int = 10
    max_concurrent: int | None = None
    scheduler: Literal["none", "asha"] = "none"
    seed: int = 0
    grace_epochs: float = 1.0
    reduction_factor: int = 3
    trial_timeout_s: float | None = None
    enqueue: tuple[Mapping[str, Scalar], ...] = ()
    budget: Budget = Budget()
    on_oom: str = "skip"
    fuse: Fuse = "auto"
    fuse_max: int = 16


@dataclass(frozen=True)
class Constraints:
    """Configurations the search skips without training them.

    A skipped configuration is recorded as a PRUNED trial with ``status_reason`` ``constraint``
    or ``equivalent``, so samplers learn to avoid it, and it does not count towards
    ``n_trials``.

    Attributes:
        max_effective_batch_size: Skip trials whose ``b x W x A`` is above this.
        max_lr: Skip trials whose scaled peak learning rate is above this.
        skip_equivalent: Skip a configuration whose effective setting (effective batch,
            applied learning rate and every other hyperparameter) equals one already tried:
            for instance ``b=32, W=2`` after ``b=64, W=1`` with the same rule, or any rule at
            ``B = B0``, where all rules give ``base_lr``. Such trials train the same
            optimisation and differ only in how the batch is split across devices.
        skip_duplicates: Do not train a configuration that trains the very same thing as one
            the study already ran or is running (``hpsearch.trials.spec.duplicate_key``: the
            same b, W, A, applied LR, seed and every other setting; another rule or base LR at
            most, as every rule at ``B = B0``). Unlike the skips above, such a duplicate is
            recorded as the trial it duplicates ended (COMPLETE with its values, or its failure),
            with ``duplicate_of`` naming it, counts toward ``n_trials`` and spends no device
            time. On by default; ``false`` trains every configuration (repeats that differ only
            by nondeterminism).
    """

    max_effective_batch_size: int | None = None
    max_lr: float | None = None
    skip_equivalent: bool = False
    skip_duplicates: bool = True

    @property
    def any(self) -> bool:
        """Whether any constraint is set."""
        return self.max_effective_batch_size is not None or self.max_lr is not None or self.skip_equivalent


@dataclass(frozen=True)
class ResourceSpec:
    """What one DDP rank (worker) of a trial needs.

    ``gpus_per_worker`` is a whole number of GPUs, or a share of one that divides it (0.5,
    0.25, 0.125...: ``1 / k``), so that ranks of k different trials share a GPU; two ranks of
    one trial never share one. It is 0 with ``device: cpu``.

    ``emulate_ranks`` (one of ``SWITCHES``): ``on`` runs every trial in one process that plays
    all its world_size ranks as gradient accumulation, in the sample order the real ranks
    would read: a one-device preview of a W-device run with the same math (runtimes are then
    one device's); ``auto`` does so for the trials whose world size the cluster's devices cannot
    hold (one node's, with ``span_nodes: false``); ``off`` never.

    ``span_nodes``: ``auto`` runs a trial whose ranks no node holds across as few nodes as hold
    it, as one DDP job (``hpsearch.trials.node.span``); ``false`` refuses such a space, as
    before trials could span nodes.

    ``reuse_workers: false`` runs every rank in a fresh process instead of a warm one that
    served earlier trials (docs/trials.md, "How ranks start: warm rank processes"): slower to
    start, and the reference that reuse is checked against; the results are the same.

    ``mps`` (one of ``SWITCHES``): CUDA MPS for the search's GPUs; ``auto`` starts it where
    trials share GPUs and it can start, ``on`` refuses to run without it.

    ``memory_per_worker``: bytes one rank may hold on the CPU (``None``: no cap); a rank that
    needs more fails as ``out_of_memory``, as one would on a GPU whose memory is full.
    """

    device: Literal["auto", "cpu", "cuda"] = "auto"
    cpus_per_worker: int = 1
    gpus_per_worker: float = 1.0
    emulate_ranks: Switch = "auto"
    span_nodes: Literal["auto", "false"] = "auto"
    reuse_workers: bool = True
    mps: Switch = "auto"
    memory_per_worker: int | None = None


@dataclass(frozen=True)
class SearchSpace:
    """A validated space file.

    Attributes:
        study: Study name (default: the file's stem).
        storage: Storage URL from the file, or ``None`` to use the settings' default.
        parameters: Name -> parameter, in file order; always holds every name of
            ``CORE_PARAMETERS`` (defaults filled in).
        source_text: The YAML text the space was read from, kept on the study so that it can be
            resumed and understood later.
    """

    study: str
    workload: WorkloadSpec
    scaling: ScalingSpec
    parameters: Mapping[str, Parameter]
    objectives: tuple[Objective, ...]
    search: SearchSettings
    resources: ResourceSpec
    constraints: Constraints = Constraints()
    analysis: AnalysisSpec = AnalysisSpec()
    tracking: TrackingSpec = TrackingSpec()
    storage: str | None = None
    source_text: str = ""
    source_path: str | None = None

    @property
    def searched(self) -> dict[str, Parameter]:
        """The parameters that vary between trials (everything but ``Fixed``)."""
        return {k: p for k, p in self.parameters.items() if not isinstance(p, Fixed)}

    @property
    def fixed(self) -> dict[str, Scalar]:
        """The parameters held at one value."""
        return {k: p.value for k, p in self.parameters.items() if isinstance(p, Fixed)}

    def grid_size(self) -> int | None:
        """How many distinct configurations the space has, or ``None`` when some parameter is
        continuous."""
        sizes = []
        for p in self.parameters.values():
            if isinstance(p, Fixed):
                sizes.append(1)
            elif isinstance(p, Choice):
                sizes.append(len(p.choices))
            else:
                return None
        return math.prod(sizes)

    def max_world_size(self) -> int:
        """The largest world size any trial of this space can ask for."""
        return max(self._world_size_bounds())

    def min_world_size(self) -> int:
        """The smallest world size any trial of this space can ask for."""
        return min(self._world_size_bounds())

    def _world_size_bounds(self) -> tuple[int, int]:
        p = self.parameters[record.WORLD_SIZE]
        if isinstance(p, Fixed):
            return int(p.value), int(p.value)
        if isinstance(p, Choice):
            sizes = [int(c) for c in p.choices]
            return min(sizes), max(sizes)
        return int(p.low), int(p.high)



#: Sampler short names a space file may give as ``search.sampler``, with the Optuna class each
#: one stands for. A class name (``TPESampler``) is accepted too and read as its short name.
SAMPLER_CLASS_NAMES: Mapping[str, str] = {
    "grid": "GridSampler",
    "random": "RandomSampler",
    "tpe": "TPESampler",
    "nsga2": "NSGAIISampler",
    "nsga3": "NSGAIIISampler",
    "cmaes": "CmaEsSampler",
    "qmc": "QMCSampler",
    "gp": "GPSampler",
    "bruteforce": "BruteForceSampler",
}
SAMPLERS: tuple[str, ...] = tuple(SAMPLER_CLASS_NAMES)
__all__ += ["SAMPLERS", "SAMPLER_CLASS_NAMES"]
