"""A Hugging Face Trainer run measured by joulestat: one line more than usual.

    python examples/huggingface/trainer.py --report-to mlflow

The run is one joulestat job (the node's agent measures it; without one, this process
does, and says so), and each of the Trainer's logs carries ``joulestat/energy_j``,
``joulestat/co2e_g``, ``joulestat/cost_usd`` and the same per step, sample and token,
so MLflow, W&B or TensorBoard (``--report-to``) show them beside the loss. At the end the
job's report (JSON and HTML) is attached to the MLflow or W&B run.

The model is a small BERT with random weights, built from a config so that nothing is
downloaded; swap in ``AutoModelForSequenceClassification.from_pretrained(...)`` and your
dataset. Needs ``pip install 'joulestat[hf,mlflow]'`` (PyTorch's CPU build will do).
"""

from __future__ import annotations

import argparse

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

from joulestat.integrations.huggingface import JoulestatCallback


def random_dataset(samples: int, length: int, vocab: int) -> list[dict[str, torch.Tensor]]:
    """Sentences of random token ids, half of them padded, with random labels."""
    generator = torch.Generator().manual_seed(0)
    rows = []
    for i in range(samples):
        ids = torch.randint(1, vocab, (length,), generator=generator)
        mask = torch.ones(length, dtype=torch.long)
        if i % 2:
            ids[length // 2:], mask[length // 2:] = 0, 0
        rows.append({"input_ids": ids, "attention_mask": mask,
                     "labels": torch.tensor(i % 2)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=160)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--logging-steps", type=int, default=5)
    parser.add_argument("--report-to", nargs="*", default=["none"])
    parser.add_argument("--output-dir", default="trainer-output")
    parser.add_argument("--name", default="tiny-bert-finetune")
    args = parser.parse_args()

    config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=128,
                        max_position_embeddings=64, num_labels=2)
    model = BertForSequenceClassification(config)
    training_args = TrainingArguments(
        output_dir=args.output_dir, run_name=args.name, num_train_epochs=1,
        per_device_train_batch_size=args.batch_size, logging_steps=args.logging_steps,
        report_to=args.report_to, save_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=training_args,
                      train_dataset=random_dataset(args.samples, 32, config.vocab_size),
                      callbacks=[JoulestatCallback()])  # <- the line joulestat adds
    trainer.train()
    trainer.save_state()  # trainer_state.json: the logs, joulestat's figures in them


if __name__ == "__main__":
    main()
