"""The LR law: how the best learning rate grows with the effective batch size.

Two forms, both fitted in log space (the best LR of a search is known to a factor, not to an
amount):

* a power law ``lr_opt(B) = c B^alpha``: alpha 1 is the linear scaling rule, 0.5 the square
  root rule, 0 a constant LR;
* McCandlish et al.'s bend ``eps_opt(B) = eps_max / (1 + B_noise / B)``: linear while
  ``B << B_noise``, flat beyond.

The bend is fitted by profiling: for a fixed ``B_noise`` the best ``eps_max`` is closed-form,
so the fit is a one-dimensional search over a log grid of ``B_noise``, vectorised across the
bootstrap draws (one matrix product for all of them, no optimiser call per draw).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import brentq
from scipy.special import fdtri, stdtrit

from hpsearch.analysis._stats import (
    FloatArray,
    Interval,
    as_positive_array,
    check_level,
    check_n_boot,
    check_same_length,
    format_batch,
    format_number,
    prediction_batches,
)
from hpsearch.errors import AnalysisError

__all__ = ["LRLawFit", "fit_lr_law"]

RULES: dict[str, float] = {"constant": 0.0, "sqrt": 0.5, "linear": 1.0}

# The bend is preferred when it lowers AICc by more than this (Burnham & Anderson: a
# difference under 2 is "substantial support" for both). The power law is the default because
# its alpha maps onto the rules a user can apply.
_AICC_MARGIN = 2.0
# The B_noise grid reaches this factor beyond the batch sizes that ran on either side; a best
# B_noise on the grid's edge means the bend degenerated into a line (linear or flat).
_GRID_REACH = 1e3
_GRID_STEPS_PER_DECADE = 25
_GOLDEN_STEPS = 30
#: The largest natural log whose exp is a finite float64.
_LOG_MAX = math.log(np.finfo(np.float64).max)


@dataclass(frozen=True)
class LRLawFit:
    """The fitted LR law, both forms, and which one the data prefer.

    Attributes:
        alpha: exponent of the power law ``lr = coefficient * B^alpha``.
        alpha_interval: t interval of ``alpha`` at ``level``.
        coefficient: ``c`` of the power law.
        preferred: ``"power"`` or ``"bend"``: the form :meth:`lr` predicts with.
        eps_max: the bend's large-batch LR, or ``None`` when the bend was not fitted (fewer
            than 4 batch sizes).
        b_noise: the bend's ``B_noise``, where the LR stops growing linearly, or ``None``.
        b_noise_interval: profile-likelihood interval of ``b_noise`` (``low`` 0 or ``high``
            inf where the data do not bound it), or ``None``.
        delta_aicc: ``AICc(power) - AICc(bend)``; positive favours the bend. ``None`` when the
            bend was not fitted.
        rules_supported: which of ``"constant"``, ``"sqrt"``, ``"linear"`` the alpha interval
            contains; possibly none, possibly several.
        summary: one sentence for a user.
        n_batch_sizes: number of batch sizes fitted.
        batch_sizes: the batch sizes, ascending.
        best_lrs: the best LR at each of ``batch_sizes``.
        log_residual_sd: residual standard deviation of the preferred form, in natural log
            units (0.1 is about 10% scatter of the best LR about the law).
        level: the intervals' level.

    Example:
        >>> fit = fit_lr_law([8, 32, 128, 512], [0.01, 0.041, 0.158, 0.65])
        >>> fit.rules_supported, fit.preferred
        (('linear',), 'power')
        >>> print(fit.summary)
        alpha 1.00 [0.98, 1.02]: the linear rule fits from B 8 to 512
    """

    alpha: float
    alpha_interval: Interval
    coefficient: float
    preferred: Literal["power", "bend"]
    eps_max: float | None
    b_noise: float | None
    b_noise_interval: Interval | None
    delta_aicc: float | None
    rules_supported: tuple[str, ...]
    summary: str
    n_batch_sizes: int
    batch_sizes: tuple[float, ...]
    best_lrs: tuple[float, ...]
    log_residual_sd: float
    level: float
    power_draws: FloatArray = field(repr=False, compare=False)
    """Draws of ``(ln coefficient, alpha)``, shape ``(n_boot, 2)``."""
    bend_draws: FloatArray | None = field(repr=False, compare=False)
    """Draws of ``(ln eps_max, ln b_noise)``, shape ``(n_boot, 2)``, or ``None``."""

    @overload
    def lr(self, batch_size: float) -> float: ...
    @overload
    def lr(self, batch_size: FloatArray) -> FloatArray: ...
    def lr(self, batch_size: float | FloatArray) -> float | FloatArray:
        """The best LR the preferred form predicts at ``batch_size``.

        Args:
            batch_size: an effective batch size or an array of them (positive).

        Returns:
            The predicted LR, shaped like the input.

        Raises:
            AnalysisError: a batch size is not positive and finite.

        Example:
            >>> fit = fit_lr_law([8, 32, 128, 512], [0.01, 0.041, 0.158, 0.65])
            >>> round(fit.lr(1024.0), 2)
            1.29
        """
        b = prediction_batches(batch_size)
        if self.preferred == "bend":
            assert self.eps_max is not None and self.b_noise is not None
            out = self.eps_max / (1.0 + self.b_noise / b)
        else:
            out = self.coefficient * b**self.alpha
        return float(out) if out.ndim == 0 else np.asarray(out, dtype=np.float64)

    def lr_draws(self, batch_size: float | FloatArray) -> FloatArray:
        """Draws of the predicted best LR at ``batch_size`` under the preferred form.

        Args:
            batch_size: an effective batch size or an array of them (positive).

        Returns:
            Array of shape ``(n_boot,) + shape(batch_size)``.

        Raises:
            AnalysisError: a batch size is not positive and finite.

        Example:
            >>> fit = fit_lr_law([8, 32, 128, 512], [0.01, 0.041, 0.158, 0.65], n_boot=200)
            >>> fit.lr_draws(np.array([64.0, 1024.0])).shape
            (200, 2)
        """
        logs = self.log_lr_draws(batch_size)
        # A log LR past the largest float's is an LR of inf: said so, not overflowed into.
        out = np.full(logs.shape, np.inf)
        np.exp(logs, out=out, where=logs < _LOG_MAX)
        return out

    def log_lr_draws(self, batch_size: float | FloatArray) -> FloatArray:
        """Draws of the natural log of the predicted best LR at ``batch_size``: where the
        intervals are computed (quantiles commute with ``exp``). With 3 batch sizes the draws of
        alpha have one degree of freedom, whose t tails reach thousands: the LR itself, ``B^alpha``,
        then lies beyond any float, its log does not.

        Args:
            batch_size: an effective batch size or an array of them (positive).

        Returns:
            Array of shape ``(n_boot,) + shape(batch_size)``.

        Raises:
            AnalysisError: a batch size is not positive and finite.

        Example:
            >>> fit = fit_lr_law([8, 32, 128, 512], [0.01, 0.041, 0.158, 0.65], n_boot=200)
            >>> bool(np.allclose(np.exp(fit.log_lr_draws(64.0)), fit.lr_draws(64.0)))
            True
        """
        b = prediction_batches(batch_size)
        lb = np.log(b)
        if self.preferred == "bend":
            assert self.bend_draws is not None
            ln_eps, ln_bn = self.bend_draws[:, 0], self.bend_draws[:, 1]
            out = ln_eps.reshape((-1,) + (1,) * b.ndim) - _softplus(np.subtract.outer(ln_bn, lb))
        else:
            ln_c, alpha = self.power_draws[:, 0], self.power_draws[:, 1]
            out = ln_c.reshape((-1,) + (1,) * b.ndim) + np.multiply.outer(alpha, lb)
        return np.asarray(out, dtype=np.float64)


def fit_lr_law(
    batch_sizes: ArrayLike,
    best_lrs: ArrayLike,
    *,
    level: float = 0.9,
    n_boot: int = 1000,
    seed: int = 0,
) -> LRLawFit:
    """Fit the best LR against effective batch size: a power law, and the bend where it bends.

    Args:
        batch_sizes: the distinct effective batch sizes (one entry each).
        best_lrs: the best LR found at each batch size (the caller picks it, e.g. the
            configuration with the least time to target).
        level: level of the intervals.
        n_boot: number of draws kept for :meth:`LRLawFit.lr_draws` (at least 100).
        seed: seed of ``numpy.random.default_rng`` for the draws.

    Returns:
        An :class:`LRLawFit`. The bend is fitted only with 4 batch sizes or more (with 3, two
        parameters leave one degree of freedom, and the two forms cannot be told apart).

    Raises:
        AnalysisError: fewer than 3 batch sizes; a batch size given twice; arguments of
            different lengths; values that are not positive and finite; a level outside
            (0, 1); ``n_boot < 100``.

    Example:
        >>> fit = fit_lr_law([8, 32, 128, 512, 2048, 8192], [0.008, 0.03, 0.09, 0.17, 0.19, 0.2])
        >>> fit.preferred, round(fit.b_noise, -1), fit.rules_supported
        ('bend', 200.0, ('sqrt',))
        >>> print(fit.summary)
        linear up to about B 197 (B_noise, 90% interval [168, 230]), flat beyond at lr 0.216; fitted from B 8 to 8192
    """
    check_level(level)
    check_n_boot(n_boot)
    b = as_positive_array("batch sizes", batch_sizes)
    lr = as_positive_array("best learning rates", best_lrs)
    check_same_length(batch_sizes=b, best_lrs=lr)
    distinct, counts = np.unique(b, return_counts=True)
    if (counts > 1).any():
        twice = ", ".join(format_batch(float(x)) for x in distinct[counts > 1])
        raise AnalysisError(
            f"an LR law takes one best LR per batch size; batch sizes given more than once: {twice}"
        )
    if b.size < 3:
        shown = ", ".join(format_batch(float(x)) for x in distinct)
        raise AnalysisError(f"an LR-law fit needs at least 3 batch sizes; got {b.size} ({shown})")
    order = np.argsort(b)
    b, lr = b[order], lr[order]
    x, y = np.log(b), np.log(lr)
    n = b.size
    rng = np.random.default_rng(seed)

    # Power law by ordinary least squares in log-log. The interval is the t interval, exact
    # when the log best LR scatters normally about the law; a percentile bootstrap with 3-8
    # points treats the scatter as known and undercovers. The draws come from the same
    # sampling distribution (a bivariate t), so intervals built from them agree with it.
    dof = n - 2
    design = np.column_stack([np.ones(n), x])
    beta, *_ = np.linalg.lstsq(design, y, rcond=None)
    ln_c, alpha = float(beta[0]), float(beta[1])
    rss_power = float(np.sum((y - design @ beta) ** 2))
    s2 = rss_power / dof
    cov = s2 * np.linalg.inv(design.T @ design)
    half = float(stdtrit(dof, (1 + level) / 2)) * math.sqrt(cov[1, 1])
    alpha_interval = Interval(alpha - half, alpha + half, level)
    chol = np.linalg.cholesky(cov) if s2 > 0 else np.zeros((2, 2))
    t_scale = np.sqrt(dof / rng.chisquare(dof, size=(n_boot, 1)))
    power_draws = beta + t_scale * np.einsum("bj,ij->bi", rng.standard_normal((n_boot, 2)), chol)
    power_draws.flags.writeable = False
    rules = tuple(name for name, value in RULES.items() if alpha_interval.contains(value))

    eps_max: float | None = None
    b_noise: float | None = None
    b_noise_interval: Interval | None = None
    delta_aicc: float | None = None
    bend_draws: FloatArray | None = None
    preferred: Literal["power", "bend"] = "power"
    log_sd = math.sqrt(s2)
    if n >= 4:
        grid = _grid(b)
        ln_bn, ln_eps, rss_bend, on_edge, rss_grid = _fit_bend(y[None, :], b, grid)
        eps_max, b_noise = math.exp(float(ln_eps[0])), math.exp(float(ln_bn[0]))
        rss_b = float(rss_bend[0])
        b_noise_interval = _profile_interval(y, b, grid, rss_grid[0], rss_b, float(ln_bn[0]), level)
        # Both forms have two parameters, so AICc's penalty cancels and the difference is the
        # likelihood term alone. The tiny floor keeps exact (noise-free) data finite.
        tiny = 1e-12 * n
        delta_aicc = n * math.log((rss_power + tiny) / (rss_b + tiny))
        if delta_aicc > _AICC_MARGIN and not bool(on_edge[0]):
            preferred = "bend"
            log_sd = math.sqrt(rss_b / dof)
        bend_draws = _bend_draws(y, b, grid, float(ln_eps[0]), float(ln_bn[0]), n_boot, rng)
        bend_draws.flags.writeable = False

    lo, hi = format_batch(float(b[0])), format_batch(float(b[-1]))
    if preferred == "bend":
        assert b_noise is not None and eps_max is not None and b_noise_interval is not None
        iv = b_noise_interval
        summary = (
            f"linear up to about B {_fmt_bn(b_noise)} (B_noise, {level * 100:.0f}% interval "
            f"[{_fmt_bn(iv.low)}, {_fmt_bn(iv.high)}]), flat beyond at lr {eps_max:.3g}; "
            f"fitted from B {lo} to {hi}"
        )
    else:
        summary = _power_summary(alpha, alpha_interval, rules, math.exp(ln_c), lo, hi)
    return LRLawFit(
        alpha=alpha,
        alpha_interval=alpha_interval,
        coefficient=math.exp(ln_c),
        preferred=preferred,
        eps_max=eps_max,
        b_noise=b_noise,
        b_noise_interval=b_noise_interval,
        delta_aicc=delta_aicc,
        rules_supported=rules,
        summary=summary,
        n_batch_sizes=n,
        batch_sizes=tuple(float(v) for v in b),
        best_lrs=tuple(float(v) for v in lr),
        log_residual_sd=log_sd,
        level=level,
        power_draws=power_draws,
        bend_draws=bend_draws,
    )


def _fmt_bn(x: float) -> str:
    # B_noise is a fitted scale, not a batch anyone ran: three significant figures.
    return format_number(x)


def _power_summary(
    alpha: float, iv: Interval, rules: tuple[str, ...], coefficient: float, lo: str, hi: str
) -> str:
    head = f"alpha {alpha:.2f} [{iv.low:.2f}, {iv.high:.2f}]: "
    span = f"from B {lo} to {hi}"
    if len(rules) == 1:
        return head + f"the {rules[0]} rule fits {span}"
    apart = "; more batch sizes would tell them apart"
    if len(rules) == 2:
        return head + f"the {rules[0]} and {rules[1]} rules both fit {span}" + apart
    if len(rules) == 3:
        return head + f"the constant, sqrt and linear rules all fit {span}" + apart
    tail = ""
    if iv.high < 0:
        # Adam-type optimizers can show this past their peak (Li et al. 2024, "surge").
        tail = " (the best LR falls as the batch grows)"
    law = f"use lr = {coefficient:.3g} * B^{alpha:.2f}"
    return head + f"no simple rule (constant, sqrt, linear) fits {span}; {law}" + tail


def _grid(b: FloatArray) -> FloatArray:
    lo, hi = math.log(b[0] / _GRID_REACH), math.log(b[-1] * _GRID_REACH)
    steps = math.ceil((hi - lo) / math.log(10) * _GRID_STEPS_PER_DECADE) + 1
    return np.linspace(lo, hi, steps)


def _shape(ln_bn: FloatArray, b: FloatArray) -> FloatArray:
    """``u = ln(1 + B_noise / B)`` for each ``ln B_noise`` (any shape) and batch size (last axis)."""
    return _softplus(ln_bn[..., None] - np.log(b))


def _softplus(x: FloatArray) -> FloatArray:
    """``ln(1 + e^x)`` without overflow: ``log1p(exp(x))`` overflows past x = 709 (a bootstrap
    draw of B_noise far beyond the batches), where the answer is x itself."""
    out: FloatArray = np.logaddexp(0.0, x)
    return out


def _grid_rss(y: FloatArray, b: FloatArray, grid: FloatArray) -> FloatArray:
    """RSS of the bend at each grid ln B_noise, for each row of ``y``: shape (rows, grid)."""
    # For fixed B_noise, ln lr = ln eps_max - u: ln eps_max is the mean of y + u and the RSS
    # is that of y + u about its mean. Expanded so that all draws and grid points cost one
    # product. einsum, not matmul: OpenBLAS threads on a busy 2-core machine make this
    # 100 x 8 x 1300 product take 10-30 ms instead of 0.2.
    uc = _shape(grid, b)
    uc -= uc.mean(axis=1, keepdims=True)
    yc = y - y.mean(axis=1, keepdims=True)
    cross = np.einsum("mi,gi->mg", yc, uc)
    rss = (yc**2).sum(axis=1)[:, None] + 2.0 * cross + (uc**2).sum(axis=1)[None, :]
    return np.asarray(np.maximum(rss, 0.0), dtype=np.float64)


def _rss_at(y: FloatArray, b: FloatArray, ln_bn: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``(rss, ln eps_max)`` of the bend at one ``ln B_noise`` per row of ``y``."""
    z = y + _shape(ln_bn, b)
    ln_eps = z.mean(axis=-1)
    return ((z - ln_eps[..., None]) ** 2).sum(axis=-1), ln_eps


