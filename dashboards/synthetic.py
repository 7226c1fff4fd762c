"""A synthetic study: what a real search would write, without training anything.

For docstring examples, dashboard tests and benchmarks that need a study of a given size now
(a real 10,000-trial search takes a cluster and days). :func:`synthetic_study` writes the same
params, user attrs, per-epoch ``curves``, intermediate values, objectives and study user attrs
as ``hpsearch start`` (DESIGN.md, "What each trial must record"), with numbers drawn from a
simple model of data-parallel training that has the shape real searches show:

- accuracy at a fixed LR falls as the effective batch B grows (``constant``); the ``linear``
  rule recovers it up to a critical batch and diverges well beyond it; ``sqrt`` lies between;
- runtime falls with world size, less than linearly (all-reduce time grows with W);
- the gradient noise scale sits near the critical batch; trials of W x A = 1 record none;
- a few trials FAIL with ``status_reason`` ``diverged`` (the LR was far too large) and a few
  are PRUNED with ``early_stopped`` (the worst ones, cut at 1 or 3 of 10 epochs).

Nothing here is a measurement: the space text says so in a comment.
"""

from __future__ import annotations

import heapq
import json
import math
import warnings
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from importlib.metadata import version
from typing import Any

import numpy as np
import optuna
from hpsearch.errors import StudyExistsError
from hpsearch.search import Search
from hpsearch.store import ATTR_N_TRIALS, ATTR_OBJECTIVES, ATTR_SPACE_TEXT, ATTR_VERSIONS, open_storage

__all__ = ["synthetic_study"]

# The space the synthetic trials are drawn from. It validates (hpsearch.search_spaces) and
# names only what the model below uses, so a reader of the study sees where every number
# came from. A real search of it would need CIFAR-10 at the path and 8 GPUs per node.
_SPACE_TEXT = """\
# Synthetic study written by hpsearch.dashboards.synthetic (seed {seed}): no trial was run,
# every number comes from a model of data-parallel training, not a measurement.
study: {study}
workload:
  name: cifar10
  epochs: {epochs}
  options: {{path: /data/cifar-10-batches-py}}
scaling: {{base_batch_size: {base_batch}, warmup_epochs: 0}}
parameters:
  per_device_batch_size: {{choices: [32, 64, 128, 256, 512]}}
  world_size: {{choices: [1, 2, 4, 8]}}
  grad_accum_steps: {{choices: [1, 2, 4]}}
  lr_rule: {{choices: [constant, linear, sqrt]}}
  base_lr: {{low: 0.01, high: 0.2, log: true}}
  momentum: 0.9
objectives:
  - {{metric: val_accuracy, direction: maximize}}
  - {{metric: runtime_s, direction: minimize}}
search: {{sampler: random, n_trials: {n_trials}, max_concurrent: {slots}, seed: {seed}}}
resources: {{device: cuda, cpus_per_worker: 4, gpus_per_worker: 1}}
"""
_OBJECTIVES = ["val_accuracy", "runtime_s"]
_PER_DEVICE_BATCHES = (32, 64, 128, 256, 512)
_WORLD_SIZES = (1, 2, 4, 8)
_ACCUM_STEPS = (1, 2, 4)
_RULES = ("constant", "linear", "sqrt")
_BASE_LR_RANGE = (0.01, 0.2)
_MOMENTUM = 0.9

# The model's constants: a CIFAR-10-sized data set on one 8-GPU node type.
_EPOCHS = 10
_BASE_BATCH = 32  # B0, the batch base_lr is meant for
_TRAIN_SAMPLES = 50_000
_BEST_ACCURACY = 0.94
_CHANCE = 0.10
_NOISE_SCALE = 1024.0  # B_noise: the LR that trains best stops growing linearly around here
_BEST_LR_AT_B0 = 0.05
_DIVERGE_RATIO = 4.0  # an LR this many times the best one diverges
_PRUNED_SHARE = 0.05  # the worst trials that ASHA would have stopped
_DEVICE_PEAK_SAMPLES_PER_S = 4000.0
_HALF_PEAK_BATCH = 64.0  # per-device batch at which a device reaches half its peak throughput
_ALLREDUCE_S = 0.03  # one all-reduce of the model's gradients across 8 devices
_EVAL_S = 0.5  # one evaluation pass
_START_S = 15.0  # launching a trial's ranks
_SLOTS = 8  # trials running at once
_NODES = ("10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14")
_DEVICE = "cuda (NVIDIA H100 80GB HBM3)"
_STARTED = datetime(2025, 1, 6, 9, 0, 0)
#: Trials per write to the store: bounds memory, and a store shared with readers (the
#: dashboard) is never held by one long transaction.
_BATCH = 2000


