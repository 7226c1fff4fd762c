"""The analysis figures: compute (``*_info``, plain data from a ``StudyAnalysis``), then render.

- ``tradeoff_figure``: steps against examples to the target, on log axes (McCandlish et al.
  2018, their figure 7): one point per effective batch at its best configuration, the fitted
  hyperbola (S/S_min - 1)(E/E_min - 1) = 1 with its asymptotes, the critical batch B_crit where
  it bends and its 90% interval along the curve, and the measured noise scale B_simple on it.
- ``lr_law_figure``: the best LR against the effective batch, on log axes: one point per batch,
  the fitted law with its band, and the three rules drawn from the law's LR at the base batch.

Example:
    >>> import optuna
    >>> from hpsearch.analysis import analyze
    >>> from hpsearch.testing import synthetic_study
    >>> analysis = analyze(synthetic_study(optuna.storages.InMemoryStorage(), "demo", n_trials=400))
    >>> [t.name for t in tradeoff_figure(tradeoff_info(analysis)).data][:3]
    ['trials that reached the target', 'each batch at its best LR', 'fit']
    >>> [t.name for t in lr_law_figure(lr_law_info(analysis)).data][-3:]
    ['constant', 'linear', 'sqrt']
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from hpsearch import record
from hpsearch.analysis import StudyAnalysis
from hpsearch.dashboards.style import FRONT_COLOR, new_figure, rule_color, subtitle, with_note
from hpsearch.trials.scaling import scale_factor

__all__ = ["LRLawInfo", "TradeOffInfo", "lr_law_figure", "lr_law_info", "tradeoff_figure", "tradeoff_info"]

_FIT_COLOR = "#333333"
_BAND_COLOR = "rgba(51, 51, 51, 0.18)"
_GRID = 64  # points along a fitted curve


@dataclass(frozen=True)
class TradeOffInfo:
    """What the steps-vs-examples figure draws.

    Attributes:
        target: The target, as text.
        batches: ``(B, examples, steps, method)`` of each batch at its best configuration.
        trials: ``(number, B, examples, steps)`` of every trial that reached the target.
        curve: ``(B, examples, steps)`` along the fitted hyperbola.
        band: The same over B_crit's interval (the bend's uncertainty).
        e_min: The examples asymptote; ``s_min``: the steps asymptote.
        knee: ``(examples, steps)`` at B = B_crit (2 E_min, 2 S_min).
        b_crit: The fitted critical batch (``inf``: no bend within the data).
        b_crit_text: B_crit and its interval, as text.
        noise_scale: ``(B_simple, examples, steps)`` of the measured median noise scale on the
            curve, or ``None``.
        note: Why there is no fit (the points are still drawn), or ``None``.
    """

    target: str
    batches: tuple[tuple[float, float, float, str], ...]
    trials: tuple[tuple[int, float, float, float], ...]
    curve: tuple[tuple[float, float, float], ...]
    band: tuple[tuple[float, float, float], ...]
    e_min: float | None
    s_min: float | None
    knee: tuple[float, float] | None
    b_crit: float | None
    b_crit_text: str
    noise_scale: tuple[float, float, float] | None
    note: str | None


def tradeoff_info(analysis: StudyAnalysis) -> TradeOffInfo:
    """The steps-vs-examples trade-off of a study's analysis, as plain data."""
    batches = tuple((p.effective_batch_size, p.samples, p.steps, p.method) for p in analysis.batches)
    trials = tuple((int(t["number"]), float(t[record.EFFECTIVE_BATCH_SIZE]), float(t["samples_to_target"]),
                    float(t["steps_to_target"] or t["samples_to_target"] / t[record.EFFECTIVE_BATCH_SIZE]))
                   for t in analysis.trials
                   if t["state"] in ("COMPLETE", "PRUNED") and t["samples_to_target"] is not None)
    fit = analysis.critical_batch
    if fit is None:
        return TradeOffInfo(str(analysis.target), batches, trials, (), (), None, None, None, None, "",
                            None, analysis.critical_batch_refusal)
    sizes = [b[0] for b in batches]
    low, high = min(sizes) / 2, max(sizes) * 2
    if math.isfinite(fit.b_crit) and fit.b_crit > 0:
        low, high = min(low, fit.b_crit / 4), max(high, fit.b_crit * 4)

    def along(lo: float, hi: float) -> tuple[tuple[float, float, float], ...]:
        grid = np.geomspace(lo, hi, _GRID)
        return tuple((float(b), float(fit.examples(b)), float(fit.steps(b))) for b in grid)

    band: tuple[tuple[float, float, float], ...] = ()
    knee = None
    if math.isfinite(fit.b_crit) and fit.b_crit > 0:
        knee = (2 * fit.e_min, 2 * fit.s_min)
        band_high = fit.b_crit_interval.high if math.isfinite(fit.b_crit_interval.high) else high
        band = along(max(fit.b_crit_interval.low, low), min(band_high, high))
    noise = None
    if analysis.noise_scale is not None:
        b_simple = analysis.noise_scale["median"]
        noise = (b_simple, float(fit.examples(b_simple)), float(fit.steps(b_simple)))
    return TradeOffInfo(str(analysis.target), batches, trials, along(low, high), band, fit.e_min, fit.s_min, knee,
                        fit.b_crit, f"B_crit {_number(fit.b_crit)} {fit.b_crit_interval}", noise, None)


