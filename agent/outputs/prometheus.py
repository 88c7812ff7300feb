"""Prometheus exposition: custom collectors that build fresh families on each scrape.

:class:`NodeMetrics` and :class:`JobMetrics` are sinks of the pipeline
(:mod:`joulestat.pipeline.sink`): each tick they copy what they export into a snapshot of
their own, under a lock of their own, and a scrape formats that snapshot. A scrape
never reads objects a tick is changing and never takes a lock the tick loop or the job
API holds (the job registry's), so a scrape never slows a tick and a slow tick or a
busy API never blocks a scrape for long.

The one exception is by design: the accelerators' clock and memory gauges are read from
the vendor library during the scrape (``device_state``, thread-safe in NVML and amdsmi,
touching no state a tick uses), so that reading them costs the tick loop nothing and
costs a scrape a few driver calls per device.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from joulestat.core.http_gate import GatedHandler, HttpGate, Limits
from joulestat.core.records import DeviceInfo, NodeInfo
from joulestat.core.tick import Tick
from joulestat.devices.accelerator import DeviceStates
from joulestat.outputs import metric_catalog as mc
from joulestat.pipeline.sink import TickRecord

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.attribution.accounting import LiveJobFigures, Snapshot

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (component, device, source)


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """The Prometheus endpoint, from the options of the same names: where it listens
    (``metrics_port`` 0: nowhere), how long an ended job stays exported, and how many
    jobs are exported at once."""

    metrics_port: int
    metrics_host: str
    job_retention_s: float
    max_job_series: int


class NodeMetrics(Collector):
    """Node energy counters, last-tick power, node info and the agent's self-monitoring."""

    stores_ticks = False  # a sink (joulestat.pipeline.sink) that keeps nothing past the process

    def __init__(self, node: NodeInfo, sensor_errors: dict[str, int] | None = None,
                 device_state: Callable[[], DeviceStates] | None = None,
                 sensor_faults: Callable[[], dict[tuple[str, str], int]] | None = None
                 ) -> None:
        self.node = node
        self._device_state = device_state
        # (sensor, kind) -> counter faults, asked at a scrape (the sensors keep the counts)
        self._sensor_faults = sensor_faults
        self._power_limits: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._energy_j: dict[Key, float] = {}
        self._power_w: dict[Key, float] = {}
        self._source_of: dict[tuple[str, str], str] = {}  # each device's latest source
        self._ticks = 0
        self._tick_seconds_sum = 0.0
        self._sensor_errors = sensor_errors if sensor_errors is not None else {}
        self._devices: dict[tuple[str, str], dict[str, str]] = {}

    def describe_devices(self, devices: list[DeviceInfo]) -> None:
        """What each device is, for ``joulestat_node_device_info`` (first source wins)."""
        with self._lock:
            for d in devices:
                self._devices.setdefault((d.component, d.device), {
                    "component": d.component, "device": d.device, "vendor": d.vendor,
                    "model": d.model, "uuid": d.uuid, "attribution": d.attribution})
                if d.power_limit_w is not None:
                    self._power_limits.setdefault((d.component, d.device), d.power_limit_w)

    def _device_gauges(self, limits: list[tuple[tuple[str, str], float]]) -> Iterator[Metric]:
        """Power limits (from the device info) and each accelerator's clock and memory in
        use, read now (``device_state``; a failing read leaves its gauges out once)."""
        gauges = {spec.name: GaugeMetricFamily(spec.family_name, spec.help, labels=spec.labels)
                  for spec in (mc.NODE_DEVICE_POWER_LIMIT, mc.NODE_DEVICE_CLOCK,
                               mc.NODE_DEVICE_MEMORY_USED)}
        for key, watts in limits:
            gauges[mc.NODE_DEVICE_POWER_LIMIT.name].add_metric(list(key), watts)
        states: DeviceStates = {}
        if self._device_state is not None:
            try:
                states = self._device_state()
            except Exception as exc:  # a gauge is a convenience: never fail a scrape
                log.debug("device state unreadable at this scrape: %s", exc)
        for key, state in sorted(states.items()):
            if state.clock_hz is not None:
                gauges[mc.NODE_DEVICE_CLOCK.name].add_metric(list(key), state.clock_hz)
            if state.memory_used_bytes is not None:
                gauges[mc.NODE_DEVICE_MEMORY_USED.name].add_metric(list(key),
                                                                   state.memory_used_bytes)
        yield from gauges.values()

    def declare(self, keys: list[Key]) -> None:
        """Export known series at 0 from the start, so rate() has a first sample."""
        with self._lock:
            for key in keys:
                self._energy_j.setdefault(key, 0.0)
                self._power_w.setdefault(key, 0.0)

    def on_tick(self, record: TickRecord) -> None:
        self.observe(record.tick)

    def close(self) -> None:
        """Nothing to release: the endpoint serving it is closed by its owner."""

    def observe(self, tick: Tick) -> None:
        with self._lock:
            for entry in tick.entries:
                key = (entry.component, entry.device, entry.source)
                self._energy_j[key] = self._energy_j.get(key, 0.0) + entry.energy_j
                self._power_w[key] = tick.power_w(entry)
                # A device whose source changed (rapl -> fill:rapl while its counter is
                # faulty, and back): the other source's power is 0 now, not its last
                # value, so a sum of power over sources counts the device once.
                device = (entry.component, entry.device)
                before = self._source_of.get(device)
                if before != entry.source:
                    if before is not None:
                        self._power_w[(*device, before)] = 0.0
                    self._source_of[device] = entry.source

    def values(self) -> tuple[dict[Key, float], dict[Key, float]]:
        """Copies of the energy and power a scrape would show now, (energy_j, power_w)
        by (component, device, source): what another exporter of the same figures reads
        (:mod:`joulestat.outputs.otlp`), so it cannot show other numbers than /metrics."""
        with self._lock:
            return dict(self._energy_j), dict(self._power_w)

    def observe_tick_work(self, seconds: float) -> None:
        with self._lock:
            self._ticks += 1
            self._tick_seconds_sum += seconds

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            energy = sorted(self._energy_j.items())
            power = sorted(self._power_w.items())
            ticks, tick_sum = self._ticks, self._tick_seconds_sum
            errors = sorted(self._sensor_errors.items())
            devices = [self._devices[key] for key in sorted(self._devices)]
            limits = sorted(self._power_limits.items())

        family = CounterMetricFamily(
            mc.NODE_ENERGY.family_name, mc.NODE_ENERGY.help, labels=mc.NODE_ENERGY.labels
        )
        for key, value in energy:
            family.add_metric(list(key), value)
        yield family

        family = GaugeMetricFamily(
            mc.NODE_POWER.family_name, mc.NODE_POWER.help, labels=mc.NODE_POWER.labels
        )
        for key, value in power:
            family.add_metric(list(key), value)
        yield family

        info = InfoMetricFamily(mc.NODE_INFO.family_name, mc.NODE_INFO.help)
        info.add_metric(
            [],
            {
                "node": self.node.node,
                "instance_type": self.node.instance_type,
                "region": self.node.region,
                "cpu_model": self.node.cpu_model,
                "agent_version": self.node.agent_version,
            },
        )
        yield info

        info = InfoMetricFamily(mc.NODE_DEVICE_INFO.family_name, mc.NODE_DEVICE_INFO.help)
        for labels in devices:
            info.add_metric([], labels)
        yield info
        yield from self._device_gauges(limits)

        yield CounterMetricFamily(mc.AGENT_TICKS.family_name, mc.AGENT_TICKS.help, value=ticks)
        yield SummaryMetricFamily(
            mc.AGENT_TICK_SECONDS.family_name,
            mc.AGENT_TICK_SECONDS.help,
            count_value=ticks,
            sum_value=tick_sum,
        )
        family = CounterMetricFamily(
            mc.AGENT_SENSOR_ERRORS.family_name,
            mc.AGENT_SENSOR_ERRORS.help,
            labels=mc.AGENT_SENSOR_ERRORS.labels,
        )
        for sensor, count in errors:
            family.add_metric([sensor], count)
        yield family

        family = CounterMetricFamily(
            mc.AGENT_SENSOR_FAULTS.family_name, mc.AGENT_SENSOR_FAULTS.help,
            labels=mc.AGENT_SENSOR_FAULTS.labels,
        )
        faults = self._sensor_faults() if self._sensor_faults is not None else {}
        for (sensor, kind), count in sorted(faults.items()):
            family.add_metric([sensor, kind], count)
        yield family


