"""The memory figure beside throughput: peak memory per rank against the per-device batch, one
line per device kind (and configuration), the out-of-memory ceiling marked; its data (values),
its drawing, ``plot_memory(search)``, its endpoint, and memory wherever the API shows a trial."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
import pandas as pd
import pytest

from hpsearch.dashboards import memory_info, plot_memory
from hpsearch.dashboards.app import create_app
from hpsearch.dashboards.peak_memory import memory_figure
from hpsearch.search import Search
from hpsearch.study import format_bytes
from hpsearch.testing import GIB, MIB, SyntheticDevice, SyntheticTruth, synthetic_study

CPU = SyntheticDevice("cpu", memory_bytes=3 * GIB, fixed_bytes=1 * GIB, per_sample_bytes=20 * MIB)


@pytest.fixture(scope="module")
def search() -> Search:
    truth = SyntheticTruth(devices=(CPU,), evals_per_epoch=2, world_sizes=(1, 2), hidden_choices=(16, 64))
    return synthetic_study(optuna.storages.InMemoryStorage(), "mem", n_trials=400, seed=2, truth=truth)


def test_one_series_per_kind_and_configuration_with_its_peaks_line_and_ceiling(search: Search) -> None:
    info = memory_info(search.trials_dataframe())
    by_name = {s.name: s for s in info.series}
    assert set(by_name) == {"cpu, hidden 16", "cpu, hidden 64"}
    wide, narrow = by_name["cpu, hidden 64"], by_name["cpu, hidden 16"]
    assert [p.per_device_batch for p in wide.peaks] == [32.0, 64.0]
    assert (wide.largest_fit, wide.smallest_out_of_memory) == (64, 128)
    assert (narrow.largest_fit, narrow.smallest_out_of_memory) == (256, 512)
    for s, width in ((wide, 1.0), (narrow, 0.25)):
        for p in s.peaks:  # each batch's median is the truth's peak, within the runs' scatter
            assert p.median == pytest.approx(CPU.peak_bytes(int(p.per_device_batch), width), rel=0.03)
            assert p.low <= p.median <= p.high and len(p.trials) == min(p.n_trials, 8)
        # The line runs to the ceiling, where the cross sits on it.
        assert s.line[-1][0] == s.smallest_out_of_memory and s.out_of_memory_at == s.line[-1]
        assert s.out_of_memory_trials
    df = search.trials_dataframe()
    assert info.n_out_of_memory == int((df["status_reason"] == "out_of_memory").sum()) > 0
    assert info.n_not_started == int((df["status_reason"] == "exceeds_memory").sum()) > 0


def test_the_figure_draws_the_peaks_the_line_the_ceiling_and_what_a_rank_may_hold(search: Search) -> None:
    fig = plot_memory(search)
    names = [t.name for t in fig.data]
    # What a rank may hold is the device kind's: named once, not once per configuration.
    assert names == ["cpu, hidden 16", "cpu, hidden 16: fitted line", "cpu, hidden 16: ran out of memory",
                     "cpu may hold 3 GiB",
                     "cpu, hidden 64", "cpu, hidden 64: fitted line", "cpu, hidden 64: ran out of memory"]
    assert fig.layout.yaxis.title.text == "peak memory per rank (GiB)"
    assert fig.layout.xaxis.title.text == "per-device batch size"
    crosses = [t for t in fig.data if t.name.endswith("ran out of memory")]
    assert [t.x[0] for t in crosses] == [512, 128] and all(t.marker.symbol == "x" for t in crosses)
    assert "ran out of memory (trials #" in crosses[1].hovertext[0]
    # The ceilings as dotted vertical lines, and the space's resources.memory_per_worker as a
    # horizontal one in GiB, named in the legend (not written over the points).
    lines = fig.layout.shapes
    assert sorted(s.x0 for s in lines if s.x0 == s.x1) == [128, 512]
    assert {y for t in fig.data if t.name.endswith("may hold 3 GiB") for y in t.y} == {3.0}
    assert not fig.layout.annotations
    assert "ran out of memory" in fig.layout.title.text


def test_a_study_without_peaks_says_so_and_an_old_study_keeps_its_table() -> None:
    assert memory_info(pd.DataFrame()).note == "no trials yet"
    df = pd.DataFrame({"number": [0, 1], "state": ["COMPLETE", "COMPLETE"], "per_device_batch_size": [8, 16]})
    info = memory_info(df)
    assert info.is_empty and info.note == "no trial recorded its peak memory yet"
    fig = memory_figure(df)
    assert fig.data == () and fig.layout.annotations[0].text == "no trial recorded its peak memory yet"


@pytest.fixture(scope="module")
def app(search: Search, tmp_path_factory: pytest.TempPathFactory) -> Any:
    url = f"sqlite:///{tmp_path_factory.mktemp('mem-app') / 'store.db'}"
    truth = SyntheticTruth(devices=(CPU,), evals_per_epoch=2, world_sizes=(1, 2))
    synthetic_study(url, "mem", n_trials=150, seed=1, truth=truth)
    synthetic_study(url, "halve", n_trials=150, seed=1,
                    truth=SyntheticTruth(devices=(CPU,), evals_per_epoch=2, world_sizes=(1, 2), on_oom="accumulate"))
    return create_app(url)


def test_the_memory_figure_is_one_of_the_study_pages_figures_beside_throughput(
        app: Any, get_json: Callable[[Any, str], Any]) -> None:
    figures = get_json(app, "/api/studies/mem")["figures"]
    assert figures.index("memory") == figures.index("throughput") + 1
    fig = get_json(app, "/api/studies/mem/figures/memory")
    assert [t["name"] for t in fig["data"]] == ["cpu", "cpu: fitted line", "cpu: ran out of memory", "cpu may hold 3 GiB"]
    assert fig["data"][-1]["y"] == [3.0, 3.0]  # the space's cap, from its text


def test_the_study_says_what_each_reason_means_and_which_never_ran(app: Any,
                                                                   get_json: Callable[[Any, str], Any]) -> None:
    reasons = {r["reason"]: r for r in get_json(app, "/api/studies/mem")["reasons"]}
    assert reasons["exceeds_memory"]["not_run"] and not reasons["out_of_memory"]["not_run"]
    assert reasons["exceeds_memory"]["meaning"].startswith("not started: the same configuration ran out of memory")
    assert reasons["out_of_memory"]["meaning"].startswith("a rank ran out of memory")
    assert reasons["out_of_memory"]["count"] > 0


def test_the_trial_table_and_page_carry_the_peak(app: Any, get_json: Callable[[Any, str], Any]) -> None:
    page = get_json(app, "/api/studies/mem/trials?state=COMPLETE&columns=peak_memory_bytes&limit=5")
    assert page["columns"] == ["number", "peak_memory_bytes"]
    assert all(row["peak_memory_bytes"] > GIB for row in page["rows"])
    number = page["rows"][0]["number"]
    trial = get_json(app, f"/api/studies/mem/trials/{number}")
    peak = trial["user_attrs"]["peak_memory_bytes"]
    assert trial["memory"] == f"peak {format_bytes(peak)} per rank on cpu"
    halved = get_json(app, "/api/studies/halve/trials?sort=number&limit=1000&columns=ran_as")
    number = next(r["number"] for r in halved["rows"] if r["ran_as"])
    trial = get_json(app, f"/api/studies/halve/trials/{number}")
    assert "; ran as b " in trial["memory"] and "ran out of memory" in trial["memory"]
    skipped = get_json(app, "/api/studies/mem/trials?q=exceeds_memory&limit=1&columns=status_reason")["rows"][0]
    trial = get_json(app, f"/api/studies/mem/trials/{skipped['number']}")
    assert trial["memory"] is None and trial["status_meaning"].startswith("not started")


def test_fused_trials_bookkeeping_is_no_configuration_of_the_memory_figure_or_a_hover() -> None:
    """A study that fused (search.fuse: auto, the default) drew one memory series per fused
    group, each named with its group's raw step times, and the frontier's hover listed them as
    configuration: every record name is the engine's, never a study parameter."""
    from hpsearch import record
    from hpsearch.dashboards.peak_memory import memory_parameters
    from hpsearch.dashboards.points import config_columns

    rows = []
    for number, (b, fused) in enumerate([(8, True), (8, True), (32, False), (32, True), (128, False)]):
        rows.append({"number": number, "state": "COMPLETE", "per_device_batch_size": b, "device": "cpu",
                     "lr_rule": "linear", "hidden": 64, "val_accuracy": 0.9, "runtime_s": 1.0 + number,
                     "peak_memory_bytes": (300 + b) * MIB, "memory_limit_bytes": 600 * MIB,
                     record.FUSE: "on" if fused else f"off: fusing did not pay on cpu ({number} ms)",
                     record.FUSED_GROUP: number // 2 if fused else None, record.FUSED_MEMBERS: 2 if fused else None,
                     record.RUNTIME_BASIS: "solo_estimate" if fused else "solo",
                     record.FUSED_RUNTIME_S: 2.0 + number / 7 if fused else None,
                     record.FUSED_STEP_S: 0.01 + number / 1000, record.SOLO_STEP_S: 0.006 + number / 1000,
                     record.FAILED_ATTEMPTS: None, record.FAILED_ATTEMPTS_S: None})
    df = pd.DataFrame(rows)
    assert memory_parameters(df) == ["hidden"]  # a study parameter, here one value for all
    assert [s.name for s in memory_info(df).series] == ["cpu"]
    hover = config_columns([str(c) for c in df.columns], "runtime_s", "val_accuracy")
    assert not any(c.startswith(("fuse", "fused", "solo", "runtime_basis", "failed")) for c in hover), hover
    assert "hidden" in hover
