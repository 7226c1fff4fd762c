"""The study page's figures read as a user expects: batch axes in doublings with ticks at the
batches run, whole world sizes, a share as a share, a legend naming only what is drawn, no
diverged trial on a frontier, and a memory figure in one unit whose ceiling no completed trial
contradicts."""

from __future__ import annotations

import math

import pandas as pd

from hpsearch.dashboards.accuracy_vs_batch import accuracy_vs_batch_figure
from hpsearch.dashboards.frontier import frontier_figure, frontier_info
from hpsearch.dashboards.noise_scale import noise_scale_figure
from hpsearch.dashboards.peak_memory import memory_figure, memory_info
from hpsearch.dashboards.throughput import throughput_figure
from hpsearch.study import frontier_numbers

MIB = 2**20
GIB = 2**30


def _batches() -> pd.DataFrame:
    """Completed trials at effective batches 8 to 64 (a span under the old 100x log rule)."""
    batches = [8, 16, 32, 64, 8, 16, 32, 64]
    return pd.DataFrame({
        "number": range(8), "state": ["COMPLETE"] * 8, "lr_rule": ["linear"] * 4 + ["sqrt"] * 4,
        "effective_batch_size": batches, "per_device_batch_size": batches, "world_size": [1] * 8,
        "val_accuracy": [0.9, 0.91, 0.92, 0.93, 0.89, 0.9, 0.91, 0.92],
        "noise_scale": [100.0, 120.0, 150.0, 200.0, 110.0, 130.0, 160.0, 210.0],
        "device": ["cpu"] * 8, "peak_memory_bytes": [(200 + 4 * b) * MIB for b in batches],
    })


def test_every_batch_axis_is_logarithmic_with_ticks_at_the_batches_present() -> None:
    df = _batches()
    for fig in (accuracy_vs_batch_figure(df), noise_scale_figure(df), memory_figure(df)):
        axis = fig.layout.xaxis
        assert axis.type == "log", fig.layout.title.text
        assert list(axis.tickvals) == [8, 16, 32, 64] and list(axis.ticktext) == ["8", "16", "32", "64"]


def test_throughput_ticks_at_the_world_sizes_run_and_draws_the_comm_share_from_0_to_100_percent() -> None:
    df = pd.DataFrame({"number": [0, 1, 2], "state": ["COMPLETE"] * 3, "world_size": [1, 2, 2],
                       "samples_per_s": [2050.0, 3900.0, 4000.0], "comm_fraction": [0.0, 0.0, 0.0]})
    fig = throughput_figure(df)
    for axis in (fig.layout.xaxis, fig.layout.xaxis2):
        assert list(axis.tickvals) == [1, 2]  # never W 1.5
    # 0 to 100% with a little room past both ends (a point at 0% was cut in half), ticks within.
    low, high = fig.layout.yaxis2.range
    assert -0.05 < low < 0 and 1 < high < 1.05 and fig.layout.yaxis2.tickformat == ".0%"
    assert list(fig.layout.yaxis2.tickvals) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    # The right panel's axis title sits in the gap between the panels, not on the left one's points.
    assert fig.layout.xaxis2.domain[0] - fig.layout.xaxis.domain[1] >= 0.2 - 1e-9


def test_a_front_of_one_trial_is_named_for_what_it_is_and_no_legend_entry_draws_nothing() -> None:
    df = pd.DataFrame({"number": [0, 1, 2], "state": ["COMPLETE"] * 3, "lr_rule": ["linear"] * 3,
                       "runtime_s": [10.0, 5.0, 30.0], "val_accuracy": [0.8, 0.9, 0.85]})
    fig = frontier_figure(df)
    assert "Pareto front" not in [t.name for t in fig.data]
    [front] = [t for t in fig.data if t.name.startswith("Pareto front")]
    assert front.name == "Pareto front: trial 1 alone" and front.mode == "markers" and list(front.x) == [5.0]
    for trace in fig.data:  # every line in the legend has a segment to draw
        assert trace.mode != "lines" or len(trace.x) >= 2


def test_a_diverged_trial_is_never_a_frontier_point_even_when_faster() -> None:
    df = pd.DataFrame({
        "number": [0, 1, 2, 3], "state": ["COMPLETE"] * 4, "lr_rule": ["linear"] * 4,
        "runtime_s": [10.0, 9.99973, 12.0, 9.0], "val_accuracy": [0.90, 0.078, 0.95, 0.1],
        "val_loss": [0.3, math.nan, 0.2, 2.3], "status_reason": [None, None, None, "diverged"],
    })
    assert frontier_numbers(df, "runtime_s", "val_accuracy") == [0, 2]
    info = frontier_info(df)
    assert info.front == (0, 2)
    assert {p.number for g in info.groups for p in g.points} == {0, 1, 2, 3}  # still drawn, off the front


