"""The plugin contract, through the example in examples/my_workload."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from hpsearch.search_spaces import parse_space
from hpsearch.search_spaces.loader import load_space
from hpsearch.trials.errors import WorkloadError
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec, trial_spec
from hpsearch.trials.workloads.base import resolve_workload

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "my_workload"


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))


def test_resolves_and_builds(on_path: None) -> None:
    factory = resolve_workload("my_workload:make_workload")
    workload = factory({"samples": 64, "features": 3})
    assert workload.loss_reduction == "sum" and workload.num_classes is None
    assert len(workload.train_set) == 64 and len(workload.val_set) == 16
    x, y = workload.train_set[0]
    assert x.shape == (3,) and y.shape == (1,)


def test_trains_one_epoch_in_process(on_path: None) -> None:
    torch.set_num_threads(1)
    spec = TrialSpec(per_device_batch_size=16, base_lr=0.001, base_batch_size=16, epochs=1,
                     workload="my_workload:make_workload", workload_options={"samples": 128})
    final = train(spec, RankContext())
    assert final is not None
    assert final["epoch"] == 1 and final["steps"] == 8
    assert "val_accuracy" not in final  # regression
    assert math.isfinite(final["val_loss"])


def test_example_space_validates() -> None:
    space = load_space(EXAMPLE / "space.yaml")
    assert space.workload.name == "my_workload:make_workload"


SEARCHED_HIDDEN = parse_space("""\
workload:
  name: "my_workload:make_workload"
  epochs: 1
  options: {samples: 128, hidden: 4}
  save_model: all
scaling: {base_batch_size: 16}
parameters:
  per_device_batch_size: 16
  base_lr: 0.001
  hidden: {choices: [0, 16]}
""")


def test_a_searched_workload_parameter_reaches_the_factory_over_its_option(on_path: None, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    finals, shapes = {}, {}
    for hidden in (0, 16):
        # `hidden` is a searched parameter; workload.options also names it, and the parameter wins.
        spec = trial_spec(SEARCHED_HIDDEN, {"per_device_batch_size": 16, "base_lr": 0.001, "hidden": hidden})
        assert spec.factory_options == {"samples": 128, "hidden": hidden}
        run = tmp_path / str(hidden)
        run.mkdir()
        finals[hidden] = train(spec, RankContext(run_dir=run))
        shapes[hidden] = {k: tuple(v.shape) for k, v in torch.load(run / "model.pt", weights_only=True).items()}
    assert shapes[0] == {"weight": (1, 8), "bias": (1,)}
    assert shapes[16]["0.weight"] == (16, 8)
    assert finals[0] is not None and finals[16] is not None
    assert finals[0]["val_loss"] != finals[16]["val_loss"]
    assert finals[16]["model_path"] == str((tmp_path / "16" / "model.pt").resolve())


def test_a_factory_returning_the_wrong_type_fails_the_trial_with_what_it_returned(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "returns_a_model.py").write_text(
        "import torch\ndef make_workload(options):\n    return torch.nn.Linear(2, 1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = TrialSpec(per_device_batch_size=8, base_lr=0.1, epochs=1, workload="returns_a_model:make_workload")
    with pytest.raises(WorkloadError, match=r"^workload 'returns_a_model:make_workload' must return a "
                                            r"hpsearch\.trials\.workloads\.base\.Workload, got a "
                                            r"torch\.nn\.modules\.linear\.Linear$"):
        train(spec, RankContext())
