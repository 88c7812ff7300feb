"""An HTTP inference server around small models that counts every inference by model.

    python examples/inference/server.py --port 8000                      # one model, mlp
    python examples/inference/server.py --models mlp-small,mlp-large     # two models

Endpoints (JSON, HTTP/1.1 keep-alive, loopback by default):

* ``POST /v1/models/<model>/infer`` with ``{"inputs": [[64 floats], ...]}``: the model's
  outputs, one row per input row (each row is one inference);
* ``GET /v1/models``: the models served, with their layer sizes;
* ``GET /v1/stats``: this process's id, the job it runs in (if any) and, per model,
  inferences, busy seconds (wall time inside the model) and CPU seconds (the serving
  threads' CPU time inside the model);
* ``GET /healthz``.

Why the per-model figures: a process serving several models has one energy figure, and
what each model cost can only come from what each model kept the process busy with.
:class:`ModelMeter` is the one place that records it; every inference goes through
:meth:`ModelMeter.record` with its model, its count and its busy and CPU time.

Counting in joulestat: under ``joulestat run --kind inference -- python server.py`` (the
wrapper names the job in ``JOULESTAT_JOB_ID``) each inference is counted into that job
with its model and busy time, ``count("inference", n, model=..., busy_s=...)``: the job
counts ``inference`` as a whole, and its energy is split among the models by busy time
(``joulestat compare --by model``, the Load curve page grouped by model; docs/jobs.md).
Run standalone (no job named in the environment) it counts only in ``/v1/stats``: that
is how ``locustfile.py`` uses it, making one job per load stage on this process and
counting each stage's inferences and busy time per model from ``/v1/stats``.

The model runs on PyTorch when it is installed (``--backend torch``), else on numpy
(``--backend numpy``); ``auto`` picks torch when it imports.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

INPUTS = 64
OUTPUTS = 10
# name -> hidden width; two hidden layers each. Small enough for a laptop core, big
# enough that the model, not HTTP, is a visible part of the cost.
MODEL_SIZES = {"mlp": 512, "mlp-small": 256, "mlp-large": 1024}
MAX_BODY_BYTES = 1 << 20
MAX_ROWS = 256

Forward = Callable[[list[list[float]]], list[list[float]]]


def numpy_model(hidden: int, seed: int) -> Forward:
    import numpy as np

    rng = np.random.default_rng(seed)
    layers = [(rng.standard_normal((a, b)).astype(np.float32) / np.sqrt(a),
               np.zeros(b, np.float32)) for a, b in ((INPUTS, hidden), (hidden, hidden),
                                                      (hidden, OUTPUTS))]

    def forward(rows: list[list[float]]) -> list[list[float]]:
        x = np.asarray(rows, dtype=np.float32)
        for i, (weight, bias) in enumerate(layers):
            x = x @ weight + bias
            if i < len(layers) - 1:
                x = np.maximum(x, 0.0)
        return x.tolist()

    return forward


def torch_model(hidden: int, seed: int) -> Forward:
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(INPUTS, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, OUTPUTS)).eval()

    def forward(rows: list[list[float]]) -> list[list[float]]:
        with torch.inference_mode():
            return model(torch.tensor(rows, dtype=torch.float32)).tolist()

    return forward


def pick_backend(name: str, threads: int) -> str:
    """``auto``: torch when it imports, else numpy. Threads are capped here, before the
    first matmul, so a request uses ``threads`` cores however many requests run."""
    if name in ("auto", "torch"):
        try:
            import torch
        except ImportError:
            if name == "torch":
                raise SystemExit("--backend torch: PyTorch is not installed "
                                 "(pip install 'joulestat[examples]')") from None
        else:
            torch.set_num_threads(threads)
            return "torch"
    return "numpy"


@dataclass
class ModelStats:
    inferences: int = 0
    busy_s: float = 0.0
    cpu_s: float = 0.0


@dataclass
class ModelMeter:
    """Inferences, busy time and CPU time per model, and where they are reported.

    ``report(model, n, busy_s)`` counts into joulestat's job when the server runs inside
    one; CPU time stays here (``/v1/stats``): the agent measures the process's own.
    """

    models: tuple[str, ...]
    report: Callable[[str, int, float], None] | None = None
    stats: dict[str, ModelStats] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.stats = {m: ModelStats() for m in self.models}

    def record(self, model: str, n: int, busy_s: float, cpu_s: float) -> None:
        with self.lock:
            entry = self.stats[model]
            entry.inferences += n
            entry.busy_s += busy_s
            entry.cpu_s += cpu_s
        if self.report is not None:
            self.report(model, n, busy_s)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            models = {m: {"inferences": s.inferences, "busy_s": s.busy_s, "cpu_s": s.cpu_s}
                      for m, s in self.stats.items()}
        return {"inferences": sum(m["inferences"] for m in models.values()), "models": models}


def joulestat_counter() -> Callable[[str, int, float], None] | None:
    """``(model, n, busy_s)`` into the job the environment names (joulestat's
    module-level ``count``, per model), else None."""
    if not os.environ.get("JOULESTAT_JOB_ID"):
        return None
    try:
        from joulestat import count
    except ImportError:
        print("server: JOULESTAT_JOB_ID is set but joulestat is not importable; "
              "inferences are counted in /v1/stats only", file=sys.stderr)
        return None

    def report(model: str, n: int, busy_s: float) -> None:
        count("inference", n, model=model, busy_s=busy_s)

    return report


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], forwards: dict[str, Forward],
                 meter: ModelMeter, backend: str) -> None:
        super().__init__(address, Handler)
        self.forwards, self.meter, self.backend = forwards, meter, backend

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-request (a load test stopping) is not an error."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out as two writes; with Nagle on, the body waits for the
    # client's delayed ACK and every request costs 40 ms more than the model does.
    disable_nagle_algorithm = True
    server: Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: a load test makes thousands of requests a minute."""

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/healthz":
            self._send(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self._send(200, {"backend": self.server.backend, "models": {
                m: {"inputs": INPUTS, "hidden": MODEL_SIZES[m], "outputs": OUTPUTS}
                for m in self.server.forwards}})
        elif self.path == "/v1/stats":
            self._send(200, {"pid": os.getpid(), "backend": self.server.backend,
                             "job_id": os.environ.get("JOULESTAT_JOB_ID"),
                             **self.server.meter.snapshot()})
        else:
            self._send(404, {"error": f"no such path {self.path}"})

    def do_POST(self) -> None:  # noqa: N802
        match = re.fullmatch(r"/v1/models/([A-Za-z0-9._-]+)/infer", self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if not match or match.group(1) not in self.server.forwards:
            self.rfile.read(min(length, MAX_BODY_BYTES))
            self._send(404, {"error": f"no such model endpoint {self.path}"})
            return
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            self._send(413, {"error": f"body over {MAX_BODY_BYTES} bytes"})
            return
        try:
            rows = json.loads(self.rfile.read(length))["inputs"]
            if (not isinstance(rows, list) or not 0 < len(rows) <= MAX_ROWS
                    or any(not isinstance(r, list) or len(r) != INPUTS for r in rows)):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            self._send(400, {"error": f"expected {{\"inputs\": [[{INPUTS} numbers], ...]}} "
                             f"with 1..{MAX_ROWS} rows"})
            return
        model = match.group(1)
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        outputs = self.server.forwards[model](rows)
        busy_s, cpu_s = time.perf_counter() - wall0, time.thread_time() - cpu0
        self.server.meter.record(model, len(rows), busy_s, cpu_s)
        self._send(HTTPStatus.OK, {"model": model, "outputs": outputs})


def build(models: list[str], backend: str, threads: int, host: str, port: int) -> Server:
    backend = pick_backend(backend, threads)
    make = torch_model if backend == "torch" else numpy_model
    forwards = {m: make(MODEL_SIZES[m], seed=i) for i, m in enumerate(models)}
    return Server((host, port), forwards, ModelMeter(tuple(models), joulestat_counter()),
                  backend)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="default: loopback only")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free one")
    parser.add_argument("--models", default="mlp",
                        help=f"comma-separated, from {', '.join(MODEL_SIZES)} [mlp]")
    parser.add_argument("--backend", choices=("auto", "torch", "numpy"), default="auto")
    parser.add_argument("--threads", type=int, default=1,
                        help="compute threads per inference [1]")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODEL_SIZES]
    if not models or unknown:
        parser.error(f"--models: unknown {unknown or 'empty'}; known: {', '.join(MODEL_SIZES)}")
    server = build(models, args.backend, args.threads, args.host, args.port)
    host, port = server.server_address[:2]
    counting = "into job " + os.environ["JOULESTAT_JOB_ID"] if server.meter.report else \
        "in /v1/stats only (no job in the environment)"
    print(f"serving {', '.join(models)} ({server.backend}) on http://{host}:{port}, "
          f"pid {os.getpid()}; inferences counted {counting}", flush=True)
    # SIGTERM (what `joulestat run` forwards, and what `kill` sends) ends the loop like
    # Ctrl-C, so exit handlers run and counts still unsent reach the job.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
