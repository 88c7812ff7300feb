"""Train a small PyTorch model on the CPU and count its samples and steps in joulestat.

    joulestat run --name mlp-train --kind training -- python examples/train/train.py

The data is generated here (points around ten centres, one class each), so nothing is
downloaded and a run is the same everywhere: what changes between runs is the machine,
the thread count and the batch size, which is what a comparison of energy per sample
should isolate. Every optimizer step counts ``step`` once and ``sample`` by the batch
size through ``track()``: under ``joulestat run`` it joins the run's job (the wrapper
names it in ``JOULESTAT_JOB_ID``); run alone it makes a job of its own, through the
node's agent or, with none answering, measured in-process. The counts are tallied
locally and sent about once a second, so counting costs the loop nothing.

Stops after ``--epochs`` passes over ``--samples`` points, or at ``--max-seconds``.
"""

from __future__ import annotations

import argparse
import sys
import time

try:
    import torch
    from torch import nn
except ImportError:
    sys.exit("train.py needs PyTorch: pip install 'joulestat[examples]' (the CPU build: "
             "pip install torch==2.13.0)")

from joulestat import track

FEATURES, CLASSES = 64, 10


def make_data(samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Points scattered around ten random centres, the centre's index as the label."""
    generator = torch.Generator().manual_seed(seed)
    centres = torch.randn(CLASSES, FEATURES, generator=generator) * 3
    labels = torch.randint(0, CLASSES, (samples,), generator=generator)
    points = centres[labels] + torch.randn(samples, FEATURES, generator=generator)
    return points, labels


def make_model(hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(),
                         nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, CLASSES))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=50_000, help="dataset size [50000]")
    parser.add_argument("--epochs", type=int, default=3, help="passes over the data [3]")
    parser.add_argument("--batch-size", type=int, default=256, help="[256]")
    parser.add_argument("--hidden", type=int, default=1024, help="hidden width [1024]")
    parser.add_argument("--threads", type=int, default=0,
                        help="PyTorch intra-op threads [0: PyTorch's default]")
    parser.add_argument("--max-seconds", type=float, default=0,
                        help="stop after this long, whatever the epoch [0: no limit]")
    parser.add_argument("--name", default="mlp-train",
                        help="job name when run without `joulestat run` [mlp-train]")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    points, labels = make_data(args.samples, seed=0)
    model = make_model(args.hidden)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    started = time.monotonic()
    steps = seen = 0
    loss = torch.tensor(0.0)
    with track(args.name, kind="training",
               labels={"model": f"mlp-{args.hidden}", "batch_size": str(args.batch_size),
                       "threads": str(torch.get_num_threads())}) as job:
        for _epoch in range(args.epochs):
            order = torch.randperm(args.samples)
            for first in range(0, args.samples, args.batch_size):
                batch = order[first:first + args.batch_size]
                optimizer.zero_grad()
                loss = loss_fn(model(points[batch]), labels[batch])
                loss.backward()
                optimizer.step()
                steps, seen = steps + 1, seen + len(batch)
                job.count("step", 1)
                job.count("sample", len(batch))
                if args.max_seconds and time.monotonic() - started >= args.max_seconds:
                    break
            else:
                continue
            break
        with torch.no_grad():
            accuracy = (model(points).argmax(1) == labels).float().mean().item()
    elapsed = time.monotonic() - started
    print(f"trained {steps} steps, {seen} samples in {elapsed:.1f} s "
          f"({seen / elapsed:.0f} samples/s, {torch.get_num_threads()} threads); "
          f"last loss {loss.item():.3f}, accuracy {accuracy:.1%}; job {job.id}"
          f"{' (joined the run)' if job.joined else ''}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
