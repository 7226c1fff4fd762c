"""Answers that hold under the recipes users train with: an LR schedule after warmup, and
``torch.compile``. The trial's LR is the one its rule scaled to (docs/science.md, "The trial's
LR"), whatever the schedule did with it; a compiled trial's runtime leaves its compilation out
(docs/gpu.md, "Compilation")."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import create_trial

import hpsearch
from hpsearch import record
from hpsearch.dashboards.api import StudyCache, trial_detail
from hpsearch.testing import synthetic_study

COSINE_SPACE = """\
study: cosine
workload: {{name: digits_mlp, epochs: {epochs}, eval_every_samples: {every}}}
scaling: {{base_batch_size: 16, warmup_epochs: {warmup}, schedule: {schedule}}}
parameters:
  per_device_batch_size: {{choices: {batches}}}
  world_size: 1
  grad_accum_steps: 1
  lr_rule: {rule}
  base_lr: {{choices: {lrs}}}
  optimizer: {optimizer}{momentum}
objectives:
  - {{metric: val_accuracy, direction: maximize}}
  - {{metric: runtime_s, direction: minimize}}
search: {{sampler: grid, n_trials: {n}, seed: 0{concurrency}}}
resources: {{device: cpu}}
analysis: {{target: {{val_accuracy: {target}}}}}
"""


def _space(*, batches: list[int], lrs: list[float], schedule: str = "cosine", warmup: float = 1.0, epochs: int = 2,
           every: int = 360, rule: str = "sqrt", optimizer: str = "sgd", target: float = 0.5,
           concurrency: str = "") -> str:
    momentum = "\n  momentum: 0.9" if optimizer == "sgd" else ""
    return COSINE_SPACE.format(epochs=epochs, every=every, warmup=warmup, schedule=schedule, batches=batches, rule=rule,
                               lrs=lrs, optimizer=optimizer, momentum=momentum, n=len(batches) * len(lrs),
                               concurrency=concurrency, target=target)


def _hpsearch(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "hpsearch", *args], capture_output=True, text=True, cwd=cwd,
                            timeout=600, env=None if env is None else {**os.environ, **env})
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_under_a_cosine_schedule_each_trial_records_the_lr_its_rule_scaled_to(tmp_path: Path) -> None:
    # sqrt rule from B0 16: B 16 and 64 run at 1x and 2x base_lr; a cosine after one epoch's
    # warmup ends each trial near 0 (the LR that releases before recorded as the trial's).
    (tmp_path / "space.yaml").write_text(_space(batches=[16, 64], lrs=[0.02, 0.05]))
    _hpsearch("start", "space.yaml", "--no-progress", cwd=tmp_path)
    search = hpsearch.load("cosine", f"sqlite:///{tmp_path / 'hpsearch.db'}")
    frame = search.trials_dataframe()
    assert len(frame) == 4 and set(frame["state"]) == {"COMPLETE"}
    for _, t in frame.iterrows():
        scaled = t[record.BASE_LR] * math.sqrt(t[record.EFFECTIVE_BATCH_SIZE] / 16)
        assert t[record.LR] == pytest.approx(scaled, rel=1e-12)
        assert t[record.LR_SCHEDULE] == "cosine"
        assert 0 < t[record.LAST_LR] < 0.01 * scaled  # the end of the cosine, kept apart
    for _, t in search.trials_dataframe(all_attrs=True).iterrows():
        lrs = t[record.CURVES][record.LAST_LR]
        # Warmup rises from base_lr towards lr, the cosine brings it down: lr is its peak.
        assert len(lrs) >= 4 and max(lrs) <= t[record.LR] * (1 + 1e-9) and lrs[-1] == min(lrs)

    # The recommendation's LR is the scaled one, within what was searched, and it says how the
    # trials ran it: warmup from base_lr, then the cosine over their two epochs.
    out = json.loads(_hpsearch("recommend", "cosine", "--devices", "1", "--json", cwd=tmp_path).stdout)
    answer = out["recommendation"]
    assert 0.02 <= answer[record.BASE_LR] <= 0.05
    assert answer[record.LR] == pytest.approx(answer[record.BASE_LR] * math.sqrt(answer[record.EFFECTIVE_BATCH_SIZE] / 16))
    assert (answer[record.LR_SCHEDULE], answer[record.WARMUP_EPOCHS], answer["epochs"]) == ("cosine", 1.0, 2)
    text = _hpsearch("recommend", "cosine", "--devices", "1", cwd=tmp_path).stdout
    if answer[record.EFFECTIVE_BATCH_SIZE] == 16:  # B0: the warmup from base_lr has nowhere to rise, and says so
        assert f"sched lr {answer[record.LR]:.4g} from the first step (a warmup from base_lr starts at it at this " \
               "batch), then cosine decay to 0 by epoch 2" in text
    else:
        assert f"sched warm up from base_lr {answer[record.BASE_LR]:.4g} to lr {answer[record.LR]:.4g} over 1 epoch, " \
               "then cosine decay to 0 by epoch 2" in text


def _as_recorded_before_last_lr(source: hpsearch.Search, storage: optuna.storages.BaseStorage) -> hpsearch.Search:
    """``source``'s trials as releases before ``last_lr`` wrote them under a cosine schedule:
    ``lr`` overwritten by the last step's LR (about 0, and smaller the fewer the steps), the
    curve of it under ``lr``, no ``lr_schedule``."""
    copy = optuna.create_study(study_name="before", storage=storage, directions=source.study.directions)
    copy.set_metric_names(source.objectives)
    for key, value in source.study.user_attrs.items():
        copy.set_user_attr(key, value)
    for t in source.study.get_trials(deepcopy=False):
        attrs: dict[str, Any] = dict(t.user_attrs)
        attrs.pop(record.LR_SCHEDULE, None)
        steps = attrs.get(record.STEPS)
        if steps:  # it ran: its last step's LR, one step short of the cosine's end
            attrs[record.LR] = attrs[record.LR] * 0.5 * (1 + math.cos(math.pi * (1 - 1 / steps)))
            curves = dict(attrs[record.CURVES])
            curves[record.LR] = curves.pop(record.LAST_LR)
            attrs[record.CURVES] = curves
        copy.add_trial(create_trial(state=t.state, params=t.params, distributions=t.distributions, values=t.values,
                                    user_attrs=attrs, intermediate_values=t.intermediate_values))
    return hpsearch.load("before", storage)


def test_a_study_recorded_before_the_schedules_last_lr_was_kept_apart_is_read_with_the_scaled_lr(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    storage = optuna.storages.RDBStorage(url)
    now = synthetic_study(storage, "now", n_trials=300, seed=3)
    before = _as_recorded_before_last_lr(now, storage)
    old, new = before.trials_dataframe(), now.trials_dataframe()
    assert list(old[record.LR]) == pytest.approx(list(new[record.LR]), rel=1e-12)
    ran = old[record.STEPS].notna()
    assert (old.loc[ran, record.LAST_LR] < old.loc[ran, record.LR]).all()  # what they recorded, as what it was
    # Every answer is the one the study gives when it records its LR apart.
    points_before, points_now = before.analyze().lr_points, now.analyze().lr_points
    assert [p.effective_batch_size for p in points_before] == [p.effective_batch_size for p in points_now]
    assert [p.lr for p in points_before] == pytest.approx([p.lr for p in points_now], rel=1e-9)
    law_before, law_now = before.analyze().lr_law, now.analyze().lr_law
    assert law_before is not None and law_now is not None and law_before.alpha == pytest.approx(law_now.alpha)
    assert before.recommend(8).base_lr == pytest.approx(now.recommend(8).base_lr)
    # The dashboard's trial page too.
    number = int(old.loc[ran, "number"].iloc[0])
    shown = trial_detail(StudyCache(url), "before", str(number))["user_attrs"]
    assert shown[record.LR] == pytest.approx(float(new.loc[new["number"] == number, record.LR].iloc[0]), rel=1e-12)
    assert shown[record.LAST_LR] < shown[record.LR]


# One LR grid per optimizer, a factor sqrt(2) apart (the best LR's parabola needs five LRs within
# a factor 3), spanning the best LRs of B 16 to 256 measured on this workload with and without a
# schedule: the best LR stays inside at every batch.
_GRIDS = {
    "sgd": [round(0.05 * 2 ** (k / 2), 4) for k in range(10)],  # 0.05 .. 1.13
    "adamw": [round(0.004 * 2 ** (k / 2), 5) for k in range(1, 11)],  # 0.0057 .. 0.128
}


@pytest.mark.slow  # four searches of 50 trials: about 3.5 min on 2 cores
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_a_cosine_study_with_warmup_fits_the_lr_law_of_the_same_study_without_a_schedule(
        tmp_path: Path, optimizer: str) -> None:
    laws = {}
    for schedule, warmup in (("none", 0.0), ("cosine", 1.0)):
        work = tmp_path / schedule
        work.mkdir()
        (work / "space.yaml").write_text(_space(
            batches=[16, 32, 64, 128, 256], lrs=_GRIDS[optimizer], schedule=schedule, warmup=warmup, epochs=8,
            every=180, rule="constant", optimizer=optimizer, target=0.93))
        _hpsearch("start", "space.yaml", "--no-progress", "--no-confirm", cwd=work)  # the search's fit alone
        out = json.loads(_hpsearch("recommend", "cosine", "--devices", "1", "--json", cwd=work).stdout)
        law = out["analysis"]["lr_law"]
        assert law is not None, out["analysis"]["lr_law_refusal"]
        laws[schedule] = law["alpha"]
        answer = out["recommendation"]
        assert min(_GRIDS[optimizer]) <= answer[record.BASE_LR] <= max(_GRIDS[optimizer])
        assert answer[record.LR_SCHEDULE] == schedule
    assert laws["cosine"] == pytest.approx(laws["none"], abs=0.15), laws


COMPILED_SPACE = """\
study: compiled
workload: {name: digits_mlp, epochs: 1, compile: true}
parameters:
  per_device_batch_size: 64
  base_lr: {choices: [0.02, 0.05, 0.1]}
