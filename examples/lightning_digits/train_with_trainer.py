"""Train the example module with Lightning's own Trainer: the plain-Lightning reference for
hpsearch's trials of the same module.

    python train_with_trainer.py --devices 2 --batch-size 32 --lr 0.1 --epochs 2 --seed 0

runs ``Trainer(accelerator="cpu", devices=2, strategy="ddp")`` (two processes over gloo: Lightning
starts the second by running this script again) and prints the last validation metrics as JSON
(``--out FILE`` writes them to a file too, ``--weights FILE`` saves the final weights). With the
per-device batch b, the devices W, the seed and the LR of an hpsearch trial (``lr`` in its
record), it ends at the trial's weights and validation metrics; docs/workloads.md, "Lightning",
says to what tolerance and why.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from digits_lightning import DigitsClassifier, DigitsData


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="per device")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the metrics here too")
    parser.add_argument("--weights", type=Path, help="save the final weights (the module's state_dict) here")
    args = parser.parse_args()

    torch.set_num_threads(1)  # as each hpsearch rank (resources.cpus_per_worker: 1)
    # Seeds the initial weights and, through PL_GLOBAL_SEED, the DistributedSampler's shuffle.
    pl.seed_everything(args.seed, verbose=False)
    model = DigitsClassifier(hidden=args.hidden, lr=args.lr)
    data = DigitsData(batch_size=args.batch_size)
    trainer = pl.Trainer(accelerator="cpu", devices=args.devices, strategy="ddp" if args.devices > 1 else "auto",
                         max_epochs=args.epochs, num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, data)
    if trainer.global_rank == 0:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        text = json.dumps(metrics, sort_keys=True)
        if args.out:
            args.out.write_text(text)
        if args.weights:
            torch.save(model.state_dict(), args.weights)
        print(text)


if __name__ == "__main__":
    main()
