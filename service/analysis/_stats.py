"""Small statistics shared by the analysis fits: intervals, input checks, weighted lines.

Everything here is vectorised over leading axes so that a bootstrap refits all its draws in
one call instead of a Python loop (a fit with 1,000 draws costs milliseconds, which keeps the
coverage tests, hundreds of fits each, within a few seconds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from hpsearch.errors import AnalysisError

__all__ = [
    "FloatArray",
    "Interval",
    "as_positive_array",
    "bounded_line",
    "check_level",
    "check_n_boot",
    "check_same_length",
    "format_batch",
    "format_number",
    "nonnegative_line",
    "percentile_interval",
    "prediction_batches",
    "quantiles",
    "weighted_line",
]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Interval:
    """A two-sided interval for a fitted quantity, at a stated level.

    Args:
        low: lower end (may be 0.0 where the data cannot bound the quantity from below).
        high: upper end; ``math.inf`` where the data cannot bound it from above (for example a
            critical batch size that may be infinite: no diminishing returns were seen).
        level: the probability the interval was built for, 0.9 for a 90% interval.

    Example:
        >>> iv = Interval(12.3, 45.6)
        >>> str(iv), iv.contains(20), iv.contains(50)
        ('[12.3, 45.6] (90%)', True, False)
        >>> str(Interval(1000.0, math.inf, 0.95))
        '[1,000, inf] (95%)'
    """

    low: float
    high: float
    level: float = 0.9

    def __post_init__(self) -> None:
        if math.isnan(self.low) or math.isnan(self.high) or self.low > self.high:
            raise AnalysisError(f"an interval needs low <= high; got [{self.low}, {self.high}]")
        if not 0.0 < self.level < 1.0:
            raise AnalysisError(f"an interval level lies strictly between 0 and 1; got {self.level}")

    def contains(self, x: float) -> bool:
        """Whether ``x`` lies in the closed interval ``[low, high]``.

        Args:
            x: the value to test.

        Returns:
            True when ``low <= x <= high``.

        Example:
            >>> Interval(1.0, math.inf).contains(1e30)
            True
        """
        return self.low <= x <= self.high

    def including(self, x: float) -> Interval:
        """The smallest interval that holds this one and ``x``: a bootstrap's percentiles can
        miss the point estimate they surround (a fit pressed against a bound), and an interval
        printed beside its estimate must hold it.

        Example:
            >>> Interval(2.0, 3.0).including(1.5)
            Interval(low=1.5, high=3.0, level=0.9)
        """
        return Interval(min(self.low, x), max(self.high, x), self.level)

    @property
    def width(self) -> float:
        """``high - low`` (``inf`` for an unbounded interval).

        Example:
            >>> Interval(1.0, 3.0).width
            2.0
        """
        return self.high - self.low

    def __str__(self) -> str:
        return f"[{format_number(self.low)}, {format_number(self.high)}] ({self.level * 100:.0f}%)"


def finite_number(value: object) -> float | None:
    """``value`` as a float when it is a finite number (a numpy scalar too), else ``None``:
    how the analysis reads a study's cells, where a missing value is ``None`` or NaN.

    Example:
        >>> finite_number(3), finite_number(float("nan")), finite_number(True), finite_number("x")
        (3.0, None, None, None)
    """
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]  # numpy scalars
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def format_number(x: float) -> str:
    """Three significant figures, thousands grouped: how the analysis prints a fitted value.

    Args:
        x: the value.

    Returns:
        ``"46,300"`` for 46287.6, ``"34.5"`` for 34.49, ``"0.000745"``, ``"inf"``.

    Example:
        >>> format_number(46287.6), format_number(34.49), format_number(math.inf)
        ('46,300', '34.5', 'inf')
    """
    # Three significant figures: enough to read a fit, short enough for a table cell; grouped
    # thousands because "4.63e+04" images reads badly in a sentence about batch sizes.
    if math.isinf(x) or math.isnan(x):
        return str(x)
    if 1000 <= abs(x) < 1e12:
        digits = math.floor(math.log10(abs(x))) - 2
        return f"{round(x, -digits):,.0f}"
    return f"{x:.3g}"


def format_batch(x: float) -> str:
    """A batch size as people write it: ``"4096"``, not ``"4,100"``; non-integers as ``format_number``.

    Args:
        x: a batch size (or world size, accumulation steps).

    Returns:
        The integer digits when ``x`` is integral, else three significant figures.

    Example:
        >>> format_batch(4096.0), format_batch(46287.6)
        ('4096', '46,300')
    """
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else format_number(x)


def check_level(level: float) -> None:
    """Raise :class:`AnalysisError` unless ``0 < level < 1``.

    Args:
        level: an interval level such as 0.9.

    Raises:
        AnalysisError: the level is outside (0, 1).

    Example:
        >>> check_level(0.9)
    """
    if not 0.0 < level < 1.0:
        raise AnalysisError(f"an interval level lies strictly between 0 and 1; got {level}")


def check_n_boot(n_boot: int) -> None:
    """Raise :class:`AnalysisError` unless ``n_boot`` is at least 100.

    Args:
        n_boot: number of bootstrap draws.

    Raises:
        AnalysisError: fewer than 100 draws (the 5% and 95% percentiles would rest on a
            handful of draws).

    Example:
        >>> check_n_boot(1000)
    """
    if n_boot < 100:
        raise AnalysisError(f"a bootstrap needs at least 100 draws for its percentiles; got n_boot={n_boot}")


def as_positive_array(name: str, values: ArrayLike, *, allow_zero: bool = False) -> FloatArray:
    """Convert ``values`` to a 1-D float array and check every entry is finite and positive.

    Args:
        name: what the values are, for the error message ("batch sizes").
        values: a sequence or array of numbers.
        allow_zero: accept zeros too (non-negative instead of positive).

    Returns:
        A new 1-D ``float64`` array.

    Raises:
        AnalysisError: not 1-D, empty, not numeric, not finite, or not positive; the message
            names ``name`` and the first offending values.

    Example:
        >>> as_positive_array("batch sizes", [8, 32])
        array([ 8., 32.])
    """
    try:
        arr = np.array(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise AnalysisError(f"{name} must be numbers; got {values!r}") from exc
    if arr.ndim != 1:
        raise AnalysisError(f"{name} must be a flat sequence (one value per run); got shape {arr.shape}")
    if arr.size == 0:
        raise AnalysisError(f"{name} is empty")
    bad = ~np.isfinite(arr)
    if bad.any():
        raise AnalysisError(f"{name} must be finite; got {_first(arr[bad])} at positions {_first(np.flatnonzero(bad))}")
    bad = arr < 0 if allow_zero else arr <= 0
    if bad.any():
        rule = "non-negative" if allow_zero else "positive"
        raise AnalysisError(f"{name} must be {rule}; got {_first(arr[bad])} at positions {_first(np.flatnonzero(bad))}")
    return arr


def prediction_batches(batch_size: float | FloatArray) -> FloatArray:
    """The batch size(s) a fitted law is read at, as an array.

    Raises:
        AnalysisError: a batch size is not positive and finite.
    """
    b = np.asarray(batch_size, dtype=np.float64)
    if not (np.isfinite(b).all() and (b > 0).all()):
        raise AnalysisError(f"a prediction needs positive, finite batch sizes; got {batch_size!r}")
    return b


def check_same_length(**arrays: FloatArray) -> None:
    """Raise :class:`AnalysisError` unless all arrays have the same length.

    Args:
        **arrays: name -> 1-D array; the names appear in the message.

    Raises:
        AnalysisError: the lengths differ; the message lists each name with its length.

    Example:
        >>> check_same_length(batch_sizes=np.ones(3), examples=np.ones(3))
    """
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{k} {n}" for k, n in lengths.items())
        raise AnalysisError(f"one value per run in every argument: the lengths differ ({listed})")


def _first(values: Sequence[float] | FloatArray | NDArray[np.intp], k: int = 5) -> str:
    shown = [f"{v:g}" for v in list(values)[:k]]
    more = ", ..." if len(values) > k else ""
    return "(" + ", ".join(shown) + more + ")"


def weighted_line(x: FloatArray, y: FloatArray, w: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Weighted least squares of the line ``y = a + c x``, vectorised over leading axes.

    Args:
        x: abscissae, shape ``(..., n)`` (broadcast against ``y`` and ``w``).
        y: ordinates, shape ``(..., n)``.
        w: non-negative weights (inverse variances), shape ``(..., n)``.

    Returns:
        ``(a, c)``, intercept and slope, each of the broadcast leading shape.

    Example:
        >>> a, c = weighted_line(np.array([1.0, 2.0, 3.0]), np.array([3.0, 5.0, 7.0]), np.ones(3))
        >>> round(float(a), 6), round(float(c), 6)
        (1.0, 2.0)
    """
    # Centred normal equations: no 2x2 solve per draw, and better conditioned than the raw
    # sums when x spans several decades (batch sizes 8 to 65,536).
    sw = w.sum(axis=-1)
    xm = (w * x).sum(axis=-1) / sw
    ym = (w * y).sum(axis=-1) / sw
    dx = x - xm[..., None]
    sxx = (w * dx * dx).sum(axis=-1)
    c = (w * dx * (y - ym[..., None])).sum(axis=-1) / sxx
    return ym - c * xm, c


