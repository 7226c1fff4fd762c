"""The LR law's curved forms, each a peak LR and one batch scale, fitted in log space.

* McCandlish et al.'s bend ``eps_opt(B) = eps_max / (1 + B_noise / B)``: linear while
  ``B << B_noise``, flat beyond;
* Li et al.'s surge ``eps_opt(B) = eps_max / ((1/2) (sqrt(B_peak / B) + sqrt(B / B_peak)))``
  (Adam-type optimizers, arXiv:2405.14578, whose peak sits at their noise scale): a square
  root rule while ``B << B_peak`` (``2 eps_max sqrt(B / B_peak)``), a peak of ``eps_max`` at
  ``B_peak``, and a fall as ``1 / sqrt(B)`` beyond.

Both read ``ln lr = ln eps_max - u(ln scale, B)`` with a shape ``u`` of the scale alone, so for a
fixed scale the best ``ln eps_max`` is the mean of ``ln lr + u``: the fit is a one-dimensional
search over a log grid of the scale, vectorised across the bootstrap draws (one product for
all of them, no optimiser call per draw), a golden-section search between the grid neighbours
of the minimum, a profile-likelihood interval of the scale, and residual-bootstrap draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import brentq
from scipy.special import fdtri

from hpsearch.analysis._stats import FloatArray, Interval

#: ``u(ln scale, B)`` for each ``ln scale`` (any shape) and batch size (the last axis).
Shape = Callable[[FloatArray, FloatArray], FloatArray]

# The scale's grid reaches this factor beyond the batch sizes that ran on either side; a best
# scale on the grid's edge means the form degenerated into a line (the bend into linear or
# flat, the surge into a sqrt rule rising or falling).
_GRID_REACH = 1e3
_GRID_STEPS_PER_DECADE = 25
_GOLDEN_STEPS = 30
_LN2 = math.log(2.0)


def softplus(x: FloatArray) -> FloatArray:
    """``ln(1 + e^x)`` without overflow: ``log1p(exp(x))`` overflows past x = 709 (a bootstrap
    draw of B_noise far beyond the batches), where the answer is x itself."""
    out: FloatArray = np.logaddexp(0.0, x)
    return out


def bend_shape(ln_bn: FloatArray, b: FloatArray) -> FloatArray:
    """The bend's ``u = ln(1 + B_noise / B)``."""
    return softplus(ln_bn[..., None] - np.log(b))


def surge_shape(ln_bp: FloatArray, b: FloatArray) -> FloatArray:
    """The surge's ``u = ln((sqrt(B_peak / B) + sqrt(B / B_peak)) / 2) = ln cosh(ln(B / B_peak) / 2)``,
    as ``logaddexp(x, -x) - ln 2`` so that a draw's peak far from the batches does not overflow."""
    x = (np.log(b) - ln_bp[..., None]) / 2.0
    out: FloatArray = np.logaddexp(x, -x) - _LN2
    return out


@dataclass(frozen=True)
class ProfiledFit:
    """One curved form fitted to the log best LRs.

    Attributes:
        ln_scale: ln of the form's batch scale (B_noise, B_peak).
        ln_eps: ln of its ``eps_max``.
        rss: its residual sum of squares in log LR.
        on_edge: the best scale lies on the grid's edge: the form degenerated into a line.
        interval: profile-likelihood interval of the scale (``low`` 0, ``high`` inf where the
            data do not bound it).
        draws: ``(ln eps_max, ln scale)`` per bootstrap draw, shape ``(n_boot, 2)``.
    """

    ln_scale: float
    ln_eps: float
    rss: float
    on_edge: bool
    interval: Interval
    draws: FloatArray


def fit_form(y: FloatArray, b: FloatArray, shape: Shape, level: float, n_boot: int,
             rng: np.random.Generator) -> ProfiledFit:
    """Fit ``ln lr = ln eps_max - shape(ln scale, B)`` to ``y`` (log best LRs at ascending ``b``)."""
    grid = _grid(b)
    ln_s, ln_eps, rss, on_edge, rss_grid = _fit(y[None, :], b, grid, shape)
    interval = _profile_interval(y, b, grid, shape, rss_grid[0], float(rss[0]), float(ln_s[0]), level)
    draws = _draws(y, b, grid, shape, float(ln_eps[0]), float(ln_s[0]), n_boot, rng)
    draws.flags.writeable = False
    return ProfiledFit(float(ln_s[0]), float(ln_eps[0]), float(rss[0]), bool(on_edge[0]), interval, draws)


def log_lr_draws(draws: FloatArray, b: FloatArray, shape: Shape) -> FloatArray:
    """``ln lr`` of each draw of ``(ln eps_max, ln scale)`` at batch sizes ``b`` (any shape):
    shape ``(n_boot,) + shape(b)``."""
    ln_eps = draws[:, 0].reshape((-1,) + (1,) * b.ndim)
    u = shape(draws[:, 1], b.ravel()).reshape((-1,) + b.shape)
    return np.asarray(ln_eps - u, dtype=np.float64)


def _grid(b: FloatArray) -> FloatArray:
    lo, hi = math.log(b[0] / _GRID_REACH), math.log(b[-1] * _GRID_REACH)
    steps = math.ceil((hi - lo) / math.log(10) * _GRID_STEPS_PER_DECADE) + 1
    return np.linspace(lo, hi, steps)


