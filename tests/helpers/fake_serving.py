"""A serving engine's Prometheus endpoint at known rates: what ``--serving-metrics``
reads, in vLLM's, TGI's or SGLang's names (as tests/fixtures/serving/*.prom show them,
from each engine's source).

Each model's counters grow linearly with wall time at the rates given (output and prompt
tokens, requests a second), so the truth over any window is rate x its length; every
request is observed once in the latency histograms at the model's fixed TTFT, ITL and
end-to-end latency. ``restart()`` zeroes the counters as a server restart does (the
truth goes on), ``down()``/``up()`` stop and resume answering; ``hits`` counts the
answers it gave.

:class:`RawServer` is an endpoint that misbehaves below HTTP, as the issue's adversarial
test found them (issue 47): :func:`dripping` sends its answer one byte every 1.5 s,
:func:`hanging` accepts and never answers, or any bytes at all (a status line that is
no HTTP).

:class:`ServingEngineProcess` is the same engine in a process of its own, as a real
server is: its answers do not wait on the test process (which polls the store, scrapes
the agent and collects its garbage meanwhile); a late answer is a late sample, and a
job's tokens before its first sample and after its last are not its own.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
LENGTH_BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


@dataclass(frozen=True)
class ModelRates:
    output_tokens_per_s: float = 200.0
    prompt_tokens_per_s: float = 50.0
    requests_per_s: float = 2.0
    ttft_s: float = 0.12
    itl_s: float = 0.02
    e2e_s: float = 2.0


@dataclass(frozen=True)
class LoadSchedule:
    """A load test's shape in wall time, as ML.ENERGY's benchmark drives a server: from
    ``start_s`` (Unix seconds) the load ramps up linearly for ``ramp_s`` while the batch
    fills, holds for ``steady_s`` with the batch full (``max_running``) and requests
    waiting, then drains for ``drain_s`` (the queue empty, the batch emptying). Each
    model's rates (:class:`ModelRates`) are its rates at full load; ``level(t)`` scales
    them. ``prompt_length`` and ``output_length``: every request's, in tokens (what the
    engine's length histograms observe)."""

    start_s: float
    ramp_s: float = 30.0
    steady_s: float = 60.0
    drain_s: float = 30.0
    max_running: float = 16.0
    waiting: float = 8.0
    prompt_length: float = 50.0
    output_length: float = 200.0

    @property
    def steady_bounds_s(self) -> tuple[float, float]:
        """The true steady-state window, Unix seconds."""
        opens = self.start_s + self.ramp_s
        return opens, opens + self.steady_s

    @property
    def end_s(self) -> float:
        return self.start_s + self.ramp_s + self.steady_s + self.drain_s

    def level(self, t_s: float) -> float:
        """Load at wall time ``t_s``, 0 to 1."""
        x = t_s - self.start_s
        if x <= 0 or x >= self.ramp_s + self.steady_s + self.drain_s:
            return 0.0
        if x < self.ramp_s:
            return x / self.ramp_s
        if x <= self.ramp_s + self.steady_s:
            return 1.0
        return 1.0 - (x - self.ramp_s - self.steady_s) / self.drain_s

    def full_load_s(self, t_s: float) -> float:
        """The integral of :meth:`level` up to ``t_s``: seconds of full load so far (a
        counter at full rate r reads r times this)."""
        x = min(max(t_s - self.start_s, 0.0), self.ramp_s + self.steady_s + self.drain_s)
        done = min(x, self.ramp_s) ** 2 / (2 * self.ramp_s)
        if x > self.ramp_s:
            done += min(x - self.ramp_s, self.steady_s)
        if x > self.ramp_s + self.steady_s:
            d = x - self.ramp_s - self.steady_s
            done += d - d * d / (2 * self.drain_s)
        return done

    def running(self, t_s: float) -> float:
        return round(self.max_running * self.level(t_s))

    def queued(self, t_s: float) -> float:
        start, end = self.steady_bounds_s
        return self.waiting if start <= t_s < end else 0.0


