"""What users see of a study stays the same from one commit to the next, unless a change means it.

The fixtures in ``tests/data/outputs_unchanged/`` were written by hpsearch itself from
``space.yaml`` there (8 configurations of digits_mlp, W 1 and 2, one exact duplicate, an answer
confirmed by 2 runs): ``searched.db`` is that search's study, ``partial.db`` the same search cut at
6 trials. The tests hold three things against them:

- the read commands (``status``, ``status --trial``, ``best``, ``recommend`` and its ``--json``,
  ``export`` as CSV and JSON) print byte for byte what they printed when the fixture was made
  (JSON value for value, its floats to their last bits' rounding);
- the same search, run now, records the same trials: numbers, states, params, the values and
  attrs that training decides, their floats to 1e-4 relative (timings and the bootstrap
  intervals they feed are left out: they differ between any two runs);
- a study written then resumes now, and its new trials record what the full search recorded for
  the same configurations.

A change that means to alter one of these rewrites the fixtures with
``HPSEARCH_WRITE_FIXTURES=1 python -m pytest tests/service_tests/test_outputs_unchanged.py``
(the search first: the reads read the study it writes) and shows the difference in its
commit.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "outputs_unchanged"
WRITE = os.environ.get("HPSEARCH_WRITE_FIXTURES") == "1"
STUDY = "golden"
STORAGE = "sqlite:///study.db"

# The read commands, each with the file its output is held in.
READS = {
    "status.txt": ["status", STUDY],
    "status.json": ["status", STUDY, "--json"],
    "trial3.txt": ["status", STUDY, "--trial", "3"],
    "best.txt": ["best", STUDY],
    "recommend.txt": ["recommend", STUDY, "--devices", "2"],
    "recommend.json": ["recommend", STUDY, "--devices", "2", "--json"],
    "export.csv": ["export", STUDY],
    "export.json": ["export", STUDY, "--format", "json"],
}

# What differs between two runs of the same search: how long things took, where they ran, how
# much memory the process held, whether the node's data cache was warm already, and the
# intervals bootstrapped from those times.
TIMED_ATTRS = {"comm_fraction", "data_cache", "device_seconds", "node_id", "node_ids", "peak_memory_bytes", "phases",
               "runtime_s", "samples_per_s", "setup_s", "train_s", "training_started"}
TIMED_CURVES = {"comm_fraction", "runtime_s", "train_s"}
RUN_STUDY_ATTRS = {"hpsearch.budget_spent", "hpsearch.study_uid", "hpsearch.versions"}

# How far a float may move and still be the same. The read commands' JSON: its last bits
# (_held). What training decides: float32 kernels round differently with the CPU's vector
# instructions (the same search on an AVX2-only CPU and on the one that wrote the fixture:
# losses, noise scales and the LR fitted from them up to 1e-6 apart, every count and accuracy
# equal), while a change in what a trial trains (its LR, its steps, its data) moves them by more
# than 1e-3 (a base LR 1% higher: the first evaluation's val_loss 1.2e-3 lower).
READ_REL_TOL = 1e-9
TRAINING_REL_TOL = 1e-4


def _hpsearch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120", "HPSEARCH_STORAGE": STORAGE}
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def _study_in(work: Path, fixture: str) -> Path:
    shutil.copy(FIXTURES / "space.yaml", work / "space.yaml")
    shutil.copy(FIXTURES / fixture, work / "study.db")
    return work


def _held(name: str, text: str) -> None:
    """Compare ``text`` with the fixture ``name`` (or, writing fixtures, keep it).

    Text is held byte for byte. JSON is held value for value, its floats to 1e-9 relative: the
    full-precision floats ``--json`` prints (a least-squares fit's residual, a bootstrap's ends)
    move in their last bits with the CPU's vector instructions, which no reader of them sees."""
    if WRITE:
        (FIXTURES / name).write_text(text)
        return
    then = (FIXTURES / name).read_text()
    if name.endswith(".json"):
        parted = _differences(json.loads(text), json.loads(then), rel_tol=READ_REL_TOL)
        assert not parted, f"{name} changed: " + "; ".join(parted[:5])
    else:
        assert text == then, f"{name} changed"


def _middle_only(interval: Any) -> Any:
    return interval[1] if isinstance(interval, list) and len(interval) == 3 else interval


def _untimed_confirmation(record: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in record.items() if k not in {"predicted_time_s", "runs"}}
    if "predicted_samples" in kept:
        kept["predicted_samples"] = _middle_only(kept["predicted_samples"])
    if isinstance(kept.get("predicted"), dict):
        kept["predicted"] = {"samples": _middle_only(kept["predicted"].get("samples"))}
    if "runs" in record:
        kept["runs"] = [{k: v for k, v in run.items() if k not in {"train_s", "time_hit"}} for run in record["runs"]]
    return kept