def tradeoff_figure(info: TradeOffInfo) -> go.Figure:
    """Steps against examples to the target, on log axes, with the fitted hyperbola."""
    title = f"steps vs samples to reach {info.target}"
    if info.b_crit_text:
        title += subtitle(f"{info.b_crit_text}: beyond it a larger batch saves few steps")
    fig = new_figure(title, record.SAMPLES_SEEN, "steps", legend_title="")
    fig.update_layout(xaxis={"title": {"text": "samples to the target"}},
                      yaxis={"title": {"text": "optimizer steps to the target"}})
    if not info.batches:
        return with_note(fig, info.note or "no trial reached the target")
    if info.trials:
        fig.add_trace(go.Scatter(
            x=[t[2] for t in info.trials], y=[t[3] for t in info.trials], mode="markers",
            name="trials that reached the target", marker={"color": "#bbbbbb", "size": 5},
            hovertext=[f"trial {n}<br>B {b:,.0f}" for n, b, _, _ in info.trials],
            hovertemplate="%{hovertext}<br>samples %{x:,.0f}<br>steps %{y:,.0f}<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=[b[1] for b in info.batches], y=[b[2] for b in info.batches], mode="markers+text",
        name="each batch at its best LR", text=[f"B {b[0]:,.0f}" for b in info.batches], textposition="top right",
        marker={"color": rule_color("linear"), "size": 10, "line": {"width": 1, "color": "white"}},
        hovertext=[f"B {b:,.0f}: {m}" for b, _, _, m in info.batches],
        hovertemplate="%{hovertext}<br>samples %{x:,.0f}<br>steps %{y:,.0f}<extra></extra>"))
    if info.curve:
        fig.add_trace(go.Scatter(
            x=[c[1] for c in info.curve], y=[c[2] for c in info.curve], mode="lines", name="fit",
            line={"color": _FIT_COLOR, "width": 2},
            hovertext=[f"B {c[0]:,.0f}" for c in info.curve],
            hovertemplate="fit at %{hovertext}<br>samples %{x:,.0f}<br>steps %{y:,.0f}<extra></extra>"))
    if info.band:
        fig.add_trace(go.Scatter(
            x=[c[1] for c in info.band], y=[c[2] for c in info.band], mode="lines", name="B_crit 90% interval",
            line={"color": _BAND_COLOR, "width": 14}, hoverinfo="skip"))
    if info.knee is not None:
        fig.add_trace(go.Scatter(
            x=[info.knee[0]], y=[info.knee[1]], mode="markers", name=info.b_crit_text or "B_crit",
            marker={"color": FRONT_COLOR, "size": 12, "symbol": "diamond"},
            hovertemplate=f"{info.b_crit_text}<extra></extra>"))
    if info.noise_scale is not None:
        b_simple, e, s = info.noise_scale
        fig.add_trace(go.Scatter(
            x=[e], y=[s], mode="markers", name=f"measured noise scale B_simple {_number(b_simple)}",
            marker={"color": rule_color("sqrt"), "size": 12, "symbol": "star"},
            hovertemplate=f"B_simple {_number(b_simple)} (median of the trials)<extra></extra>"))
    if info.e_min is not None and info.s_min is not None:
        for x, y, name in (([info.e_min] * 2, None, "E_min"), (None, [info.s_min] * 2, "S_min")):
            xs = x or [min(c[1] for c in info.curve), max(c[1] for c in info.curve)]
            ys = y or [min(c[2] for c in info.curve), max(c[2] for c in info.curve)]
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=f"{name} (asymptote)",
                                     line={"color": _FIT_COLOR, "width": 1, "dash": "dot"}, hoverinfo="skip"))
    if info.note:
        with_note(fig, info.note)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return fig