def nonnegative_line(x: FloatArray, y: FloatArray, w: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Weighted least squares of ``y = a + c x`` with ``a >= 0`` and ``c >= 0`` (``y > 0``).

    Where the free fit has a negative slope the best constrained fit is the constant
    ``a = weighted mean of y``; where it has a negative intercept it is the line through the
    origin. (Both cannot be negative at once: the weighted line passes through the weighted
    centroid, which is positive.)

    Args:
        x: positive abscissae, shape ``(..., n)``.
        y: positive ordinates, shape ``(..., n)``.
        w: non-negative weights, shape ``(..., n)``.

    Returns:
        ``(a, c)``, both ``>= 0``, each of the broadcast leading shape.

    Example:
        >>> a, c = nonnegative_line(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.9, 2.8]), np.ones(3))
        >>> round(float(a), 6), float(c)
        (2.9, 0.0)
    """
    a, c = weighted_line(x, y, w)
    x, y, w = np.broadcast_arrays(x, y, w)
    flat = c < 0
    through_origin = a < 0
    a_flat = (w * y).sum(axis=-1) / w.sum(axis=-1)
    c_origin = (w * x * y).sum(axis=-1) / (w * x * x).sum(axis=-1)
    a = np.where(flat, a_flat, np.where(through_origin, 0.0, a))
    c = np.where(flat, 0.0, np.where(through_origin, c_origin, c))
    return np.asarray(a, dtype=np.float64), np.asarray(c, dtype=np.float64)


def bounded_line(x: FloatArray, y: FloatArray, w: FloatArray, bound_x: FloatArray,
                 bound_y: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Weighted least squares of ``y = a + c x`` with ``a >= 0``, ``c >= 0`` and the line at or
    above each lower bound: ``a + c bound_x[j] >= bound_y[j]``, vectorised over leading axes.

    The bounds are runs that trained ``bound_y`` examples at batch ``bound_x`` without reaching
    the target (right-censored): the line of examples to the target must not pass below what
    they show. The problem is a convex quadratic over a polygon in (a, c), so its minimum is
    the unconstrained minimum of the whole plane, of one edge (one constraint held with
    equality), or a vertex (two held): every candidate is computed, those outside the polygon
    are dropped, and the one of least weighted squared error is kept. With no bounds it is
    ``nonnegative_line``.

    Args:
        x: positive abscissae, shape ``(..., n)``.
        y: positive ordinates, shape ``(..., n)``.
        w: non-negative weights, shape ``(..., n)``.
        bound_x: the bounds' abscissae, shape ``(k,)``.
        bound_y: the bounds' ordinates, shape ``(k,)``.

    Returns:
        ``(a, c)``, each of the broadcast leading shape.

    Example:
        >>> x, y = np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.1, 1.2])
        >>> a, c = bounded_line(x, y, np.ones(3), np.array([6.0]), np.array([3.0]))
        >>> bool(a + 6 * c >= 3 - 1e-9), round(float(a + 6 * c), 6)
        (True, 3.0)
    """
    bx = np.asarray(bound_x, dtype=np.float64).ravel()
    by = np.asarray(bound_y, dtype=np.float64).ravel()
    if bx.size == 0:
        return nonnegative_line(x, y, w)
    x, y, w = np.broadcast_arrays(x, y, w)
    a_free, c_free = weighted_line(x, y, w)
    sw, swx, swxx = w.sum(axis=-1), (w * x).sum(axis=-1), (w * x * x).sum(axis=-1)
    candidates = [(a_free, c_free),
                  ((w * y).sum(axis=-1) / sw, np.zeros_like(sw)),  # flat: c = 0
                  (np.zeros_like(sw), (w * x * y).sum(axis=-1) / swxx)]  # through the origin: a = 0
    for j in range(bx.size):
        # The line through bound j: y - by = c (x - bx), fitted in c.
        dx = x - bx[j]
        c_j = (w * dx * (y - by[j])).sum(axis=-1) / (w * dx * dx).sum(axis=-1)
        candidates.append((by[j] - c_j * bx[j], c_j))
        candidates.append((np.zeros_like(sw), np.full_like(sw, by[j] / bx[j])))  # and a = 0
        candidates.append((np.full_like(sw, by[j]), np.zeros_like(sw)))  # and c = 0
        for k in range(j + 1, bx.size):
            if bx[k] != bx[j]:  # through bounds j and k
                c_jk = (by[k] - by[j]) / (bx[k] - bx[j])
                candidates.append((np.full_like(sw, by[j] - c_jk * bx[j]), np.full_like(sw, c_jk)))
    a_all = np.stack([np.broadcast_to(a, sw.shape) for a, _ in candidates], axis=-1)
    c_all = np.stack([np.broadcast_to(c, sw.shape) for _, c in candidates], axis=-1)
    scale = np.maximum(np.abs(by).max(), 1e-300)
    with np.errstate(invalid="ignore"):
        feasible = (a_all >= -1e-12 * scale) & (c_all >= -1e-12 * scale / max(float(np.abs(bx).max()), 1e-300))
        feasible &= (a_all[..., None] + c_all[..., None] * bx >= by * (1 - 1e-9)).all(axis=-1)
        # sum w (y - a - c x)^2 = sum w y^2 - 2 a sum w y - 2 c sum w x y + a^2 sw + 2 a c swx + c^2 swxx
        swy, swxy, swyy = (w * y).sum(axis=-1), (w * x * y).sum(axis=-1), (w * y * y).sum(axis=-1)
        sse = (swyy[..., None] - 2 * a_all * swy[..., None] - 2 * c_all * swxy[..., None]
               + a_all**2 * sw[..., None] + 2 * a_all * c_all * swx[..., None] + c_all**2 * swxx[..., None])
    sse = np.where(feasible & np.isfinite(sse), sse, np.inf)
    best = np.argmin(sse, axis=-1)[..., None]
    a_best = np.take_along_axis(a_all, best, axis=-1)[..., 0]
    c_best = np.take_along_axis(c_all, best, axis=-1)[..., 0]
    return np.asarray(np.maximum(a_best, 0.0), dtype=np.float64), np.asarray(np.maximum(c_best, 0.0), dtype=np.float64)


