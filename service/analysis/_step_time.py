"""Step time of a DDP configuration: compute per micro-step plus one all-reduce per step.

For a per-device batch ``b``, world size ``W``, ``A`` accumulation steps and ranks on ``n``
nodes, one optimizer step runs ``A`` micro-steps and all-reduces once (the ``A - 1`` others run
under ``no_sync``)::

    step_time(b, W, A, n) = A (t0 + t1 b) + t_ar 2 (W - 1) / W          on one node (n = 1)
    step_time(b, W, A, n) = A (t0 + t1 b) + t_ar_inter 2 (W - 1) / W    across nodes (n >= 2)

``t0`` is the fixed cost of a micro-step (launches, Python, the optimizer), ``t1`` the cost of
one sample, so throughput per device saturates as ``b`` grows; ``2 (W - 1) / W`` is the share of
the gradient a ring all-reduce sends per device, 0 on one device. One model per device kind.

Why one term per kind of link, and not a sum: a ring all-reduce of a gradient of ``S`` bytes
over ``W`` ranks runs ``2 (W - 1)`` steps, each moving ``S / W`` bytes over every link of the
ring at once, and a step ends when its slowest link has delivered. On one node the slowest link
is the node's own (NVLink, PCIe, shared memory): ``t_ar = S / bandwidth within a node``. A ring
over ``n >= 2`` nodes leaves each node once, so every step waits on a link between nodes:
``t_ar_inter = S / bandwidth between nodes``, with the same ``2 (W - 1) / W``; how many nodes
beyond the first does not enter (the links between nodes work in parallel). The latency term
(``2 (W - 1)`` hops) is left out: for a model's gradient the bandwidth term dominates. Each
coefficient multiplies a column of its own (trials on one node, trials across nodes), so
non-negative least squares identifies ``t_ar_inter`` from the trials that spanned nodes alone;
without one it is unmeasured (``inter_node_measured``), and a prediction across nodes uses the
intra-node ``t_ar`` in its place, a lower bound (links between nodes are seldom faster) that
``extrapolations`` names. Hierarchical or tree all-reduces (NCCL's across nodes) move less over
the slow links as ``n`` grows; the form here is the ring's, and more nodes than any trial
spanned is named as an extrapolation too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypeAlias, overload

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import nnls

from hpsearch.analysis._stats import (
    FloatArray,
    Interval,
    as_positive_array,
    check_level,
    check_n_boot,
    check_same_length,
    format_batch,
    percentile_interval,
)
from hpsearch.errors import AnalysisError

__all__ = ["ThroughputModel", "fit_throughput"]

Number: TypeAlias = float | FloatArray


@dataclass(frozen=True)
class ThroughputModel:
    """A fitted step-time model for one device kind, with the ranges it was fitted on.

    Attributes:
        device: the device kind the trials ran on ("cpu", "cuda:H100", ...).
        t0: fixed seconds per micro-step.
        t1: seconds per sample per micro-step.
        t_ar: seconds of a ring all-reduce within one node at large ``W`` (multiplied by
            ``2 (W - 1) / W``); 0.0 and meaningless when ``allreduce_measured`` is false.
        t0_interval: bootstrap interval of ``t0``.
        t1_interval: bootstrap interval of ``t1``.
        t_ar_interval: bootstrap interval of ``t_ar``.
        n_trials: number of trials fitted.
        per_device_batch_range: smallest and largest per-device batch that ran.
        world_sizes: the distinct world sizes that ran, ascending.
        accum_range: smallest and largest number of accumulation steps that ran.
        allreduce_measured: whether any trial ran on more than one device of one node.
        relative_rmse: root mean square of the relative residuals (0.04 is 4% scatter).
        level: the intervals' level.
        note: what a reader should know about the fit, or ``None``.
        t_ar_inter: seconds of a ring all-reduce whose ranks span nodes, at large ``W``
            (multiplied by ``2 (W - 1) / W``): the link between nodes is the ring's slowest;
            0.0 and meaningless when ``inter_node_measured`` is false.
        t_ar_inter_interval: bootstrap interval of ``t_ar_inter``.
        node_counts: the distinct node counts the trials' ranks ran on, ascending (``(1,)``
            for a study whose trials recorded none).
        inter_node_measured: whether any trial's ranks spanned nodes.

    Example:
        >>> m = fit_throughput([8, 32, 128, 32], [1, 1, 1, 4], [1, 1, 1, 2], [0.014, 0.026, 0.074, 0.09])
        >>> round(m.samples_per_s(64, 1, 1)), m.extrapolations(64, 8, 1)
        (1524, ('world size 8 is larger than any that ran (up to 4)',))
    """

    device: str
    t0: float
    t1: float
    t_ar: float
    t0_interval: Interval
    t1_interval: Interval
    t_ar_interval: Interval
    n_trials: int
    per_device_batch_range: tuple[float, float]
    world_sizes: tuple[int, ...]
    accum_range: tuple[int, int]
    allreduce_measured: bool
    relative_rmse: float
    level: float
    note: str | None
    coefficient_draws: FloatArray = field(repr=False, compare=False)
    """Bootstrap draws of ``(t0, t1, t_ar, t_ar_inter)``, shape ``(n_boot, 4)``; a row of NaN is
    a draw that left the model's support and was dropped (``n_draws``). A term never measured
    is 0 in every draw."""
    t_ar_inter: float
    t_ar_inter_interval: Interval
    node_counts: tuple[int, ...]
    inter_node_measured: bool

    @property
    def n_draws(self) -> int:
        """The bootstrap draws the intervals rest on: those whose resampled step times stayed
        positive and whose refit predicts a positive step time at every configuration that ran
        (the others are dropped, not clipped: a clipped draw predicted steps of ~1e-10 s)."""
        return int(np.isfinite(self.coefficient_draws).all(axis=1).sum())

    @overload
    def step_time(self, per_device_batch: float, world_size: float, accum_steps: float,
                  nodes: float = 1) -> float: ...
    @overload
    def step_time(self, per_device_batch: Number, world_size: Number, accum_steps: Number,
                  nodes: Number = 1) -> Number: ...
    def step_time(self, per_device_batch: Number, world_size: Number, accum_steps: Number,
                  nodes: Number = 1) -> Number:
        """Predicted seconds per optimizer step; arguments broadcast like numpy arrays.

        Args:
            per_device_batch: samples per device per micro-step.
            world_size: number of devices (DDP ranks).
            accum_steps: micro-steps per optimizer step.
            nodes: the nodes the ranks run on (1: one node; 2 or more: the all-reduce crosses
                nodes, ``t_ar_inter``, or ``t_ar`` in its place where no trial spanned nodes).

        Returns:
            A float for scalar arguments, else an array of the broadcast shape.

        Raises:
            AnalysisError: an argument is not positive and finite, a world size, accumulation
                count or node count is below 1, or more nodes than devices.

        Example:
            >>> m = fit_throughput([8, 32, 128], [1, 1, 1], [1, 1, 1], [0.014, 0.026, 0.074])
            >>> round(m.step_time(64, 1, 2), 3)
            0.084
        """
        b, w, a, n = _config(per_device_batch, world_size, accum_steps, nodes)
        intra, inter = self._links(self.t_ar, self.t_ar_inter)
        out = _step_time(b, w, a, n, self.t0, self.t1, intra, inter)
        return float(out) if out.ndim == 0 else out

    @overload
    def samples_per_s(self, per_device_batch: float, world_size: float, accum_steps: float,
                      nodes: float = 1) -> float: ...
    @overload
    def samples_per_s(self, per_device_batch: Number, world_size: Number, accum_steps: Number,
                      nodes: Number = 1) -> Number: ...
    def samples_per_s(self, per_device_batch: Number, world_size: Number, accum_steps: Number,
                      nodes: Number = 1) -> Number:
        """Predicted training throughput over all devices: ``b W A / step_time``.

        Args:
            per_device_batch: samples per device per micro-step.
            world_size: number of devices (DDP ranks).
            accum_steps: micro-steps per optimizer step.
            nodes: the nodes the ranks run on (as :meth:`step_time`).

        Returns:
            Samples per second; a float for scalar arguments, else an array.

        Raises:
            AnalysisError: as :meth:`step_time`.

        Example:
            >>> m = fit_throughput([8, 32, 128], [1, 1, 1], [1, 1, 1], [0.014, 0.026, 0.074])
            >>> m.samples_per_s(np.array([8.0, 128.0]), 1, 1).round()
            array([ 571., 1730.])
        """
        b, w, a, n = _config(per_device_batch, world_size, accum_steps, nodes)
        intra, inter = self._links(self.t_ar, self.t_ar_inter)
        out = b * w * a / _step_time(b, w, a, n, self.t0, self.t1, intra, inter)
        return float(out) if out.ndim == 0 else out

    def step_time_draws(self, per_device_batch: Number, world_size: Number, accum_steps: Number,
                        nodes: Number = 1) -> FloatArray:
        """Bootstrap draws of the step time, for prediction intervals.

        Args:
            per_device_batch: samples per device per micro-step.
            world_size: number of devices (DDP ranks).
            accum_steps: micro-steps per optimizer step.
            nodes: the nodes the ranks run on (as :meth:`step_time`).

        Returns:
            Array of shape ``(n_boot,) + broadcast shape of the arguments``; NaN in the draws
            that left the model's support (see ``n_draws``).

        Raises:
            AnalysisError: as :meth:`step_time`.

        Example:
            >>> m = fit_throughput([8, 32, 128], [1, 1, 1], [1, 1, 1], [0.014, 0.026, 0.074], n_boot=100)
            >>> m.step_time_draws(np.array([8.0, 16.0]), 1, 1).shape
            (100, 2)
        """
        b, w, a, n = np.broadcast_arrays(*_config(per_device_batch, world_size, accum_steps, nodes))
        t0, t1, t_ar, t_ar_inter = (self.coefficient_draws[:, k].reshape((-1,) + (1,) * b.ndim) for k in range(4))
        intra, inter = self._links(t_ar, t_ar_inter)
        return _step_time(b, w, a, n, t0, t1, intra, inter)

    def _links(self, t_ar: float | FloatArray, t_ar_inter: float | FloatArray) -> tuple[
            float | FloatArray, float | FloatArray]:
        """The all-reduce costs a prediction uses within a node and across nodes: each the one
        fitted where trials measured it, else the other in its place (the intra-node cost for
        the links between nodes, a lower bound; the inter-node cost for a node's own, an upper
        bound), else 0 (no trial ran on more than one device)."""
        if self.allreduce_measured and self.inter_node_measured:
            return t_ar, t_ar_inter
        if self.inter_node_measured:
            return t_ar_inter, t_ar_inter
        return t_ar, t_ar

    def extrapolations(self, per_device_batch: Number, world_size: Number, accum_steps: Number,
                       nodes: Number = 1) -> tuple[str, ...]:
        """Why a prediction at this configuration goes beyond what the trials measured.

        Args:
            per_device_batch: samples per device per micro-step (or an array: any outside counts).
            world_size: number of devices.
            accum_steps: micro-steps per optimizer step.
            nodes: the nodes the ranks run on.

        Returns:
            One sentence per reason, empty when the configuration is inside the data.

        Raises:
            AnalysisError: as :meth:`step_time`.

        Example:
            >>> m = fit_throughput([8, 32, 128], [1, 1, 1], [1, 1, 1], [0.014, 0.026, 0.074])
            >>> for reason in m.extrapolations(512, 4, 1): print(reason)
            per-device batch 512 is outside the range that ran (8 to 128)
            communication is unmeasured: every trial ran on one device (W = 1), so the step time at W = 4 leaves out the all-reduce
            >>> m = fit_throughput([8, 32, 128, 32], [1, 1, 1, 4], [1, 1, 1, 2], [0.014, 0.026, 0.074, 0.09])
            >>> for reason in m.extrapolations(32, 8, 1, nodes=2): print(reason)
            world size 8 is larger than any that ran (up to 4)
            the all-reduce across nodes is unmeasured: no trial spanned nodes, so the step time on 2 nodes uses the all-reduce measured within one node (a lower bound: links between nodes are seldom faster)
        """
        b, w, a, n = _config(per_device_batch, world_size, accum_steps, nodes)
        b, w, a, n = np.broadcast_arrays(b, w, a, n)
        reasons = []
        lo, hi = self.per_device_batch_range
        outside = b[(b < lo) | (b > hi)]
        if outside.size:
            ran = f"{format_batch(lo)} to {format_batch(hi)}"
            reasons.append(f"per-device batch {_values(outside)} is outside the range that ran ({ran})")
        w_max = self.world_sizes[-1]
        if not self.allreduce_measured and not self.inter_node_measured and (w > 1).any():
            reasons.append(
                "communication is unmeasured: every trial ran on one device (W = 1), so the step time "
                f"at W = {_values(w[w > 1])} leaves out the all-reduce"
            )
        elif (w > w_max).any():
            reasons.append(f"world size {_values(w[w > w_max])} is larger than any that ran (up to {w_max})")
        spans, within = n > 1, (n == 1) & (w > 1)
        if self.allreduce_measured and not self.inter_node_measured and spans.any():
            reasons.append(
                f"the all-reduce across nodes is unmeasured: no trial spanned nodes, so the step time on "
                f"{_values(n[spans])} nodes uses the all-reduce measured within one node (a lower bound: links "
                "between nodes are seldom faster)"
            )
        elif self.inter_node_measured and (n > self.node_counts[-1]).any():
            reasons.append(
                f"{_values(n[n > self.node_counts[-1]])} nodes are more than any trial spanned (up to "
                f"{self.node_counts[-1]}): the all-reduce across them is the ring's, bound by the link between "
                "nodes measured on fewer"
            )
        if self.inter_node_measured and not self.allreduce_measured and within.any():
            reasons.append(
                "the all-reduce within one node is unmeasured: every trial of more than one device spanned "
                f"nodes, so the step time at W = {_values(w[within])} on one node uses the all-reduce measured "
                "across nodes (an upper bound)"
            )
        a_lo, a_hi = self.accum_range
        outside = a[(a < a_lo) | (a > a_hi)]
        if outside.size:
            reasons.append(
                f"accumulation steps {_values(outside)} are outside the range that ran ({a_lo} to {a_hi})"
            )
        return tuple(reasons)


def _values(x: FloatArray) -> str:
    distinct = np.unique(x)
    return ", ".join(format_batch(float(v)) for v in distinct)


def _step_time(b: FloatArray, w: FloatArray, a: FloatArray, n: FloatArray, t0: float | FloatArray,
               t1: float | FloatArray, t_ar: float | FloatArray, t_ar_inter: float | FloatArray) -> FloatArray:
    # The model itself, in the module docstring's terms; the fit's design matrix is its columns.
    out: FloatArray = a * (t0 + t1 * b) + np.where(n > 1, t_ar_inter, t_ar) * _ring(w)
    return out


def _ring(world_size: FloatArray) -> FloatArray:
    # A ring all-reduce sends 2 (W - 1) / W of the gradient per device: 0 at W = 1, 1 at W = 2,
    # approaching 2 as W grows, so t_ar is the cost of moving the gradient twice.
    out: FloatArray = 2.0 * (world_size - 1.0) / world_size
    return out


def _config(b: Number, w: Number, a: Number, n: Number = 1) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    arrays = tuple(np.asarray(v, dtype=np.float64) for v in (b, w, a, n))
    names = ("per-device batch", "world size", "accumulation steps", "node count")
    for name, arr, least in zip(names, arrays, (0.0, 1.0, 1.0, 1.0), strict=True):
        if not np.isfinite(arr).all() or (arr <= 0).any() or (arr < least).any():
            rule = "positive and finite" if least == 0 else "finite and at least 1"
            raise AnalysisError(f"a step-time prediction needs a {name} that is {rule}; got {arr.tolist()!r}")
    if (arrays[3] > arrays[1]).any():
        raise AnalysisError(f"a step-time prediction needs at least one device per node; got world size "
                            f"{arrays[1].tolist()!r} on {arrays[3].tolist()!r} nodes")
    return arrays[0], arrays[1], arrays[2], arrays[3]


def fit_throughput(
    per_device_batch: ArrayLike,
    world_size: ArrayLike,
    accum_steps: ArrayLike,
    step_time_s: ArrayLike,
    *,
    nodes: ArrayLike | None = None,
    device: str = "cpu",
    level: float = 0.9,
    n_boot: int = 1000,
    seed: int = 0,
) -> ThroughputModel:
    """Fit ``step_time = A (t0 + t1 b) + t_ar 2 (W - 1) / W`` to measured trials of one device
    kind, with ``t_ar_inter`` in place of ``t_ar`` for the trials whose ranks spanned nodes.

    The coefficients are non-negative least squares on relative error (each trial weighted
    ``1 / step_time``), so a 20 ms step and a 2 s step count alike. Without ``nodes``, or with
    every trial on one node, the fit and its draws are those of the three-coefficient model.

    Args:
        per_device_batch: samples per device per micro-step of each trial.
        world_size: devices (DDP ranks) of each trial.
        accum_steps: micro-steps per optimizer step of each trial.
        step_time_s: measured seconds per optimizer step of each trial (a median over steps
            after warm-up is what the model is about).
        nodes: the nodes each trial's ranks ran on (``record.NODES``); default: one each.
        device: the device kind all these trials ran on (the caller groups by it).
        level: level of the coefficient intervals.
        n_boot: number of bootstrap draws (at least 100).
        seed: seed of the bootstrap's ``numpy.random.default_rng``.

    Returns:
        A :class:`ThroughputModel`.

    Raises:
        AnalysisError: fewer than 3 trials; every trial at the same per-device batch (the fixed
            and per-sample costs cannot be told apart); arguments of different lengths; values
            that are not positive and finite, a world size, accumulation or node count below 1,
            or a trial on more nodes than devices.

    Example:
        >>> m = fit_throughput([8, 32, 128], [1, 1, 1], [1, 1, 1], [0.014, 0.026, 0.074])
        >>> round(m.t0, 3), round(m.t1 * 1e3, 2), m.allreduce_measured
        (0.01, 0.5, False)
        >>> m = fit_throughput([32, 128, 32, 32, 32], [1, 1, 4, 8, 16], [1, 1, 1, 1, 1],
        ...                    [0.026, 0.074, 0.041, 0.0435, 0.19475], nodes=[1, 1, 1, 1, 2])
        >>> round(m.t_ar, 3), round(m.t_ar_inter, 3), m.inter_node_measured
        (0.01, 0.09, True)
    """
    check_level(level)
    check_n_boot(n_boot)
    b = as_positive_array("per-device batch sizes", per_device_batch)
    w = as_positive_array("world sizes", world_size)
    a = as_positive_array("accumulation steps", accum_steps)
    t = as_positive_array("step times", step_time_s)
    check_same_length(per_device_batch=b, world_size=w, accum_steps=a, step_time_s=t)
    n = np.ones_like(b) if nodes is None else as_positive_array("node counts", nodes)
    if nodes is not None:
        check_same_length(per_device_batch=b, nodes=n)
    for name, arr in (("world sizes", w), ("accumulation steps", a), ("node counts", n)):
        if (arr < 1).any():
            raise AnalysisError(f"{name} are at least 1; got {_values(arr[arr < 1])}")
    if (n > w).any():
        raise AnalysisError(f"a trial runs at least one device per node; got world size {_values(w[n > w])} on "
                            f"{_values(n[n > w])} nodes")
    if b.size < 3:
        raise AnalysisError(f"a step-time fit needs at least 3 trials; got {b.size}")
    if np.unique(b).size < 2:
        raise AnalysisError(
            "a step-time fit needs trials at 2 or more per-device batch sizes to tell the fixed "
            f"cost per micro-step from the cost per sample; every trial ran b = {format_batch(float(b[0]))}"
        )
    spans = n > 1
    allreduce_measured = bool(((w > 1) & ~spans).any())
    inter_node_measured = bool(spans.any())
    # The inter-node column only where a trial spanned nodes: a study of one node fits (and
    # draws) exactly as the three-coefficient model did, so its answers do not move.
    columns = [a, a * b, _ring(w) * ~spans] + ([_ring(w) * spans] if inter_node_measured else [])
    design = np.column_stack(columns)
    n_coef = 2 + int(allreduce_measured) + int(inter_node_measured)
    coef = _nnls_relative(design, t)
    fitted = design @ coef
    rel = t / fitted - 1.0
    notes = []
    if not allreduce_measured and not inter_node_measured:
        notes.append("every trial ran on one device: the all-reduce cost is unmeasured (t_ar = 0)")
    elif not allreduce_measured:
        notes.append("every trial of more than one device spanned nodes: the all-reduce within one node is "
                     "unmeasured (t_ar = 0; a prediction on one node uses t_ar_inter, an upper bound)")
    dof = b.size - n_coef
    rng = np.random.default_rng(seed)
    if dof > 0:
        draws = _residual_draws(design, fitted, rel, dof, n_boot, rng)
        dropped = n_boot - int(np.isfinite(draws).all(axis=1).sum())
        if dropped == n_boot:
            raise AnalysisError(
                f"no bootstrap draw of the step-time fit stayed inside its model (positive step times): the "
                f"{b.size} trials scatter too much about it (relative error {math.sqrt(np.mean(rel**2)):.0%})"
            )
        if dropped:
            notes.append(f"{dropped} of {n_boot} bootstrap draws left the model (a step time of zero or less) and "
                         "were dropped: the intervals rest on the others")
    else:
        notes.append("as many trials as coefficients: the fit is exact and its intervals carry no uncertainty")
        draws = np.tile(coef, (n_boot, 1))
    if not inter_node_measured:  # t_ar_inter: 0 in every draw kept, NaN in those dropped
        coef = np.append(coef, 0.0)
        draws = np.column_stack([draws, np.where(np.isnan(draws[:, :1]), np.nan, 0.0)])
    draws.flags.writeable = False
    return ThroughputModel(
        device=device,
        t0=float(coef[0]),
        t1=float(coef[1]),
        t_ar=float(coef[2]),
        t0_interval=percentile_interval(draws[:, 0], level),
        t1_interval=percentile_interval(draws[:, 1], level),
        t_ar_interval=percentile_interval(draws[:, 2], level),
        n_trials=int(b.size),
        per_device_batch_range=(float(b.min()), float(b.max())),
        world_sizes=tuple(int(v) for v in np.unique(w)),
        accum_range=(int(a.min()), int(a.max())),
        allreduce_measured=allreduce_measured,
        relative_rmse=float(math.sqrt(np.mean(rel**2))),
        level=level,
        note="; ".join(notes) if notes else None,
        coefficient_draws=draws,
        t_ar_inter=float(coef[3]),
        t_ar_inter_interval=percentile_interval(draws[:, 3], level),
        node_counts=tuple(int(v) for v in np.unique(n)),
        inter_node_measured=inter_node_measured,
    )


def _nnls_relative(design: FloatArray, t: FloatArray) -> FloatArray:
    # Rows divided by the measured time: minimises the sum of squared relative errors.
    coef, _ = nnls(design / t[:, None], np.ones_like(t))
    return np.asarray(coef, dtype=np.float64)


def _residual_draws(
    design: FloatArray, fitted: FloatArray, rel: FloatArray, dof: int, n_boot: int, rng: np.random.Generator
) -> FloatArray:
    """Refit on the fitted times times resampled relative residuals; a draw that leaves the
    model's support is a row of NaN (dropped)."""
    n = fitted.size
    # As for the critical batch: residuals rescaled to the errors they estimate, and each
    # draw's noise scale drawn from its chi-square distribution (few trials, uncertain scale).
    r = (rel - rel.mean()) * math.sqrt(n / dof)
    scale = np.sqrt(dof / rng.chisquare(dof, size=(n_boot, 1)))
    factor = 1.0 + scale * r[rng.integers(0, n, size=(n_boot, n))]
    # A relative error of -100% or less is a step of no time at all: outside the model, whose
    # step times are positive. With one degree of freedom (four configurations, three
    # coefficients) the chi-square scale sends a few percent of the draws there; clipped to a
    # sliver of the fitted time, they would refit to step times of ~1e-10 s and put the low end
    # of a recommendation's time interval at a fortieth of what its fewest samples need. Such
    # draws are dropped, as are refits that predict no time for a configuration that ran.
    inside = (factor > 0).all(axis=1)
    draws = np.full((n_boot, design.shape[1]), np.nan)
    # nnls has no batched form; 1,000 refits of a 3-column problem take ~20 ms.
    for k in np.flatnonzero(inside):
        coef = _nnls_relative(design, fitted * factor[k])
        if (design @ coef > 0).all():
            draws[k] = coef
    return draws