@dataclass(frozen=True)
class LRLawInfo:
    """What the LR-law figure draws.

    Attributes:
        points: ``(B, lr, trial, at_edge, by)`` of the best LR at each batch.
        curve: ``(B, lr, low, high)`` along the fitted law with its 90% band.
        rules: ``{rule: ((B, lr), ...)}``: each rule from the law's LR at the base batch.
        summary: The law in words.
        note: Why there is no law (the points are still drawn), or ``None``.
    """

    points: tuple[tuple[float, float, int, bool, str], ...]
    curve: tuple[tuple[float, float, float, float], ...]
    rules: dict[str, tuple[tuple[float, float], ...]]
    summary: str
    note: str | None


def lr_law_info(analysis: StudyAnalysis) -> LRLawInfo:
    """The best LR per batch and the fitted law of a study's analysis, as plain data."""
    points = tuple((p.effective_batch_size, p.lr, p.trial, p.at_edge, p.by if p.used else f"{p.by}; left out of the law: {p.why}")
                   for p in analysis.lr_points)
    law = analysis.lr_law
    if law is None or not points:
        return LRLawInfo(points, (), {}, "", analysis.lr_law_refusal if points else
                         "no effective batch was tried at two LRs or more")
    sizes = [p[0] for p in points]
    grid = np.geomspace(min(sizes) / 1.5, max(sizes) * 1.5, _GRID)
    # Percentiles of the log LR (quantiles commute with exp): with few batches some draws of the
    # LR lie beyond any float, and percentiles of infinities are undefined.
    logs = np.percentile(np.asarray(law.log_lr_draws(grid), dtype=float), [5, 95], axis=0)
    low, high = np.exp(np.minimum(logs, np.log(np.finfo(float).max)))
    curve = tuple((float(b), float(law.lr(float(b))), float(lo), float(hi)) for b, lo, hi in zip(grid, low, high))
    base = analysis.base_batch_size or min(sizes)
    start = float(law.lr(base))
    rules = {rule: tuple((float(b), start * scale_factor(rule, float(b) / base)) for b in grid)
             for rule in ("constant", "linear", "sqrt")}
    return LRLawInfo(points, curve, rules, law.summary, None)


def lr_law_figure(info: LRLawInfo) -> go.Figure:
    """The best LR against the effective batch, the fitted law and the three rules."""
    title = "best learning rate vs effective batch size"
    if info.summary:
        title += subtitle(info.summary)
    fig = new_figure(title, record.EFFECTIVE_BATCH_SIZE, "lr", legend_title="")
    if not info.points:
        return with_note(fig, info.note or "no best LR to draw")
    if info.curve:
        fig.add_trace(go.Scatter(
            x=[c[0] for c in info.curve] + [c[0] for c in reversed(info.curve)],
            y=[c[3] for c in info.curve] + [c[2] for c in reversed(info.curve)],
            fill="toself", fillcolor=_BAND_COLOR, line={"width": 0}, name="law: 90% band", hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=[c[0] for c in info.curve], y=[c[1] for c in info.curve], mode="lines",
                                 name="fitted law", line={"color": _FIT_COLOR, "width": 2},
                                 hovertemplate="B %{x:,.0f}<br>lr %{y:.4g}<extra>law</extra>"))
    fig.add_trace(go.Scatter(
        x=[p[0] for p in info.points], y=[p[1] for p in info.points], mode="markers", name="best LR at each batch",
        marker={"color": FRONT_COLOR, "size": 10,
                "symbol": ["circle-open" if p[3] else "circle" for p in info.points]},
        hovertext=[f"B {b:,.0f}: lr {lr:.4g} (trial {n}; {by}{', at the edge of the LRs tried' if edge else ''})"
                   for b, lr, n, edge, by in info.points],
        hovertemplate="%{hovertext}<extra></extra>"))
    for rule, line in info.rules.items():
        fig.add_trace(go.Scatter(x=[p[0] for p in line], y=[p[1] for p in line], mode="lines", name=rule,
                                 line={"color": rule_color(rule), "width": 1.5, "dash": "dash"},
                                 hovertemplate=f"{rule} rule<br>B %{{x:,.0f}}<br>lr %{{y:.4g}}<extra></extra>"))
    if info.note:
        with_note(fig, info.note)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return fig


def _number(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:,.0f}"