@dataclass(frozen=True)
class _Outcome:
    """One synthetic trial, before it becomes an Optuna trial."""

    state: str
    params: dict[str, Any]
    user_attrs: dict[str, Any]
    values: list[float] | None
    intermediate_values: dict[int, float]
    runtime_s: float


def synthetic_study(
    storage: str | optuna.storages.BaseStorage,
    study_name: str = "synthetic",
    n_trials: int = 200,
    seed: int = 0,
) -> Search:
    """Write a synthetic, realistic-looking study into a store and return it as a ``Search``.

    The study is what ``hpsearch start`` would leave after ``n_trials`` trials of a random
    search over per-device batch, world size, accumulation steps, LR rule and base LR (see the
    module docstring for the shape of the numbers): the same params, user attrs, ``curves``,
    intermediate values (``val_accuracy`` at ``step = samples_seen``), objectives
    ``val_accuracy`` (maximize) and ``runtime_s`` (minimize) and study user attrs (space text,
    objectives, target ``n_trials``, versions). The same ``seed`` writes the same trials.

    It is quick: 10,000 trials take seconds on SQLite, where Optuna's per-trial writes would
    take minutes (see ``_insert_trials``).

    Args:
        storage: A store URL (``sqlite:///demo.db``, ``postgresql+psycopg://...``) or an Optuna
            storage object such as ``optuna.storages.InMemoryStorage()``.
        study_name: The new study's name.
        n_trials: How many trials to write (all finished: COMPLETE, FAIL or PRUNED); also the
            study's target. 0 writes a study whose search has just started (target 1).
        seed: Seeds every random draw.

    Returns:
        The study as a :class:`hpsearch.Search`.

    Raises:
        StudyExistsError: The store already has a study of that name.
        StoreError: The storage URL is malformed or the store cannot be opened.
        ValueError: ``n_trials`` is negative.

    Example:
        >>> import optuna
        >>> search = synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=50)
        >>> search.summary()["n_trials"], search.objectives
        (50, ['val_accuracy', 'runtime_s'])
        >>> sorted(search.trials_dataframe()["lr_rule"].unique())
        ['constant', 'linear', 'sqrt']
    """
    if n_trials < 0:
        raise ValueError(f"n_trials must be 0 or more, got {n_trials}")
    backend = open_storage(storage)
    if study_name in optuna.get_all_study_names(backend):
        raise StudyExistsError(f"study {study_name!r} already exists in this store; pick another name")
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" line
    try:
        study = optuna.create_study(
            study_name=study_name, storage=backend, directions=["maximize", "minimize"]
        )
    finally:
        optuna.logging.set_verbosity(verbosity)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(_OBJECTIVES)
    # A space asks for at least one trial: an empty study is one whose search has just started.
    target = max(n_trials, 1)
    study.set_user_attr(ATTR_SPACE_TEXT, _SPACE_TEXT.format(
        seed=seed, study=study_name, epochs=_EPOCHS, base_batch=_BASE_BATCH, n_trials=target, slots=_SLOTS))
    study.set_user_attr(ATTR_OBJECTIVES, _OBJECTIVES)
    study.set_user_attr(ATTR_N_TRIALS, target)
    study.set_user_attr(ATTR_VERSIONS, {p: version(p) for p in ("hpsearch", "optuna", "ray", "torch")})

    rng = np.random.default_rng(seed)
    node_ids = _node_ids(rng)
    outcomes = [_draw_trial(rng, node_ids) for _ in range(n_trials)]
    _prune_the_worst(outcomes)
    trials = _frozen_trials(outcomes)
    for start in range(0, len(trials), _BATCH):
        chunk = trials[start:start + _BATCH]
        if isinstance(backend, optuna.storages.RDBStorage):
            _insert_trials(backend, backend.get_study_id_from_name(study_name), chunk)
        else:
            study.add_trials(chunk)
    return Search(study_name, backend)