def _fit_bend(
    y: FloatArray, b: FloatArray, grid: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, NDArray[np.bool_], FloatArray]:
    """Best bend for each row of ``y``: ``(ln B_noise, ln eps_max, rss, on_edge, grid rss)``.

    The grid finds the basin; a golden-section search between the grid neighbours of the
    minimum, run on all rows at once, then pins ``B_noise`` to about 1e-6 in log.
    """
    rss_grid = _grid_rss(y, b, grid)
    i = np.argmin(rss_grid, axis=1)
    on_edge = (i == 0) | (i == grid.size - 1)
    lo = grid[np.maximum(i - 1, 0)]
    hi = grid[np.minimum(i + 1, grid.size - 1)]
    inv_phi = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = hi - inv_phi * (hi - lo), lo + inv_phi * (hi - lo)
    fc, fd = _rss_at(y, b, c)[0], _rss_at(y, b, d)[0]
    for _ in range(_GOLDEN_STEPS):
        left = fc < fd  # the minimum lies in [lo, d]
        hi = np.where(left, d, hi)
        lo = np.where(left, lo, c)
        d_new = np.where(left, c, lo + inv_phi * (hi - lo))
        c_new = np.where(left, hi - inv_phi * (hi - lo), d)
        f_new = _rss_at(y, b, np.where(left, c_new, d_new))[0]
        fd, fc = np.where(left, fc, f_new), np.where(left, f_new, fd)
        c, d = c_new, d_new
    ln_bn = (lo + hi) / 2.0
    rss, ln_eps = _rss_at(y, b, ln_bn)
    return ln_bn, ln_eps, rss, on_edge, rss_grid


