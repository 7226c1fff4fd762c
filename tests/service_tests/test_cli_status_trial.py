"""Where a trial's time went: ``hpsearch status STUDY --trial N`` and ``Search.trial_phases``, on
studies written by hand (every kind of trial: trained, skipped, from an earlier release, still
pending) and on a real search, end to end, which must also leave nothing in the working folder
but its store, its runs folder and its frontier page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

import hpsearch
from hpsearch.cli import cli
from hpsearch.errors import TrialNotFoundError
from hpsearch.record import PHASE_NAMES

#: A trial that trained, the first of a search with free slots: 1.3 s of start-up (Ray and Tune
#: starting its process, then placing its devices), no wait for devices, 3 s of training, 0.75 s
#: of the rest.
TRAINED = {"asked_at": 1_790_000_000.0, "asked": 0.0, "launched": 1.1, "devices_free": 1.1, "reserved": 1.3,
           "handed": 1.32, "ready": 1.7, "training_started": 1.75, "training_ended": 4.75, "last_report": 4.8,
           "told": 5.05}
#: A trial that came when every device was held by other trials: 5 s waiting for devices.
WAITED = {"asked_at": 1_790_000_002.0, "asked": 0.0, "launched": 0.25, "devices_free": 5.25, "reserved": 5.3,
          "handed": 5.31, "ready": 5.4, "training_started": 5.4, "training_ended": 6.4, "last_report": 6.41,
          "told": 6.5}
#: A trial of a release that recorded no launch: start-up and waiting for devices in one.
UNSPLIT = {"asked_at": 1_790_000_003.0, "asked": 0.0, "reserved": 1.5, "handed": 1.52, "ready": 1.9,
           "training_started": 1.95, "training_ended": 4.95, "last_report": 5.0, "told": 5.25}
#: A trial a constraint skipped: asked and told at once.
SKIPPED = {"asked_at": 1_790_000_001.0, "asked": 0.0, "told": 0.01}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('phases') / 'store.db'}"
    study = optuna.create_study(study_name="phased", storage=url, directions=["maximize"])
    study.set_metric_names(["val_accuracy"])
    dists = {"per_device_batch_size": CategoricalDistribution([32, 64]), "world_size": CategoricalDistribution([1, 2]),
             "lr_rule": CategoricalDistribution(["constant", "linear"])}

    def params(b: int, w: int, rule: str) -> dict[str, object]:
        return {"per_device_batch_size": b, "world_size": w, "lr_rule": rule}

    study.add_trial(create_trial(params=params(64, 2, "linear"), distributions=dists, values=[0.93],
                                 user_attrs={"phases": TRAINED, "training_started": True}))
    study.add_trial(create_trial(state=TrialState.FAIL, params=params(64, 2, "constant"), distributions=dists,
                                 user_attrs={"phases": SKIPPED, "status_reason": "constraint",
                                             "status_detail": "effective batch 128 > max_effective_batch_size 64"}))
    # A trial recorded before phases were: nothing to show but the trial.
    study.add_trial(create_trial(params=params(32, 1, "constant"), distributions=dists, values=[0.9]))
    study.ask()  # proposed, waiting for its devices
    # Skipped as a repeat of an earlier configuration: it never ran, so it has no phases.
    study.add_trial(create_trial(state=TrialState.PRUNED, params=params(64, 2, "linear"), distributions=dists,
                                 user_attrs={"status_reason": "equivalent"}))
    for phases in (WAITED, UNSPLIT):
        study.add_trial(create_trial(params=params(32, 2, "linear"), distributions=dists, values=[0.92],
                                     user_attrs={"phases": phases, "training_started": True}))
    return url


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_status_trial_prints_each_phase_its_gap_and_where_the_time_went(store: str) -> None:
    code, out, err = _run("status", "phased", "--trial", "0", "--storage", store)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("trial #0 of 'phased' in ") and lines[0].endswith(": COMPLETE")
    assert "  configuration: per_device_batch_size 64, world_size 2, lr_rule linear" in lines
    # One row per phase, in the order they happen: seconds since asked, then since the one
    # before, and what that gap was spent on.
    rows = [line.split(maxsplit=5) for line in lines if line.split() and line.split()[0] in PHASE_NAMES]
    assert [r[0] for r in rows] == list(PHASE_NAMES)
    assert rows[0] == ["asked", "0.000", "s", "-"]
    assert rows[1] == ["launched", "1.100", "s", "1.100", "s", "start-up"]
    assert rows[2] == ["devices_free", "1.100", "s", "0.000", "s", "waiting for devices"]
    assert rows[3] == ["reserved", "1.300", "s", "0.200", "s", "start-up"]
    assert rows[4] == ["handed", "1.320", "s", "0.020", "s", "the rest"]
    assert rows[7] == ["training_ended", "4.750", "s", "3.000", "s", "training"]
    assert rows[-1] == ["told", "5.050", "s", "0.250", "s", "the rest"]
    # Free slots: Ray and Tune starting it is start-up, not waiting for devices.
    assert lines[-1] == ("  start-up 1.300 s, waiting for devices 0.000 s; after its devices were reserved: "
                         "training 3.000 s, the rest 0.750 s")
    assert "not reached" not in out


def test_status_trial_says_waiting_for_devices_only_for_the_time_other_trials_held_them(store: str) -> None:
    code, out, err = _run("status", "phased", "--trial", "5", "--storage", store)
    assert code == 0, err
    assert out.splitlines()[-1] == ("  start-up 0.300 s, waiting for devices 5.000 s; after its devices were "
                                    "reserved: training 1.000 s, the rest 0.200 s")
    timeline = hpsearch.load("phased", storage=store).trial_phases(5).timeline
    assert timeline is not None and (timeline.startup_s, timeline.waited_s) == (0.3, 5.0)


def test_a_trial_of_an_earlier_release_does_not_call_its_start_up_waiting(store: str) -> None:
    code, out, err = _run("status", "phased", "--trial", "6", "--storage", store)
    assert code == 0, err
    assert "  reserved                1.500 s    1.500 s  start-up\n" in out
    assert out.splitlines()[-1] == (
        "  devices reserved 1.500 s after it was asked (start-up and waiting for devices not told apart by the "
        "release that recorded it); after its devices were reserved: training 3.000 s, the rest 0.750 s")
    data = json.loads(_run("status", "phased", "--trial", "6", "--storage", store, "--json")[1])["phases"]
    assert (data["startup_s"], data["waited_s"]) == (None, None)


def test_status_trial_json_is_the_trial_and_its_phases_as_data(store: str) -> None:
    code, out, err = _run("status", "phased", "--trial", "0", "--storage", store, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["study"] == "phased" and data["number"] == 0 and data["state"] == "COMPLETE"
    assert data["params"] == {"per_device_batch_size": 64, "world_size": 2, "lr_rule": "linear"}
    phases = data["phases"]
    assert [p["phase"] for p in phases["phases"]] == list(PHASE_NAMES)
    assert [p["at_s"] for p in phases["phases"]] == [TRAINED[name] for name in PHASE_NAMES]
    assert [p["span"] for p in phases["phases"]] == [None, "startup", "wait", "startup", "rest", "rest", "rest",
                                                     "train", "rest", "rest"]
    assert phases["asked_at"] == TRAINED["asked_at"] and phases["asked_at_iso"].startswith("2026-")
    assert (phases["startup_s"], phases["waited_s"], phases["training_s"], phases["rest_s"]) == (1.3, 0.0, 3.0, 0.75)
    assert phases["missing"] == [] and phases["summary"].startswith("start-up 1.300 s, waiting for devices 0.000 s")
    # Every span's name, as the CLI prints it, for the dashboard's bar and legend.
    assert [(s["kind"], s["label"]) for s in phases["spans"]] == [
        ("startup", "start-up"), ("wait", "waiting for devices"), ("train", "training"), ("rest", "the rest")]


def test_every_phase_but_asked_ends_a_span_of_one_kind_and_the_docs_name_them_all() -> None:
    from hpsearch.study import PHASE_SPANS

    ends = [name for span in PHASE_SPANS for name in span.ends]
    assert sorted(ends) == sorted(PHASE_NAMES[1:])
    docs = (Path(__file__).resolve().parents[2] / "docs" / "search.md").read_text()
    section = docs[docs.index("### Where a trial's time went"):]
    section = section[:section.index("\n## ")]
    for name in PHASE_NAMES:
        assert f"`{name}`" in section, name
    for span in PHASE_SPANS:
        assert f"**{span.label}**" in section, span.label


def test_a_skipped_trial_shows_its_reason_and_the_phases_it_never_reached(store: str) -> None:
    code, out, err = _run("status", "phased", "--trial", "1", "--storage", store)
    assert code == 0, err
    assert ": FAIL\n" in out
    assert "  reason: constraint: effective batch 128 > max_effective_batch_size 64\n" in out
    assert ("  not reached: launched, devices_free, reserved, handed, ready, training_started, training_ended, "
            "last_report\n") in out
    assert out.endswith("  never reserved devices; told 0.010 s after it was asked\n")


@pytest.mark.parametrize(("number", "state", "why"), [
    (2, "COMPLETE", "the study was written by a release that did not record them"),
    (3, "PENDING", "it records them when it ends"),
    (4, "PRUNED", "it never ran"),
])
def test_a_trial_without_phases_says_why(store: str, number: int, state: str, why: str) -> None:
    code, out, err = _run("status", "phased", "--trial", str(number), "--storage", store)
    assert code == 0, err
    assert out.splitlines()[0].endswith(f": {state}") and out.endswith(f"  no phases recorded ({why})\n")
    code, out, _ = _run("status", "phased", "--trial", str(number), "--storage", store, "--json")
    assert code == 0 and json.loads(out)["phases"] is None


def test_status_of_a_trial_the_study_lacks_is_one_line_and_exit_code_2(store: str) -> None:
    code, out, err = _run("status", "phased", "--trial", "9", "--storage", store)
    assert (code, out) == (2, "")
    assert err == "error: study 'phased' has no trial #9 (its trials are #0 to #6)\n"
    code, _, err = _run("status", "phased", "--trial", "-1", "--storage", store)
    assert code == 2 and "-1" in err and "Traceback" not in err


def test_trial_phases_gives_the_timeline_to_a_python_caller(store: str) -> None:
    search = hpsearch.load("phased", storage=store)
    timeline = search.trial_phases(0).timeline
    assert timeline is not None and timeline.at("ready") == 1.7
    assert [p.gap_s for p in timeline.phases][:5] == [None, 1.1, 0.0, 0.2, 0.02]
    assert search.trial_phases(1).status_reason == "constraint"
    with pytest.raises(TrialNotFoundError, match="no trial #7"):
        search.trial_phases(7)


# ---- a real search, end to end ------------------------------------------------------------------

TINY_SPACE = """\
study: tiny-phases
workload: {name: digits_cnn, epochs: 1}
scaling: {base_batch_size: 8}
parameters:
  per_device_batch_size: {choices: [32, 64]}
  world_size: {choices: [1, 2]}
  lr_rule: linear
  base_lr: 0.01
