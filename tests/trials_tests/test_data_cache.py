"""Workload data kept warm in a rank process (``@builds_data``, ``workload.keep_data``): the
second trial of the same data does not build them again, the results are the same with and
without keeping, and the memory kept is bounded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from hpsearch.trials.launcher import run_trial
from hpsearch.trials.node.pool import RankPool
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.data_cache import DataCache
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec
from hpsearch.trials.workloads.base import build_workload, data_builder

# A workload whose data builder notes every call in a file, and draws from torch's global
# generator (which a careful builder would not): keeping the data must still not change the
# model's initial weights.
PLUGIN = '''
import torch
from torch import nn
from torch.utils.data import TensorDataset
from hpsearch.trials.workloads.base import Workload, builds_data, takes_options

def load(options):
    with open(options["log"], "a") as f:
        f.write("built\\n")
    torch.rand(100)  # the global generator, advanced
    gen = torch.Generator().manual_seed(options.get("data_seed", 0))
    x = torch.randn(600, 8, generator=gen)
    y = (x[:, 0] > 0).long()
    return TensorDataset(x[:500], y[:500]), TensorDataset(x[500:], y[500:])

@takes_options("log", "data_seed", "hidden")
@builds_data(load, options=["log", "data_seed"])
def make(options, data):
    train, val = data
    model = nn.Sequential(nn.Linear(8, options.get("hidden", 16)), nn.Dropout(0.2), nn.ReLU(),
                          nn.Linear(options.get("hidden", 16), 2))
    return Workload(model, train, val, nn.CrossEntropyLoss(), "mean", num_classes=2)

def plain(options):
    # A factory that does not declare its data: built every trial.
    return make.__wrapped__(options, load(options))
'''

COMPARED = ("val_loss", "val_accuracy", "train_loss", "samples_seen", "steps", "last_lr", "noise_scale")


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "kept_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path / "built.log"


@pytest.fixture
def pool() -> Iterator[RankPool]:
    made = RankPool(["kept_plugin"], prestart={None: 1})
    yield made
    made.close()


def _spec(log: Path, **fields: Any) -> TrialSpec:
    return TrialSpec(**{**dict(per_device_batch_size=32, grad_accum_steps=2, base_lr=0.1, epochs=2,
                               workload="kept_plugin:make", workload_options={"log": str(log)},
                               hyperparameters={"momentum": 0.9}, seed=4), **fields})


def _builds(log: Path) -> int:
    return log.read_text().count("built") if log.exists() else 0


def test_a_warm_rank_builds_the_data_once_and_trains_as_without_keeping(plugin: Path, pool: RankPool,
                                                                       tmp_path: Path) -> None:
    first = run_trial(_spec(plugin), tmp_path / "a", ranks=pool)
    second = run_trial(_spec(plugin, hyperparameters={"momentum": 0.9, "hidden": 32}), tmp_path / "b", ranks=pool)
    third = run_trial(_spec(plugin), tmp_path / "c", ranks=pool)
    # One process served all three; it built the data for the first only (hidden is a model
    # option: the same data).
    assert [w["tasks"] for w in pool.workers()] == [3]
    assert _builds(plugin) == 1
    assert (first["data_cache"], second["data_cache"], third["data_cache"]) == ("built", "kept", "kept")

    off = run_trial(_spec(plugin, keep_data=False), tmp_path / "d", ranks=pool)
    assert off["data_cache"] == "off" and _builds(plugin) == 2
    # Same seed, same data: the same training whether the data were built, kept or built anew.
    assert {k: first[k] for k in COMPARED} == {k: third[k] for k in COMPARED} == {k: off[k] for k in COMPARED}
    assert {k: first[k] for k in COMPARED} != {k: second[k] for k in COMPARED}  # another model


def test_other_data_options_build_other_data(plugin: Path, pool: RankPool, tmp_path: Path) -> None:
    run_trial(_spec(plugin), tmp_path / "a", ranks=pool)
    other = run_trial(_spec(plugin, workload_options={"log": str(plugin), "data_seed": 1}), tmp_path / "b",
                      ranks=pool)
    again = run_trial(_spec(plugin), tmp_path / "c", ranks=pool)
    assert (other["data_cache"], again["data_cache"]) == ("built", "kept")
    assert _builds(plugin) == 2


def test_a_factory_that_does_not_declare_its_data_builds_them_every_trial(plugin: Path, pool: RankPool,
                                                                         tmp_path: Path) -> None:
    finals = [run_trial(_spec(plugin, workload="kept_plugin:plain"), tmp_path / str(i), ranks=pool) for i in range(2)]
    assert [f["data_cache"] for f in finals] == ["not declared", "not declared"]
    assert _builds(plugin) == 2
    assert {k: finals[0][k] for k in COMPARED} == {k: finals[1][k] for k in COMPARED}


def test_the_built_ins_declare_their_data_options() -> None:
    from hpsearch.trials.workloads.base import builtin_workloads

    declared = {name: sorted(b.options) for name, f in builtin_workloads().items() if (b := data_builder(f))}
    assert declared == {
        "digits_cnn": ["split_seed", "val_fraction"],
        "digits_mlp": ["split_seed", "val_fraction"],
        "teacher_mlp": ["classes", "data_seed", "depth", "features", "samples", "val_fraction", "width"],
        "cifar10": ["limit", "path", "val_source"],
        "text_lm": ["context", "files", "level", "val_files"],
    }
    # Called as a plain factory, a declared one builds its data itself.
    assert len(build_workload("teacher_mlp", {"samples": 50}).train_set) == 40


def test_kept_data_are_bounded_least_recently_used_first() -> None:
    calls: list[int] = []

    def load(options: dict[str, Any]) -> torch.Tensor:
        calls.append(options["n"])
        return torch.zeros(options["n"], dtype=torch.uint8)

    cache = DataCache(max_entries=2, max_bytes=1000)
    for n in (10, 20, 10, 30):  # 20 is the least recently used when 30 comes
        cache.data(load, {"n": n})
    assert calls == [10, 20, 30] and len(cache) == 2
    assert cache.data(load, {"n": 10})[1] == "kept"
    assert cache.data(load, {"n": 20})[1] == "built"
    # Past the bytes: the oldest go; a data set larger than the bound alone is used, not kept.
    cache.data(load, {"n": 900})
    assert cache.bytes <= 1000
    assert cache.data(load, {"n": 2000})[1] == "built" and cache.data(load, {"n": 2000})[1] == "built"
    assert cache.bytes <= 1000


def test_data_kept_in_this_process_give_the_trial_the_same_numbers(plugin: Path) -> None:
    # train() in this process keeps the data too (a script calling it twice).
    first, second = RankContext(), RankContext()
    train(_spec(plugin, seed=11), first)
    train(_spec(plugin, seed=11), second)
    assert [r["data_cache"] for r in (first.reports[-1], second.reports[-1])] == ["built", "kept"]
    assert [{k: r[k] for k in COMPARED} for r in first.reports] == [{k: r[k] for k in COMPARED} for r in second.reports]