def _profile_interval(
    y: FloatArray,
    b: FloatArray,
    grid: FloatArray,
    rss_grid: FloatArray,
    rss_min: float,
    ln_bn: float,
    level: float,
) -> Interval:
    """The F-based profile interval of B_noise: every B_noise whose best RSS is within the
    level's F bound of the minimum. It follows the curved likelihood of a nonlinear parameter
    with a handful of points, where a Wald interval is symmetric and a percentile bootstrap
    too narrow; measured coverage 0.90-0.92 over 300 synthetic studies."""
    dof = y.size - 2
    threshold = rss_min * (1.0 + float(fdtri(1, dof, level)) / dof)
    point = math.exp(ln_bn)
    i = int(np.argmin(rss_grid))

    def excess(ln: float) -> float:
        return float(_rss_at(y, b, np.array(ln))[0]) - threshold

    if rss_grid[i] > threshold:
        # Near-exact data (best LRs read off smoothed fits): the whole basin lies between two
        # grid points. Find its edges from the optimum itself, between it and those points.
        if excess(ln_bn) >= 0:  # no noise at all: nothing to bound
            return Interval(point, point, level)
        lo_edge, hi_edge = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, grid.size - 1)])
        low = math.exp(float(brentq(excess, lo_edge, ln_bn))) if excess(lo_edge) > 0 else math.exp(lo_edge)
        high = math.exp(float(brentq(excess, ln_bn, hi_edge))) if excess(hi_edge) > 0 else math.exp(hi_edge)
        return Interval(min(low, point), max(high, point), level)
    below = rss_grid <= threshold
    left = i
    while left > 0 and below[left - 1]:
        left -= 1
    right = i
    while right < grid.size - 1 and below[right + 1]:
        right += 1

    def crossing(outside: float, inside: float) -> float:
        # The grid's expanded RSS and the direct one differ in the last digits; where that
        # loses the sign change, the grid point is as good an answer.
        if excess(outside) * excess(inside) > 0:
            return math.exp(inside)
        return math.exp(float(brentq(excess, outside, inside)))

    low = 0.0 if left == 0 else crossing(float(grid[left - 1]), float(grid[left]))
    high = math.inf if right == grid.size - 1 else crossing(float(grid[right + 1]), float(grid[right]))
    return Interval(min(low, point), max(high, point), level)


def _bend_draws(
    y: FloatArray,
    b: FloatArray,
    grid: FloatArray,
    ln_eps: float,
    ln_bn: float,
    n_boot: int,
    rng: np.random.Generator,
) -> FloatArray:
    """Residual-bootstrap draws of (ln eps_max, ln B_noise), for prediction intervals."""
    n = y.size
    dof = n - 2
    fitted = ln_eps - _shape(np.array(ln_bn), b)
    r = y - fitted
    # As for the critical batch: residuals rescaled to the errors they estimate, and each
    # draw's noise scale drawn from its chi-square distribution (few points, uncertain scale).
    r = (r - r.mean()) * math.sqrt(n / dof)
    scale = np.sqrt(dof / rng.chisquare(dof, size=(n_boot, 1)))
    y_star = fitted + scale * r[rng.integers(0, n, size=(n_boot, n))]
    bn_star, eps_star, *_ = _fit_bend(y_star, b, grid)
    return np.column_stack([eps_star, bn_star])
