"""The LR law: how the best learning rate follows the effective batch size.

Three forms, all fitted in log space (the best LR of a search is known to a factor, not to an
amount), each with two parameters:

* a power law ``lr_opt(B) = c B^alpha``: alpha 1 is the linear scaling rule, 0.5 the square
  root rule, 0 a constant LR;
* McCandlish et al.'s bend ``eps_opt(B) = eps_max / (1 + B_noise / B)``: linear while
  ``B << B_noise``, flat beyond (SGD);
* Li et al.'s surge ``eps_opt(B) = eps_max / ((1/2) (sqrt(B_peak / B) + sqrt(B / B_peak)))``:
  a square root rule while ``B << B_peak``, a peak at ``B_peak``, falling beyond (Adam-type
  optimizers).

The power law is the default, since its alpha maps onto the rules a user can apply; a curved
form replaces it only where it lowers AICc by more than a margin, and the surge replaces the
bend only where it lowers AICc by that margin below the bend too (``fit_lr_law``). The curved
forms are profiled over a log grid of their batch scale (``hpsearch.analysis._lr_forms``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, overload

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import stdtrit

from hpsearch.analysis._lr_forms import ProfiledFit, bend_shape, fit_form, log_lr_draws, surge_shape
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

#: The forms ``LRLawFit.preferred`` names.
Form = Literal["power", "bend", "surge"]

# A curved form is preferred when it lowers AICc by more than this (Burnham & Anderson: a
# difference under 2 is "substantial support" for both). The power law is the default because
# its alpha maps onto the rules a user can apply; the surge, whose claim (the LR falls) goes
# furthest, must also lower AICc by this much below the bend.
_AICC_MARGIN = 2.0
#: The fewest batch sizes the curved forms are fitted with: with 3, two parameters leave one
#: degree of freedom, and the forms cannot be told apart.
_CURVED_MIN = 4
#: The largest natural log whose exp is a finite float64.
_LOG_MAX = math.log(np.finfo(np.float64).max)


@dataclass(frozen=True)
class LRLawFit:
    """The fitted LR law, its three forms, and which one the data prefer.

    Attributes:
        alpha: exponent of the power law ``lr = coefficient * B^alpha``.
        alpha_interval: t interval of ``alpha`` at ``level``.
        coefficient: ``c`` of the power law.
        preferred: ``"power"``, ``"bend"`` or ``"surge"``: the form :meth:`lr` predicts with
            (``fit_lr_law`` says how it is chosen).
        eps_max: the bend's large-batch LR, or ``None`` when the bend was not fitted (fewer
            than 4 batch sizes).
        b_noise: the bend's ``B_noise``, where the LR stops growing linearly, or ``None``.
        b_noise_interval: profile-likelihood interval of ``b_noise`` (``low`` 0 or ``high``
            inf where the data do not bound it), or ``None``.
        delta_aicc: ``AICc(power) - AICc(bend)``; positive favours the bend. ``None`` when the
            bend was not fitted.
        b_peak: the surge's peak batch ``B_peak``, where the best LR is largest (Li et al. 2024:
            their noise scale), or ``None`` when the surge was not fitted (fewer than 4 batch
            sizes). Only a peak inside the batches fitted is one the data show: beyond them
            the surge is a sqrt rule rising or falling, and is not preferred.
        b_peak_interval: profile-likelihood interval of ``b_peak`` (``low`` 0 or ``high`` inf
            where the data do not bound it), or ``None``.
        peak_lr: the surge's ``eps_max``, its LR at ``b_peak``, or ``None``.
        surge_delta_aicc: ``AICc(power) - AICc(surge)``; positive favours the surge. ``None``
            when the surge was not fitted.
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
    preferred: Form
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
    b_peak: float | None = None
    b_peak_interval: Interval | None = None
    peak_lr: float | None = None
    surge_delta_aicc: float | None = None
    surge_draws: FloatArray | None = field(default=None, repr=False, compare=False)
    """Draws of ``(ln peak_lr, ln b_peak)``, shape ``(n_boot, 2)``, or ``None``."""

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
        elif self.preferred == "surge":
            assert self.peak_lr is not None and self.b_peak is not None
            out = self.peak_lr / (0.5 * (np.sqrt(self.b_peak / b) + np.sqrt(b / self.b_peak)))
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
        if self.preferred == "bend":
            assert self.bend_draws is not None
            return log_lr_draws(self.bend_draws, b, bend_shape)
        if self.preferred == "surge":
            assert self.surge_draws is not None
            return log_lr_draws(self.surge_draws, b, surge_shape)
        ln_c, alpha = self.power_draws[:, 0], self.power_draws[:, 1]
        out = ln_c.reshape((-1,) + (1,) * b.ndim) + np.multiply.outer(alpha, np.log(b))
        return np.asarray(out, dtype=np.float64)

    def past_peak(self, batch_size: float) -> bool:
        """Whether ``batch_size`` lies beyond the peak of the preferred form: only a surge has
        one, and beyond it the best LR falls as the batch grows, so no rule that scales the LR
        up (sqrt, linear) holds there.

        Example:
            >>> b = np.array([32.0, 64, 128, 256, 512, 1024, 2048])
            >>> fit = fit_lr_law(b, 0.01 / (0.5 * (np.sqrt(256 / b) + np.sqrt(b / 256))))
            >>> fit.preferred, fit.past_peak(128.0), fit.past_peak(1024.0)
            ('surge', False, True)
        """
        return self.preferred == "surge" and self.b_peak is not None and batch_size > self.b_peak


