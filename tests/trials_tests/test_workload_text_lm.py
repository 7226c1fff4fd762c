"""The text_lm built-in: text from the standard library's own files, split by file, hashed, a
per-token loss that falls, its language-model measures, and the refusal of other text."""

from __future__ import annotations

import math
import platform
import shutil
from pathlib import Path

import optuna
import pytest
import torch

import hpsearch
from hpsearch import record
from hpsearch.errors import WorkloadError
from hpsearch.search_spaces import parse_space
from hpsearch.store import study_attrs
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.fused import fusable, train_fused
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec, group_spec
from hpsearch.trials.workloads import text_lm as lm
from hpsearch.trials.workloads.base import resolve_workload
from hpsearch.workload_check import check_for_search

TINY = {"layers": 1, "width": 32, "heads": 2, "context": 16, "files": 3, "val_files": 2}


@pytest.fixture
def stdlib_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the pinned files, which the workload then reads instead of the stdlib's."""
    folder = tmp_path / "stdlib"
    folder.mkdir()
    for name in lm.PINNED_FILES:
        shutil.copy(lm.stdlib_dir() / name, folder / name)
    monkeypatch.setattr(lm, "stdlib_dir", lambda: folder)
    return folder


def test_is_a_builtin() -> None:
    assert resolve_workload("text_lm") is lm.text_lm


def test_the_split_is_by_file_fixed_and_disjoint() -> None:
    assert set(lm.TRAIN_FILES).isdisjoint(lm.VAL_FILES)
    assert tuple(sorted(lm.TRAIN_FILES + lm.VAL_FILES)) == lm.PINNED_FILES
    # The validation windows are those of the validation files, whatever the training files.
    few, many = lm.text_data({"files": 1}), lm.text_data({"files": 5})
    assert torch.equal(few.val.tensors[0], many.val.tensors[0])
    assert len(many.train) > len(few.train)
    # The first training files' text opens the training windows, the first validation file's
    # the validation ones: no file is in both.
    context = 64
    first_train = (lm.stdlib_dir() / lm.TRAIN_FILES[0]).read_bytes()[:context]
    first_val = (lm.stdlib_dir() / lm.VAL_FILES[0]).read_bytes()[:context]
    assert bytes(few.train.tensors[0][0].tolist()) == first_train
    assert bytes(few.val.tensors[0][0].tolist()) == first_val


def test_samples_are_next_token_windows_of_int64() -> None:
    data = lm.text_data({"context": 16, "files": 2, "val_files": 1})
    x, y = data.train.tensors
    assert x.dtype == y.dtype == torch.int64 and x.shape[1] == y.shape[1] == 16
    assert torch.equal(x[:, 1:], y[:, :-1])  # the targets are the inputs moved by one
    assert int(x.max()) < 256 and data.vocab_size == 256


def test_char_level_vocabulary_is_the_pinned_texts_characters() -> None:
    data = lm.text_data({"level": "char", "files": 2, "val_files": 1})
    text = "".join((lm.stdlib_dir() / name).read_text(encoding="utf-8") for name in lm.PINNED_FILES)
    assert data.vocab_size == len(set(text))
    assert int(data.train.tensors[0].max()) < data.vocab_size
    workload = lm.text_lm({"level": "char", **TINY})
    assert workload.num_classes == data.vocab_size


def test_the_text_hash_is_stable_and_changes_with_the_text(stdlib_copy: Path) -> None:
    first = lm.text_lm(TINY).data_fingerprint
    assert first is not None and len(first) == 64
    assert lm.text_lm({**TINY, "level": "char", "files": 1}).data_fingerprint == first  # the pin's, not the options'
    # A file the options do not even use (the last training file) changes it when edited.
    edited = stdlib_copy / lm.TRAIN_FILES[-1]
    edited.write_bytes(edited.read_bytes() + b"# one more line\n")
    assert lm.text_lm(TINY).data_fingerprint != first


def test_a_missing_pinned_file_names_the_file_and_the_python(stdlib_copy: Path) -> None:
    (stdlib_copy / "shlex.py").unlink()
    with pytest.raises(WorkloadError, match=rf"'shlex.py' is missing .*Python {platform.python_version()}"):
        lm.text_lm(TINY)


@pytest.mark.parametrize("options", [{"level": "word"}, {"heads": 3}, {"files": 0}, {"val_files": 9},
                                     {"dropout": 1.0}, {"context": 100000}, {"width": 2.5}, {"layer": 1}])
def test_bad_options_are_workload_errors(options: dict[str, object]) -> None:
    with pytest.raises(WorkloadError):
        lm.text_lm({**TINY, **options})


def test_the_model_is_fusable_and_predicts_every_position() -> None:
    workload = lm.text_lm(TINY)
    assert fusable(workload, "adamw") is None and fusable(workload, "sgd") is None
    ids = workload.train_set[0][0].unsqueeze(0)
    assert workload.model(ids).shape == (1, 256, 16)  # classes on dimension 1, as cross_entropy takes them


def _spec(**fields: object) -> TrialSpec:
    base: dict[str, object] = dict(per_device_batch_size=32, base_lr=3e-3, lr_rule="constant", workload="text_lm",
                                   epochs=3, seed=0,
                                   hyperparameters={"optimizer": "adamw", "weight_decay": 0.1})
    return TrialSpec(**{**base, **fields})  # type: ignore[arg-type]


