"""The loop that ties the pipeline together: sensors -> sampler -> sinks.

Ticks are scheduled on the monotonic clock at start + k * interval. A tick that runs
late is not made up for: the next one integrates over the real elapsed time, so no
energy is lost or invented, and a stalled machine does not cause a burst of ticks.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent import __version__
from agent.config import ConfigError
from agent.identity import NodeInfo, detect_node_info
from agent.sampler import Sampler
from agent.sensors.base import Sensor
from agent.sinks.prometheus import NodeMetrics, make_registry, serve

log = logging.getLogger(__name__)

MAINTAIN_EVERY_S = 60.0


def build_sensors(settings: Mapping[str, Any], now_s: float) -> list[Sensor]:
    """Measured sources where the hardware has them, honest estimates where it has not."""
    from agent.sensors.network import NetworkSensor

    procfs_root: Path = settings["procfs_root"]
    if settings.get("replay"):
        from agent.sensors.replay import TraceError, open_replay

        try:
            return [open_replay(settings["replay"], now_s)]
        except TraceError as exc:
            raise ConfigError(f"--replay: {exc}") from None

    from agent.sensors.model import open_estimators
    from agent.sensors.rapl import open_rapl

    sensors: list[Sensor] = []
    rapl = open_rapl(settings["sysfs_root"])
    measured: set[str] = set()
    if rapl is not None:
        sensors.append(rapl)
        measured = {device.component for device in rapl.describe()}
    for estimator in open_estimators(procfs_root):
        components = {device.component for device in estimator.describe()}
        if components & measured:
            continue  # never estimate what is measured
        sensors.append(estimator)
    if settings.get("nvml", True):
        from agent.sensors.nvidia import open_nvidia

        nvidia = open_nvidia()
        if nvidia is not None:
            sensors.append(nvidia)
    sensors.append(NetworkSensor(procfs_root))
    return sensors


@dataclass
class Daemon:
    """Runs ticks until ``stop`` is set; every sink sees every tick exactly once."""

    settings: Mapping[str, Any]
    sampler: Sampler
    node: NodeInfo
    metrics: NodeMetrics
    writer: Any = None  # agent.store.writer.StoreWriter, or None for metrics only
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        interval_s = float(self.settings["interval"])
        self.sampler.start()
        started = time.monotonic()
        next_tick = started + interval_s
        next_maintain = started + MAINTAIN_EVERY_S
        log.info("ticking every %.3g s", interval_s)
        while not self.stop.wait(max(next_tick - time.monotonic(), 0.0)):
            work_started = time.perf_counter()
            tick = self.sampler.tick()
            self.metrics.observe(tick)
            now = time.monotonic()
            if self.writer is not None:
                self.writer.add(tick)
                self.writer.maybe_flush(now)
                if now >= next_maintain:
                    self.writer.maintain(tick.t1_s)
                    next_maintain = now + MAINTAIN_EVERY_S
            self.metrics.observe_tick_work(time.perf_counter() - work_started)
            next_tick += interval_s
            if next_tick <= now:  # late: skip missed slots, the next tick covers the gap
                missed = int((now - next_tick) // interval_s) + 1
                log.debug("tick ran late; skipping %d slot(s)", missed)
                next_tick += missed * interval_s
        self._final_tick()

    def _final_tick(self) -> None:
        """Count the energy since the last tick, so a clean stop loses nothing."""
        tick = self.sampler.tick()
        self.metrics.observe(tick)
        if self.writer is not None:
            self.writer.add(tick)
            self.writer.close()
        self.sampler.close()


def open_store(settings: Mapping[str, Any], node: NodeInfo, devices: list) -> Any:
    """Migrate the store if needed and return a writer; a bad URL stops the agent."""
    from agent.store.engine import default_db_url, make_engine
    from agent.store.migrate import is_at_head, upgrade
    from agent.store.writer import StoreWriter

    url = settings.get("db") or default_db_url()
    try:
        engine = make_engine(url)
        if not is_at_head(engine):
            log.info("migrating the store at %s", engine.url.render_as_string(hide_password=True))
            upgrade(engine)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"--db {url}: cannot open the store: {exc}") from None
    return StoreWriter(engine, node, devices, raw_retention_s=settings["raw_retention"])


def run_agent(settings: Mapping[str, Any]) -> int:
    from agent.procfs import read_cpu_model

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())

    sensors = build_sensors(settings, time.monotonic())
    sampler = Sampler(sensors)
    node = detect_node_info(settings, read_cpu_model(settings["procfs_root"]), __version__)
    devices = sampler.describe()
    log.info(
        "node %s (%s, region %s, cpu %s); sensors: %s",
        node.node,
        node.instance_type,
        node.region or "unknown",
        node.cpu_model,
        ", ".join(f"{d.component}/{d.device}={d.source}" for d in devices),
    )
    metrics = NodeMetrics(node, sampler.sensor_errors_total)
    metrics.declare([(d.component, d.device, d.source) for d in devices])
    writer = open_store(settings, node, devices)

    server = None
    port = int(settings["metrics_port"])
    if port:
        try:
            server = serve(make_registry(metrics), settings["metrics_host"], port)
        except OSError as exc:
            writer.close()
            raise ConfigError(
                f"--metrics-port {port} on {settings['metrics_host']}: {exc.strerror or exc}"
            ) from None
        log.info("metrics on http://%s:%d/metrics", settings["metrics_host"], port)

    Daemon(settings, sampler, node, metrics, writer, stop).run()
    if server is not None:
        server.shutdown()
    log.info("stopped cleanly")
    return 0
