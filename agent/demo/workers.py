"""The demo's workloads, run as ``python -m joulestat.demo.workers ROLE BACKEND CPUS
SECONDS`` by ``joulestat demo`` (:mod:`joulestat.demo.training_serving`), each in a
process of its own so that a job is exactly one process pinned to its CPUs.

* ``train``: an MLP (64 -> 1024 -> 1024 -> 10) trained by data-parallel SGD on points
  around ten centres, one replica per CPU given, batches of 256, for SECONDS; one JSON
  line of cumulative ``sample`` and ``step`` counts (all replicas) about every 0.25 s
  on stdout.
* ``serve``: the same shape of MLP behind an HTTP/1.1 server on a loopback port:
  ``POST /infer`` with ``{"inputs": [[64 floats], ...]}`` answers the outputs, and
  ``GET /stats`` the inferences made so far; it stops when its stdin closes, so it
  never outlives the demo.

Both print one JSON line once ready (libraries imported, data built, a first step
taken), and ``train`` waits for a line on stdin before it starts: the demo registers
the job in between, so the job is the work and not the start-up. Every matrix product
runs on one thread (the demo sets ``OMP_NUM_THREADS`` and friends to 1, PyTorch gets
``set_num_threads(1)``): parallelism is the replicas'.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

FEATURES, CLASSES, BATCH, HIDDEN = 64, 10, 256, 1024


SYNC_EVERY = 8  # steps each replica takes between two averagings of the weights


def _numpy_replica(seed: int) -> tuple[Any, list[Any]]:
    """One replica: its own shard of generated data, a step function, its weights."""
    import numpy as np

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, 8192)
    points = ((np.random.default_rng(0).standard_normal((CLASSES, FEATURES)) * 3)[labels]
              + rng.standard_normal((8192, FEATURES))).astype(np.float32)
    init = np.random.default_rng(0)  # every replica starts from the same weights
    weights = [(init.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
               for a, b in ((FEATURES, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, CLASSES))]
    at = [0]

    def step() -> None:
        first = at[0] = (at[0] + BATCH) % (len(points) - BATCH)
        acts, y = [points[first:first + BATCH]], labels[first:first + BATCH]
        for k, weight in enumerate(weights):
            z = acts[-1] @ weight
            acts.append(np.maximum(z, 0.0) if k < len(weights) - 1 else z)
        p = np.exp(acts[-1] - acts[-1].max(axis=1, keepdims=True))
        grad = p / p.sum(axis=1, keepdims=True)
        grad[np.arange(BATCH), y] -= 1.0
        grad /= BATCH
        for k in reversed(range(len(weights))):
            update = acts[k].T @ grad
            if k:
                grad = (grad @ weights[k].T) * (acts[k] > 0)
            weights[k] -= 0.01 * update

    return step, weights


def _torch_replica(seed: int) -> tuple[Any, list[Any]]:
    import torch

    torch.manual_seed(0)  # same initial weights in every replica
    model = _torch_mlp(torch)
    generator = torch.Generator().manual_seed(seed)
    points = torch.randn(8192, FEATURES, generator=generator)
    labels = torch.randint(0, CLASSES, (8192,), generator=generator)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    at = [0]

    def step() -> None:
        first = at[0] = (at[0] + BATCH) % (len(points) - BATCH)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(points[first:first + BATCH]),
                                          labels[first:first + BATCH]).backward()
        optimizer.step()

    return step, list(model.parameters())


def _torch_mlp(torch: Any) -> Any:
    nn = torch.nn
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN),
                         nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


def _average(replicas: list[list[Any]]) -> None:
    """Every replica's weights set to their mean (numpy arrays or torch parameters)."""
    if len(replicas) < 2:
        return
    for tensors in zip(*replicas, strict=True):
        mean = sum(t.detach() if hasattr(t, "detach") else t for t in tensors) / len(tensors)
        for tensor in tensors:
            if hasattr(tensor, "detach"):
                tensor.detach().copy_(mean)
            else:
                tensor[...] = mean


def _train_loop(backend: str, cpus: int, seconds: float) -> int:
    """Data-parallel SGD: one replica per CPU, each on its own thread and data shard,
    weights averaged every SYNC_EVERY steps. Replicas rather than intra-op threads
    because a BLAS or OpenMP barrier per matrix product stalls whenever a vCPU is
    descheduled, which on a shared VM made two vCPUs slower than one."""
    if backend == "torch":
        import torch

        torch.set_num_threads(1)
    make = _torch_replica if backend == "torch" else _numpy_replica
    replicas = [make(seed) for seed in range(cpus)]
    for step, _params in replicas:
        step()  # first-call costs (allocations, kernel selection) before the job starts
    print(json.dumps({"backend": backend, "replicas": cpus}), flush=True)
    if not sys.stdin.readline():
        return 1  # the demo stopped before registering the job: nothing to train for
    steps = [0] * cpus
    deadline = time.monotonic() + seconds
    stop = [False]

    def sync() -> None:
        _average([params for _step, params in replicas])
        stop[0] = time.monotonic() >= deadline  # decided once, so all replicas agree

    barrier = threading.Barrier(cpus, action=sync)

    def run(index: int) -> None:
        step = replicas[index][0]
        while not stop[0]:
            for _ in range(SYNC_EVERY):
                step()
                steps[index] += 1
            barrier.wait()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(cpus)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        threads[0].join(0.25)
        try:
            print(json.dumps({"sample": sum(steps) * BATCH, "step": sum(steps)}), flush=True)
        except BrokenPipeError:  # the demo is gone: stop at once, quietly, not mid-thread
            os._exit(1)
    return 0


def _serve_loop(backend: str) -> int:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    if backend == "torch":
        import torch

        torch.set_num_threads(1)
        model = _torch_mlp(torch).eval()

        def forward(rows: list) -> list:
            with torch.inference_mode():
                return model(torch.tensor(rows)).tolist()
    else:
        import numpy as np

        rng = np.random.default_rng(1)
        weights = [(rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
                   for a, b in ((FEATURES, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, CLASSES))]

        def forward(rows: list) -> list:
            x = np.asarray(rows, dtype=np.float32)
            for k, weight in enumerate(weights):
                x = x @ weight if k == len(weights) - 1 else np.maximum(x @ weight, 0.0)
            return x.tolist()

    done, lock = [0], threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version, disable_nagle_algorithm = "HTTP/1.1", True

        def log_message(self, *_args: Any) -> None:
            pass

        def _answer(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802
            rows = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["inputs"]
            outputs = forward(rows)
            with lock:
                done[0] += len(rows)
            self._answer({"outputs": outputs})

        def do_GET(self) -> None:  # noqa: N802
            with lock:
                made = done[0]
            self._answer({"inferences": made})

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            if not isinstance(sys.exc_info()[1], ConnectionError):  # not a client leaving
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), Handler)
    forward([[0.0] * FEATURES])
    print(json.dumps({"port": server.server_address[1], "backend": backend}), flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), server.shutdown()), daemon=True).start()
    server.serve_forever(poll_interval=0.2)
    return 0


def main(argv: list[str]) -> int:
    role, backend, cpu_list, seconds = argv[:4]
    cpus = [int(c) for c in cpu_list.split(",")]
    os.sched_setaffinity(0, cpus)  # before numpy starts its BLAS threads
    if role == "train":
        return _train_loop(backend, len(cpus), float(seconds))
    return _serve_loop(backend)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
