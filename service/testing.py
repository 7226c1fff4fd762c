"""Synthetic studies: what a real search would write, drawn from known laws, without training.

For docstring examples, tests and benchmarks that need a study of a given size now (a real
10,000-trial search takes a cluster and days), and for checking that the analysis finds back
the laws a study was drawn from. :func:`synthetic_study` writes the same params, user attrs,
per-evaluation ``curves``, intermediate values, objectives and study user attrs as
``hpsearch start`` (docs/design.md, "What each trial must record"), with numbers drawn from a
model of data-parallel training whose laws are those the analysis fits (docs/science.md), held
in a :class:`SyntheticTruth`:

- samples to reach the target at the best LR follow E(B) = E_min (1 + B / B_crit) (McCandlish
  et al. 2018), each trial with a seed's noise; an LR off the best one by a factor f costs
  accuracy (0.05 ln(f)^2) and samples (x (1 + 0.5 ln(f)^2)), and four times the best LR or more
  diverges;
- the best LR follows lr_opt(B) = lr_at_base (B / B0)^alpha, or, with ``b_noise``, the bent form
  eps_max / (1 + B_noise / B) (SGD), or, with ``b_peak``, the surge of Adam-type optimizers
  eps_max / ((1/2) (sqrt(B_peak / B) + sqrt(B / B_peak))) (Li et al. 2024), which peaks at
  B_peak and falls beyond;
- a step takes A (t0 + t1 b) + t_allreduce 2 (W - 1) / W seconds (docs/science.md, "What the
  analysis fits"); with ``devices_per_node``, a trial of more ranks than a node holds spans
  ceil(W / devices_per_node) nodes, records ``nodes`` and ``node_ids``, and its all-reduce
  costs t_allreduce_inter 2 (W - 1) / W instead (the link between nodes is the ring's slowest);
- the gradient noise scale sits near B_crit; trials of W x A = 1 record none;
- the worst trials are PRUNED with ``early_stopped`` (cut at 1 or 3 of 10 epochs);
- with ``hidden_choices``, the workload's own parameter ``hidden`` is searched too: the largest
  width trains at the laws' pace, any other needs a quarter more samples;
- a rank's peak memory is fixed + per-sample x b on its device kind (``SyntheticDevice``: the
  weights, gradients and optimizer state, then the activations of the per-device batch, which
  scale with ``hidden``); a trial whose peak would pass the device's memory runs out of it
  (``out_of_memory``), and the search then treats that configuration at that per-device batch
  or above as ``hpsearch start`` does (``search.on_oom``): not started (``exceeds_memory``, not
  counted toward ``n_trials``), or run halved with twice the accumulation (``ran_as``).

The LR rules and the study's attrs are the product's own (``hpsearch.trials.scaling``,
``hpsearch.store.study_attrs``). Nothing here is a measurement: the space text says so.

For tests and benchmarks of tracking (docs/tracking.md), :class:`MlflowServer` runs a real local
``mlflow server``.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, distribution_to_json
from optuna.storages._rdb import models
from sqlalchemy import func, insert, select

from hpsearch import record as r
from hpsearch.errors import StudyExistsError
from hpsearch.planner.ceilings import ExceedsMemory, MemoryCeilings, halved
from hpsearch.search import Search
from hpsearch.store import open_storage, study_attrs
from hpsearch.study import direct_sql
from hpsearch.trials.scaling import scaled_lr

__all__ = ["GIB", "HIDDEN_PENALTY", "MIB", "SEARCHED_SPACE", "SURGE_TRUTH", "MlflowServer", "SyntheticDevice",
           "SyntheticTruth", "searched_study", "synthetic_study"]

# The space the synthetic trials are drawn from. It validates (hpsearch.search_spaces) and
# names only what the model uses. A real search of it would need CIFAR-10 at the path and 8
# GPUs per node.
_SPACE_TEXT = """\
# Synthetic study written by hpsearch.testing (seed {seed}): no trial was run, every number
# comes from a model of data-parallel training, not a measurement.
study: {study}
workload:
  name: cifar10
  epochs: {epochs}
  options: {{path: /data/cifar-10-batches-py}}
scaling: {{base_batch_size: {base_batch}, warmup_epochs: 0}}
parameters:
  per_device_batch_size: {{choices: {batches}}}
  world_size: {{choices: {world_sizes}}}
  grad_accum_steps: {{choices: {accum_steps}}}
  lr_rule: {{choices: [constant, linear, sqrt]}}
  base_lr: {base_lr}
  momentum: 0.9{hidden}
objectives:
  - {{metric: val_accuracy, direction: maximize}}
  - {{metric: runtime_s, direction: minimize}}
