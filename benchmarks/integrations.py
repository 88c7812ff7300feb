"""What the Trainer's JoulestatCallback costs a training run, and what one figures
request costs the agent. One table, side by side in one run.

    .venv/bin/python benchmarks/integrations.py [--steps 200] [--pairs 3]

A real agent (this machine's sensors, a temporary store, 1 s ticks) and the tiny BERT of
examples/huggingface/trainer.py, trained ``--steps`` steps of 8 samples in a fresh
process each time, with and without the callback, alternating (with, without, with,
...) so drift in the machine's load falls on both; logging every 10 steps, so the
callback asks the agent for figures at most once a second. The figure compared is the
Trainer's own ``train_runtime``. Then the figures endpoint itself: the time of
``GET /v1/jobs/{id}/figures`` on a running job, over ``--requests`` calls.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOULESTAT = str(Path(sys.executable).with_name("joulestat"))

TRAIN = r'''
import json, sys
sys.path.insert(0, {examples!r})
from trainer import random_dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
steps, with_callback, out = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3]
config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=128,
                    max_position_embeddings=64, num_labels=2)
callbacks = []
if with_callback:
    from joulestat.integrations.huggingface import JoulestatCallback
    callbacks = [JoulestatCallback(name="bench-callback")]
args = TrainingArguments(output_dir=out, num_train_epochs=1, per_device_train_batch_size=8,
                         logging_steps=10, report_to=[], save_strategy="no", use_cpu=True,
                         disable_tqdm=True)
trainer = Trainer(model=BertForSequenceClassification(config), args=args,
                  train_dataset=random_dataset(steps * 8, 32, config.vocab_size),
                  callbacks=callbacks)
result = trainer.train()
print(json.dumps({{"runtime_s": result.metrics["train_runtime"]}}))
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def train(steps: int, with_callback: bool, env: dict[str, str], out: Path) -> float:
    code = TRAIN.format(examples=str(ROOT / "examples" / "huggingface"))
    result = subprocess.run([sys.executable, "-c", code, str(steps),
                             "1" if with_callback else "0", str(out)],
                            env=env, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(result.stderr[-3000:])
    return float(json.loads(result.stdout.strip().splitlines()[-1])["runtime_s"])


def wait_up(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the agent exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("the agent did not start") from None
            time.sleep(0.2)


def figures_latency_ms(api: str, requests: int) -> list[float]:
    body = json.dumps({"name": "bench-figures", "kind": "training",
                       "pids": [os.getpid()]}).encode()
    request = urllib.request.Request(api + "/v1/jobs", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    job = json.loads(urllib.request.urlopen(request, timeout=10).read())
    time.sleep(3)  # a few ticks of energy
    took = []
    for _ in range(requests):
        start = time.perf_counter()
        urllib.request.urlopen(f"{api}/v1/jobs/{job['id']}/figures", timeout=10).read()
        took.append((time.perf_counter() - start) * 1000)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        metrics_port, api_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOULESTAT_")}
        env.update(JOULESTAT_CLOUD_METADATA="false", OMP_NUM_THREADS="1",
                   JOULESTAT_AGENT_URL=f"http://127.0.0.1:{api_port}")
        agent = subprocess.Popen(
            [JOULESTAT, "agent", "--db", f"sqlite:///{tmp}/bench.db", "--spool-dir",
             f"{tmp}/spool", "--metrics-port", str(metrics_port), "--api-port",
             str(api_port), "--nvml", "false"], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_up(f"http://127.0.0.1:{metrics_port}/metrics", agent)
            runs: dict[bool, list[float]] = {True: [], False: []}
            for i in range(args.pairs):
                for with_callback in (True, False) if i % 2 == 0 else (False, True):
                    runs[with_callback].append(
                        train(args.steps, with_callback, env, Path(tmp) / "out"))
            latency = figures_latency_ms(f"http://127.0.0.1:{api_port}", args.requests)
        finally:
            agent.terminate()
            agent.wait(timeout=60)
    with_s, without_s = statistics.median(runs[True]), statistics.median(runs[False])
    print(f"Trainer, {args.steps} steps of 8 samples, logging every 10 steps, "
          f"median of {args.pairs}:")
    print(f"  without JoulestatCallback  {without_s:8.2f} s  "
          f"({', '.join(f'{s:.2f}' for s in runs[False])})")
    print(f"  with JoulestatCallback     {with_s:8.2f} s  "
          f"({', '.join(f'{s:.2f}' for s in runs[True])})")
    print(f"  ratio with/without         {with_s / without_s:8.3f}")
    print(f"GET /v1/jobs/{{id}}/figures over {args.requests} calls: median "
          f"{statistics.median(latency):.1f} ms, max {max(latency):.1f} ms")


if __name__ == "__main__":
    main()
