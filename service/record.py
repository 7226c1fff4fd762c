"""The trial record: every name a trial writes into its study, declared once.

These names are a contract (docs/design.md, "What each trial must record"). The trial engine reports
them, the searcher writes them as params, user attrs, objective values and intermediate values,
and the CLI, the study API, the dashboard and the analysis read them back. Each name is declared
here once, as data, with what it means, its axis label and which way is better, so the readers
never guess.

The module sits in the lowest layer (as the error root does) so that every layer can name the
record without importing upward; it is pure data (and the one byte formatter every layer shows
figures with, ``format_bytes``) and imports nothing of hpsearch.

Example:
    >>> FIELDS[RUNTIME_S].label, FIELDS[RUNTIME_S].direction
    ('runtime (s)', 'minimize')
    >>> label("per_device_batch_size"), label("my_own_param")
    ('per-device batch size', 'my_own_param')
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CURVE_METRICS",
    "FIELDS",
    "FINISHED_STATES",
    "METRICS",
    "NOT_RUN_REASONS",
    "PHASE_NAMES",
    "RECORDED_METRICS",
    "RERUN_REASONS",
    "STATES",
    "Direction",
    "Field",
    "direction_of",
    "format_bytes",
    "label",
    "param_value_key",
    "params_key",
]

Direction = Literal["minimize", "maximize"]

# ---- parameters the trial engine interprets (every other parameter goes to the workload) ----
PER_DEVICE_BATCH_SIZE = "per_device_batch_size"
WORLD_SIZE = "world_size"
GRAD_ACCUM_STEPS = "grad_accum_steps"
LR_RULE = "lr_rule"
BASE_LR = "base_lr"

# ---- derived when a trial is proposed ----
EFFECTIVE_BATCH_SIZE = "effective_batch_size"
BASE_BATCH_SIZE = "base_batch_size"
#: The LR the trial's rule scaled to, ``base_lr x rule(B / B0)``: the peak that warmup rises to
#: and a schedule starts from, "the trial's LR" for every reader (docs/science.md).
LR = "lr"
WARMUP_EPOCHS = "warmup_epochs"
#: Where warmup starts (``scaling.warmup_from``): ``base_lr`` or ``zero``. A trial recorded before
#: the setting existed warmed up from ``base_lr`` (``warmup_from_of``).
WARMUP_FROM = "warmup_from"
#: What runs after warmup (``scaling.schedule``): ``none``, ``cosine`` or ``step``.
LR_SCHEDULE = "lr_schedule"
#: The seed of the trial's model initialisation and data order: the space's ``search.seed``, or,
#: for a confirmation run, one no earlier run of its configuration used. Trials recorded before
#: it was kept ran with the space's ``search.seed``.
SEED = "seed"

# ---- measured by the trial (rank 0's reports) ----
VAL_ACCURACY = "val_accuracy"
CHANCE_ACCURACY = "chance_accuracy"
VAL_LOSS = "val_loss"
TRAIN_LOSS = "train_loss"
EPOCHS_COMPLETED = "epochs_completed"
#: The LR the warmup and the schedule gave the last optimizer step before an evaluation; at the
#: trial's end its final LR (near 0 after a cosine schedule). Never the trial's LR: that is ``lr``.
LAST_LR = "last_lr"
SAMPLES_SEEN = "samples_seen"
STEPS = "steps"
RUNTIME_S = "runtime_s"
TRAIN_S = "train_s"
DEVICE_SECONDS = "device_seconds"
SAMPLES_PER_S = "samples_per_s"
COMM_FRACTION = "comm_fraction"
ALLREDUCE_CALLS = "allreduce_calls"
NOISE_SCALE = "noise_scale"
NOISE_SCALE_NOTE = "noise_scale_note"
EMULATED_RANKS = "emulated_ranks"
DEVICE = "device"
NODE = "node"
NODE_ID = "node_id"
#: How many nodes the trial's ranks ran on (1 unless it spanned nodes: ``resources.span_nodes``),
#: and their Ray node ids, rank 0's node first. Studies recorded before trials could span nodes
#: lack them: read them as 1 node, ``[node_id]``.
NODES = "nodes"
NODE_IDS = "node_ids"
#: The GPUs a CUDA trial's ranks ran on, in rank order, as Ray numbers them on the node.
GPU_IDS = "gpu_ids"
#: Where rank 0 wrote the trial's final weights (``workload.save_model``).
MODEL_PATH = "model_path"
#: How the batches reached the device (``device`` or ``loader``, ``workload.data``), and why.
DATA_PATH = "data_path"
DATA_PATH_REASON = "data_path_reason"
#: Whether the rank process built the workload's data (``built``), took the copy it kept from an
#: earlier trial (``kept``), or builds it every trial (``off``: ``workload.keep_data: false``;
#: ``not declared``: the factory does not say which options its data depend on).
DATA_CACHE = "data_cache"
#: Seconds rank 0 spent before its first step: the workload built (or taken from the kept
#: copy), the model on its device, the data placed.
SETUP_S = "setup_s"
#: The arithmetic the trial trained and evaluated in (``workload.precision``).
PRECISION = "precision"
#: With ``workload.compile``: seconds of the steps and evaluations that compiled the model,
#: left out of ``runtime_s`` and ``train_s`` (what it costs depends on the compile caches, not on
#: the configuration); a budget counts it.
COMPILE_S = "compile_s"
#: The most memory one of the trial's ranks held at once, in bytes: on CUDA the allocator's peak
#: (``torch.cuda.max_memory_allocated``), on the CPU the rank process's peak resident memory
#: during the trial; the largest over the ranks.
PEAK_MEMORY_BYTES = "peak_memory_bytes"
#: The memory one of the trial's ranks could hold, in bytes: ``resources.memory_per_worker`` on
#: the CPU, the GPU's total memory on CUDA (shared where trials share the GPU); absent on a CPU
#: without a cap.
MEMORY_LIMIT_BYTES = "memory_limit_bytes"
#: Where a trial that ran out of memory was when it did: ``training`` (a step at its per-device
#: batch), ``evaluation`` (a validation batch, at most the per-device batch) or ``setup`` (the
#: model and data built and placed). Only ``training`` says its per-device batch is too large.
OUT_OF_MEMORY_PHASE = "out_of_memory_phase"
#: CUDA MPS on the trial's node: ``on``, or ``off: <why>`` (``resources.mps``).
MPS = "mps"
#: The per-device batch and accumulation the trial ran at, when ``search.on_oom: accumulate``
#: halved its per-device batch (doubling its accumulation, the same effective batch) because a
#: larger one ran out of memory: ``{"per_device_batch_size": b, "grad_accum_steps": A, "out_of_memory_at": b0}``.
RAN_AS = "ran_as"
#: Fused trials (``search.fuse``): configurations that share a shape train as one model vectorized
#: over its members (``hpsearch.trials.rank.fused``). Each member stays a trial of its own; these
#: say with whom it trained. ``fused_group``: the group's id (the study number of its first
#: member), shared by its members; ``fused_members``: how many members the group started with.
FUSED_GROUP = "fused_group"
FUSED_MEMBERS = "fused_members"
#: Whether the trial trained fused: ``on``, or ``off: <why>`` (not fusable, fusing did not pay
#: on this device, no partner of its shape).
FUSE = "fuse"
#: What ``runtime_s`` means: ``solo`` (the trial's own wall time) or ``solo_estimate`` (a fused
#: member: what it would take alone on its devices, from solo steps of its shape timed in the
#: same trial on the same devices, ``solo_step_s``); the group's own wall time is ``fused_runtime_s``.
RUNTIME_BASIS = "runtime_basis"
FUSED_RUNTIME_S = "fused_runtime_s"
#: The median time of one optimizer step of the whole group (``fused_step_s``) and of one member
#: alone (``solo_step_s``), timed side by side on the group's first steps, on the same batches.
FUSED_STEP_S = "fused_step_s"
SOLO_STEP_S = "solo_step_s"
#: In a fused group's reports (rank 0's ``metrics.jsonl``): the member a report is about (its
#: index in the group), a member's failure (its reason), the member's share of the group's wall
#: time so far (each stretch of it shared among the members training then), and, in the final
#: report of a group that did not train fused, why.
FUSED_MEMBER = "fused_member"
MEMBER_FAILED = "member_failed"
DEVICE_SHARE_S = "device_share_s"
FUSE_DECLINED = "fuse_declined"
#: A fused member's: why its group's steady step times, timed again a quarter into the run, say
#: fusing no longer pays (``fuse: auto``): the group finished fused, and no later group of its
#: shape is fused.
FUSE_STOPPED_PAYING = "fuse_stopped_paying"
#: A language model's (a workload with ``tokens_per_sample``, such as ``text_lm``): the
#: validation perplexity, ``exp(val_loss)`` of a loss that is a mean per token, and the training
#: tokens seen over all ranks, ``samples_seen`` x the tokens per sample.
VAL_PERPLEXITY = "val_perplexity"
TOKENS_SEEN = "tokens_seen"

# ---- bookkeeping written by the searcher ----
#: Why a trial is PRUNED or FAIL (a short code, see the ``REASON_*`` names).
STATUS_REASON = "status_reason"
#: The human-readable explanation of ``status_reason``.
STATUS_DETAIL = "status_detail"
#: The per-evaluation series of a trial: ``{metric: [value per evaluation]}`` on ``samples_seen``.
CURVES = "curves"
#: The number of the interrupted trial a queued rerun repeats.
RERUN_OF = "rerun_of"
#: The trial that trained this one's exact duplicate (``constraints.skip_duplicates``): the same
#: b, W, A, applied LR, seed and every other setting the trial sees, another rule or base LR at
#: most. This trial did not train: it carries that trial's end, values, curves and measurements,
#: and spends no device time (``hpsearch.planner.budget.spent_device_seconds``).
DUPLICATE_OF = "duplicate_of"
#: Why the trial ran, where it is not one of the search's own: ``confirmation`` (``ROLE_CONFIRMATION``),
#: a run of the study's own answer (``analysis.confirm``; docs/analysis.md, "Confirmation").
ROLE = "role"
#: A confirmation run's record: ``{"round": k, "devices": N, "target": "val_accuracy >= 0.95",
#: "params": {...}, "predicted": {"samples": [low, estimate, high], "time_s": [...]}}``. Its
#: ``params`` are the exact configuration it ran: where a value lies outside the study's
#: distribution of that parameter (an LR the law gives between the choices, a world size the
#: space never searched), Optuna cannot hold it as a param of the study, and this is where it is.
CONFIRMATION = "confirmation"
#: ``ROLE``'s value for a confirmation run.
ROLE_CONFIRMATION = CONFIRMATION
#: When the trial got its devices and its ranks started (seconds since the epoch); a RUNNING
#: trial without it is still waiting for resources.
TRAINING_STARTED = "training_started"
#: Where a trial's time went, as ``{phase: seconds since it was asked}`` with the wall-clock time
#: it was asked under ``asked_at`` (``PHASE_NAMES``, in order): so a slow orchestrator shows.
PHASES = "phases"
#: The phases a trial records, in the order they happen: asked (the searcher proposed it),
#: launched (Tune ran it in a trial process, which asked the reservation desk for its devices),
#: devices_free (its devices were free for it: when it asked, or when a trial that held them
#: released them), reserved (its devices placed and its node's warm rank processes ready),
#: handed (its ranks to warm workers), ready (every rank began), training_started and
#: training_ended (rank 0's loop), last_report (the trial's process had rank 0's final report)
#: and told (the searcher wrote its end to the study). What each span between two of them is
#: called (start-up, waiting for devices, training, the rest) is ``hpsearch.study.PHASE_SPANS``.
PHASE_NAMES: tuple[str, ...] = ("asked", "launched", "devices_free", "reserved", "handed", "ready", "training_started",
                                "training_ended", "last_report", "told")
#: Beside the phases, a trial whose ranks ran more than once on the devices it held (search.on_oom:
#: accumulate retried it halved) records how many attempts failed before the last and their
#: seconds, from the first attempt's ``handed`` to the last one's start; its phases are the last
#: attempt's.
FAILED_ATTEMPTS = "failed_attempts"
FAILED_ATTEMPTS_S = "failed_attempts_s"

# ---- the study's own user attrs (hpsearch writes them once per study) ----
#: The space file's text the search was started with.
ATTR_SPACE_TEXT = "hpsearch.space_text"
#: The versions of hpsearch, Optuna, Ray and PyTorch that started it.
ATTR_VERSIONS = "hpsearch.versions"
#: The objectives' metric names, in order.
ATTR_OBJECTIVES = "hpsearch.objectives"
#: The study's target number of finished trials (the space's, or a total given to ``resume``).
ATTR_N_TRIALS = "hpsearch.n_trials"
#: The study's budget (the space's ``search.budget``, or the one given to ``start``/``resume``):
#: ``{"wall_s": seconds or null, "device_hours": hours or null}``.
ATTR_BUDGET = "hpsearch.budget"
#: What the study's searches spent, over every run: ``{"wall_s": ..., "device_s": ...}``.
ATTR_BUDGET_SPENT = "hpsearch.budget_spent"
#: The trials whose saved weights a better trial made the search delete (``save_model: best``).
ATTR_REMOVED_MODELS = "hpsearch.removed_models"
#: The study's confirmation rounds, in order (``hpsearch.study.ConfirmationRound``): each the
#: answer it ran, what it predicted before it ran, its trials and whether the answer held.
ATTR_CONFIRMATIONS = "hpsearch.confirmations"
#: A random id the study gets when it is created: a copy of the store holds the same study
#: (same name, same Optuna ``study_id``), so files on disk name the store and this id
#: (``hpsearch.store.ownership``).
ATTR_STUDY_UID = "hpsearch.study_uid"
#: What ``search.fuse: auto`` decided for the study's shapes (``hpsearch.planner.fuse_decisions``):
#: those that do not fuse and why, those that do; a resume follows them rather than timing again.
ATTR_FUSE_DECISIONS = "hpsearch.fuse_decisions"
#: The data the study trains on, for a workload that names them (``Workload.data_fingerprint``):
#: ``{"sha256": ..., "python": ...}``, the hash the search's check built and the Python that
#: built it. A resume that builds another refuses to run; so does each rank, per trial.
ATTR_DATA_FINGERPRINT = "hpsearch.data_fingerprint"

# ---- status reasons ----
REASON_EARLY_STOPPED = "early_stopped"
REASON_CONSTRAINT = "constraint"
REASON_EQUIVALENT = "equivalent"
REASON_INTERRUPTED = "interrupted"
#: The search's budget ran out: stopped at the limit, or not started because the budget left
#: could not fit it (``search.budget``).
REASON_BUDGET = "budget"
REASON_DIVERGED = "diverged"
REASON_TIMEOUT = "timeout"
REASON_RANK_EXITED = "rank_exited"
REASON_PEER_LOST = "peer_lost"
REASON_WORKLOAD_ERROR = "workload_error"
REASON_NO_RESULT = "no_result"
#: A rank ran out of memory (the device's, or ``resources.memory_per_worker`` on the CPU).
REASON_OUT_OF_MEMORY = "out_of_memory"
#: Not started: the same configuration ran out of memory at this per-device batch or a smaller one.
REASON_EXCEEDS_MEMORY = "exceeds_memory"
REASON_MISSING_METRIC = "missing_metric"
REASON_STOPPED = "stopped"
REASON_ERROR = "error"

#: Trials the search itself cut short (Ctrl-C, a dead orchestrator, the budget): ``resume``
#: runs their configurations again.
RERUN_REASONS = frozenset({REASON_INTERRUPTED, REASON_BUDGET})
#: Trials that did not run to an end of their own: skipped by a constraint or as equivalent, or
#: cut short by a stopped search. They do not count as finished.
NOT_RUN_REASONS = frozenset({REASON_CONSTRAINT, REASON_EQUIVALENT, REASON_EXCEEDS_MEMORY}) | RERUN_REASONS

#: Optuna's trial states as the record names them, and the ones that have ended.
STATES: tuple[str, ...] = ("RUNNING", "WAITING", "COMPLETE", "PRUNED", "FAIL")
FINISHED_STATES = frozenset({"COMPLETE", "PRUNED", "FAIL"})


@dataclass(frozen=True)
class Field:
    """One name of the trial record.

    Attributes:
        name: The name as stored (param, user attr, objective or curve key).
        label: A human axis title, with units.
        kind: ``param`` (the engine's own parameters), ``derived`` (computed when the trial is
            proposed), ``measured`` (reported by the trial) or ``bookkeeping``.
        direction: Which values are better, where that means something (``None`` otherwise).
            For a study's objectives the study's own directions rule; this is the default for
            every other reader (axes of a frontier, "best" in a figure).
        objective: Whether a space's ``objectives`` may name it.
        curve: Whether it is kept per evaluation in the ``curves`` attr.
        doc: What it is, in one line.
    """

    name: str
    label: str
    kind: Literal["param", "derived", "measured", "bookkeeping"]
    direction: Direction | None = None
    objective: bool = False
    curve: bool = False
    doc: str = ""


_MIN: Direction = "minimize"
_MAX: Direction = "maximize"

#: Every name of the record, in the order tables show them.
FIELDS: Mapping[str, Field] = {f.name: f for f in (
    Field(PER_DEVICE_BATCH_SIZE, "per-device batch size", "param", doc="b, samples per rank per micro-step"),
    Field(WORLD_SIZE, "world size (devices)", "param", doc="W, DDP ranks"),
    Field(GRAD_ACCUM_STEPS, "gradient accumulation steps", "param", doc="A, micro-steps per optimizer step"),
    Field(LR_RULE, "LR rule", "param", doc="constant, linear or sqrt in B / B0"),
    Field(BASE_LR, "base learning rate", "param", doc="the LR meant for the base batch B0"),
    Field(EFFECTIVE_BATCH_SIZE, "effective batch size", "derived", doc="B = b x W x A"),
    Field(BASE_BATCH_SIZE, "base batch size", "derived", doc="B0, the batch base_lr is meant for"),
    Field(LR, "learning rate", "derived",
          doc="the LR the rule scaled to, base_lr x rule(B / B0): the peak warmup rises to and a schedule starts from"),
    Field(WARMUP_EPOCHS, "warmup epochs", "derived", doc="linear warmup to lr over these epochs"),
    Field(WARMUP_FROM, "warmup from", "derived", doc="where warmup starts: base_lr (Goyal et al.) or zero; "
                                                      "absent on trials recorded before it existed: base_lr"),
    Field(LR_SCHEDULE, "LR schedule", "derived", doc="after warmup: none (lr held), cosine (to 0) or step (x0.1 at 50%, 75%)"),
    Field(SEED, "seed", "derived", doc="seeds the model's initial weights and the data order"),
    Field(VAL_ACCURACY, "validation accuracy", "measured", _MAX, objective=True, curve=True),
    Field(VAL_LOSS, "validation loss", "measured", _MIN, objective=True, curve=True),
    Field(CHANCE_ACCURACY, "chance accuracy", "measured",
          doc="a classifier's validation accuracy when it always answers the validation set's commonest class; "
              "a trial at or below it learned nothing and stands on no frontier"),
    Field(TRAIN_LOSS, "training loss", "measured", _MIN, objective=True, curve=True),
    Field(EPOCHS_COMPLETED, "epochs completed", "measured"),
    Field(LAST_LR, "LR of the last step", "measured", curve=True,
          doc="what warmup and the schedule made of lr at the last step before each evaluation; at the end, the final LR"),
    Field(SAMPLES_SEEN, "samples seen", "measured", curve=True, doc="training samples over all ranks"),
    Field(STEPS, "optimizer steps", "measured", curve=True),
    Field(RUNTIME_S, "runtime (s)", "measured", _MIN, objective=True, curve=True,
          doc="wall time of the training job, evaluations included, compiling left out (compile_s)"),
    Field(TRAIN_S, "training time (s)", "measured", _MIN, curve=True,
          doc="wall time of the optimizer steps alone, evaluations left out"),
    Field(DEVICE_SECONDS, "device-seconds", "measured", _MIN, objective=True, doc="runtime x devices"),
    Field(SAMPLES_PER_S, "throughput (samples/s)", "measured", _MAX, objective=True),
    Field(COMM_FRACTION, "communication share of step time", "measured", _MIN, objective=True, curve=True,
          doc="share of step time in gradient all-reduce"),
    Field(ALLREDUCE_CALLS, "all-reduce calls", "measured"),
    Field(NOISE_SCALE, "gradient noise scale", "measured", curve=True, doc="B_simple (McCandlish et al. 2018)"),
    Field(NOISE_SCALE_NOTE, "noise scale note", "measured"),
    Field(EMULATED_RANKS, "emulated ranks per process", "measured"),
    Field(DEVICE, "device", "measured"),
    Field(NODE, "node", "bookkeeping"),
    Field(NODE_ID, "Ray node id", "bookkeeping"),
    Field(NODES, "nodes", "measured", doc="how many nodes the trial's ranks ran on (resources.span_nodes)"),
    Field(NODE_IDS, "Ray node ids", "bookkeeping", doc="the nodes of the trial's ranks, rank 0's first"),
    Field(GPU_IDS, "GPUs (rank order)", "bookkeeping"),
    Field(PEAK_MEMORY_BYTES, "peak memory per rank (bytes)", "measured", _MIN,
          doc="the most memory one rank held at once: CUDA's allocator peak, or the CPU rank's peak resident memory"),
    Field(MEMORY_LIMIT_BYTES, "memory limit per rank (bytes)", "measured",
          doc="resources.memory_per_worker on the CPU, the GPU's total memory on CUDA"),
    Field(OUT_OF_MEMORY_PHASE, "ran out of memory in", "measured",
          doc="training, evaluation or setup: where an out_of_memory trial was when it ran out"),
    Field(MPS, "CUDA MPS", "bookkeeping"),
    Field(RAN_AS, "ran as (b, A)", "bookkeeping"),
    Field(MODEL_PATH, "saved model", "measured",
          doc="the trial's final weights (a torch state dict), on the node of its rank 0"),
    Field(DATA_PATH, "data path", "measured", doc="device (tensors on the device) or loader (a DataLoader)"),
    Field(DATA_PATH_REASON, "why this data path", "measured"),
    Field(DATA_CACHE, "workload data", "measured", doc="built, kept (from an earlier trial), off or not declared"),
    Field(SETUP_S, "setup time (s)", "measured", _MIN, doc="rank 0's time from its start to its first step"),
    Field(PRECISION, "precision", "derived", doc="fp32, tf32 or bf16 (autocast): workload.precision or a parameter"),
    Field(COMPILE_S, "compile time (s)", "measured", _MIN,
          doc="torch.compile's share of the wall time (the steps that compiled), left out of runtime_s and train_s"),
    Field(FUSE, "fused", "bookkeeping", doc="on, or off: why the trial trained on its own"),
    Field(FUSED_GROUP, "fused group", "bookkeeping", doc="the number of the group's first trial"),
    Field(FUSED_MEMBERS, "fused members", "bookkeeping", doc="how many trials the group held at its start"),
    Field(FUSED_MEMBER, "fused member", "bookkeeping", doc="in a group's reports: the member a report is about"),
    Field(MEMBER_FAILED, "member failed", "bookkeeping", doc="in a group's reports: a member's failure"),
    Field(FUSE_DECLINED, "fuse declined", "bookkeeping",
          doc="in a group's final report: why the group did not train fused"),
    Field(FUSE_STOPPED_PAYING, "fusing stopped paying", "bookkeeping",
          doc="a fused member's: why its group's steady step times say fusing no longer pays"),
    Field(RUNTIME_BASIS, "runtime basis", "bookkeeping",
          doc="solo (its own wall time) or solo_estimate (a fused member: what it would take alone)"),
    Field(FUSED_RUNTIME_S, "fused group's runtime (s)", "measured", _MIN, doc="the group's own wall time"),
    Field(FUSED_STEP_S, "fused step time (s)", "measured", _MIN, doc="one optimizer step of the whole group"),
    Field(SOLO_STEP_S, "solo step time (s)", "measured", _MIN,
          doc="one optimizer step of one member alone, timed beside the group's"),
    Field(DEVICE_SHARE_S, "device share (s)", "measured", _MIN,
          doc="in a group's reports: the member's share of the group's wall time so far"),
    Field(FAILED_ATTEMPTS, "failed attempts", "bookkeeping",
          doc="attempts that ran out of memory before the last (search.on_oom: accumulate)"),
    Field(FAILED_ATTEMPTS_S, "failed attempts (s)", "measured", _MIN, doc="their seconds on the trial's devices"),
    Field(STATUS_REASON, "status reason", "bookkeeping"),
    Field(STATUS_DETAIL, "status detail", "bookkeeping"),
    Field(CURVES, "curves", "bookkeeping"),
    Field(RERUN_OF, "rerun of trial", "bookkeeping"),
    Field(DUPLICATE_OF, "duplicate of trial", "bookkeeping",
          doc="the trial that trained this exact trial; this one did not train and carries its values and end"),
    Field(ROLE, "role", "bookkeeping", doc="confirmation: a run of the study's own answer, apart from n_trials"),
    Field(CONFIRMATION, "confirmation", "bookkeeping",
          doc="a confirmation run's round, devices, exact configuration and what the answer predicted before it ran"),
    Field(TRAINING_STARTED, "training started", "bookkeeping"),
    Field(PHASES, "phases (s since asked)", "bookkeeping"),
    # Not an objective: it orders trials exactly as val_loss does, which is the one to name.
    Field(VAL_PERPLEXITY, "validation perplexity", "measured", _MIN,
          doc="a language model's exp(val_loss), the loss a mean per token"),
    Field(TOKENS_SEEN, "tokens seen", "measured", doc="a language model's training tokens over all ranks: samples_seen x tokens per sample"),
)}

#: Metrics a space's objectives may name.
METRICS: tuple[str, ...] = tuple(f.name for f in FIELDS.values() if f.objective)
#: Series kept per evaluation in the ``curves`` attr (``samples_seen`` is their x axis).
CURVE_METRICS: tuple[str, ...] = (SAMPLES_SEEN, STEPS, VAL_ACCURACY, VAL_LOSS, TRAIN_LOSS, LAST_LR, RUNTIME_S, TRAIN_S,
                                  COMM_FRACTION, NOISE_SCALE)
#: Result keys the searcher copies to a trial's user attrs when it ends.
RECORDED_METRICS: tuple[str, ...] = (
    VAL_ACCURACY, VAL_LOSS, CHANCE_ACCURACY, TRAIN_LOSS, EPOCHS_COMPLETED, SAMPLES_SEEN, STEPS, RUNTIME_S, TRAIN_S, DEVICE_SECONDS,
    SAMPLES_PER_S, COMM_FRACTION, ALLREDUCE_CALLS, NOISE_SCALE, NOISE_SCALE_NOTE, EMULATED_RANKS, DEVICE, NODE,
    NODE_ID, NODES, NODE_IDS, GPU_IDS, LAST_LR, DATA_PATH, DATA_PATH_REASON, DATA_CACHE, SETUP_S, PRECISION, COMPILE_S, PEAK_MEMORY_BYTES,
    MEMORY_LIMIT_BYTES, OUT_OF_MEMORY_PHASE, MPS, FUSED_GROUP, FUSED_MEMBERS, FUSE, FUSE_STOPPED_PAYING, RUNTIME_BASIS, FUSED_RUNTIME_S,
    FUSED_STEP_S, SOLO_STEP_S, VAL_PERPLEXITY, TOKENS_SEEN,
)


def label(name: str) -> str:
    """A human axis title, with units, for a record name; any other name comes back as it is.

    Example:
        >>> label("device_seconds")
        'device-seconds'
    """
    field = FIELDS.get(name)
    return field.label if field is not None else name


def direction_of(name: str) -> Direction | None:
    """Which values of a record name are better, or ``None`` where that means nothing.

    A study's own objectives carry their direction in the study; prefer
    ``hpsearch.study.direction`` where a study's objective directions are at hand.

    Example:
        >>> direction_of("val_loss"), direction_of("world_size")
        ('minimize', None)
    """
    field = FIELDS.get(name)
    return field.direction if field is not None else None


_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(count: float | None) -> str:
    """A byte count as every reader writes it (the trial's failure details, its data path's
    reason, the CLI, the analysis and the dashboard): the largest binary unit it reaches, three
    significant digits; ``-`` for none. One function, so a figure reads the same wherever it
    shows (three once rounded it three ways: ``600.0 MiB``, ``600 MiB``, ``1.50 GiB``).

    Example:
        >>> format_bytes(1288490188.8), format_bytes(512 * 2**20), format_bytes(900), format_bytes(None)
        ('1.2 GiB', '512 MiB', '900 B', '-')
        >>> format_bytes(107216896), format_bytes(1023 * 2**20)
        ('102 MiB', '1023 MiB')
    """
    if count is None or not math.isfinite(count):
        return "-"
    value = float(count)
    unit = 0
    while abs(value) >= 1024 and unit < len(_BYTE_UNITS) - 1:
        value /= 1024
        unit += 1
    text = f"{value:.3g}" if unit else f"{value:.0f}"
    if "e" in text:  # 1000-1023 of a unit: four digits read better than 1.02e+03
        text = f"{value:.0f}"
    return f"{text} {_BYTE_UNITS[unit]}"


def param_value_key(value: object) -> object:
    """One parameter value as it compares in a key: every number as a float (a grid's ``1`` and
    Optuna's stored ``1.0`` are one value), booleans and strings as they are, anything else by
    its ``repr`` (hashable, and equal only where it prints alike).

    Example:
        >>> param_value_key(1) == param_value_key(1.0), param_value_key(True), param_value_key("sqrt")
        (True, True, 'sqrt')
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return repr(value)


def params_key(params: Mapping[str, object], *, leave_out: frozenset[str] | set[str] = frozenset()) -> tuple[tuple[str, object], ...]:
    """A configuration's parameters as one hashable key, ``leave_out`` left out: the one rule by
    which the search, the sampler, the memory ceilings and the analysis tell configurations
    apart. (Three helpers once disagreed: one compared ``repr`` and saw ``1`` and ``1.0`` as
    two configurations, one compared floats and saw them as one.)

    Example:
        >>> params_key({"base_lr": 1, "lr_rule": "sqrt"}) == params_key({"lr_rule": "sqrt", "base_lr": 1.0})
        True
        >>> params_key({"per_device_batch_size": 8, "hidden": 64}, leave_out={"per_device_batch_size"})
        (('hidden', 64.0),)
    """
    return tuple(sorted((k, param_value_key(v)) for k, v in params.items() if k not in leave_out))