search: {{sampler: random, n_trials: {n_trials}, max_concurrent: {slots}, seed: {seed}}}
resources: {resources}
"""
_CUDA_RESOURCES = "{device: cuda, cpus_per_worker: 4, gpus_per_worker: 1}"
_OBJECTIVES = [r.VAL_ACCURACY, r.RUNTIME_S]
_RULES = ("constant", "linear", "sqrt")
_MOMENTUM = 0.9
_CHANCE = 0.10
_DIVERGE_RATIO = 4.0  # an LR this many times the best one diverges
#: The extra samples a ``hidden`` width other than the largest costs (``SyntheticTruth.hidden_choices``).
HIDDEN_PENALTY = 0.25
_PRUNED_SHARE = 0.05  # the worst trials that ASHA would have stopped
_EVAL_S = 0.5  # one evaluation pass
_START_S = 15.0  # launching a trial's ranks
_SLOTS = 8  # trials running at once
_NODES = ("10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14")
_DEVICE = "cuda (NVIDIA H100 80GB HBM3)"
#: Bytes in a mebibyte and a gibibyte (memory sizes: ``SyntheticDevice``).
MIB = 2**20
GIB = 2**30
_STARTED = datetime(2025, 1, 6, 9, 0, 0)
#: Trials per write to the store: bounds memory, and a store shared with readers (the
#: dashboard) is never held by one long transaction.
_BATCH = 2000


@dataclass(frozen=True)
class SyntheticDevice:
    """One device kind of the synthetic cluster, and what a rank of a trial holds in its memory.

    A rank's peak memory is ``fixed_bytes + per_sample_bytes x b`` at per-device batch b (the
    weights, their gradients and the optimizer's state whatever the batch, then the activations
    of each sample of a micro-step; accumulation and the world size add none), the activations
    scaled by ``hidden / max(hidden)`` where ``hidden`` is searched, with a run's scatter
    (``SyntheticTruth.memory_noise``). A trial whose peak would pass ``memory_bytes`` runs out
    of memory.

    Attributes:
        name: The trials' ``device`` attr on this kind.
        memory_bytes: What a rank may hold: the device's memory (or ``resources.memory_per_worker``
            on the CPU); ``None``: no trial runs out.
        fixed_bytes: The peak's part that does not grow with the batch.
        per_sample_bytes: The peak's growth per sample of the per-device batch.
        speed: Step times are divided by this (a faster kind).
    """

    name: str = _DEVICE
    memory_bytes: float | None = None
    fixed_bytes: float = 2.0 * GIB
    per_sample_bytes: float = 24.0 * MIB
    speed: float = 1.0

    def peak_bytes(self, per_device_batch: int, width: float = 1.0) -> float:
        """A rank's peak memory at ``per_device_batch``, without a run's scatter; ``width`` scales
        the activations (``hidden / max(hidden)``)."""
        return self.fixed_bytes + self.per_sample_bytes * per_device_batch * width


@dataclass(frozen=True)
class SyntheticTruth:
    """The laws a synthetic study is drawn from: what an analysis of it should find back.

    Attributes:
        e_min: Samples to reach ``target`` at a vanishing batch, each batch at its best LR.
        b_crit: The critical batch: E(B) = e_min (1 + B / b_crit).
        base_batch: B0, the batch ``base_lr`` is meant for.
        lr_at_base: The best LR at B0.
        alpha: The best LR grows as (B / B0)^alpha (1: the linear rule is right).
        b_noise: With a value, the best LR bends instead: eps_max / (1 + b_noise / B), equal to
            ``lr_at_base`` at B0 (linear well below b_noise, flat well above).
        b_peak: With a value, the best LR surges instead (Adam-type optimizers, Li et al. 2024),
            whatever ``alpha`` and ``b_noise`` say: eps_max / ((1/2) (sqrt(b_peak / B) +
            sqrt(B / b_peak))), equal to ``lr_at_base`` at B0; a sqrt rule well below b_peak,
            largest at b_peak, falling as 1 / sqrt(B) well above (``SURGE_TRUTH``).
        t0: Seconds per micro-step whatever its size (launch costs).
        t1: Seconds per sample per device.
        t_allreduce: Seconds of a ring all-reduce's bandwidth term within one node: W ranks take
            t_allreduce x 2 (W - 1) / W per optimizer step.
        t_allreduce_inter: The same across nodes, for a trial whose ranks span nodes.
        devices_per_node: The devices a node holds: a trial of W ranks runs on
            ceil(W / devices_per_node) of the cluster's nodes (rank 0's drawn, then the next ones),
            and every trial records ``nodes`` and ``node_ids``. ``None`` (the default): every
            trial runs on one node and records neither, as trials did before they could span
            nodes (studies drawn before keep every number).
        examples_noise: A seed's spread of the samples a trial needs (lognormal sigma).
        step_noise: The spread of a trial's step time (lognormal sigma).
        target: The validation accuracy the laws are stated for.
        best_accuracy: The accuracy a trial at its best LR approaches.
        train_samples: Samples per epoch.
        epochs: Epochs per trial.
        evals_per_epoch: Evaluations per epoch (the curves' resolution).
        per_device_batches: The per-device batches a search draws from.
        world_sizes: The world sizes a search draws from.
        accum_steps: The accumulation steps a search draws from.
        base_lr_range: The range of base LRs (log-uniform); one value when both ends are equal
            (the base LR tuned once at B0, as rules are meant to be used).
        hidden_choices: The widths a search draws the workload's own parameter ``hidden``
            from; empty (the default): not searched. The largest trains at the laws' pace, any
            other needs ``1 + HIDDEN_PENALTY`` times the samples.
        devices: The device kinds the trials run on (drawn per trial where there are several),
            with their memory (``SyntheticDevice``). By default one H100 kind that no trial
            runs out of.
        memory_noise: A run's scatter of its peak memory (lognormal sigma).
        on_oom: What the search does with a configuration at or above a per-device batch that
            ran out of memory (``search.on_oom``): ``skip`` records it as not started
            (``exceeds_memory``), ``accumulate`` runs it at half the per-device batch and twice
            the accumulation (``ran_as``), halving until it fits, the trial that ran out too.
    """

    e_min: float = 150_000.0
    b_crit: float = 1024.0
    base_batch: int = 32
    lr_at_base: float = 0.05
    alpha: float = 1.0
    b_noise: float | None = 1024.0
    t0: float = 0.004
    t1: float = 1 / 4000
    t_allreduce: float = 0.015
    examples_noise: float = 0.05
    step_noise: float = 0.03
    target: float = 0.90
    best_accuracy: float = 0.94
    train_samples: int = 50_000
    epochs: int = 10
    evals_per_epoch: int = 1
    per_device_batches: tuple[int, ...] = (32, 64, 128, 256, 512)
    world_sizes: tuple[int, ...] = (1, 2, 4, 8)
    accum_steps: tuple[int, ...] = (1, 2, 4)
    base_lr_range: tuple[float, float] = (0.01, 0.2)
    hidden_choices: tuple[int, ...] = ()
    devices: tuple[SyntheticDevice, ...] = (SyntheticDevice(),)
    memory_noise: float = 0.01
    on_oom: str = "skip"
    t_allreduce_inter: float = 0.06
    devices_per_node: int | None = None
    b_peak: float | None = None

    def best_lr(self, batch: float) -> float:
        """The LR that trains best at effective batch ``batch``."""
        if self.b_peak is not None:
            return self.lr_at_base * _surge(self.base_batch, self.b_peak) / _surge(batch, self.b_peak)
        if self.b_noise is not None:
            eps_max = self.lr_at_base * (1 + self.b_noise / self.base_batch)
            return eps_max / (1 + self.b_noise / batch)
        return float(self.lr_at_base * (batch / self.base_batch) ** self.alpha)

    def examples_to_target(self, batch: float) -> float:
        """Samples to reach ``target`` at the best LR: E(B) = e_min (1 + B / b_crit)."""
        return self.e_min * (1 + batch / self.b_crit)

    def nodes_of(self, world_size: int) -> int:
        """The nodes a trial of ``world_size`` ranks runs on: ceil(W / devices_per_node), or 1."""
        return 1 if self.devices_per_node is None else max(1, math.ceil(world_size / self.devices_per_node))

    def step_time(self, b: int, w: int, a: int, nodes: int = 1) -> float:
        """Seconds per optimizer step of (b, W, A) with the ranks on ``nodes`` nodes, without noise."""
        return a * (self.t0 + self.t1 * b) + self.allreduce_s(w, nodes)

    def allreduce_s(self, w: int, nodes: int = 1) -> float:
        """Seconds of a step's all-reduce over W ranks on ``nodes`` nodes: the ring's share
        2 (W - 1) / W times the cost of its slowest link (between nodes where it spans them)."""
        return (self.t_allreduce_inter if nodes > 1 else self.t_allreduce) * 2 * (w - 1) / w


def _surge(batch: float, b_peak: float) -> float:
    """The surge's denominator (1/2) (sqrt(b_peak / B) + sqrt(B / b_peak)): 1 at the peak."""
    return 0.5 * (math.sqrt(b_peak / batch) + math.sqrt(batch / b_peak))


#: A study of an Adam-type optimizer: the best LR surges, peaking at B 512 (inside the batches
#: a synthetic search draws, 32 to 16,384) and falling beyond (Li et al. 2024); the rest as
#: ``SyntheticTruth()``. ``synthetic_study(storage, truth=SURGE_TRUTH)`` writes one.
SURGE_TRUTH = SyntheticTruth(b_peak=512.0)


@dataclass(frozen=True)
class _Outcome:
    """One synthetic trial, before it becomes an Optuna trial."""

    state: str
    params: dict[str, Any]
    user_attrs: dict[str, Any]
    values: list[float] | None
    intermediate_values: dict[int, float]
    runtime_s: float
    ran: bool = True  # False: the search did not start it (exceeds_memory)


def synthetic_study(
    storage: str | optuna.storages.BaseStorage,
    study_name: str = "synthetic",
    n_trials: int = 200,
    seed: int = 0,
    *,
    truth: SyntheticTruth | None = None,
) -> Search:
    """Write a synthetic study into a store and return it as a ``Search``.

    The study is what ``hpsearch start`` would leave after ``n_trials`` trials of a random
    search over per-device batch, world size, accumulation steps, LR rule and base LR, drawn
    from ``truth`` (see the module docstring): the same params, user attrs, ``curves``,
    intermediate values (``val_accuracy`` at ``step = samples_seen``), objectives
    ``val_accuracy`` (maximize) and ``runtime_s`` (minimize) and study user attrs. The same
    ``seed`` writes the same trials. 10,000 trials take seconds on SQLite (``_insert_trials``).

    Args:
        storage: A store URL (``sqlite:///demo.db``, ``postgresql+psycopg://...``) or an Optuna
            storage object such as ``optuna.storages.InMemoryStorage()``.
        study_name: The new study's name.
        n_trials: How many finished trials to write (COMPLETE, FAIL or PRUNED); also the
            study's target. 0 writes a study whose search has just started (target 1). Where
            trials run out of memory, the proposals the search then does not start
            (``exceeds_memory``) come besides, as they do not count toward ``n_trials``.
        seed: Seeds every random draw.
        truth: The laws to draw from (default: ``SyntheticTruth()``).

    Returns:
        The study as a :class:`hpsearch.Search`.

    Raises:
        StudyExistsError: The store already has a study of that name.
        StoreError: The storage URL is malformed or the store cannot be opened.
        ValueError: ``n_trials`` is negative, or a world size needs more nodes than the
            cluster has (``SyntheticTruth.devices_per_node``).

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
    truth = truth or SyntheticTruth()
    per_kind = len(_nodes(truth)) // len(truth.devices)
    widest = truth.nodes_of(max(truth.world_sizes))
    if widest > per_kind:
        raise ValueError(f"world size {max(truth.world_sizes)} needs {widest} nodes of {truth.devices_per_node} "
                         f"devices; the synthetic cluster has {per_kind} per device kind")
    backend = open_storage(storage)
    if study_name in optuna.get_all_study_names(backend):
        raise StudyExistsError(f"study {study_name!r} already exists in this store; pick another name")
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" line
    try:
        study = optuna.create_study(study_name=study_name, storage=backend, directions=["maximize", "minimize"])
    finally:
        optuna.logging.set_verbosity(verbosity)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(_OBJECTIVES)
    # A space asks for at least one trial: an empty study is one whose search has just started.
    target = max(n_trials, 1)
    space_text = _SPACE_TEXT.format(
        seed=seed, study=study_name, epochs=truth.epochs, base_batch=truth.base_batch, n_trials=target,
        slots=_SLOTS, batches=list(truth.per_device_batches), world_sizes=list(truth.world_sizes),
        accum_steps=list(truth.accum_steps),
        base_lr=(truth.base_lr_range[0] if truth.base_lr_range[0] == truth.base_lr_range[1] else
                 f"{{low: {truth.base_lr_range[0]}, high: {truth.base_lr_range[1]}, log: true}}"),
        hidden=f"\n  hidden: {{choices: {list(truth.hidden_choices)}}}" if truth.hidden_choices else "",
        resources=_resources(truth))
    for key, value in study_attrs(space_text, _OBJECTIVES, target).items():
        study.set_user_attr(key, value)

    rng = np.random.default_rng(seed)
    node_ids = {ip: rng.bytes(28).hex() for ip in _nodes(truth)}
    # Peaks draw their scatter from a stream of their own, so that every other number a seed
    # draws is the same whether or not the model draws peaks.
    memory = _Memory(truth, np.random.default_rng([seed, 0x6D656D]))
    outcomes: list[_Outcome] = []
    finished = skipped = 0
    while finished < n_trials:
        outcome = _draw_trial(rng, node_ids, truth, memory)
        outcomes.append(outcome)
        if outcome.ran:
            finished, skipped = finished + 1, 0
        else:
            skipped += 1
            if skipped >= _MOST_SKIPS:  # as the search stops, when it can propose nothing that fits
                break
    _prune_the_worst(outcomes, truth)
    trials = _frozen_trials(outcomes, truth)
    for start in range(0, len(trials), _BATCH):
        chunk = trials[start:start + _BATCH]
        if direct_sql(backend):
            _insert_trials(backend, backend.get_study_id_from_name(study_name), chunk)  # type: ignore[arg-type]
        else:
            study.add_trials(chunk)
    return Search(study_name, backend)


class _Memory:
    """What the synthetic search knows of memory: the smallest per-device batch that ran out per
    configuration (the search's own ``MemoryCeilings``), and the peaks' own random stream."""

    def __init__(self, truth: SyntheticTruth, rng: np.random.Generator) -> None:
        self.truth = truth
        self.rng = rng
        self.ceilings = MemoryCeilings()

    def width(self, params: dict[str, Any]) -> float:
        """The activations' scale of a configuration: its ``hidden`` over the largest."""
        hidden = self.truth.hidden_choices
        return params["hidden"] / max(hidden) if hidden and "hidden" in params else 1.0

    def fits(self, device: SyntheticDevice, params: dict[str, Any], batch: int) -> bool:
        return device.memory_bytes is None or device.peak_bytes(batch, self.width(params)) <= device.memory_bytes

    def peak(self, device: SyntheticDevice, params: dict[str, Any], batch: int) -> int:
        """A run's measured peak at ``batch``: the model's, with its scatter, never above what the
        device holds (a rank that needed more would have run out)."""
        peak = device.peak_bytes(batch, self.width(params)) * self.rng.lognormal(0, self.truth.memory_noise)
        return int(peak if device.memory_bytes is None else min(peak, device.memory_bytes))


def _nodes(truth: SyntheticTruth) -> tuple[str, ...]:
    """The cluster's nodes: two per device kind where there are several kinds (a node holds one)."""
    if len(truth.devices) == 1:
        return _NODES
    return tuple(f"10.0.{k + 1}.{11 + j}" for k in range(len(truth.devices)) for j in range(2))


def _resources(truth: SyntheticTruth) -> str:
    """The space's ``resources``: CUDA, or the CPU with its cap on a rank's memory where every
    kind is the CPU and one has a limit (``resources.memory_per_worker``)."""
    limits = [d.memory_bytes for d in truth.devices if d.memory_bytes is not None]
    if all(d.name == "cpu" for d in truth.devices) and limits:
        return f"{{device: cpu, cpus_per_worker: 4, memory_per_worker: {int(min(limits))}}}"
    return _CUDA_RESOURCES


#: Proposals in a row the synthetic search may leave unstarted before it stops (the search's
#: own ``MAX_SKIPS_IN_A_ROW``).
_MOST_SKIPS = 1000


def _draw_trial(rng: np.random.Generator, node_ids: dict[str, str], truth: SyntheticTruth,
                memory: _Memory) -> _Outcome:
    """One trial of the random search, as the searcher would record it."""
    b = int(rng.choice(truth.per_device_batches))
    w = int(rng.choice(truth.world_sizes))
    a = int(rng.choice(truth.accum_steps))
    rule = str(rng.choice(_RULES))
    low, high = truth.base_lr_range
    base_lr = low if low == high else float(math.exp(rng.uniform(math.log(low), math.log(high))))
    batch = b * w * a
    lr = scaled_lr(rule, base_lr, batch, truth.base_batch)
    params = {r.PER_DEVICE_BATCH_SIZE: b, r.WORLD_SIZE: w, r.GRAD_ACCUM_STEPS: a, r.LR_RULE: rule,
              r.BASE_LR: base_lr, "momentum": _MOMENTUM}
    slower = 1.0
    if truth.hidden_choices:  # drawn only when searched: studies without it keep their draws
        params["hidden"] = int(rng.choice(truth.hidden_choices))
        slower = 1.0 if params["hidden"] == max(truth.hidden_choices) else 1.0 + HIDDEN_PENALTY
    kind = 0
    if len(truth.devices) > 1:  # drawn only with several kinds: studies of one keep their draws
        kind = int(rng.integers(len(truth.devices)))
    device = truth.devices[kind]
    nodes = _nodes(truth)
    node = str(rng.choice(nodes if len(truth.devices) == 1 else nodes[2 * kind:2 * kind + 2]))
    where = _placement(truth, nodes if len(truth.devices) == 1 else nodes[2 * kind:2 * kind + 2], node, w, node_ids)
    attrs: dict[str, Any] = {r.EFFECTIVE_BATCH_SIZE: batch, r.BASE_BATCH_SIZE: truth.base_batch, r.LR: lr,
                             r.WARMUP_EPOCHS: 0.0, r.LR_SCHEDULE: "none"}

    # Memory, as the searcher and the trial's process handle it (hpsearch.planner.ceilings): a
    # proposal at or above a batch that ran out is not started, or runs halved; a trial that
    # runs out fails, or (on_oom: accumulate) runs again halved on its devices until it fits.
    plan = memory.ceilings.plan(params, truth.on_oom)
    if isinstance(plan, ExceedsMemory):
        attrs.update({r.STATUS_REASON: r.REASON_EXCEEDS_MEMORY, r.STATUS_DETAIL: plan.detail})
        return _Outcome("PRUNED", params, attrs, None, {}, 0.0, ran=False)
    ran_as: dict[str, Any] | None = plan.ran_as if plan is not None else None
    b_run, a_run = (ran_as[r.PER_DEVICE_BATCH_SIZE], ran_as[r.GRAD_ACCUM_STEPS]) if ran_as else (b, a)
    attrs[r.TRAINING_STARTED] = True
    if device.memory_bytes is not None:  # as a rank records it: the CPU's cap, the GPU's memory
        attrs[r.MEMORY_LIMIT_BYTES] = int(device.memory_bytes)
    while not memory.fits(device, params, b_run):
        assert device.memory_bytes is not None
        memory.ceilings.ran_out(params, b_run)
        smaller = halved(b_run, a_run, b_run) if truth.on_oom == "accumulate" else None
        if smaller is None:
            need = device.peak_bytes(b_run, memory.width(params))
            attrs.update({r.DEVICE: device.name, **where,
                          r.PEAK_MEMORY_BYTES: int(device.memory_bytes),
                          r.STATUS_REASON: r.REASON_OUT_OF_MEMORY,
                          r.STATUS_DETAIL: f"out of memory at per-device batch {b_run}: a rank needed about "
                                           f"{need / GIB:.3g} GiB, {device.name} holds "
                                           f"{device.memory_bytes / GIB:.3g} GiB"})
            if ran_as is not None:
                attrs[r.RAN_AS] = ran_as
            return _Outcome("FAIL", params, attrs, None, {}, 0.0)
        ran_as = {r.PER_DEVICE_BATCH_SIZE: smaller[0], r.GRAD_ACCUM_STEPS: smaller[1], "out_of_memory_at": b_run}
        b_run, a_run = smaller
    if ran_as is not None:
        attrs[r.RAN_AS] = ran_as

    # Accuracy approaches a_max as chance + (a_max - chance)(1 - exp(-s / tau)); at the best LR
    # it crosses the target after E(B) samples (with a seed's noise), so tau follows from E(B).
    off = math.log(lr / truth.best_lr(batch))
    a_max = truth.best_accuracy - 0.05 * off * off
    tau = (truth.examples_to_target(batch) * rng.lognormal(0, truth.examples_noise)
           / math.log((truth.best_accuracy - _CHANCE) / (truth.best_accuracy - truth.target)))
    tau *= (1 + 0.5 * off * off) * slower
    spans = truth.nodes_of(w)
    step_s = truth.step_time(b_run, w, a_run, spans) / device.speed * rng.lognormal(0, truth.step_noise)
    comm_s = truth.allreduce_s(w, spans)
    samples_per_epoch = math.ceil(truth.train_samples / w) * w  # padded so every rank has as many
    steps_per_epoch = math.ceil(truth.train_samples / batch)
    noise_scale = truth.b_crit * rng.lognormal(0, 0.25) if w * a > 1 else None
    diverged_in = int(rng.integers(1, 4)) if lr / truth.best_lr(batch) > _DIVERGE_RATIO else None
    epochs = truth.epochs if diverged_in is None else diverged_in - 1

    evals = epochs * truth.evals_per_epoch
    curves: dict[str, list[Any]] = {k: [] for k in r.CURVE_METRICS}
    intermediate: dict[int, float] = {}
    for k in range(1, evals + 1):
        samples = round(samples_per_epoch * k / truth.evals_per_epoch)
        steps = round(steps_per_epoch * k / truth.evals_per_epoch)
        accuracy = _CHANCE + (a_max - _CHANCE) * (1 - math.exp(-samples / tau)) + rng.normal(0, 0.002)
        accuracy = min(0.999, max(_CHANCE / 2, accuracy))
        val_loss = 0.15 + 2.15 * (1 - accuracy) / (1 - _CHANCE)
        train_s = steps * step_s
        curves[r.SAMPLES_SEEN].append(samples)
        curves[r.STEPS].append(steps)
        curves[r.VAL_ACCURACY].append(accuracy)
        curves[r.VAL_LOSS].append(val_loss)
        curves[r.TRAIN_LOSS].append(val_loss * 0.85)
        curves[r.LAST_LR].append(lr)
        curves[r.TRAIN_S].append(train_s)
        curves[r.RUNTIME_S].append(train_s + k * _EVAL_S)
        curves[r.COMM_FRACTION].append(min(1.0, comm_s / step_s * rng.lognormal(0, 0.05)))
        curves[r.NOISE_SCALE].append(None if noise_scale is None else noise_scale * (0.3 + 0.7 * k / evals))
        intermediate[samples] = accuracy
    if evals:
        attrs.update({r.CURVES: curves, r.EPOCHS_COMPLETED: epochs, r.SAMPLES_SEEN: curves[r.SAMPLES_SEEN][-1],
                      r.STEPS: curves[r.STEPS][-1]})
    attrs[r.PEAK_MEMORY_BYTES] = memory.peak(device, params, b_run)
    if diverged_in is not None:
        attrs.update({**where, r.STATUS_REASON: r.REASON_DIVERGED,
                      r.STATUS_DETAIL: f"non-finite training loss nan in epoch {diverged_in}, "
                                       f"step {int(rng.integers(1, steps_per_epoch + 1))}"})
        return _Outcome("FAIL", params, attrs, None, intermediate, curves[r.RUNTIME_S][-1] if evals else 0.0)

    runtime = curves[r.RUNTIME_S][-1]
    attrs.update({
        r.VAL_ACCURACY: curves[r.VAL_ACCURACY][-1], r.VAL_LOSS: curves[r.VAL_LOSS][-1],
        r.TRAIN_LOSS: curves[r.TRAIN_LOSS][-1], r.RUNTIME_S: runtime, r.TRAIN_S: curves[r.TRAIN_S][-1],
        r.DEVICE_SECONDS: runtime * w, r.SAMPLES_PER_S: curves[r.SAMPLES_SEEN][-1] / runtime,
        r.COMM_FRACTION: curves[r.COMM_FRACTION][-1], r.ALLREDUCE_CALLS: steps_per_epoch * truth.epochs if w > 1 else 0,
        r.EMULATED_RANKS: 1, r.DEVICE: device.name, **where,
    })
    if noise_scale is None:
        attrs[r.NOISE_SCALE_NOTE] = "not measurable: world_size x grad_accum_steps = 1"
    else:
        attrs[r.NOISE_SCALE] = curves[r.NOISE_SCALE][-1]
    return _Outcome("COMPLETE", params, attrs, [attrs[r.VAL_ACCURACY], runtime], intermediate, runtime)


def _placement(truth: SyntheticTruth, nodes: tuple[str, ...], node: str, world_size: int,
               node_ids: dict[str, str]) -> dict[str, Any]:
    """Where a trial's ranks ran, as it records it: rank 0's node and, with
    ``truth.devices_per_node``, the nodes its ranks spanned (``node``, then the next of the
    kind's ``nodes`` in turn) and their count."""
    where: dict[str, Any] = {r.NODE: node, r.NODE_ID: node_ids[node]}
    if truth.devices_per_node is not None:
        first = nodes.index(node)
        spanned = [nodes[(first + k) % len(nodes)] for k in range(truth.nodes_of(world_size))]
        where.update({r.NODES: len(spanned), r.NODE_IDS: [node_ids[ip] for ip in spanned]})
    return where


def _prune_the_worst(outcomes: list[_Outcome], truth: SyntheticTruth) -> None:
    """Turn the worst completed trials into ones ASHA stopped at its first or second rung
    (1 or 3 epochs of 10, as ``grace_epochs: 1, reduction_factor: 3`` would)."""
    done = [i for i, o in enumerate(outcomes) if o.state == "COMPLETE"]
    worst = sorted(done, key=lambda i: (outcomes[i].user_attrs[r.VAL_ACCURACY], i))
    for rank, i in enumerate(worst[:int(len(done) * _PRUNED_SHARE)]):
        o = outcomes[i]
        stop_epoch = 1 if rank % 2 == 0 else 3
        stop = stop_epoch * truth.evals_per_epoch
        curves = {k: v[:stop] for k, v in o.user_attrs[r.CURVES].items()}
        attrs = {k: o.user_attrs[k] for k in (r.EFFECTIVE_BATCH_SIZE, r.BASE_BATCH_SIZE, r.LR, r.WARMUP_EPOCHS,
                                               r.LR_SCHEDULE, r.TRAINING_STARTED, r.NODE, r.NODE_ID, r.NODES,
                                               r.NODE_IDS, r.RAN_AS)
                 if k in o.user_attrs}
        attrs.update({
            r.CURVES: curves, r.EPOCHS_COMPLETED: stop_epoch, r.SAMPLES_SEEN: curves[r.SAMPLES_SEEN][-1],
            r.STEPS: curves[r.STEPS][-1], r.VAL_ACCURACY: curves[r.VAL_ACCURACY][-1],
            r.VAL_LOSS: curves[r.VAL_LOSS][-1], r.TRAIN_LOSS: curves[r.TRAIN_LOSS][-1],
            r.RUNTIME_S: curves[r.RUNTIME_S][-1], r.TRAIN_S: curves[r.TRAIN_S][-1],
            r.COMM_FRACTION: curves[r.COMM_FRACTION][-1],
            r.ALLREDUCE_CALLS: o.user_attrs[r.ALLREDUCE_CALLS] * stop_epoch // truth.epochs,
            r.STATUS_REASON: r.REASON_EARLY_STOPPED,
            r.STATUS_DETAIL: (f"ASHA stopped it after {stop_epoch} of {truth.epochs} epochs "
                              f"({curves[r.SAMPLES_SEEN][-1]} samples seen): val_accuracy "
                              f"{curves[r.VAL_ACCURACY][-1]} did not make its rung's cutoff"),
        })
        if curves[r.NOISE_SCALE][-1] is not None:
            attrs[r.NOISE_SCALE] = curves[r.NOISE_SCALE][-1]
        steps = dict(list(o.intermediate_values.items())[:stop])
        outcomes[i] = _Outcome("PRUNED", o.params, attrs, None, steps, curves[r.RUNTIME_S][-1])


def _frozen_trials(outcomes: list[_Outcome], truth: SyntheticTruth) -> list[optuna.trial.FrozenTrial]:
    """Optuna trials of the outcomes, started as a cluster of ``_SLOTS`` trial slots would
    start them: each trial when the first slot frees up."""
    distributions: dict[str, optuna.distributions.BaseDistribution] = {
        r.PER_DEVICE_BATCH_SIZE: CategoricalDistribution(list(truth.per_device_batches)),
        r.WORLD_SIZE: CategoricalDistribution(list(truth.world_sizes)),
        r.GRAD_ACCUM_STEPS: CategoricalDistribution(list(truth.accum_steps)),
        r.LR_RULE: CategoricalDistribution(list(_RULES)),
        r.BASE_LR: (CategoricalDistribution([truth.base_lr_range[0]]) if truth.base_lr_range[0] == truth.base_lr_range[1]
                    else FloatDistribution(*truth.base_lr_range, log=True)),
        "momentum": CategoricalDistribution([_MOMENTUM]),
    }
    if truth.hidden_choices:
        distributions["hidden"] = CategoricalDistribution(list(truth.hidden_choices))
    states = {s.name: s for s in optuna.trial.TrialState}
    free_at = [0.0] * _SLOTS
    trials = []
    for o in outcomes:
        if not o.ran:  # told at once when asked, with no slot of its own
            start = end = free_at[0]
        else:
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
    """``study.add_trials(trials)`` for an RDB store of a known schema, as a few bulk inserts
    in one transaction.

    Optuna writes a trial as some 70 queries (each attribute looked up, then written), so a
    10,000-trial study takes minutes to write on SQLite. Here each table gets one
    multi-row insert. The rows are the ones ``RDBStorage._get_prepared_new_trial`` writes
    (same encodings of values, params, datetimes and JSON); a test checks that a study written
    here reads back equal to one written by ``add_trials``. Trial numbers follow the study's
    existing trials, as Optuna numbers them.
    """

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
                stored, step_kind = models.TrialIntermediateValueModel.intermediate_value_to_stored_repr(value)
                steps.append({"trial_id": trial_id, "step": step, "intermediate_value": stored,
                              "intermediate_value_type": step_kind})
        for model, rows in ((models.TrialValueModel, values), (models.TrialParamModel, params),
                            (models.TrialUserAttributeModel, attrs), (models.TrialIntermediateValueModel, steps)):
            if rows:
                connection.execute(insert(model.__table__), rows)


#: The space of ``searched_study``: the optimizer and the workload's own width searched beside
#: the per-device batch, at one LR rule, base LR and momentum (fixed: a param of every trial).
SEARCHED_SPACE = """\
study: {study}
workload: {{name: digits_mlp, epochs: 2}}
scaling: {{base_batch_size: 16}}
parameters:
  per_device_batch_size: {{choices: [16, 64]}}
  world_size: 1
  grad_accum_steps: 1
  lr_rule: linear
  base_lr: 0.01
  optimizer: {{choices: [sgd, adamw]}}
  momentum: 0.9
  hidden: {{choices: [32, 64]}}
objectives:
  - {{metric: val_accuracy, direction: maximize}}
  - {{metric: runtime_s, direction: minimize}}
search: {{sampler: grid, n_trials: 8, seed: 0}}
resources: {{device: cpu}}
"""


def searched_study(storage: str | optuna.storages.BaseStorage, study_name: str = "searched") -> Search:
    """Write the 8 trials ``hpsearch start`` would leave for ``SEARCHED_SPACE`` (every param
    recorded, the fixed ones with their one value), with made-up measurements in which the
    optimizer decides: the trials of one batch and LR reach 0.93 with sgd and 0.11 with adamw.
    For what a reader must show of a study's searched settings (its trial tables).

    Example:
        >>> import optuna
        >>> search = searched_study(optuna.storages.InMemoryStorage())
        >>> sorted(search.trials_dataframe().groupby("optimizer")["val_accuracy"].max().round(2).items())
        [('adamw', 0.12), ('sgd', 0.94)]
    """
    backend = open_storage(storage) if isinstance(storage, str) else storage
    study = optuna.create_study(study_name=study_name, storage=backend, directions=["maximize", "minimize"])
    study.set_metric_names(_OBJECTIVES)
    for key, value in study_attrs(SEARCHED_SPACE.format(study=study_name), _OBJECTIVES, 8).items():
        study.set_user_attr(key, value)
    choices: dict[str, list[Any]] = {r.PER_DEVICE_BATCH_SIZE: [16, 64], r.WORLD_SIZE: [1], r.GRAD_ACCUM_STEPS: [1], r.LR_RULE: ["linear"],
               r.BASE_LR: [0.01], "optimizer": ["sgd", "adamw"], "momentum": [0.9], "hidden": [32, 64]}
    distributions: dict[str, optuna.distributions.BaseDistribution] = {
        name: CategoricalDistribution(values) for name, values in choices.items()}
    for b, optimizer, hidden in itertools.product([16, 64], ["sgd", "adamw"], [32, 64]):
        params = {name: values[0] for name, values in choices.items()}
        params.update({r.PER_DEVICE_BATCH_SIZE: b, "optimizer": optimizer, "hidden": hidden})
        accuracy = (0.93 if optimizer == "sgd" else 0.114) + hidden / 10_000
        runtime = 100.0 / b + hidden / 100
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions=distributions, values=[accuracy, runtime], user_attrs={
                r.EFFECTIVE_BATCH_SIZE: b, r.BASE_BATCH_SIZE: 16, r.LR: 0.01 * b / 16, r.VAL_ACCURACY: accuracy,
                r.RUNTIME_S: runtime, r.DEVICE_SECONDS: runtime, r.PEAK_MEMORY_BYTES: MIB * b, r.EPOCHS_COMPLETED: 2,
                r.CURVES: {r.SAMPLES_SEEN: [100, 200], r.VAL_ACCURACY: [accuracy / 2, accuracy]}}))
    return Search(study_name, backend)