def _memory_trials(devices: list[str]) -> pd.DataFrame:
    """b 64 and 128 complete; a trial at 128 ran out (a contradiction) and one at 512 did too."""
    return pd.DataFrame({
        "number": [0, 1, 2, 3, 4], "state": ["COMPLETE", "COMPLETE", "COMPLETE", "FAIL", "FAIL"],
        "status_reason": [None, None, None, "out_of_memory", "out_of_memory"],
        "per_device_batch_size": [64, 128, 256, 128, 512], "device": devices,
        "peak_memory_bytes": [1.25 * GIB, 1.5 * GIB, 2.0 * GIB, None, None],
    })


def test_an_out_of_memory_at_a_batch_that_completed_is_drawn_as_contradicted_not_as_the_ceiling() -> None:
    info = memory_info(_memory_trials(["cuda"] * 5))
    [s] = info.series
    assert s.smallest_out_of_memory == 512 and s.out_of_memory_at is not None and s.out_of_memory_at[0] == 512
    assert s.contradicted == ((128, (3,)),)
    fig = memory_figure(_memory_trials(["cuda"] * 5))
    [cross] = [t for t in fig.data if t.name.endswith(": ran out of memory")]
    assert list(cross.x) == [512]
    [grey] = [t for t in fig.data if "contradicted" in t.name]
    assert list(grey.x) == [128] and grey.marker.symbol == "x-open"


def test_trials_on_cuda_0_and_cuda_are_one_device_kind() -> None:
    info = memory_info(_memory_trials(["cuda:0 (NVIDIA H100)", "cuda (NVIDIA H100)", "cuda:1 (NVIDIA H100)",
                                       "cuda:0 (NVIDIA H100)", "cuda (NVIDIA H100)"]))
    assert [s.name for s in info.series] == ["cuda (NVIDIA H100)"]
    assert [p.per_device_batch for p in info.series[0].peaks] == [64, 128, 256]


def test_the_memory_axis_and_what_a_rank_may_hold_share_one_unit() -> None:
    df = _batches().assign(memory_limit_bytes=600 * MIB)
    fig = memory_figure(df)
    assert fig.layout.yaxis.title.text == "peak memory per rank (MiB)"
    [limit] = [t for t in fig.data if "may hold" in t.name]
    assert limit.name == "cpu may hold 600 MiB" and set(limit.y) == {600.0}
    assert max(y for t in fig.data if t.name == "cpu" for y in t.y) == 456.0  # 200 + 4 x 64 MiB, in MiB
    assert not fig.layout.annotations  # named in the legend, not written over the points


def test_a_faster_trial_that_learned_nothing_is_off_the_front_and_its_hover_says_why() -> None:
    df = pd.DataFrame({"number": [0, 1, 2], "state": ["COMPLETE"] * 3, "lr_rule": ["linear", "sqrt", "constant"],
                       "runtime_s": [0.5, 1.0, 2.0], "val_accuracy": [0.078, 0.889, 0.95],
                       "val_loss": [2.43, 0.4, 0.2], "chance_accuracy": [0.117] * 3})
    info = frontier_info(df, x="runtime_s", y="val_accuracy")
    assert info.front == (1, 2)  # the fastest, at chance, is not its first step
    notes = {p.number: p.config.get("on no front") for g in info.groups for p in g.points}
    assert notes[0] == "learned nothing: accuracy at or below chance, 0.117 (always the commonest class)"
    assert notes[1] is None and notes[2] is None


def test_a_figure_with_nothing_to_draw_labels_no_axis_range_it_does_not_have() -> None:
    # Every trial on one device: no noise scale was measurable. The empty batch axis read -1 to 6.
    df = pd.DataFrame({"number": [0, 1], "state": ["COMPLETE"] * 2, "effective_batch_size": [16, 64],
                       "world_size": [1, 1], "grad_accum_steps": [1, 1], "lr_rule": ["linear"] * 2})
    fig = noise_scale_figure(df)
    assert not fig.data and fig.layout.annotations  # the note says why
    assert fig.layout.xaxis.showticklabels is False and fig.layout.yaxis.showticklabels is False
