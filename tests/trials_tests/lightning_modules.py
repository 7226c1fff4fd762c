"""LightningModules and datamodules for the lightning workload's tests: a module whose batches
are dicts and whose accuracy is a torchmetrics Metric, and modules that each lack one thing the
workload needs. Named in the tests as "lightning_modules:Class" with this folder on the path."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
import torchmetrics
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Blobs(Dataset[dict[str, torch.Tensor]]):
    """Three Gaussian blobs in 4 dimensions, each sample a dict (not an (input, target) pair)."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, 3, (n,), generator=g)
        centres = torch.tensor([[2.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 2.0, 0]])
        self.x = centres[self.y] + torch.randn(n, 4, generator=g)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"features": self.x[i], "label": self.y[i]}


class BlobData(pl.LightningDataModule):
    def __init__(self, samples: int = 200, batch_size: int = 10) -> None:
        super().__init__()
        self.samples = samples
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        self.train_set = Blobs(self.samples, seed=1)
        self.val_set = Blobs(60, seed=2)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val_set, batch_size=16)


class BlobModel(pl.LightningModule):
    """Dict batches; accuracy logged as a torchmetrics object under the name ``val_acc``."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, width), nn.Tanh(), nn.Linear(width, 3))
        self.accuracy = torchmetrics.classification.MulticlassAccuracy(num_classes=3, average="micro")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        return {"loss": F.cross_entropy(self(batch["features"]), batch["label"])}

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        logits = self(batch["features"])
        self.log("val_loss", F.cross_entropy(logits, batch["label"]))
        self.accuracy(logits, batch["label"])
        self.log("val_acc", self.accuracy)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1.0)


class NoValidation(BlobModel):
    """Lacks validation_step (LightningModule's own does nothing)."""

    validation_step = pl.LightningModule.validation_step  # type: ignore[assignment]


class LogsNoValLoss(BlobModel):
    """Logs its validation loss under another name."""

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("loss", F.cross_entropy(self(batch["features"]), batch["label"]))


class WithScheduler(BlobModel):
    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1)}


class TwoOptimizers(BlobModel):
    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(self.net[0].parameters(), lr=0.1), torch.optim.SGD(self.net[2].parameters(), lr=0.1)]


class ManualOptimization(BlobModel):
    def __init__(self, width: int = 8) -> None:
        super().__init__(width)
        self.automatic_optimization = False


class UsesTrainer(BlobModel):
    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        scale = 1.0 / (1 + self.trainer.current_epoch)
        return scale * F.cross_entropy(self(batch["features"]), batch["label"])


class NotAModule(nn.Module):
    """A plain torch module, not a LightningModule."""


class NoValLoader(BlobData):
    """Lacks val_dataloader."""

    val_dataloader = pl.LightningDataModule.val_dataloader  # type: ignore[assignment]


class _Stream(torch.utils.data.IterableDataset[Any]):
    def __iter__(self) -> Any:
        return iter(())


class IterableData(BlobData):
    """Streams its training data: DistributedSampler cannot shard it."""

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(_Stream(), batch_size=self.batch_size)