objectives:
  - {metric: val_accuracy, direction: maximize}
  - {metric: runtime_s, direction: minimize}
search: {sampler: grid, n_trials: 4, seed: 0}
resources: {device: cpu}
constraints: {max_effective_batch_size: 64}
"""


def _hpsearch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # The defaults a new user has: the store and runs folder in the working folder.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPSEARCH_") and k != "RAY_ADDRESS"}
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real search of three trained trials (one of two ranks) and one a constraint skips,
    started in an empty folder (the space file lives elsewhere)."""
    space = tmp_path_factory.mktemp("space") / "space.yaml"
    space.write_text(TINY_SPACE)
    work = tmp_path_factory.mktemp("work")
    result = _hpsearch("start", str(space), "--no-progress", cwd=work)
    assert result.returncode == 0, result.stdout + result.stderr
    return work


def test_a_search_leaves_only_its_store_its_runs_folder_and_its_frontier_page(searched: Path) -> None:
    # No lock file, no plotly bundle beside the page: the bundle is in the runs folder, which
    # the page refers to.
    [bundle] = (searched / "hpsearch_runs").glob("plotly-*.min.js")
    page = (searched / "tiny-phases-frontier.html").read_text()
    assert f'src="hpsearch_runs/{bundle.name}"' in page and len(page) < 100_000


