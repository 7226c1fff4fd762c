"""The LR-law figure draws whichever form the law prefers: a surge's curve rises to its peak and
falls beyond it, with the band around it."""

from __future__ import annotations

import optuna

from hpsearch.analysis import analyze
from hpsearch.dashboards.analysis_figures import lr_law_figure, lr_law_info
from hpsearch.testing import SURGE_TRUTH, synthetic_study


def test_a_surging_law_is_drawn_as_a_curve_that_peaks_where_the_fit_says() -> None:
    search = synthetic_study(optuna.storages.InMemoryStorage(), "surge", n_trials=3000, seed=0, truth=SURGE_TRUTH)
    analysis = analyze(search, ("val_accuracy", SURGE_TRUTH.target))
    law = analysis.lr_law
    assert law is not None and law.preferred == "surge" and law.b_peak is not None
    info = lr_law_info(analysis)
    top = max(info.curve, key=lambda c: c[1])
    # The curve's highest point sits at the fitted peak (to the grid's spacing), lower both sides.
    assert 0.8 < top[0] / law.b_peak < 1.25
    assert info.curve[0][1] < top[1] and info.curve[-1][1] < top[1]
    assert all(low <= lr <= high for _, lr, low, high in info.curve)
    assert "peaks near B" in info.summary
    names = [trace.name for trace in lr_law_figure(info).data]
    assert "fitted law" in names and "law: 90% band" in names