def _node_ids(rng: np.random.Generator) -> dict[str, str]:
    """A Ray node id (56 hex digits) per node IP, drawn from ``rng``."""
    return {ip: rng.bytes(28).hex() for ip in _NODES}


def _best_lr(batch: float) -> float:
    """The LR that trains best at effective batch ``batch``: linear in B well below the noise
    scale, flat well above it (McCandlish et al. 2018, eps_opt = eps_max / (1 + B_noise / B))."""
    eps_max = _BEST_LR_AT_B0 * (1 + _NOISE_SCALE / _BASE_BATCH)
    return eps_max / (1 + _NOISE_SCALE / batch)


def _scaled_lr(rule: str, base_lr: float, batch: int) -> float:
    k = batch / _BASE_BATCH
    return base_lr * {"constant": 1.0, "linear": k, "sqrt": math.sqrt(k)}[rule]


def _draw_trial(rng: np.random.Generator, node_ids: dict[str, str]) -> _Outcome:
    """One trial of the random search, as the searcher would record it."""
    b = int(rng.choice(_PER_DEVICE_BATCHES))
    w = int(rng.choice(_WORLD_SIZES))
    a = int(rng.choice(_ACCUM_STEPS))
    rule = str(rng.choice(_RULES))
    base_lr = float(math.exp(rng.uniform(math.log(_BASE_LR_RANGE[0]), math.log(_BASE_LR_RANGE[1]))))
    batch = b * w * a
    lr = _scaled_lr(rule, base_lr, batch)
    params = {"per_device_batch_size": b, "world_size": w, "grad_accum_steps": a, "lr_rule": rule,
              "base_lr": base_lr, "momentum": _MOMENTUM}
    node = str(rng.choice(_NODES))
    attrs: dict[str, Any] = {"effective_batch_size": batch, "base_batch_size": _BASE_BATCH, "lr": lr,
                             "warmup_epochs": 0.0}

    # Accuracy: an LR off the best one by a factor f costs 0.05 x ln(f)^2; a batch beyond the
    # noise scale loses some generalisation whatever the LR.
    off = math.log(lr / _best_lr(batch))
    final = (_BEST_ACCURACY - 0.05 * off * off - 0.02 * max(0.0, math.log2(batch / _NOISE_SCALE)) ** 2
             + rng.normal(0, 0.004))
    final = min(_BEST_ACCURACY, max(_CHANCE + 0.02, final))
    # Time: per-device throughput saturates with the per-device batch; every optimizer step
    # all-reduces once (a ring: time grows as (W-1)/W), half of it hidden behind the backward pass.
    steps = math.ceil(_TRAIN_SAMPLES / batch)
    compute_s = b * a / (_DEVICE_PEAK_SAMPLES_PER_S * b / (b + _HALF_PEAK_BATCH))
    comm_s = _ALLREDUCE_S * (w - 1) / w * 8 / 7
    epoch_s = steps * (compute_s + comm_s / 2) * rng.lognormal(0, 0.05) + _EVAL_S
    samples_per_epoch = math.ceil(_TRAIN_SAMPLES / w) * w  # padded so every rank has as many
    noise_scale = _NOISE_SCALE * rng.lognormal(0, 0.25) if w * a > 1 else None

    diverged_in = (int(rng.integers(1, 4)) if lr / _best_lr(batch) > _DIVERGE_RATIO else None)
    epochs = _EPOCHS if diverged_in is None else diverged_in - 1
    curves: dict[str, list[Any]] = {k: [] for k in ("samples_seen", "val_accuracy", "val_loss", "train_loss",
                                                     "lr", "runtime_s", "comm_fraction", "noise_scale")}
    intermediate: dict[int, float] = {}
    for e in range(1, epochs + 1):
        progress = (1 - math.exp(-3.0 * e / _EPOCHS)) / (1 - math.exp(-3.0))
        accuracy = _CHANCE + (final - _CHANCE) * progress + (rng.normal(0, 0.003) if e < _EPOCHS else 0.0)
        val_loss = 0.15 + 2.15 * (1 - accuracy) / (1 - _CHANCE)
        curves["samples_seen"].append(samples_per_epoch * e)
        curves["val_accuracy"].append(accuracy)
        curves["val_loss"].append(val_loss)
        curves["train_loss"].append(val_loss * 0.85)
        curves["lr"].append(lr)
        curves["runtime_s"].append(epoch_s * e)
        # All-reduce time over the epoch's wall time, as the trial engine measures it.
        curves["comm_fraction"].append(min(1.0, steps * comm_s / epoch_s * rng.lognormal(0, 0.05)))
        curves["noise_scale"].append(None if noise_scale is None else noise_scale * (0.3 + 0.7 * e / _EPOCHS))
        intermediate[samples_per_epoch * e] = accuracy
    if epochs:
        attrs.update(curves=curves, epochs_completed=epochs, samples_seen=curves["samples_seen"][-1])
    if diverged_in is not None:
        attrs.update(node=node, node_id=node_ids[node], status_reason="diverged",
                     status_detail=f"non-finite training loss nan in epoch {diverged_in}, "
                                   f"step {int(rng.integers(1, steps + 1))}")
        return _Outcome("FAIL", params, attrs, None, intermediate, epochs * epoch_s)

    runtime = curves["runtime_s"][-1]
    attrs.update(
        val_accuracy=curves["val_accuracy"][-1], val_loss=curves["val_loss"][-1],
        train_loss=curves["train_loss"][-1], runtime_s=runtime, device_seconds=runtime * w,
        samples_per_s=curves["samples_seen"][-1] / runtime, comm_fraction=curves["comm_fraction"][-1],
        allreduce_calls=steps * _EPOCHS if w > 1 else 0, emulated_ranks=1, device=_DEVICE, node=node,
        node_id=node_ids[node],
    )
    if noise_scale is None:
        attrs["noise_scale_note"] = "not measurable: world_size x grad_accum_steps = 1"
    else:
        attrs["noise_scale"] = curves["noise_scale"][-1]
    return _Outcome("COMPLETE", params, attrs, [attrs["val_accuracy"], runtime], intermediate, runtime)