class FakeServingEngine:
    """``with FakeServingEngine("vllm", {"m": ModelRates()}) as engine: engine.url``."""

    def __init__(self, engine: str, models: dict[str, ModelRates],
                 controlled: bool = False, schedule: LoadSchedule | None = None) -> None:
        """``controlled``: ``POST /control/restart`` (``down``, ``up``) does what the
        method of that name does (:class:`ServingEngineProcess` calls them so).
        ``schedule``: the load follows it (counters, running and waiting gauges, length
        histograms) instead of constant rates."""
        self.engine, self.models, self.schedule = engine, models, schedule
        self._lock = threading.Lock()
        self._since = time.monotonic()  # counters count from here (a restart resets it)
        self._answering = True
        self.hits = 0
        engine_self = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if not engine_self._answering:
                    self.send_error(503, "down")
                    return
                body = engine_self.render().encode()
                with engine_self._lock:
                    engine_self.hits += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                verb = self.path.removeprefix("/control/")
                if not controlled or verb not in ("restart", "down", "up"):
                    self.send_error(404)
                    return
                getattr(engine_self, verb)()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/metrics"

    def __enter__(self) -> FakeServingEngine:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def restart(self) -> None:
        with self._lock:
            self._since = time.monotonic()

    def down(self) -> None:
        self._answering = False

    def up(self) -> None:
        self._answering = True

    # -- the exposition ----------------------------------------------------------------

    def render(self) -> str:
        with self._lock:
            elapsed = time.monotonic() - self._since
        if self.schedule is not None:  # counters count full-load seconds
            elapsed = self.schedule.full_load_s(time.time())
        lines: list[str] = []
        render = {"vllm": self._vllm, "sglang": self._sglang, "tgi": self._tgi}[self.engine]
        render(lines, elapsed)
        return "\n".join(lines) + "\n"

    @staticmethod
    def _histogram(lines: list[str], name: str, labels: str, value_s: float,
                   observations: float) -> None:
        sep = "," if labels else ""
        for bound in BUCKETS_S:
            count = observations if value_s <= bound else 0.0
            lines.append(f'{name}_bucket{{{labels}{sep}le="{bound}"}} {count}')
        lines.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {observations}')
        lines.append(f"{name}_sum{{{labels}}} {observations * value_s}" if labels
                     else f"{name}_sum {observations * value_s}")
        lines.append(f"{name}_count{{{labels}}} {observations}" if labels
                     else f"{name}_count {observations}")

    def _prefixed(self, lines: list[str], elapsed: float, prefix: str, requests: str,
                  extra: str) -> None:
        """vLLM and SGLang: the same shapes under their own prefixes."""
        for kind, name in (("counter", f"{prefix}:generation_tokens"),
                           ("counter", f"{prefix}:prompt_tokens"),
                           ("counter", f"{prefix}:{requests}")):
            lines.append(f"# TYPE {name} {kind}")
            for model, rates in self.models.items():
                value = {f"{prefix}:generation_tokens": rates.output_tokens_per_s,
                         f"{prefix}:prompt_tokens": rates.prompt_tokens_per_s,
                         }.get(name, rates.requests_per_s) * elapsed
                lines.append(f'{name}_total{{model_name="{model}"{extra}}} {value}')
        for name, attr in ((f"{prefix}:time_to_first_token_seconds", "ttft_s"),
                           (f"{prefix}:inter_token_latency_seconds", "itl_s"),
                           (f"{prefix}:e2e_request_latency_seconds", "e2e_s")):
            lines.append(f"# TYPE {name} histogram")
            for model, rates in self.models.items():
                self._histogram(lines, name, f'model_name="{model}"', getattr(rates, attr),
                                rates.requests_per_s * elapsed)

    def _vllm(self, lines: list[str], elapsed: float) -> None:
        self._prefixed(lines, elapsed, "vllm", "request_success", ',finished_reason="stop"')
        if self.schedule is None:
            return
        now = time.time()
        for name, value in (("vllm:num_requests_running", self.schedule.running(now)),
                            ("vllm:num_requests_waiting", self.schedule.queued(now))):
            lines.append(f"# TYPE {name} gauge")
            for model in self.models:
                lines.append(f'{name}{{model_name="{model}"}} {value}')
        for name, length in (("vllm:request_prompt_tokens", self.schedule.prompt_length),
                             ("vllm:request_generation_tokens", self.schedule.output_length)):
            lines.append(f"# TYPE {name} histogram")
            for model, rates in self.models.items():
                requests = rates.requests_per_s * elapsed
                for bound in LENGTH_BUCKETS:
                    count = requests if length <= bound else 0.0
                    lines.append(f'{name}_bucket{{model_name="{model}",le="{bound}"}} {count}')
                lines.append(f'{name}_bucket{{model_name="{model}",le="+Inf"}} {requests}')
                lines.append(f'{name}_sum{{model_name="{model}"}} {requests * length}')
                lines.append(f'{name}_count{{model_name="{model}"}} {requests}')

    def _sglang(self, lines: list[str], elapsed: float) -> None:
        self._prefixed(lines, elapsed, "sglang", "num_requests", "")

    def _tgi(self, lines: list[str], elapsed: float) -> None:
        (rates,) = self.models.values()  # TGI serves one model
        requests = rates.requests_per_s * elapsed
        lines += ["# TYPE tgi_request_success counter", f"tgi_request_success {requests}"]
        for name, per_request in (
                ("tgi_request_generated_tokens", rates.output_tokens_per_s / rates.requests_per_s),
                ("tgi_request_input_length", rates.prompt_tokens_per_s / rates.requests_per_s)):
            lines.append(f"# TYPE {name} histogram")
            lines.append(f'{name}_bucket{{le="+Inf"}} {requests}')
            lines.append(f"{name}_sum {requests * per_request}")
            lines.append(f"{name}_count {requests}")
        for name, value in (("tgi_request_mean_time_per_token_duration", rates.itl_s),
                            ("tgi_request_duration", rates.e2e_s)):
            lines.append(f"# TYPE {name} histogram")
            self._histogram(lines, name, "", value, requests)