objectives:
  - {metric: val_accuracy, direction: maximize}
  - {metric: runtime_s, direction: minimize}
search: {sampler: grid, n_trials: 3, max_concurrent: 1, seed: 0}
resources: {device: cpu}
analysis: {target: {val_accuracy: 0.5}}
"""


# Inductor imports a deprecated part of torch itself (torch.jit.script_method), nothing of ours.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.slow  # three compilations on the CPU: about a minute on 2 cores
def test_a_compiled_trials_runtime_leaves_out_what_compiling_cost_whatever_the_cache_held(tmp_path: Path) -> None:
    # Three trials of one shape, one at a time, the compile cache empty at the start: the first
    # compiles from nothing (seconds), the others find the compiled code cached.
    (tmp_path / "space.yaml").write_text(COMPILED_SPACE)
    _hpsearch("start", "space.yaml", "--no-progress", cwd=tmp_path,
              env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache")})
    study = optuna.load_study(study_name="compiled", storage=f"sqlite:///{tmp_path / 'hpsearch.db'}")
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    first = trials[0].user_attrs
    # One epoch of digits trains in well under the seconds compiling from nothing takes: a
    # runtime holding the compilation would exceed it.
    assert first[record.RUNTIME_S] < first[record.COMPILE_S]
    for t in trials:
        attrs = t.user_attrs
        assert t.values[1] == attrs[record.RUNTIME_S]  # the frontier's axis
        assert attrs[record.TRAIN_S] <= attrs[record.RUNTIME_S]
        assert attrs[record.DEVICE_SECONDS] == pytest.approx(attrs[record.RUNTIME_S])
    # The recommendation counts the compilation apart: once, the longest measured.
    longest = max(t.user_attrs[record.COMPILE_S] for t in trials)
    out = json.loads(_hpsearch("recommend", "compiled", "--devices", "1", "--json", cwd=tmp_path).stdout)
    assert out["recommendation"][record.COMPILE_S] == pytest.approx(longest)
    assert "compiling the model once: up to" in _hpsearch("recommend", "compiled", "--devices", "1", cwd=tmp_path).stdout