def _prune_the_worst(outcomes: list[_Outcome]) -> None:
    """Turn the worst completed trials into ones ASHA stopped at its first or second rung
    (1 or 3 epochs of 10, as ``grace_epochs: 1, reduction_factor: 3`` would)."""
    done = [i for i, o in enumerate(outcomes) if o.state == "COMPLETE"]
    worst = sorted(done, key=lambda i: (outcomes[i].user_attrs["val_accuracy"], i))
    for rank, i in enumerate(worst[:int(len(done) * _PRUNED_SHARE)]):
        o = outcomes[i]
        stop = 1 if rank % 2 == 0 else 3
        curves = {k: v[:stop] for k, v in o.user_attrs["curves"].items()}
        attrs = {k: o.user_attrs[k] for k in ("effective_batch_size", "base_batch_size", "lr", "warmup_epochs",
                                               "node", "node_id")}
        attrs.update(
            curves=curves, epochs_completed=stop, samples_seen=curves["samples_seen"][-1],
            val_accuracy=curves["val_accuracy"][-1], val_loss=curves["val_loss"][-1],
            train_loss=curves["train_loss"][-1], runtime_s=curves["runtime_s"][-1],
            comm_fraction=curves["comm_fraction"][-1], allreduce_calls=o.user_attrs["allreduce_calls"] * stop // _EPOCHS,
            status_reason="early_stopped",
            status_detail=(f"ASHA stopped it after {stop} of {_EPOCHS} epochs ({curves['samples_seen'][-1]} "
                           f"samples seen): val_accuracy {curves['val_accuracy'][-1]} did not make its "
                           "rung's cutoff"),
        )
        if curves["noise_scale"][-1] is not None:
            attrs["noise_scale"] = curves["noise_scale"][-1]
        steps = dict(list(o.intermediate_values.items())[:stop])
        outcomes[i] = _Outcome("PRUNED", o.params, attrs, None, steps, curves["runtime_s"][-1])