def percentile_interval(draws: FloatArray, level: float) -> Interval:
    """The equal-tailed percentile interval of bootstrap draws that may hold ``inf``.

    ``numpy.quantile`` interpolates ``inf - x`` into ``nan``; here a quantile that falls on or
    next to an infinite draw is ``inf`` (the draws say the quantity may be unbounded there).
    ``nan`` draws (a refit that had no answer) are dropped.

    Args:
        draws: 1-D array of draws; ``+inf`` allowed.
        level: the interval's level, e.g. 0.9 for the 5% and 95% percentiles.

    Returns:
        An :class:`Interval` at ``level``.

    Raises:
        AnalysisError: no finite-or-inf draw is left.

    Example:
        >>> percentile_interval(np.array([1.0, 2.0, 3.0, 4.0, np.inf]), 0.5)
        Interval(low=2.0, high=4.0, level=0.5)
    """
    lo, hi = quantiles(draws, np.array([(1 - level) / 2, (1 + level) / 2]))
    return Interval(float(lo), float(hi), level)


def quantiles(draws: FloatArray, q: FloatArray) -> FloatArray:
    """Quantiles of 1-D draws with linear interpolation, ``inf`` where a neighbour is ``inf``.

    Args:
        draws: 1-D draws; ``nan`` dropped, ``+-inf`` kept.
        q: probabilities in [0, 1].

    Returns:
        The quantiles, shaped like ``q``.

    Raises:
        AnalysisError: every draw is ``nan``.

    Example:
        >>> quantiles(np.array([0.0, 10.0, np.inf]), np.array([0.25, 0.75]))
        array([ 5., inf])
    """
    d = np.sort(draws[~np.isnan(draws)])
    if d.size == 0:
        raise AnalysisError("no bootstrap draw had an answer: the data cannot support this fit")
    pos = q * (d.size - 1)
    i = np.floor(pos).astype(np.intp)
    j = np.minimum(i + 1, d.size - 1)
    frac = pos - i
    lo, hi = d[i], d[j]
    with np.errstate(invalid="ignore"):
        # inf - inf or 0 * inf would make nan: a quantile on or next to an infinite draw is
        # that draw (a critical batch that may be unbounded reads "inf", not "nan").
        between = np.where(np.isinf(lo), lo, np.where(np.isinf(hi), hi, lo + frac * (hi - lo)))
    out = np.where(frac == 0, lo, between)
    return np.asarray(out, dtype=np.float64)