def test_every_trained_trial_records_its_phases_in_order_and_status_prints_them(searched: Path) -> None:
    # What the search left in its folder, before this test opens the store (SQLite's -wal and
    # -shm files live as long as a connection does).
    assert sorted(p.name for p in searched.iterdir()) == ["hpsearch.db", "hpsearch_runs", "tiny-phases-frontier.html"]
    study = optuna.load_study(study_name="tiny-phases", storage=f"sqlite:///{searched / 'hpsearch.db'}")
    trials = study.get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 3 and {t.params["world_size"] for t in complete} == {1, 2}
    for t in complete:
        phases = t.user_attrs["phases"]
        assert set(PHASE_NAMES) <= set(phases), (t.number, phases)
        times = [phases[name] for name in PHASE_NAMES]
        assert times == sorted(times), (t.number, phases)
        assert phases["asked"] == 0.0 and abs(phases["asked_at"] - t.datetime_start.timestamp()) < 5
        training = phases["training_ended"] - phases["training_started"]
        assert 0 < training <= t.user_attrs["runtime_s"] + 0.5

    number = complete[0].number
    result = _hpsearch("status", "tiny-phases", "--trial", str(number), cwd=searched)
    assert result.returncode == 0, result.stderr
    printed = [line.split()[0] for line in result.stdout.splitlines() if line.split() and line.split()[0] in PHASE_NAMES]
    assert printed == list(PHASE_NAMES)
    assert "start-up " in result.stdout and ", waiting for devices " in result.stdout and ", the rest " in result.stdout