def _frozen_trials(outcomes: list[_Outcome]) -> list[optuna.trial.FrozenTrial]:
    """Optuna trials of the outcomes, started as a cluster of ``_SLOTS`` trial slots would
    start them: each trial when the first slot frees up."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    distributions = {
        "per_device_batch_size": CategoricalDistribution(list(_PER_DEVICE_BATCHES)),
        "world_size": CategoricalDistribution(list(_WORLD_SIZES)),
        "grad_accum_steps": CategoricalDistribution(list(_ACCUM_STEPS)),
        "lr_rule": CategoricalDistribution(list(_RULES)),
        "base_lr": FloatDistribution(*_BASE_LR_RANGE, log=True),
        "momentum": CategoricalDistribution([_MOMENTUM]),
    }
    states = {s.name: s for s in optuna.trial.TrialState}
    free_at = [0.0] * _SLOTS
    trials = []
    for o in outcomes:
        start = heapq.heappop(free_at)
        end = start + _START_S + o.runtime_s
        heapq.heappush(free_at, end)
        trial = optuna.trial.create_trial(
            state=states[o.state], params=o.params, distributions=distributions, values=o.values,
            user_attrs=o.user_attrs, intermediate_values=o.intermediate_values,
        )
        trial.datetime_start = _STARTED + timedelta(seconds=start)
        trial.datetime_complete = _STARTED + timedelta(seconds=end)
        trials.append(trial)
    return trials


def _insert_trials(storage: optuna.storages.RDBStorage, study_id: int, trials: list[optuna.trial.FrozenTrial]) -> None:
    """``study.add_trials(trials)`` for an RDB store, as a few bulk inserts in one transaction.

    Optuna writes a trial as some 70 queries (each attribute looked up, then written): 43 ms
    per trial measured on SQLite, about 7 minutes for 10,000. Here each table gets one
    multi-row insert. The rows are the ones ``RDBStorage._get_prepared_new_trial`` writes
    (same encodings of values, params, datetimes and JSON); a test checks that a study written
    here reads back equal to one written by ``add_trials``. Trial numbers follow the study's
    existing trials, as Optuna numbers them.
    """
    from optuna.distributions import distribution_to_json
    from optuna.storages._rdb import models
    from sqlalchemy import func, insert, select

    def utc(moment: datetime | None) -> datetime | None:
        # Optuna stores naive UTC and hands out naive local time (models.TrialModel).
        return None if moment is None else moment.astimezone(timezone.utc).replace(tzinfo=None)

    trials_table = models.TrialModel.__table__
    with storage.engine.begin() as connection:
        first = connection.execute(
            select(func.count()).select_from(trials_table).where(trials_table.c.study_id == study_id)
        ).scalar_one()
        ids = connection.execute(
            insert(trials_table).returning(trials_table.c.trial_id, sort_by_parameter_order=True),
            [{"number": first + i, "study_id": study_id, "state": t.state,
              "datetime_start": utc(t.datetime_start), "datetime_complete": utc(t.datetime_complete)}
             for i, t in enumerate(trials)],
        ).scalars().all()
        values, params, attrs, steps = [], [], [], []
        for trial_id, t in zip(ids, trials):
            for objective, value in enumerate(t.values or []):
                stored, kind = models.TrialValueModel.value_to_stored_repr(value)
                values.append({"trial_id": trial_id, "objective": objective, "value": stored, "value_type": kind})
            for name, value in t.params.items():
                distribution = t.distributions[name]
                params.append({"trial_id": trial_id, "param_name": name,
                               "param_value": distribution.to_internal_repr(value),
                               "distribution_json": distribution_to_json(distribution)})
            attrs += [{"trial_id": trial_id, "key": k, "value_json": json.dumps(v)} for k, v in t.user_attrs.items()]
            for step, value in t.intermediate_values.items():
                stored, kind = models.TrialIntermediateValueModel.intermediate_value_to_stored_repr(value)
                steps.append({"trial_id": trial_id, "step": step, "intermediate_value": stored,
                              "intermediate_value_type": kind})
        for model, rows in ((models.TrialValueModel, values), (models.TrialParamModel, params),
                            (models.TrialUserAttributeModel, attrs), (models.TrialIntermediateValueModel, steps)):
            if rows:
                connection.execute(insert(model.__table__), rows)