def _grid_rss(y: FloatArray, b: FloatArray, grid: FloatArray, shape: Shape) -> FloatArray:
    """RSS of the form at each grid ln scale, for each row of ``y``: shape (rows, grid)."""
    # For a fixed scale, ln lr = ln eps_max - u: ln eps_max is the mean of y + u and the RSS
    # is that of y + u about its mean. Expanded so that all draws and grid points cost one
    # product. einsum, not matmul: OpenBLAS threads on a busy 2-core machine make this
    # 100 x 8 x 1300 product take 10-30 ms instead of 0.2.
    uc = shape(grid, b)
    uc -= uc.mean(axis=1, keepdims=True)
    yc = y - y.mean(axis=1, keepdims=True)
    cross = np.einsum("mi,gi->mg", yc, uc)
    rss = (yc**2).sum(axis=1)[:, None] + 2.0 * cross + (uc**2).sum(axis=1)[None, :]
    return np.asarray(np.maximum(rss, 0.0), dtype=np.float64)


def _rss_at(y: FloatArray, b: FloatArray, ln_s: FloatArray, shape: Shape) -> tuple[FloatArray, FloatArray]:
    """``(rss, ln eps_max)`` of the form at one ``ln scale`` per row of ``y``."""
    z = y + shape(ln_s, b)
    ln_eps = z.mean(axis=-1)
    return ((z - ln_eps[..., None]) ** 2).sum(axis=-1), ln_eps


def _fit(
    y: FloatArray, b: FloatArray, grid: FloatArray, shape: Shape
) -> tuple[FloatArray, FloatArray, FloatArray, NDArray[np.bool_], FloatArray]:
    """Best form for each row of ``y``: ``(ln scale, ln eps_max, rss, on_edge, grid rss)``.

    The grid finds the basin; a golden-section search between the grid neighbours of the
    minimum, run on all rows at once, then pins the scale to about 1e-6 in log.
    """
    rss_grid = _grid_rss(y, b, grid, shape)
    i = np.argmin(rss_grid, axis=1)
    on_edge = (i == 0) | (i == grid.size - 1)
    lo = grid[np.maximum(i - 1, 0)]
    hi = grid[np.minimum(i + 1, grid.size - 1)]
    inv_phi = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = hi - inv_phi * (hi - lo), lo + inv_phi * (hi - lo)
    fc, fd = _rss_at(y, b, c, shape)[0], _rss_at(y, b, d, shape)[0]
    for _ in range(_GOLDEN_STEPS):
        left = fc < fd  # the minimum lies in [lo, d]
        hi = np.where(left, d, hi)
        lo = np.where(left, lo, c)
        d_new = np.where(left, c, lo + inv_phi * (hi - lo))
        c_new = np.where(left, hi - inv_phi * (hi - lo), d)
        f_new = _rss_at(y, b, np.where(left, c_new, d_new), shape)[0]
        fd, fc = np.where(left, fc, f_new), np.where(left, f_new, fd)
        c, d = c_new, d_new
    ln_s = (lo + hi) / 2.0
    rss, ln_eps = _rss_at(y, b, ln_s, shape)
    return ln_s, ln_eps, rss, on_edge, rss_grid


def _profile_interval(
    y: FloatArray,
    b: FloatArray,
    grid: FloatArray,
    shape: Shape,
    rss_grid: FloatArray,
    rss_min: float,
    ln_s: float,
    level: float,
) -> Interval:
    """The F-based profile interval of the scale: every scale whose best RSS is within the
    level's F bound of the minimum. It follows the curved likelihood of a nonlinear parameter
    with a handful of points, where a Wald interval is symmetric and a percentile bootstrap
    too narrow; measured coverage of B_noise 0.90-0.92 over 300 synthetic studies."""
    dof = y.size - 2
    threshold = rss_min * (1.0 + float(fdtri(1, dof, level)) / dof)
    point = math.exp(ln_s)
    i = int(np.argmin(rss_grid))

    def excess(ln: float) -> float:
        return float(_rss_at(y, b, np.array(ln), shape)[0]) - threshold

    if rss_grid[i] > threshold:
        # Near-exact data (best LRs read off smoothed fits): the whole basin lies between two
        # grid points. Find its edges from the optimum itself, between it and those points.
        if excess(ln_s) >= 0:  # no noise at all: nothing to bound
            return Interval(point, point, level)
        lo_edge, hi_edge = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, grid.size - 1)])
        low = math.exp(float(brentq(excess, lo_edge, ln_s))) if excess(lo_edge) > 0 else math.exp(lo_edge)
        high = math.exp(float(brentq(excess, ln_s, hi_edge))) if excess(hi_edge) > 0 else math.exp(hi_edge)
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


def _draws(
    y: FloatArray,
    b: FloatArray,
    grid: FloatArray,
    shape: Shape,
    ln_eps: float,
    ln_s: float,
    n_boot: int,
    rng: np.random.Generator,
) -> FloatArray:
    """Residual-bootstrap draws of (ln eps_max, ln scale), for prediction intervals."""
    n = y.size
    dof = n - 2
    fitted = ln_eps - shape(np.array(ln_s), b)
    r = y - fitted
    # As for the critical batch: residuals rescaled to the errors they estimate, and each
    # draw's noise scale drawn from its chi-square distribution (few points, uncertain scale).
    r = (r - r.mean()) * math.sqrt(n / dof)
    scale = np.sqrt(dof / rng.chisquare(dof, size=(n_boot, 1)))
    y_star = fitted + scale * r[rng.integers(0, n, size=(n_boot, n))]
    s_star, eps_star, *_ = _fit(y_star, b, grid, shape)
    return np.column_stack([eps_star, s_star])