def _untimed_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in attrs.items() if k not in TIMED_ATTRS}
    if isinstance(kept.get("curves"), dict):
        kept["curves"] = {k: v for k, v in kept["curves"].items() if k not in TIMED_CURVES}
    if isinstance(kept.get("confirmation"), dict):
        kept["confirmation"] = _untimed_confirmation(kept["confirmation"])
    return kept


def _records(work: Path) -> dict[str, Any]:
    """The study at ``work`` as its records, less what timing decides."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{work / 'study.db'}")
    attrs = {k: v for k, v in study.user_attrs.items() if k not in RUN_STUDY_ATTRS}
    if "hpsearch.confirmations" in attrs:
        attrs["hpsearch.confirmations"] = [_untimed_confirmation(c) for c in attrs["hpsearch.confirmations"]]
    trials = [{
        "number": t.number, "state": t.state.name, "params": t.params,
        "val_accuracy": None if t.values is None else t.values[0],
        "intermediate": {str(step): value for step, value in sorted(t.intermediate_values.items())},
        "attrs": _untimed_attrs(t.user_attrs), "attr_names": sorted(t.user_attrs),
    } for t in study.get_trials(deepcopy=False)]
    return json.loads(json.dumps({"study": attrs, "trials": trials}, sort_keys=True, default=str))


def _differences(now: Any, then: Any, at: str = "", rel_tol: float = 0.0) -> list[str]:
    """Where two records part, as key paths, so that a failure names what changed (floats that
    agree to ``rel_tol`` relative are the same)."""
    if isinstance(now, dict) and isinstance(then, dict):
        return [d for key in sorted(set(now) | set(then), key=str)
                for d in _differences(now.get(key), then.get(key), f"{at}.{key}", rel_tol)]
    if isinstance(now, list) and isinstance(then, list) and len(now) == len(then):
        return [d for i, (a, b) in enumerate(zip(now, then)) for d in _differences(a, b, f"{at}[{i}]", rel_tol)]
    if type(now) is float and type(then) is float and math.isclose(now, then, rel_tol=rel_tol):
        return []
    return [] if now == then else [f"{at}: {then!r} then, {now!r} now"[:300]]


def _held_records() -> dict[str, Any]:
    """records.json, less what ``_records`` leaves out now (a record left out later applies to
    fixtures written before it too)."""
    held = json.loads((FIXTURES / "records.json").read_text())
    for trial in held["trials"]:
        trial["attrs"] = _untimed_attrs(trial["attrs"])
    return held


def _by_configuration(trials: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {json.dumps(t["params"], sort_keys=True): t for t in trials if not t["attrs"].get("confirmation")}


def test_the_same_search_records_the_same_trials(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "space.yaml", tmp_path / "space.yaml")
    result = _hpsearch("start", "space.yaml", "--no-progress", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    records = _records(tmp_path)
    if WRITE:
        (FIXTURES / "records.json").write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
        shutil.copy(tmp_path / "study.db", FIXTURES / "searched.db")
        return
    assert _differences(records, _held_records(), rel_tol=TRAINING_REL_TOL) == []


def test_the_read_commands_print_what_they_printed_for_the_same_study(tmp_path: Path) -> None:
    work = _study_in(tmp_path, "searched.db")
    for name, args in READS.items():
        result = _hpsearch(*args, cwd=work)
        assert result.returncode == 0, result.stderr
        _held(name, result.stdout)


def test_a_study_written_then_resumes_and_its_new_trials_record_the_same(tmp_path: Path) -> None:
    if WRITE:
        shutil.copy(FIXTURES / "space.yaml", tmp_path / "space.yaml")
        result = _hpsearch("start", "space.yaml", "--no-progress", "--n-trials", "6", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        shutil.copy(tmp_path / "study.db", FIXTURES / "partial.db")
        return
    work = _study_in(tmp_path, "partial.db")
    before = _records(work)["trials"]
    result = _hpsearch("resume", STUDY, "--n-trials", "8", "--no-progress", cwd=work)
    assert result.returncode == 0, result.stderr
    after = _records(work)["trials"]
    assert _differences(after[:len(before)], before) == [], "resume rewrote trials it had no business touching"
    ran = _by_configuration(after[len(before):])
    assert len(ran) == 2 and all(t["state"] == "COMPLETE" for t in ran.values())
    full = _by_configuration(_held_records()["trials"])
    for key, trial in ran.items():
        same = full[key]
        assert trial["val_accuracy"] == same["val_accuracy"] and trial["intermediate"] == same["intermediate"]
        assert trial["attr_names"] == same["attr_names"]
