"""``joulestat demo --llm``'s serving engine: a tiny GPT-2 generating on CPU, exposing
what vLLM exposes, so the demo measures a serving job the way a real one is measured.

Why a server of its own rather than vLLM: the demo must run on any laptop in two
minutes with no download, so the model is a GPT-2 of two layers and 64 dimensions with
random weights, built from a config here (its tokens are nonsense; their cost is real).
Why vLLM's metric names: the agent counts a serving job's tokens from the server's
Prometheus endpoint (``--serving-metrics``, :mod:`joulestat.host.serving_metrics`), and
the demo's jobs should go through exactly that path, not through ``count()``:

* counters ``vllm:generation_tokens_total``, ``vllm:prompt_tokens_total``,
  ``vllm:request_success_total`` (``finished_reason="length"``: every request generates
  its full number of tokens);
* histograms ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``,
  ``vllm:e2e_request_latency_seconds``, with vLLM's buckets (vllm/v1/metrics/loggers.py)
  and a few finer ones below them: the tiny model answers in milliseconds, under vLLM's
  first bounds, where every percentile would read as the first bucket's interpolation;
* gauges ``vllm:num_requests_running`` and ``vllm:num_requests_waiting`` (always 0: each
  stream runs its requests itself, nothing queues) and the per-request length histograms
  ``vllm:request_prompt_tokens`` and ``vllm:request_generation_tokens``: where a serving
  job's steady-state window is found and its energy per request read from;

each labelled ``model_name="demo-gpt2-tiny"``, in a registry of the server's own (never
the process's default one), served at ``/metrics`` on 127.0.0.1 on a free port.

Requests run in this process: :func:`run_load` keeps ``concurrency`` threads each
generating one request after another (a prompt of :data:`PROMPT_TOKENS` random token
ids, :data:`NEW_TOKENS` new tokens, greedy), so the job measured is this process, as a
serving job is the server's. ``model.generate`` with a streamer times each token as it
comes (time to first token, then between tokens), with the stable API of transformers
4.40 to 5. PyTorch runs each operation on one thread (``set_num_threads(1)``): the
concurrency is the requests'. torch and transformers are imported by :meth:`start`
(the ``hf`` extra; the CLI checks for it before anything is written).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

log = logging.getLogger(__name__)

__all__ = ["MODEL_NAME", "NEW_TOKENS", "PROMPT_TOKENS", "LoadResult", "RequestTiming",
           "ServedTotals", "TinyLLMServer", "run_load"]

MODEL_NAME = "demo-gpt2-tiny"
PROMPT_TOKENS, NEW_TOKENS = 32, 64  # within n_positions (128)
VOCAB_SIZE = 1000
SEED = 0
METRICS_PATH = "/metrics"
# vLLM's request_prompt_tokens / request_generation_tokens bounds are 1-2-5 steps up to
# the model's length (vllm/v1/metrics/loggers.py build_1_2_5_buckets).
LENGTH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)

# vLLM's bounds (vllm/v1/metrics/loggers.py, as tests/fixtures/serving/vllm.prom shows
# them) with finer ones prepended for a model that answers in milliseconds.
TTFT_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                  0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0,
                  2560.0)
ITL_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
                 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                 80.0)
E2E_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0,
                 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
                 7680.0)


class FinishedReason(StrEnum):
    """vLLM's ``finished_reason`` label: the demo's requests always run to their length."""

    LENGTH = "length"


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """One request as the server observed it, in seconds from its start."""

    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    itl_s: tuple[float, ...]
    e2e_s: float


@dataclass(frozen=True, slots=True)
class ServedTotals:
    """What the server has served since it started: its counters' values."""

    output_tokens: int = 0
    prompt_tokens: int = 0
    requests: int = 0


@dataclass(frozen=True, slots=True)
class LoadResult:
    """One load stage: the requests its threads completed and the tokens they generated."""

    concurrency: int
    requests: int
    output_tokens: int
    elapsed_s: float


class _Streamer:
    """Times the tokens ``generate`` streams: its first call is the prompt, each later
    one a new token (transformers' BaseStreamer protocol: ``put`` and ``end``)."""

    def __init__(self) -> None:
        self.calls_s: list[float] = []

    def put(self, _value: Any) -> None:
        self.calls_s.append(time.perf_counter())

    def end(self) -> None:
        pass


