"""OTLP export: the agent's node and job metrics pushed to an OpenTelemetry collector.

A pipeline sink (:mod:`joulestat.pipeline.sink`) beside the Prometheus endpoint, for sites
whose metrics go through OpenTelemetry rather than a scrape. It sends what ``/metrics``
shows, from the same state: the node's figures are :meth:`NodeMetrics.values
<joulestat.outputs.prometheus.NodeMetrics.values>`, the jobs' are the accounting's
snapshot through the same retention and cap (:func:`joulestat.outputs.prometheus.
select_jobs`). The numbers are the same floats, not recomputed ones.

Threads. ``on_tick`` runs on the tick thread and only copies: once ``--otlp-interval``
has passed it takes the node's figures and the jobs' (a copy under the registry's lock,
as a scrape takes) and leaves them in a one-place mailbox. The exporter's own daemon
thread encodes them and sends them, so a slow or dead collector never delays a tick.
When the thread is still busy with an older copy the newer one replaces it: every sum is
cumulative, so the newest export carries everything the dropped one did.

Time. Every point is stamped with the end of the tick it was copied after: an export is
the state of the node at that instant, as ``/metrics`` is between two ticks. Sums are
cumulative from a fixed start: the exporter's creation for the node's series (they count
since the agent started, as the Prometheus counters do), the job's start for a job's.
``joulestat.agent.ticks`` is ``joulestat_agent_ticks_total`` after that tick, so an export
can be paired with a scrape of the same tick.

Names. Where the OpenTelemetry semantic conventions name a figure, it has that name:
``hw.energy`` and ``hw.power`` for a component's energy and power, ``hw.host.energy`` and
``hw.host.power`` for RAPL psys (``platform``, which overlaps cpu and dram: the
convention keeps whole-host figures apart so that nothing sums them with the parts).
Where they do not (a job's energy, work units, the agent's ticks) the names are
joulestat's own, under ``joulestat.``. docs/opentelemetry.md lists them all.

An endpoint that does not answer is logged once per outage (a warning, then an info line
when it answers again); nothing is retried, since the next export carries the totals.

``opentelemetry-proto`` (and ``grpcio`` for gRPC) are the ``otel`` extra, imported only
when an endpoint is set: :func:`check_settings` says at start which extra to install.
No OpenTelemetry SDK is used: the request is built from the protobuf messages directly.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from joulestat.core.errors import ConfigError
from joulestat.core.otlp_options import OtlpProtocol, parse_endpoint, parse_headers
from joulestat.core.redact import redact_text
from joulestat.core.socket_deadline import SocketDeadline
from joulestat.core.tick import Component

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.attribution.accounting import LiveJobFigures, Snapshot
    from joulestat.core.records import NodeInfo
    from joulestat.pipeline.sink import TickRecord

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (component, device, source), as joulestat.outputs.prometheus
Attributes = tuple[tuple[str, str], ...]

SERVICE_NAME = "joulestat-agent"
SCOPE_NAME = "joulestat"
HTTP_PATH = "/v1/metrics"  # the OTLP/HTTP metrics path, appended to a URL with none
GRPC_METHOD = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
GRPC_DEFAULT_PORT = 4317
# The OpenTelemetry exporters' default (OTEL_EXPORTER_OTLP_TIMEOUT, 10 s): one export
# never takes longer, and a stop waits no longer than this for the last one.
EXPORT_TIMEOUT_S = 10.0
# How long the tick thread waits for the job registry's lock (held by the job API for
# microseconds) before leaving this export to the next tick.
JOB_LOCK_WAIT_S = 0.05


class Instrument(StrEnum):
    """How a metric is encoded: a cumulative monotonic Sum, or a Gauge."""

    COUNTER = "counter"
    GAUGE = "gauge"


@dataclass(frozen=True, slots=True)
class OtlpMetric:
    """One exported metric: its name, instrument, UCUM unit and description."""

    name: str
    instrument: Instrument
    unit: str
    description: str
    convention: bool  # named by the OpenTelemetry semantic conventions (else joulestat's)


HW_ENERGY = OtlpMetric("hw.energy", Instrument.COUNTER, "J",
                       "Energy consumed by the component", True)
HW_POWER = OtlpMetric("hw.power", Instrument.GAUGE, "W",
                      "Instantaneous power consumed by the component (the average over the "
                      "agent's last tick)", True)
HW_HOST_ENERGY = OtlpMetric("hw.host.energy", Instrument.COUNTER, "J",
                            "Energy of the whole platform as RAPL psys reports it; overlaps "
                            "the cpu and memory series, never sum them", True)
HW_HOST_POWER = OtlpMetric("hw.host.power", Instrument.GAUGE, "W",
                           "Power of the whole platform as RAPL psys reports it (the average "
                           "over the agent's last tick)", True)
JOB_ENERGY = OtlpMetric("joulestat.job.energy", Instrument.COUNTER, "J",
                        "Energy attributed to a job on this node (dynamic plus its idle share "
                        "under --idle-policy share)", False)
JOB_WORK_UNITS = OtlpMetric("joulestat.job.work_units", Instrument.COUNTER, "{unit}",
                            "Work units a job reported (inference, sample, step, token, ...)",
                            False)
AGENT_TICKS = OtlpMetric("joulestat.agent.ticks", Instrument.COUNTER, "{tick}",
                         "Ticks the agent has completed (joulestat_agent_ticks_total): pairs "
                         "an export with a scrape of the same tick", False)
METRICS: tuple[OtlpMetric, ...] = (HW_ENERGY, HW_POWER, HW_HOST_ENERGY, HW_HOST_POWER,
                                   JOB_ENERGY, JOB_WORK_UNITS, AGENT_TICKS)

# joulestat's components as the convention's hw.type values. hw.type's list is open ("a
# custom value MAY be used" where none applies): an accelerator that is no GPU (AWS
# Neuron, Intel Gaudi) is "accelerator", and "other" stays "other".
HW_TYPES: Mapping[str, str] = {
    Component.CPU: "cpu",
    Component.DRAM: "memory",
    Component.ACCELERATOR: "gpu",
    Component.NET: "network",
    Component.OTHER: "other",
}
NON_GPU_ACCELERATORS = ("neuron", "gaudi")  # device-name prefixes (devices/neuron, gaudi)


def hw_type(component: str, device: str) -> str:
    """The ``hw.type`` of a joulestat (component, device)."""
    if component == Component.ACCELERATOR and device.startswith(NON_GPU_ACCELERATORS):
        return "accelerator"
    return HW_TYPES.get(component, str(component))


def node_series(key: Key) -> tuple[OtlpMetric, OtlpMetric, Attributes]:
    """The energy and power metrics of one node series, and its attributes.

    ``hw.id`` is ``<component>/<device>``: unique on the host, where a device name alone
    is not (RAPL names a package's cpu and dram domains after the package). The joulestat
    component and source go along, so that whether a figure is measured (``rapl``,
    ``nvml_energy``) or estimated (``model:…``, ``fill:…``) survives the export.
    """
    component, device, source = key
    common = (("hw.id", f"{component}/{device}"), ("hw.name", device))
    own = (("joulestat.component", str(component)), ("joulestat.source", source))
    if component == Component.PLATFORM:
        return HW_HOST_ENERGY, HW_HOST_POWER, (*common, *own)
    return HW_ENERGY, HW_POWER, (*common, ("hw.type", hw_type(component, device)), *own)


def job_attributes(job: LiveJobFigures) -> Attributes:
    return (("job.id", job.id), ("job.name", job.name), ("job.kind", job.kind))


@dataclass(frozen=True, slots=True)
class Point:
    """One data point before encoding: what the receiver decodes it back to."""

    metric: OtlpMetric
    attributes: Attributes
    value: float | int
    start_s: float | None  # a Sum's start; None for a gauge


@dataclass(frozen=True, slots=True)
class ExportState:
    """What one export sends: the figures after one tick, copied on the tick thread."""

    t1_s: float  # the end of the tick: every point's time
    ticks: int
    energy_j: Mapping[Key, float]
    power_w: Mapping[Key, float]
    jobs: tuple[LiveJobFigures, ...]


def points(state: ExportState, start_s: float) -> list[Point]:
    """Every point of ``state``; node sums start at ``start_s``, a job's at its start."""
    found: list[Point] = []
    for key, joules in sorted(state.energy_j.items()):
        energy, _power, attributes = node_series(key)
        found.append(Point(energy, attributes, joules, start_s))
    for key, watts in sorted(state.power_w.items()):
        _energy, power, attributes = node_series(key)
        found.append(Point(power, attributes, watts, None))
    for job in state.jobs:
        labels = job_attributes(job)
        for component, joules in job.energy_j.items():
            found.append(Point(JOB_ENERGY, (*labels, ("joulestat.component", str(component))),
                               joules, job.started_s))
        for unit, count in sorted(job.units.items()):
            found.append(Point(JOB_WORK_UNITS, (*labels, ("joulestat.work_unit", unit)),
                               count, job.started_s))
    found.append(Point(AGENT_TICKS, (), state.ticks, start_s))
    return found


def resource_attributes(node: NodeInfo) -> Attributes:
    """The resource every point belongs to: the agent as a service on its host."""
    found = [("service.name", SERVICE_NAME), ("service.version", node.agent_version),
             ("host.name", node.node)]
    if node.instance_type and node.instance_type != "local":
        found.append(("host.type", node.instance_type))
    if node.region:
        found.append(("cloud.region", node.region))
    return tuple(found)


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def encode(state: ExportState, resource: Attributes, start_s: float, version: str) -> Any:
    """An ``ExportMetricsServiceRequest`` of ``state`` (protobuf messages built by hand)."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import (
        AnyValue,
        InstrumentationScope,
        KeyValue,
    )
    from opentelemetry.proto.metrics.v1 import metrics_pb2
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource

    def key_values(attributes: Iterable[tuple[str, str]]) -> list[Any]:
        return [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attributes]

    request = ExportMetricsServiceRequest()
    resource_metrics = request.resource_metrics.add()
    resource_metrics.resource.CopyFrom(Resource(attributes=key_values(resource)))
    scope_metrics = resource_metrics.scope_metrics.add()
    scope_metrics.scope.CopyFrom(InstrumentationScope(name=SCOPE_NAME, version=version))
    time_ns = _ns(state.t1_s)
    by_name: dict[str, Any] = {}
    for point in points(state, start_s):
        spec = point.metric
        metric = by_name.get(spec.name)
        if metric is None:
            metric = scope_metrics.metrics.add(name=spec.name, unit=spec.unit,
                                               description=spec.description)
            if spec.instrument is Instrument.COUNTER:
                metric.sum.aggregation_temporality = \
                    metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
                metric.sum.is_monotonic = True
            by_name[spec.name] = metric
        data = metric.sum if spec.instrument is Instrument.COUNTER else metric.gauge
        number = data.data_points.add(time_unix_nano=time_ns,
                                      attributes=key_values(point.attributes))
        if point.start_s is not None:
            number.start_time_unix_nano = _ns(point.start_s)
        if isinstance(point.value, int):
            number.as_int = point.value
        else:
            number.as_double = point.value
    return request


# -- settings ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class OtlpSettings:
    """The OTLP export, from the options of the same names (``otlp_endpoint`` None: no
    export), and the job window it shares with ``/metrics`` (``--job-retention``,
    ``--max-job-series``), so both export the same jobs."""

    otlp_endpoint: str | None
    otlp_protocol: OtlpProtocol
    otlp_headers: tuple[tuple[str, str], ...]
    otlp_interval_s: float
    job_retention_s: float
    max_job_series: int


def check_settings(settings: OtlpSettings) -> None:
    """At start, before anything runs: the extra is installed and the endpoint suits the
    protocol; else a :class:`ConfigError` naming the flag (or the extra to install)."""
    from joulestat.core.extras import Extra, require

    if settings.otlp_endpoint is None:
        return
    what = "--otlp-endpoint (OTLP export)"
    require("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2", Extra.OTEL, what)
    if settings.otlp_protocol is OtlpProtocol.GRPC:
        require("grpc", Extra.OTEL, f"{what} over --otlp-protocol grpc")
        path = urllib.parse.urlsplit(settings.otlp_endpoint).path
        if path not in ("", "/"):
            raise ConfigError(f"--otlp-endpoint {redact_text(settings.otlp_endpoint)}: a "
                              "gRPC endpoint is host and port, with no path (the path is "
                              "OTLP/HTTP's; --otlp-protocol grpc is set)")


def http_url(endpoint: str) -> str:
    """Where OTLP/HTTP posts: the endpoint as given when it has a path, else
    ``<endpoint>/v1/metrics`` (OTEL_EXPORTER_OTLP_METRICS_ENDPOINT vs _ENDPOINT)."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.path in ("", "/"):
        return urllib.parse.urlunsplit(parts._replace(path=HTTP_PATH))
    return endpoint


def grpc_target(endpoint: str) -> tuple[str, bool]:
    """(``host:port``, TLS?) for grpcio: https:// is TLS with the system's roots; a URL
    with no port means 4317, OTLP/gRPC's."""
    parts = urllib.parse.urlsplit(endpoint)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{parts.port or GRPC_DEFAULT_PORT}", parts.scheme == "https"


# -- transports -------------------------------------------------------------------------

class ExportError(Exception):
    """An export that did not arrive; the message says why, without any header."""


class Transport(Protocol):
    def send(self, request: Any) -> int:
        """Send one ExportMetricsServiceRequest; the bytes sent, or ExportError."""
        ...

    def close(self) -> None: ...


class HttpTransport:
    """OTLP/HTTP: one protobuf POST per export (stdlib; a connection per export, which
    at one export every ten seconds costs nothing worth a pool)."""

    def __init__(self, endpoint: str, headers: Iterable[tuple[str, str]],
                 timeout_s: float = EXPORT_TIMEOUT_S) -> None:
        self.url = http_url(endpoint)
        self.headers = {**dict(headers), "Content-Type": "application/x-protobuf",
                        "User-Agent": f"{SERVICE_NAME}"}
        self.timeout_s = timeout_s

    def send(self, request: Any) -> int:
        """POST within :attr:`timeout_s` in all (connect, headers and body), however
        slowly the collector answers (:class:`~joulestat.core.socket_deadline.SocketDeadline`:
        a per-read timeout let a dripping collector hold one export 85 s, issue 47)."""
        import http.client
        import socket
        import urllib.parse

        body = request.SerializeToString()
        parts = urllib.parse.urlsplit(self.url)
        https = parts.scheme == "https"
        kind = http.client.HTTPSConnection if https else http.client.HTTPConnection
        deadline = SocketDeadline(self.timeout_s)
        connection = kind(parts.hostname or "", parts.port or (443 if https else 80),
                          timeout=self.timeout_s)
        connection._create_connection = (  # type: ignore[attr-defined]
            lambda address, _timeout, source: deadline.watch(socket.create_connection(
                address, max(deadline.left_s(), 0.001), source)))
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            connection.request("POST", path, body=body, headers=self.headers)
            response = connection.getresponse()
            status, reason = response.status, response.reason
            answer = response.read()
        except (TimeoutError, http.client.HTTPException, OSError) as exc:
            if deadline.expired or isinstance(exc, TimeoutError):
                raise ExportError(deadline.message(self.url)) from None
            raise ExportError(str(exc) or type(exc).__name__) from None
        finally:
            connection.close()
            deadline.cancel()
        if deadline.expired:  # the deadline cut the answer short
            raise ExportError(deadline.message(self.url))
        if not 200 <= status < 300:
            raise ExportError(f"HTTP {status} {reason}")
        _log_partial_success(answer)
        return len(body)

    def close(self) -> None:
        """Nothing held between exports."""


class GrpcTransport:
    """OTLP/gRPC: the unary ``MetricsService/Export`` call over one channel.

    The channel reconnects by itself; its backoff is capped near the export interval, so
    a collector that comes back gets the next export, not one two minutes later (grpc's
    default cap is 120 s)."""

    def __init__(self, endpoint: str, headers: Iterable[tuple[str, str]],
                 interval_s: float, timeout_s: float = EXPORT_TIMEOUT_S) -> None:
        import grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc

        self._grpc = grpc
        target, tls = grpc_target(endpoint)
        backoff_ms = int(max(1.0, min(interval_s, 30.0)) * 1000)
        options = [("grpc.initial_reconnect_backoff_ms", min(1000, backoff_ms)),
                   ("grpc.min_reconnect_backoff_ms", min(1000, backoff_ms)),
                   ("grpc.max_reconnect_backoff_ms", backoff_ms)]
        self.channel = (grpc.secure_channel(target, grpc.ssl_channel_credentials(), options)
                        if tls else grpc.insecure_channel(target, options))
        self.stub = metrics_service_pb2_grpc.MetricsServiceStub(self.channel)
        # gRPC metadata keys are lowercase.
        self.metadata = tuple((k.lower(), v) for k, v in headers)
        self.timeout_s = timeout_s

    def send(self, request: Any) -> int:
        try:
            answer = self.stub.Export(request, timeout=self.timeout_s,
                                      metadata=self.metadata or None)
        except self._grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            detail = exc.details() if hasattr(exc, "details") else str(exc)
            raise ExportError(f"gRPC {getattr(code, 'name', code)}: {detail}") from None
        _log_partial_success(answer.SerializeToString())
        return request.ByteSize()

    def close(self) -> None:
        self.channel.close()


def _log_partial_success(answer: bytes) -> None:
    """A collector that took the request but rejected points says so in the answer."""
    if not answer:
        return
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceResponse,
    )

    try:
        response = ExportMetricsServiceResponse.FromString(answer)
    except Exception:  # an answer we cannot read is the collector's business
        return
    partial = response.partial_success
    if partial.rejected_data_points or partial.error_message:
        log.warning("the OTLP collector rejected %d point(s): %s",
                    partial.rejected_data_points, partial.error_message or "no reason given")


