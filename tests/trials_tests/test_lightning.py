"""The lightning workload: a LightningModule and LightningDataModule trained by the engine's DDP
loop, with the engine's batch and LR semantics and measurements, and the same result as a plain
Lightning Trainer (examples/lightning_digits)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
import torch

from hpsearch.trials.errors import WorkloadError
from hpsearch.trials.launcher import run_trial
from hpsearch.trials.rank.context import RankContext
from hpsearch.trials.rank.loop import train
from hpsearch.trials.spec import TrialSpec
from hpsearch.trials.workloads.base import build_workload

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "lightning_digits"
HERE = Path(__file__).resolve().parent
DIGITS = {"module": "digits_lightning:DigitsClassifier", "datamodule": "digits_lightning:DigitsData"}
BLOBS = {"module": "lightning_modules:BlobModel", "datamodule": "lightning_modules:BlobData"}


@pytest.fixture(autouse=True)
def lightning_on_path(unavailable: Callable[[str], NoReturn], monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        import lightning.pytorch  # noqa: F401
    except ImportError:
        unavailable("PyTorch Lightning is not installed: pip install -c constraints/cpu.txt -e '.[lightning]' "
                    "(or '.[dev]') to run the lightning workload's tests")
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(HERE))
    torch.set_num_threads(1)


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _spec(**overrides: Any) -> TrialSpec:
    settings: dict[str, Any] = dict(per_device_batch_size=32, base_lr=0.05, base_batch_size=32, lr_rule="linear",
                                    epochs=2, workload="lightning", workload_options=DIGITS, seed=0, save_model=True)
    return TrialSpec(**{**settings, **overrides})


def _accuracy_of(weights: Path, hidden: int = 64) -> float:
    """The saved weights' accuracy on the example's validation set, computed here by hand."""
    from digits_lightning import DigitsClassifier, DigitsData

    model = DigitsClassifier(hidden=hidden)
    model.load_state_dict(_weights(weights))
    data = DigitsData()
    data.setup("fit")
    x, y = data.val_set.tensors
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean())


def test_a_lightning_module_trains_with_the_engines_record(tmp_path: Path) -> None:
    # b 16 x A 2: B = 32 = B0, so the linear rule keeps base_lr; the searched hidden reaches the module.
    spec = _spec(per_device_batch_size=16, grad_accum_steps=2, hyperparameters={"hidden": 32})
    final = train(spec, RankContext(run_dir=tmp_path))
    assert final is not None
    assert final["epochs_completed"] == 2 and final["steps"] == 2 * math.ceil(1437 / 32)
    assert final["samples_seen"] == 2 * 1437
    assert final["last_lr"] == pytest.approx(0.05)
    assert math.isfinite(final["val_loss"]) and math.isfinite(final["train_loss"])
    # W x A = 2: the noise scale is measured per micro-batch.
    assert final["noise_scale"] is not None and final["noise_scale"] > 0
    # val_accuracy is what validation_step logged over the whole validation set: the saved weights
    # (the LightningModule's own state dict) give the same accuracy computed by hand.
    assert final["val_accuracy"] == pytest.approx(_accuracy_of(tmp_path / "model.pt", hidden=32), abs=1e-6)


def test_accumulating_two_micro_batches_matches_one_batch_of_twice_the_size(tmp_path: Path) -> None:
    for name, b, a in (("accumulated", 16, 2), ("plain", 32, 1)):
        (tmp_path / name).mkdir()
        train(_spec(per_device_batch_size=b, grad_accum_steps=a), RankContext(run_dir=tmp_path / name))
    # 1437 samples: the last step holds 29, split 16 + 13; the per-sample weighting keeps it exact.
    assert _max_diff(_weights(tmp_path / "accumulated" / "model.pt"), _weights(tmp_path / "plain" / "model.pt")) <= 1e-6


def test_the_trials_lr_is_set_on_the_optimizer_of_configure_optimizers(tmp_path: Path) -> None:
    # The module's own lr (0.05 by default) is replaced: at B = 4 x B0 the linear rule trains at 0.2,
    # with a warmup from base_lr over the first epoch.
    ctx = RankContext(run_dir=tmp_path)
    final = train(_spec(per_device_batch_size=128, base_lr=0.05, warmup_epochs=1.0), ctx)
    assert final is not None and final["last_lr"] == pytest.approx(0.2)
    steps = math.ceil(1437 / 128)
    assert ctx.lr_trace[0] == pytest.approx(0.05) and ctx.lr_trace[steps:] == pytest.approx([0.2] * steps)
    assert 0.05 < ctx.lr_trace[steps // 2] < 0.2


def test_dict_batches_and_a_torchmetrics_accuracy_under_a_name_of_the_modules_own(tmp_path: Path) -> None:
    options = {**BLOBS, "val_accuracy": "val_acc", "width": 16}
    spec = _spec(per_device_batch_size=10, base_lr=0.01, base_batch_size=10, lr_rule="sqrt",
                 workload_options=options, epochs=3)
    final = train(spec, RankContext(run_dir=tmp_path))
    assert final is not None
    from lightning_modules import BlobData, BlobModel

    model = BlobModel(width=16)
    model.load_state_dict(_weights(tmp_path / "model.pt"))
    data = BlobData()
    data.setup("fit")
    with torch.no_grad():
        by_hand = float((model(data.val_set.x).argmax(dim=1) == data.val_set.y).float().mean())
    assert final["val_accuracy"] == pytest.approx(by_hand, abs=1e-6)
    assert final["val_accuracy"] > 0.8  # three separable blobs


def test_a_diverging_lightning_module_fails_as_diverged() -> None:
    from hpsearch.trials.errors import TrialFailed

    # Adam moves each weight by about the LR per step: at 1e37 the logits overflow float32.
    spec = _spec(workload_options=BLOBS, per_device_batch_size=10, base_batch_size=10, base_lr=1e37, epochs=1)
    with pytest.raises(TrialFailed) as failed:
        train(spec, RankContext())
    assert failed.value.reason == "diverged"


@pytest.mark.parametrize(("classes", "says"), [
    ({"module": "lightning_modules:NoValidation"}, "does not define validation_step, which hpsearch trains with; "
                                                   "add def validation_step(self, batch, batch_idx) calling "
                                                   'self.log("val_loss", loss)'),
    ({"module": "lightning_modules:LogsNoValLoss"}, "LogsNoValLoss.validation_step logs no 'val_loss' (it logs: "
                                                    "loss); hpsearch records the validation loss the module logs "
                                                    "as val_loss: add self.log('val_loss', loss) to validation_step"),
    ({"module": "lightning_modules:WithScheduler"}, "returned a learning-rate scheduler; hpsearch sets the LR at "
                                                    "every step"),
    ({"module": "lightning_modules:TwoOptimizers"}, "returned 2 optimizers; hpsearch trains with one"),
    ({"module": "lightning_modules:ManualOptimization"}, "sets automatic_optimization = False"),
    ({"module": "lightning_modules:NotAModule"}, "must be a subclass of LightningModule"),
    ({"module": "lightning_modules:Missing"}, "module 'lightning_modules' has no 'Missing'"),
    ({"datamodule": "lightning_modules:NoValLoader"}, "does not define val_dataloader, which hpsearch trains with; "
                                                      "add def val_dataloader(self) returning a torch DataLoader"),
    ({"datamodule": "lightning_modules:IterableData"}, "must load a map-style dataset"),
    ({"lr": 0.1}, "'lr' cannot be a workload option of a lightning workload"),
    ({"widht": 4}, "unknown workload options ['widht']: neither BlobModel nor BlobData takes them"),
])
def test_a_module_that_lacks_what_the_workload_needs_is_told_what_to_add(classes: dict[str, Any], says: str) -> None:
    with pytest.raises(WorkloadError) as refused:
        build_workload("lightning", {**BLOBS, **classes})
    assert says in str(refused.value)


def test_a_module_file_that_raises_at_import_is_one_line_naming_where(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "raising_module.py").write_text("import os\nraise RuntimeError('no data under DATA_DIR')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(WorkloadError) as refused:
        build_workload("lightning", {**BLOBS, "module": "raising_module:Model"})
    assert str(refused.value) == ("cannot import the LightningModule's module 'raising_module': RuntimeError: no data "
                                  f"under DATA_DIR (at {tmp_path / 'raising_module.py'}:2)")


def test_a_module_that_reads_self_trainer_fails_its_trial_saying_why() -> None:
    spec = _spec(workload_options={**BLOBS, "module": "lightning_modules:UsesTrainer"}, per_device_batch_size=10,
                 base_batch_size=10, epochs=1)
    with pytest.raises(WorkloadError, match=r"without a Trainer, so self\.trainer does not exist"):
        train(spec, RankContext())


@pytest.mark.slow  # two Lightning Trainer processes and two warm ranks, each importing Lightning: ~40 s on 2 cores
def test_two_gloo_ranks_end_where_a_plain_lightning_ddp_trainer_ends(tmp_path: Path) -> None:
    # hpsearch: b 32 x W 2 = B 64 at the linear rule from B0 32: lr 0.1, real gloo ranks.
    spec = _spec(world_size=2)
    assert spec.lr == 0.1
    ours = run_trial(spec, tmp_path / "hpsearch")
    # The same module under Lightning's Trainer(devices=2, strategy="ddp") at the same b, LR and seed.
    out, weights = tmp_path / "trainer.json", tmp_path / "trainer.pt"
    script = EXAMPLE / "train_with_trainer.py"
    done = subprocess.run([sys.executable, str(script), "--devices", "2", "--batch-size", "32", "--lr", repr(spec.lr),
                           "--epochs", "2", "--seed", "0", "--out", str(out), "--weights", str(weights)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stdout + done.stderr
    theirs = json.loads(out.read_text())
    # Same samples per step, same gradient averaging, same SGD: the weights agree to float
    # rounding, and so do the metrics (each side sums its validation batches in its own order).
    assert _max_diff(_weights(tmp_path / "hpsearch" / "model.pt"), _weights(weights)) <= 1e-6
    assert ours["val_loss"] == pytest.approx(theirs["val_loss"], abs=1e-5)
    assert ours["val_accuracy"] == pytest.approx(theirs["val_accuracy"], abs=1e-6)
    # The engine's measurements of the DDP trial.
    assert ours["effective_batch_size"] == 64 and ours["samples_seen"] == 2 * 1438
    assert ours["noise_scale"] is not None and 0 < ours["comm_fraction"] <= 1
    assert ours["device_seconds"] == pytest.approx(2 * ours["runtime_s"])

    # Two emulated ranks in one process read the real ranks' samples: the same weights again.
    (tmp_path / "emulated").mkdir()
    train(_spec(world_size=2, emulated_ranks=2), RankContext(run_dir=tmp_path / "emulated"))
    assert _max_diff(_weights(tmp_path / "emulated" / "model.pt"), _weights(tmp_path / "hpsearch" / "model.pt")) <= 1e-6