class _VllmMetrics:
    """vLLM's metric names in a registry of their own (prometheus_client adds ``_total``
    to the counters)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        model = ("model_name",)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", model,
            registry=self.registry).labels(MODEL_NAME)
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", model,
            registry=self.registry).labels(MODEL_NAME)
        self.request_success = Counter(
            "vllm:request_success", "Count of successfully processed requests.",
            (*model, "finished_reason"), registry=self.registry,
        ).labels(MODEL_NAME, FinishedReason.LENGTH.value)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            model, registry=self.registry, buckets=TTFT_BUCKETS_S).labels(MODEL_NAME)
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            model, registry=self.registry, buckets=ITL_BUCKETS_S).labels(MODEL_NAME)
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.", model, registry=self.registry,
            buckets=E2E_BUCKETS_S).labels(MODEL_NAME)
        self.running = Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.",
            model, registry=self.registry).labels(MODEL_NAME)
        self.waiting = Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
            model, registry=self.registry).labels(MODEL_NAME)
        self.waiting.set(0)
        self.prompt_lengths = Histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", model,
            registry=self.registry, buckets=LENGTH_BUCKETS).labels(MODEL_NAME)
        self.output_lengths = Histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.",
            model, registry=self.registry, buckets=LENGTH_BUCKETS).labels(MODEL_NAME)

    def observe(self, timing: RequestTiming) -> None:
        self.prompt_tokens.inc(timing.prompt_tokens)
        self.generation_tokens.inc(timing.output_tokens)
        self.ttft.observe(timing.ttft_s)
        for gap_s in timing.itl_s:
            self.itl.observe(gap_s)
        self.e2e.observe(timing.e2e_s)
        self.prompt_lengths.observe(timing.prompt_tokens)
        self.output_lengths.observe(timing.output_tokens)
        self.request_success.inc()


class TinyLLMServer:
    """A GPT-2 of random weights and its vLLM-named metrics endpoint.

    ``with TinyLLMServer() as server: server.generate(prompt)``; ``server.url`` is the
    endpoint to give ``--serving-metrics``. :meth:`wait_scrapes` lets the demo wait for
    the measurement to read the endpoint (its first read is a job's baseline).
    """

    def __init__(self, seed: int = SEED) -> None:
        self._seed = seed
        self._model: Any = None
        self._torch: Any = None
        self._metrics = _VllmMetrics()
        self._totals = ServedTotals()
        self._lock = threading.Lock()
        self._scraped = threading.Condition()
        self._scrapes = 0
        self._http: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- life ----------------------------------------------------------------------------

    def start(self) -> TinyLLMServer:
        """Build the model (seconds: importing transformers most of them), warm it up,
        then serve the metrics."""
        self._build()
        self.generate(self.prompt(random.Random(self._seed)))  # first-call costs, uncounted
        self._metrics = _VllmMetrics()  # the warm-up is no request anyone served
        self._totals = ServedTotals()
        self._serve_metrics()
        return self

    def __enter__(self) -> TinyLLMServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def _build(self) -> None:
        from joulestat.core.extras import Extra, require

        what = "joulestat demo --llm"
        torch = require("torch", Extra.HF, what)
        transformers = require("transformers", Extra.HF, what)
        torch.set_num_threads(1)  # one thread per operation: concurrency is the requests'
        torch.manual_seed(self._seed)
        # bos/eos inside the vocabulary (GPT-2's 50256 is not, and transformers says so).
        config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=VOCAB_SIZE,
                                         n_positions=128, bos_token_id=VOCAB_SIZE - 1,
                                         eos_token_id=VOCAB_SIZE - 1)
        self._model = transformers.GPT2LMHeadModel(config).eval()
        self._torch = torch

    def _serve_metrics(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?")[0] != METRICS_PATH:
                    self.send_error(404)
                    return
                body = generate_latest(server._metrics.registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                with server._scraped:
                    server._scrapes += 1
                    server._scraped.notify_all()

            def log_message(self, *_args: object) -> None:
                pass

        class Http(ThreadingHTTPServer):
            daemon_threads = True

        self._http = Http(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={
            "poll_interval": 0.2}, name="demo-llm-metrics", daemon=True)
        self._thread.start()

    # -- what the demo reads -------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._http is None:
            raise RuntimeError("the server is not started")
        return f"http://127.0.0.1:{self._http.server_address[1]}{METRICS_PATH}"

    @property
    def scrapes(self) -> int:
        """How many times the metrics were read so far."""
        with self._scraped:
            return self._scrapes

    def wait_scrapes(self, at_least: int, timeout_s: float) -> bool:
        """Whether the metrics were read ``at_least`` times in all within ``timeout_s``."""
        with self._scraped:
            return self._scraped.wait_for(lambda: self._scrapes >= at_least, timeout_s)

    def totals(self) -> ServedTotals:
        with self._lock:
            return self._totals

    # -- serving -------------------------------------------------------------------------

    @staticmethod
    def prompt(rng: random.Random, tokens: int = PROMPT_TOKENS) -> list[int]:
        """A prompt of random token ids (the model has no tokenizer: nothing to read)."""
        return [rng.randrange(VOCAB_SIZE) for _ in range(tokens)]

    def generate(self, prompt_ids: list[int], new_tokens: int = NEW_TOKENS) -> RequestTiming:
        """One request, greedy, exactly ``new_tokens`` long; observed in the metrics."""
        torch = self._torch
        if torch is None:
            raise RuntimeError("the server is not started")
        ids = torch.tensor([prompt_ids], dtype=torch.long)
        streamer = _Streamer()
        started_s = time.perf_counter()
        self._metrics.running.inc()
        try:
            with torch.inference_mode():
                self._model.generate(ids, attention_mask=torch.ones_like(ids),
                                     do_sample=False, max_new_tokens=new_tokens,
                                     min_new_tokens=new_tokens, pad_token_id=VOCAB_SIZE - 1,
                                     streamer=streamer)
        finally:
            self._metrics.running.dec()
        ended_s = time.perf_counter()
        tokens_s = streamer.calls_s[1:]  # the first call is the prompt
        timing = RequestTiming(
            prompt_tokens=len(prompt_ids), output_tokens=len(tokens_s),
            ttft_s=(tokens_s[0] if tokens_s else ended_s) - started_s,
            itl_s=tuple(b - a for a, b in zip(tokens_s, tokens_s[1:], strict=False)),
            e2e_s=ended_s - started_s)
        self._metrics.observe(timing)
        with self._lock:
            t = self._totals
            self._totals = ServedTotals(t.output_tokens + timing.output_tokens,
                                        t.prompt_tokens + timing.prompt_tokens, t.requests + 1)
        return timing


def run_load(server: TinyLLMServer, concurrency: int, seconds: float,
             progress: Callable[[float, str], None] | None = None) -> LoadResult:
    """``concurrency`` threads, each generating one request after another for
    ``seconds`` (a request started before the deadline runs to its end). ``progress``
    (fraction done, what to show) is called from this thread about ten times a second.
    Ctrl-C stops the threads at their next request and is raised again."""
    stop = threading.Event()
    done = {"requests": 0, "tokens": 0}
    lock = threading.Lock()
    failed: list[BaseException] = []

    def worker(index: int) -> None:
        rng = random.Random(SEED * 1000 + concurrency * 100 + index)
        try:
            while not stop.is_set():
                timing = server.generate(server.prompt(rng))
                with lock:
                    done["requests"] += 1
                    done["tokens"] += timing.output_tokens
        except Exception as exc:  # said by the caller, once, not per thread
            failed.append(exc)
            stop.set()

    started_s = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,), name=f"demo-llm-{i}", daemon=True)
               for i in range(concurrency)]
    for thread in threads:
        thread.start()
    try:
        while any(t.is_alive() for t in threads):
            elapsed_s = time.monotonic() - started_s
            if elapsed_s >= seconds:
                stop.set()
            if progress is not None:
                with lock:
                    tokens = done["tokens"]
                progress(elapsed_s / seconds, f"{concurrency} streams, {tokens:,} tokens")
            time.sleep(0.1)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    if failed:
        log.error("demo LLM server: a request failed: %r", failed[0])
        raise RuntimeError(f"the demo's model failed to generate: {failed[0]}") from failed[0]
    return LoadResult(concurrency, done["requests"], done["tokens"],
                      time.monotonic() - started_s)