def make_registry(node_metrics: NodeMetrics, *collectors: Collector | None
                  ) -> CollectorRegistry:
    """A registry of our own (not the global one) plus the standard process_* metrics."""
    from prometheus_client import ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(node_metrics)
    for collector in collectors:
        if collector is not None:
            registry.register(collector)
    ProcessCollector(registry=registry)
    return registry


class _MetricsHandler(GatedHandler):
    """GET /metrics over a request the gate has already read whole."""

    registry: CollectorRegistry

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path.split("?", 1)[0] not in ("/metrics", "/"):
            self.send_error(404, "only /metrics is served here")
            return
        body = generate_latest(self.registry)
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("metrics %s: " + format, self.client_address[0], *args)


def serve(registry: CollectorRegistry, host: str, port: int) -> HttpGate:
    """Start the /metrics endpoint (daemon threads); returns it, for ``close()``.

    Our own server rather than client_python's ``start_http_server``: that one polls
    for shutdown twice a second (a large part of an idle agent's CPU time) and, like
    any ``ThreadingHTTPServer``, starts a thread per connection before a byte arrives,
    so idle connections pile up threads and memory. The gate (:mod:`joulestat.core.http_gate`)
    holds them as sockets, answers from two workers, caps connections (the oldest
    silent one goes first), and sleeps until an event or a deadline. Binding errors
    (OSError) are raised here, before anything runs.
    """
    # A scrape is one small GET: no body worth reading, few at a time; ten seconds from
    # accept to the whole request, and to write the answer (Prometheus's own timeout).
    limits = Limits(max_connections=512, max_in_flight=8, workers=2, max_body_bytes=64 << 10,
                    max_body_buffered=1 << 20, deadline_s=10.0, send_timeout_s=10.0)
    handler = type("Handler", (_MetricsHandler,), {"registry": registry})
    server = HttpGate("metrics", host, port, handler, limits=limits)
    server.start()
    return server


