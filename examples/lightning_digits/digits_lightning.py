"""A plain PyTorch Lightning module and datamodule, searched by hpsearch as they are.

Nothing here imports hpsearch: the same two classes train under Lightning's own ``Trainer``
(``train_with_trainer.py`` beside this file) and under ``hpsearch start space.yaml``, which
names them as ``workload: {lightning: {module: "digits_lightning:DigitsClassifier", datamodule:
"digits_lightning:DigitsData"}}``.

What hpsearch needs from a LightningModule, all of which a Lightning user writes anyway:

- ``training_step`` returns the batch's mean loss;
- ``validation_step`` logs the validation loss as ``val_loss`` (and the accuracy as
  ``val_accuracy``, or tell hpsearch the names you use: ``lightning: {val_accuracy: val_acc}``);
- ``configure_optimizers`` returns one optimizer. Its LR is replaced at every step by the trial's
  LR (base_lr scaled by the rule, with warmup), so ``lr`` here is only the Trainer's;
- the datamodule's loaders are DataLoaders over map-style datasets. hpsearch keeps their dataset
  and ``collate_fn`` and sets the batch size (``per_device_batch_size``) and the sampler itself,
  so ``batch_size`` here is only the Trainer's.

The data are scikit-learn's bundled 8x8 digits (no download): 1,797 images, 360 held out.
"""

from __future__ import annotations

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

__all__ = ["DigitsClassifier", "DigitsData"]


class DigitsClassifier(pl.LightningModule):
    """A one-hidden-layer MLP on 8x8 digits, trained with SGD."""

    def __init__(self, hidden: int = 64, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        # sync_dist: under a multi-device Trainer each device validates a shard; the logged value
        # is then the mean over all of them, as hpsearch's (one rank, the whole set).
        self.log("val_loss", F.cross_entropy(logits, y), sync_dist=True)
        self.log("val_accuracy", (logits.argmax(dim=1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class DigitsData(pl.LightningDataModule):
    """scikit-learn's digits, split once by ``split_seed`` into 1,437 training and ``val_size``
    validation images, pixels scaled to [0, 1]."""

    def __init__(self, batch_size: int = 32, val_size: int = 360, split_seed: int = 0) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.val_size = val_size
        self.split_seed = split_seed

    def setup(self, stage: str) -> None:
        data = load_digits()
        x = torch.tensor(data.data / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
        y = torch.tensor(data.target, dtype=torch.long)
        order = torch.from_numpy(np.random.default_rng(self.split_seed).permutation(len(y)))
        val, train = order[: self.val_size], order[self.val_size :]
        self.train_set = TensorDataset(x[train], y[train])
        self.val_set = TensorDataset(x[val], y[val])

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(self.val_set, batch_size=256)