def fit_lr_law(
    batch_sizes: ArrayLike,
    best_lrs: ArrayLike,
    *,
    level: float = 0.9,
    n_boot: int = 1000,
    seed: int = 0,
) -> LRLawFit:
    """Fit the best LR against effective batch size: a power law, the bend where it bends, the
    surge where it peaks.

    All three forms have two parameters and are fitted in log LR, so they compete on AICc
    (whose penalty then cancels: each difference is ``n ln(RSS_power / RSS_form)``):

    * the power law is the default;
    * the bend replaces it when it lowers AICc by more than 2 and its ``B_noise`` is not on
      the edge of its grid (three decades beyond the batches);
    * the surge replaces either when it lowers AICc by more than 2 below the power law and by
      more than 2 below the bend, and its peak lies inside the batches fitted (a peak beyond
      them is no peak the data show: there the surge is a sqrt rule rising or falling).

    Args:
        batch_sizes: the distinct effective batch sizes (one entry each).
        best_lrs: the best LR found at each batch size (the caller picks it, e.g. the
            configuration with the least time to target).
        level: level of the intervals.
        n_boot: number of draws kept for :meth:`LRLawFit.lr_draws` (at least 100).
        seed: seed of ``numpy.random.default_rng`` for the draws.

    Returns:
        An :class:`LRLawFit`. The bend and the surge are fitted only with 4 batch sizes or more
        (with 3, two parameters leave one degree of freedom, and the forms cannot be told
        apart); the summary of a fit of 3 says so.

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

    bend: ProfiledFit | None = None
    surge: ProfiledFit | None = None
    delta_aicc: float | None = None
    surge_delta_aicc: float | None = None
    preferred: Form = "power"
    log_sd = math.sqrt(s2)
    if n >= _CURVED_MIN:
        # The bend's draws first, from the same stream as before the surge was fitted: a study
        # gives the bend (and the answers read off it) the numbers it gave then.
        bend = fit_form(y, b, bend_shape, level, n_boot, rng)
        surge = fit_form(y, b, surge_shape, level, n_boot, rng)
        # All three forms have two parameters, so AICc's penalty cancels and each difference is
        # the likelihood term alone. The tiny floor keeps exact (noise-free) data finite.
        tiny = 1e-12 * n
        delta_aicc = n * math.log((rss_power + tiny) / (bend.rss + tiny))
        surge_delta_aicc = n * math.log((rss_power + tiny) / (surge.rss + tiny))
        if delta_aicc > _AICC_MARGIN and not bend.on_edge:
            preferred = "bend"
        # A peak is one the data show only inside the batches fitted: on the grid's edge, or
        # anywhere beyond the batches, the surge is a sqrt rule rising (or falling) over them,
        # which the power law states, and whose "peak" no batch measured.
        peak_inside = math.log(b[0]) < surge.ln_scale < math.log(b[-1]) and not surge.on_edge
        # Below the power law by the margin, and below the bend by it too.
        if peak_inside and surge_delta_aicc > _AICC_MARGIN + max(delta_aicc, 0.0):
            preferred = "surge"
        if preferred != "power":
            chosen = bend if preferred == "bend" else surge
            log_sd = math.sqrt(chosen.rss / dof)

    lo, hi = format_batch(float(b[0])), format_batch(float(b[-1]))
    pct = f"{level * 100:.0f}%"
    if preferred == "bend":
        assert bend is not None
        iv = bend.interval
        summary = (
            f"linear up to about B {_fmt_bn(math.exp(bend.ln_scale))} (B_noise, {pct} interval "
            f"[{_fmt_bn(iv.low)}, {_fmt_bn(iv.high)}]), flat beyond at lr {math.exp(bend.ln_eps):.3g}; "
            f"fitted from B {lo} to {hi}"
        )
    elif preferred == "surge":
        assert surge is not None
        iv = surge.interval
        summary = (
            f"the best LR peaks near B {_fmt_bn(math.exp(surge.ln_scale))} ({pct} interval "
            f"[{_fmt_bn(iv.low)}, {_fmt_bn(iv.high)}]) at lr {math.exp(surge.ln_eps):.3g} and falls beyond it "
            f"(surge, Li et al. 2024); fitted from B {lo} to {hi}"
        )
    else:
        summary = _power_summary(alpha, alpha_interval, rules, math.exp(ln_c), lo, hi)
        if n < _CURVED_MIN:
            summary += f" ({n} batch sizes: a bend or a peak needs {_CURVED_MIN} or more)"
    return LRLawFit(
        alpha=alpha,
        alpha_interval=alpha_interval,
        coefficient=math.exp(ln_c),
        preferred=preferred,
        eps_max=None if bend is None else math.exp(bend.ln_eps),
        b_noise=None if bend is None else math.exp(bend.ln_scale),
        b_noise_interval=None if bend is None else bend.interval,
        delta_aicc=delta_aicc,
        rules_supported=rules,
        summary=summary,
        n_batch_sizes=n,
        batch_sizes=tuple(float(v) for v in b),
        best_lrs=tuple(float(v) for v in lr),
        log_residual_sd=log_sd,
        level=level,
        power_draws=power_draws,
        bend_draws=None if bend is None else bend.draws,
        b_peak=None if surge is None else math.exp(surge.ln_scale),
        b_peak_interval=None if surge is None else surge.interval,
        peak_lr=None if surge is None else math.exp(surge.ln_eps),
        surge_delta_aicc=surge_delta_aicc,
        surge_draws=None if surge is None else surge.draws,
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