def select_jobs(jobs: Iterable[LiveJobFigures], now_s: float, retention_s: float, max_jobs: int
                ) -> tuple[list[LiveJobFigures], int]:
    """The jobs an exporter sends at ``now_s``: within retention, running first, then the
    most recently ended, at most ``max_jobs``; and how many there were when that cap cut
    them (0: it did not). One rule for every exporter (Prometheus here, OTLP in
    :mod:`joulestat.outputs.otlp`), so both show the same jobs."""
    kept = [j for j in jobs if j.ended_s is None or now_s - j.ended_s <= retention_s]
    kept.sort(key=lambda j: (j.ended_s is not None, -(j.ended_s or j.started_s)))
    if len(kept) > max_jobs:
        return kept[:max_jobs], len(kept)
    return kept, 0


class JobMetrics(Collector):
    """Per-job energy and work units, with bounded cardinality.

    Not a pipeline sink, on purpose: a scrape takes the jobs' figures from ``snapshot`` (normally
    :meth:`joulestat.attribution.accounting.JobAccounting.snapshot`: a copy, made under the job
    registry's lock, of every job as of the last tick, never half a tick). Copying
    every tick for scrapes that come every 15 s or so cost a busy node 0.2 ms a tick
    (benchmarks/busy_node.py: 50 jobs), a tenth of the agent's tick. A scrape waits at
    most ``lock_wait_s`` for the lock and otherwise serves its previous copy, so a
    long-held lock never stalls Prometheus.

    Ended jobs stay for ``retention_s`` so the last increments reach Prometheus, then
    drop; running jobs come first when more than ``max_jobs`` would be exported, and a
    warning says so once per crossing. Retention and the cap are applied at scrape
    time, as the scrape's clock sees them.
    """

    def __init__(self, snapshot: Callable[[float], Snapshot | None], retention_s: float,
                 max_jobs: int, clock: Callable[[], float] = time.time,
                 lock_wait_s: float = 0.1) -> None:
        self.snapshot = snapshot
        self.retention_s = retention_s
        self.max_jobs = max_jobs
        self.lock_wait_s = lock_wait_s
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: tuple[LiveJobFigures, ...] = ()  # the last copy a scrape took
        self._capped = False

    def exported_jobs(self) -> list[LiveJobFigures]:
        """The jobs a scrape now exports: within retention, running first, capped."""
        taken = self.snapshot(self.lock_wait_s)
        now = self._clock()
        with self._lock:
            if taken is not None:
                self._jobs = tuple(taken.jobs.values())
            else:
                log.debug("job registry busy for %.2f s: exporting the previous copy",
                          self.lock_wait_s)
            jobs, over = select_jobs(self._jobs, now, self.retention_s, self.max_jobs)
            if over and not self._capped:
                log.warning("%d jobs to export, more than --max-job-series %d: exporting "
                            "the running and most recent ones", over, self.max_jobs)
            self._capped = bool(over)
        return jobs

    def collect(self) -> Iterator[Metric]:
        energy = CounterMetricFamily(mc.JOB_ENERGY.family_name, mc.JOB_ENERGY.help,
                                     labels=mc.JOB_ENERGY.labels)
        units = CounterMetricFamily(mc.JOB_WORK_UNITS.family_name, mc.JOB_WORK_UNITS.help,
                                    labels=mc.JOB_WORK_UNITS.labels)
        for job in self.exported_jobs():
            for component, value in job.energy_j.items():
                energy.add_metric([job.id, job.name, job.kind, component], value)
            for unit, count in sorted(job.units.items()):
                units.add_metric([job.id, job.name, unit], count)
        yield energy
        yield units