def test_loss_per_token_falls_and_the_lm_measures_are_recorded() -> None:
    torch.set_num_threads(1)
    ctx = RankContext()
    final = train(_spec(), ctx)
    assert final is not None
    losses = [r[record.VAL_LOSS] for r in ctx.reports]
    assert losses[-1] < losses[0] < math.log(256)  # per token, below a uniform guess over the bytes
    assert ctx.reports[-1][record.TRAIN_LOSS] < ctx.reports[0][record.TRAIN_LOSS]
    for report in ctx.reports:
        assert report[record.VAL_PERPLEXITY] == pytest.approx(math.exp(report[record.VAL_LOSS]), rel=1e-12)
        assert report[record.TOKENS_SEEN] == report[record.SAMPLES_SEEN] * 64
        # Next-token accuracy over every position: above always answering the commonest byte.
        assert 0.0 < report[record.CHANCE_ACCURACY] < 1.0
    assert final[record.VAL_ACCURACY] > final[record.CHANCE_ACCURACY]
    assert final[record.VAL_PERPLEXITY] == ctx.reports[-1][record.VAL_PERPLEXITY]


def test_a_bf16_trial_trains() -> None:
    torch.set_num_threads(1)
    final = train(_spec(precision="bf16", epochs=2), RankContext())
    assert final is not None and final[record.PRECISION] == "bf16"
    assert math.isfinite(final[record.VAL_LOSS]) and final[record.VAL_LOSS] < math.log(256)


def test_dropout_draws_its_masks_per_fused_member(tmp_path: Path) -> None:
    twin = _spec(workload_options={**TINY, "dropout": 0.2}, epochs=1, per_device_batch_size=16)
    ctx = RankContext(run_dir=tmp_path)
    train_fused(group_spec([twin, twin], fuse="true"), ctx)
    finals = [r for r in ctx.reports if r.get("final")]
    assert [r[record.FUSE] for r in finals] == ["on", "on"]
    assert finals[0][record.VAL_LOSS] != finals[1][record.VAL_LOSS]  # one shared mask would train them alike
    assert finals[0][record.VAL_PERPLEXITY] == pytest.approx(math.exp(finals[0][record.VAL_LOSS]))


@pytest.mark.parametrize("fused", [False, True])
def test_a_rank_that_builds_other_text_fails_its_trial(fused: bool, tmp_path: Path) -> None:
    built = lm.text_lm(TINY).data_fingerprint
    spec = _spec(workload_options=TINY, epochs=1, data_fingerprint="0" * 64)
    with pytest.raises(WorkloadError) as caught:
        if fused:
            train_fused(group_spec([spec, spec], fuse="true"), RankContext(run_dir=tmp_path))
        else:
            train(spec, RankContext())
    message = str(caught.value)
    assert f"fingerprint {built}" in message and f"fingerprint {'0' * 64}" in message
    assert f"Python {platform.python_version()}" in message
    train(_spec(workload_options=TINY, epochs=1, data_fingerprint=built), RankContext())  # its own text trains


SPACE = """\
study: lm-fingerprint
workload: {name: text_lm, epochs: 1, options: {layers: 1, width: 32, heads: 2, context: 16, files: 2, val_files: 1}}
parameters: {per_device_batch_size: 16, base_lr: 0.001, optimizer: adamw}
objectives: [{metric: val_loss, direction: minimize}]
search: {sampler: grid, n_trials: 1}
resources: {device: cpu}
"""


def test_the_search_check_reports_the_fingerprint() -> None:
    found = check_for_search(parse_space(SPACE))
    assert found.data_fingerprint == lm.text_lm(TINY).data_fingerprint
    assert found.fingerprint_attr() == {"sha256": found.data_fingerprint, "python": platform.python_version()}


def test_resume_refuses_a_study_recorded_on_other_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    storage = f"sqlite:///{tmp_path / 'lm.db'}"
    study = optuna.create_study(study_name="lm-fingerprint", storage=storage, directions=["minimize"])
    for key, value in study_attrs(SPACE, ["val_loss"], 1).items():
        study.set_user_attr(key, value)
    other = {"sha256": "f" * 64, "python": "3.10.0"}
    study.set_user_attr(record.ATTR_DATA_FINGERPRINT, other)
    with pytest.raises(WorkloadError) as caught:
        hpsearch.resume("lm-fingerprint", storage=storage)
    message = str(caught.value)
    assert caught.value.exit_code == 2
    assert "f" * 64 in message and "Python 3.10.0" in message and f"({platform.python_version()})" in message
    assert lm.text_lm(TINY).data_fingerprint in message
    # Nothing ran: the study is as it was.
    again = optuna.load_study(study_name="lm-fingerprint", storage=storage)
    assert again.trials == [] and again.user_attrs[record.ATTR_DATA_FINGERPRINT] == other


def test_every_trial_of_the_study_carries_its_recorded_fingerprint(tmp_path: Path) -> None:
    from hpsearch.planner.state import SearchState

    study = optuna.create_study(study_name="lm-fingerprint", storage=optuna.storages.InMemoryStorage())
    space = parse_space(SPACE)
    params = {"per_device_batch_size": 16, "base_lr": 0.001, "optimizer": "adamw", "lr_rule": "sqrt"}
    assert SearchState(study, space, 1, "cpu", tmp_path).spec(params).data_fingerprint is None
    study.set_user_attr(record.ATTR_DATA_FINGERPRINT, {"sha256": "a" * 64, "python": "3.11.7"})
    assert SearchState(study, space, 1, "cpu", tmp_path).spec(params).data_fingerprint == "a" * 64
