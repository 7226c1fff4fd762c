"""The frontier figure and its standalone HTML file."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import plotly
import plotly.graph_objects as go

from hpsearch.dashboards.frontier import frontier_figure
from hpsearch.dashboards.standalone import write_figure_html
from hpsearch.dashboards.style import RULE_COLORS, rule_color


def _trials() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "number": [0, 1, 2, 3, 4],
            "state": ["COMPLETE", "COMPLETE", "COMPLETE", "COMPLETE", "PRUNED"],
            "per_device_batch_size": [8, 32, 128, 512, 8],
            "world_size": [1, 1, 2, 2, 1],
            "grad_accum_steps": [1, 1, 1, 1, 1],
            "effective_batch_size": [8, 32, 256, 1024, 8],
            "lr_rule": ["constant", "linear", "sqrt", "linear", "sqrt"],
            "base_lr": [0.01] * 5,
            "lr": [0.01, 0.04, 0.0566, 1.28, 0.01],
            "runtime_s": [100.0, 40.0, 5.0, 2.0, 1.0],
            "device_seconds": [100.0, 40.0, 10.0, 4.0, 1.0],
            "val_accuracy": [0.95, 0.93, 0.80, 0.40, 0.99],
        }
    )


def _traces(fig: go.Figure) -> dict[str, go.Scatter]:
    return {trace.name: trace for trace in fig.data}


def test_one_trace_per_rule_plus_the_front() -> None:
    fig = frontier_figure(_trials())
    assert [t.name for t in fig.data] == ["constant", "linear", "sqrt", "Pareto front"]
    front = _traces(fig)["Pareto front"]
    assert list(front.x) == [2.0, 5.0, 40.0, 100.0]
    assert front.line.shape == "hv"


def test_rules_keep_their_colors_across_figures() -> None:
    full = _traces(frontier_figure(_trials()))
    only_linear = _traces(frontier_figure(_trials().query("lr_rule == 'linear'")))
    assert full["linear"].marker.color == only_linear["linear"].marker.color
    assert full["linear"].marker.color == RULE_COLORS["linear"]
    assert len({full[r].marker.color for r in ("constant", "linear", "sqrt")}) == 3
    assert rule_color("my_rule") == rule_color("my_rule")


def test_larger_effective_batch_draws_larger_markers() -> None:
    linear = _traces(frontier_figure(_trials()))["linear"]
    small, large = linear.marker.size  # batches 32 and 1024
    assert large > small


def test_hover_text_names_batch_and_rule() -> None:
    sqrt = _traces(frontier_figure(_trials()))["sqrt"]
    (text,) = sqrt.hovertext
    assert "trial 2" in text
    assert "per_device_batch_size: 128" in text
    assert "effective_batch_size: 256" in text
    assert "lr_rule: sqrt" in text


def test_axis_titles_have_units() -> None:
    fig = frontier_figure(_trials())
    assert fig.layout.xaxis.title.text == "runtime (s)"
    assert fig.layout.yaxis.title.text == "validation accuracy"
    assert fig.layout.title.text
    fig = frontier_figure(_trials(), x="device_seconds")
    assert fig.layout.xaxis.title.text == "device-seconds"


def test_log_x_axis_when_runtime_spans_two_decades() -> None:
    wide = _trials().assign(runtime_s=[200.0, 40.0, 5.0, 2.0, 1.0])  # 2 s to 200 s
    assert frontier_figure(wide).layout.xaxis.type == "log"
    assert frontier_figure(wide, x="device_seconds").layout.xaxis.type != "log"  # 4 to 100
    # One decade and a half (2 s to 100 s) still reads best on a linear axis.
    assert frontier_figure(_trials()).layout.xaxis.type != "log"
    assert frontier_figure(_trials()).layout.yaxis.type != "log"


def test_empty_study_says_no_completed_trials_yet() -> None:
    for df in (pd.DataFrame(), _trials().assign(state="RUNNING")):
        fig = frontier_figure(df)
        assert len(fig.data) == 0
        assert [a.text for a in fig.layout.annotations] == ["no completed trials yet"]


def _script_tags(page: str) -> list[str]:
    return re.findall(r"<script[^>]*>", page)


def test_written_pages_are_small_and_share_one_plotly_bundle_beside_them(tmp_path: Path) -> None:
    folder = tmp_path / "reports" / "nested"
    first = write_figure_html(frontier_figure(_trials()), folder / "a-frontier.html")
    assert first == folder / "a-frontier.html"
    page = first.read_text(encoding="utf-8")
    # A whole page, not a fragment to paste into one, of a few kilobytes instead of megabytes.
    assert page.lower().startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert "Pareto front" in page
    assert len(page.encode()) < 50_000
    # Nothing is loaded from elsewhere: the one script with a source is the bundle beside the page.
    sources = [tag for tag in _script_tags(page) if "src=" in tag]
    assert len(sources) == 1
    bundle = folder / re.search(r'src="([^"]+)"', sources[0])[1]
    assert re.fullmatch(r"plotly-\d+\.\d+\.\d+\.min\.js", bundle.name)
    installed = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    assert bundle.read_bytes() == installed.read_bytes()

    # A second page of the folder reuses the bundle: not written again.
    written_at = bundle.stat().st_mtime_ns
    write_figure_html(frontier_figure(_trials()), folder / "b-frontier.html")
    assert bundle.stat().st_mtime_ns == written_at
    assert sorted(p.name for p in folder.iterdir()) == sorted(["a-frontier.html", "b-frontier.html", bundle.name])

    # A bundle cut short (a full disk) is written again.
    bundle.write_bytes(b"cut")
    write_figure_html(frontier_figure(_trials()), folder / "a-frontier.html")
    assert bundle.read_bytes() == installed.read_bytes()


def test_pages_can_share_a_bundle_kept_in_another_folder_by_a_relative_path(tmp_path: Path) -> None:
    # As the hpsearch commands write them: the bundle in the runs folder, the pages beside it.
    runs = tmp_path / "hpsearch_runs"
    first = write_figure_html(frontier_figure(_trials()), tmp_path / "a-frontier.html", bundle_dir=runs)
    write_figure_html(frontier_figure(_trials()), tmp_path / "b-frontier.html", bundle_dir=runs)
    [bundle] = runs.iterdir()
    assert re.fullmatch(r"plotly-\d+\.\d+\.\d+\.min\.js", bundle.name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-frontier.html", "b-frontier.html", "hpsearch_runs"]
    assert f'src="hpsearch_runs/{bundle.name}"' in first.read_text()
    assert f"which it expects at hpsearch_runs/{bundle.name}, relative to the page" in first.read_text()


def test_a_bundle_path_that_a_url_and_a_script_must_escape_stays_in_its_place(tmp_path: Path) -> None:
    elsewhere = tmp_path / "runs<" / "script>"  # the note's text would read ".../runs</script>/..."
    page = write_figure_html(frontier_figure(_trials()), tmp_path / 'my "pages"' / "c.html", bundle_dir=elsewhere)
    [bundle] = elsewhere.iterdir()
    text = page.read_text()
    assert f'src="../runs%3C/script%3E/{bundle.name}"' in text
    assert f"which it expects at ../runs<\\/script>/{bundle.name}, relative to the page" in text
    assert text.count("</script>") == text.count("<script")


def test_a_self_contained_page_holds_plotly_and_needs_nothing_beside_it(tmp_path: Path) -> None:
    target = tmp_path / "frontier.html"
    write_figure_html(frontier_figure(_trials()), target, self_contained=True)
    page = target.read_text(encoding="utf-8")
    assert _script_tags(page) == ["<script>"] * page.count("<script")  # no script has a source
    assert re.search(r"plotly\.js v\d", page)  # the library itself is inline: megabytes
    assert len(page) > 1_000_000
    assert list(tmp_path.iterdir()) == [target]  # no bundle, no temporary file left behind


def test_importing_the_package_does_not_import_plotly() -> None:
    code = (
        "import sys, hpsearch.dashboards as d; "
        "assert d.pareto_front and d.frontier_info and d.FrontierInfo; "
        "assert 'plotly' not in sys.modules, 'plotly imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _fused() -> pd.DataFrame:
    # Trials 1 and 2 trained fused in group 1, the same configuration twice: the same batches,
    # one solo estimate, so one x and y. Trial 0 trained on its own.
    return pd.DataFrame({
        "number": [0, 1, 2], "state": ["COMPLETE"] * 3, "lr_rule": ["linear"] * 3, "effective_batch_size": [32] * 3,
        "runtime_s": [10.0, 6.0, 6.0], "val_accuracy": [0.9, 0.93, 0.93],
        "fused_group": [None, 1, 1], "runtime_basis": [None, "solo_estimate", "solo_estimate"],
    })


def test_trials_at_one_point_are_one_marker_whose_hover_names_them_all() -> None:
    trace = _traces(frontier_figure(_fused()))["linear"]
    assert list(trace.customdata) == [0, 1]
    assert trace.hovertext[1].startswith("<b>trials 1 and 2 (at one point)</b>")


def test_solo_estimated_runtimes_are_hollow_markers_said_in_the_hover_and_the_legend() -> None:
    traces = _traces(frontier_figure(_fused()))
    assert list(traces["linear"].marker.symbol) == ["circle", "circle-open"]
    assert "runtime (s): 6, a solo estimate: it trained fused" in traces["linear"].hovertext[1]
    assert "solo estimate" not in traces["linear"].hovertext[0]
    legend = traces["hollow: runtime a solo estimate (trained fused)"]
    assert legend.marker.symbol == "circle-open" and list(legend.x) == [None]
    # On the device-seconds axis the members' share of the group's time is measured: drawn solid.
    assert "hollow: runtime a solo estimate (trained fused)" not in _traces(
        frontier_figure(_fused().assign(device_seconds=[10.0, 3.0, 3.0]), x="device_seconds"))