Answer = Callable[[socket.socket, threading.Event], None]


class RawServer:
    """``with RawServer(dripping()) as server: server.url``: a loopback TCP server that
    hands each connection to ``answer(connection, stopping)`` on a thread of its own and
    counts them (``connections``); ``stopping`` is set when the server closes."""

    def __init__(self, answer: Answer, path: str = "/metrics") -> None:
        self._answer = answer
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._listener.settimeout(0.1)  # so the accept loop sees the server closing
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}{path}"
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self.connections = 0
        self._open: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._thread.join(10)
        with self._lock:
            for connection in self._open:
                connection.close()
        for thread in self._threads:
            thread.join(10)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._open.append(connection)
            thread = threading.Thread(target=self._serve, args=(connection,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, connection: socket.socket) -> None:
        try:
            self._answer(connection, self._stopping)
        except OSError:
            pass  # the client went away: what a misbehaving server outlives


def _read_request(connection: socket.socket) -> None:
    connection.settimeout(10)
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        if not chunk:
            return
        received += chunk


def dripping(every_s: float = 1.5, head_first: bool = False,
             page: bytes = b"vllm:generation_tokens_total 1\n" * 64) -> Answer:
    """An answer sent one byte every ``every_s`` (``head_first``: the status line and
    headers at once, then the body so), until the client hangs up: a socket timeout
    longer than ``every_s`` never fires on it."""
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
            b"Content-Length: %d\r\n\r\n" % len(page))

    def answer(connection: socket.socket, stopping: threading.Event) -> None:
        _read_request(connection)
        rest = head + page
        if head_first:
            connection.sendall(head)
            rest = page
        for index in range(len(rest)):
            if stopping.wait(every_s):
                return
            connection.sendall(rest[index:index + 1])

    return answer


def hanging(connection: socket.socket, stopping: threading.Event) -> None:
    """Accepts, reads nothing, answers nothing, until the server closes."""
    stopping.wait()


def sending(data: bytes) -> Answer:
    """``data`` as the whole answer, whatever was asked, then the connection closed."""

    def answer(connection: socket.socket, _stopping: threading.Event) -> None:
        _read_request(connection)
        connection.sendall(data)
        connection.close()

    return answer


class ServingEngineProcess:
    """``with ServingEngineProcess("vllm", {"m": ModelRates()}) as engine: engine.url``:
    :class:`FakeServingEngine` served by a process of its own, with the same
    ``restart()``, ``down()`` and ``up()``."""

    def __init__(self, engine: str, models: dict[str, ModelRates],
                 schedule: LoadSchedule | None = None) -> None:
        self.engine, self.models, self.schedule = engine, models, schedule
        self._proc: subprocess.Popen[str] | None = None
        self._port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}/metrics"

    def __enter__(self) -> ServingEngineProcess:
        spec = json.dumps({"models": {model: asdict(rates)
                                      for model, rates in self.models.items()},
                           "schedule": asdict(self.schedule) if self.schedule else None})
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.fake_serving", self.engine, spec],
            cwd=Path(__file__).resolve().parents[2], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        assert line.startswith("port "), line
        self._port = int(line.split()[1])
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.close()  # its cue to stop
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def _control(self, verb: str) -> None:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self._port}/control/{verb}", data=b"", method="POST")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=10) as answer:
            assert answer.status == 204

    def restart(self) -> None:
        self._control("restart")

    def down(self) -> None:
        self._control("down")

    def up(self) -> None:
        self._control("up")


def _serve_until_stdin_closes(engine: str, spec: str) -> None:
    given = json.loads(spec)
    models = {model: ModelRates(**rates) for model, rates in given["models"].items()}
    schedule = LoadSchedule(**given["schedule"]) if given["schedule"] else None
    with FakeServingEngine(engine, models, controlled=True, schedule=schedule) as served:
        print(f"port {served.url.split(':')[2].split('/')[0]}", flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    _serve_until_stdin_closes(sys.argv[1], sys.argv[2])
