"""A PyTorch Lightning fit measured by joulestat: one callback more than usual.

    python examples/lightning/fit.py --logger csv

The fit is one joulestat job (the node's agent measures it; without one, this process
does, and says so). Its energy, CO2e and cost so far, in all and per step, sample and
token (``joulestat/energy_j``, ``joulestat/energy_j_per_sample``, ...), reach the
Trainer's logger beside the loss; at the end, the final figures, how they were
obtained (``joulestat.energy_is``) and, for MLflow and W&B, the job's report.

The model is a small transformer classifier with random weights on random token ids,
so nothing is downloaded; put your LightningModule and DataLoader in their place.
Needs ``pip install 'joulestat[lightning]'`` (and ``[mlflow]`` or ``[wandb]`` for
those loggers; PyTorch's CPU build will do).
"""

from __future__ import annotations

import argparse

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from joulestat.integrations.lightning import JoulestatCallback


class RandomTokens(Dataset):
    """Sequences of random token ids, half of them padded, with random labels."""

    def __init__(self, samples: int, length: int = 32, vocab: int = 1000) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, vocab, (samples, length), generator=generator)
        self.mask = torch.ones(samples, length, dtype=torch.long)
        self.mask[1::2, length // 2:] = 0
        self.ids[self.mask == 0] = 0
        self.labels = torch.arange(samples) % 2

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": self.mask[i],
                "labels": self.labels[i]}


class Classifier(L.LightningModule):
    def __init__(self, vocab: int = 1000, width: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        layer = nn.TransformerEncoderLayer(width, nhead=2, dim_feedforward=128,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(width, 2)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        hidden = self.encoder(self.embed(batch["input_ids"]),
                              src_key_padding_mask=batch["attention_mask"] == 0)
        loss = nn.functional.cross_entropy(self.head(hidden[:, 0]), batch["labels"])
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def make_logger(kind: str, save_dir: str):
    if kind == "mlflow":
        from lightning.pytorch.loggers import MLFlowLogger
        return MLFlowLogger(experiment_name="joulestat-example")
    if kind == "wandb":
        from lightning.pytorch.loggers import WandbLogger
        return WandbLogger(project="joulestat-example", save_dir=save_dir)
    from lightning.pytorch.loggers import CSVLogger
    return CSVLogger(save_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=160)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--log-every-n-steps", type=int, default=5)
    parser.add_argument("--logger", choices=["csv", "mlflow", "wandb"], default="csv")
    parser.add_argument("--save-dir", default="lightning-logs")
    args = parser.parse_args()

    trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1,
                        logger=make_logger(args.logger, args.save_dir),
                        log_every_n_steps=args.log_every_n_steps,
                        enable_checkpointing=False, enable_progress_bar=False,
                        callbacks=[JoulestatCallback(name="tiny-transformer-fit")])
    loader = DataLoader(RandomTokens(args.samples), batch_size=args.batch_size)
    trainer.fit(Classifier(), loader)


if __name__ == "__main__":
    main()