class MlflowServer:
    """A real ``mlflow server`` on a SQLite backend in ``folder``, its artifacts served from there,
    on a free local port and in a process group of its own. ``start`` waits for its health check;
    ``stop`` kills the group, as a machine that goes away; ``start`` again brings it back on the
    same port and data. ``env``: the server's environment (default: this process's).

    Example:
        >>> server = MlflowServer(Path("mlflow"))  # doctest: +SKIP
        >>> server.start(); hpsearch.start("space.yaml", mlflow=server.uri); server.stop()  # doctest: +SKIP
    """

    def __init__(self, folder: Path, *, env: dict[str, str] | None = None) -> None:
        self.folder = folder
        self.env = env
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def executable() -> str | None:
        """The ``mlflow`` command of this interpreter's environment, else the one on ``PATH``."""
        beside = Path(sys.executable).with_name("mlflow")
        return str(beside) if beside.exists() else shutil.which("mlflow")

    def start(self, timeout: float = 180.0) -> None:
        """Start the server and wait until it answers (``RuntimeError`` with its log, if not)."""
        exe = self.executable()
        if exe is None:
            raise RuntimeError("no mlflow command: pip install 'hpsearch[mlflow]'")
        self.folder.mkdir(parents=True, exist_ok=True)
        log = self.folder / "server.log"
        with open(log, "ab") as out:  # the server's own output, kept for a failure
            self.process = subprocess.Popen(
                [exe, "server", "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}",
                 "--artifacts-destination", str(self.folder / "artifacts"), "--host", "127.0.0.1",
                 "--port", str(self.port), "--workers", "1"],
                cwd=self.folder, stdout=out, stderr=out, start_new_session=True, env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited ({self.process.returncode}):\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"mlflow server did not answer in {timeout:g} s:\n{log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # the server and its workers
            self.process.wait(timeout=30)
        self.process = None
