"""An OTLP metrics receiver for tests, built on ``opentelemetry-proto``: no collector binary
installs here, and Debian 12's Prometheus predates its OTLP receiver.

Two front ends share one store of decoded points: an OTLP/HTTP server (stdlib
``http.server``, ``POST /v1/metrics`` of protobuf) and an OTLP/gRPC server (grpcio, the
``MetricsService`` servicer ``opentelemetry-proto`` generates). Each request is decoded
from the wire into flat :class:`ReceivedPoint` rows a test asserts on, grouped by request
(:class:`Export`), with the headers or metadata it came with.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc


@dataclass(frozen=True)
class ReceivedPoint:
    name: str
    kind: str  # sum or gauge
    unit: str
    attributes: dict[str, str]
    value: float
    time_ns: int
    start_ns: int
    monotonic: bool = False
    cumulative: bool = False


@dataclass
class Export:
    """One request as decoded: its resource, its points, and what it was sent with."""

    resource: dict[str, str]
    points: list[ReceivedPoint]
    headers: dict[str, str]
    size_bytes: int

    def ticks(self) -> int:
        return int(self.one("joulestat.agent.ticks").value)

    def one(self, name: str, **attributes: str) -> ReceivedPoint:
        found = self.find(name, **attributes)
        assert len(found) == 1, (name, attributes, found)
        return found[0]

    def find(self, name: str, **attributes: str) -> list[ReceivedPoint]:
        return [p for p in self.points if p.name == name
                and all(p.attributes.get(k) == v for k, v in attributes.items())]


def _value(any_value: Any) -> str:
    kind = any_value.WhichOneof("value")
    return str(getattr(any_value, kind)) if kind else ""


def decode(request: Any, headers: dict[str, str], size_bytes: int) -> Export:
    """An ExportMetricsServiceRequest as flat points (one resource, as the agent sends)."""
    assert len(request.resource_metrics) == 1, request
    resource_metrics = request.resource_metrics[0]
    resource = {kv.key: _value(kv.value) for kv in resource_metrics.resource.attributes}
    points: list[ReceivedPoint] = []
    for scope in resource_metrics.scope_metrics:
        for metric in scope.metrics:
            kind = metric.WhichOneof("data")
            data = getattr(metric, kind)
            monotonic = kind == "sum" and data.is_monotonic
            cumulative = kind == "sum" and data.aggregation_temporality == 2
            for point in data.data_points:
                value_kind = point.WhichOneof("value")
                points.append(ReceivedPoint(
                    metric.name, kind, metric.unit,
                    {kv.key: _value(kv.value) for kv in point.attributes},
                    float(getattr(point, value_kind)), point.time_unix_nano,
                    point.start_time_unix_nano, monotonic, cumulative))
    return Export(resource, points, headers, size_bytes)


@dataclass
class Received:
    """Every export a receiver decoded, in arrival order; thread-safe."""

    exports: list[Export] = field(default_factory=list)
    requests: int = 0
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def add(self, export: Export) -> None:
        with self._cond:
            self.exports.append(export)
            self._cond.notify_all()

    def snapshot(self) -> list[Export]:
        with self._cond:
            return list(self.exports)

    def wait_for(self, predicate: Callable[[list[Export]], Any], timeout_s: float = 30
                 ) -> Any:
        """The first truthy ``predicate(exports)``, re-checked on each arrival; an
        AssertionError past the deadline."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                found = predicate(list(self.exports))
                if found:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no such export in {timeout_s} s; "
                                         f"{len(self.exports)} received")
                self._cond.wait(left)

    def by_tick(self) -> dict[int, Export]:
        return {export.ticks(): export for export in self.snapshot()}


class _Handler(BaseHTTPRequestHandler):
    received: Received

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/metrics" or \
                self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_error(404 if self.path != "/v1/metrics" else 415)
            return
        request = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
        self.received.add(decode(request, {k.lower(): v for k, v in self.headers.items()},
                                 len(body)))
        answer = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: a test reads the points, not an access log."""


@contextmanager
def http_receiver(port: int = 0, received: Received | None = None
                  ) -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP receiver on 127.0.0.1; yields (its base URL, what it received)."""
    received = received if received is not None else Received()
    handler = type("Handler", (_Handler,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class _Servicer(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, received: Received) -> None:
        self.received = received

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 (generated name)
        metadata = {k: v for k, v in context.invocation_metadata()}
        self.received.add(decode(request, metadata, request.ByteSize()))
        return metrics_service_pb2.ExportMetricsServiceResponse()


@contextmanager
def grpc_receiver(port: int = 0, received: Received | None = None
                  ) -> Iterator[tuple[str, Received]]:
    """An OTLP/gRPC receiver on 127.0.0.1; yields (its URL, what it received)."""
    import grpc

    received = received if received is not None else Received()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_Servicer(received), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        yield f"http://127.0.0.1:{bound}", received
    finally:
        server.stop(grace=None).wait(5)