def make_transport(settings: OtlpSettings) -> Transport:
    assert settings.otlp_endpoint is not None
    if settings.otlp_protocol is OtlpProtocol.GRPC:
        return GrpcTransport(settings.otlp_endpoint, settings.otlp_headers,
                             settings.otlp_interval_s)
    return HttpTransport(settings.otlp_endpoint, settings.otlp_headers)


# -- the sink ---------------------------------------------------------------------------

class OtlpExporter:
    """The pipeline sink: copies on the tick thread, sends from its own.

    ``node_values``: the node's (energy_j, power_w) as ``/metrics`` shows them
    (:meth:`NodeMetrics.values`), read after that sink has seen the tick (the assembly
    puts this sink after it). ``jobs``: the accounting's snapshot (None: no jobs).
    """

    stores_ticks = False

    def __init__(self, settings: OtlpSettings, node: NodeInfo,
                 node_values: Callable[[], tuple[Mapping[Key, float], Mapping[Key, float]]],
                 jobs: Callable[[float], Snapshot | None] | None = None,
                 transport: Transport | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 start_s: float | None = None) -> None:
        assert settings.otlp_endpoint is not None
        self.settings = settings
        self.endpoint = redact_text(settings.otlp_endpoint)
        self.resource = resource_attributes(node)
        self.version = node.agent_version
        self.node_values = node_values
        self.jobs = jobs
        self.transport = transport if transport is not None else make_transport(settings)
        self.start_s = time.time() if start_s is None else start_s
        self._clock = clock
        self._due_s = clock()  # the first tick exports: a collector sees the agent at once
        self._ticks = 0
        self._last_t1_s: float | None = None
        self._copied_tick = 0  # the tick of the newest copy
        self._cond = threading.Condition()
        self._pending: ExportState | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._failing = False
        # What the exports cost and how they went (for tests, benchmarks and debugging).
        self.exported = 0
        self.failures = 0
        self.last_bytes = 0
        self.last_export_s = 0.0
        self.busy_skips = 0

    # -- the tick thread --

    def on_tick(self, record: TickRecord) -> None:
        self._ticks += 1
        self._last_t1_s = record.tick.t1_s
        now = self._clock()
        if now < self._due_s:
            return
        if self._copy():
            # The next slot on the schedule; after a stall, one export, not a burst.
            interval_s = self.settings.otlp_interval_s
            self._due_s += interval_s
            if self._due_s <= now:
                self._due_s = now + interval_s

    def _copy(self) -> bool:
        """Copy the figures after the current tick into the mailbox (False: the job
        registry was busy; the next tick tries again)."""
        assert self._last_t1_s is not None
        selected: tuple[LiveJobFigures, ...] = ()
        if self.jobs is not None:
            snapshot = self.jobs(JOB_LOCK_WAIT_S)
            if snapshot is None:
                self.busy_skips += 1
                return False
            from joulestat.outputs.prometheus import select_jobs

            chosen, _over = select_jobs(snapshot.jobs.values(), self._last_t1_s,
                                        self.settings.job_retention_s,
                                        self.settings.max_job_series)
            selected = tuple(chosen)
        energy_j, power_w = self.node_values()
        state = ExportState(self._last_t1_s, self._ticks, energy_j, power_w, selected)
        self._copied_tick = self._ticks
        with self._cond:
            self._pending = state
            self._cond.notify()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="joulestat-otlp",
                                            daemon=True)
            self._thread.start()
        return True

    def close(self) -> None:
        """Send the figures after the last tick (the final one of a clean stop), waiting
        at most one export's timeout, then stop the thread."""
        if self._last_t1_s is not None and self._copied_tick != self._ticks:
            self._copy()
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(EXPORT_TIMEOUT_S + 1.0)
        self.transport.close()

    # -- the exporter's thread --

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._stopping:
                    self._cond.wait()
                state, self._pending = self._pending, None
                if state is None:  # stopping, nothing left
                    return
            self.export(state)

    def export(self, state: ExportState) -> bool:
        """Encode and send one state; never raises (a failure is logged, once an outage)."""
        started = time.perf_counter()
        try:
            request = encode(state, self.resource, self.start_s, self.version)
            sent = self.transport.send(request)
        except ExportError as exc:
            self.failures += 1
            if not self._failing:
                log.warning("OTLP export to %s failed (%s); retrying every --otlp-interval "
                            "(%.3g s): the totals are cumulative, so the next export that "
                            "arrives carries everything", self.endpoint, exc,
                            self.settings.otlp_interval_s)
                self._failing = True
            else:
                log.debug("OTLP export to %s failed again: %s", self.endpoint, exc)
            return False
        except Exception:  # a bug must not kill the thread: the next export tries again
            self.failures += 1
            log.exception("OTLP export to %s failed", self.endpoint)
            return False
        self.exported += 1
        self.last_bytes = sent
        self.last_export_s = time.perf_counter() - started
        if self._failing:
            log.info("OTLP export to %s answers again (tick %d)", self.endpoint, state.ticks)
            self._failing = False
        log.debug("OTLP export of tick %d: %d bytes in %.1f ms", state.ticks, sent,
                  self.last_export_s * 1000)
        return True


__all__ = ["METRICS", "ExportState", "OtlpExporter", "OtlpMetric", "OtlpProtocol",
           "OtlpSettings", "Point", "check_settings", "encode", "hw_type", "node_series",
           "parse_endpoint", "parse_headers", "points"]
