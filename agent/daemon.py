"""The loop that ties the pipeline together: sensors -> sampler -> sinks.

Ticks are scheduled on the monotonic clock at start + k * interval. A tick that runs
late is not made up for: the next one integrates over the real elapsed time, so no
energy is lost or invented, and a stalled machine does not cause a burst of ticks.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent import __version__
from agent.config import ConfigError
from agent.identity import NodeInfo, detect_cloud, detect_node_info
from agent.sampler import Sampler
from agent.sensors.base import Sensor, SensorError
from agent.sinks.prometheus import NodeMetrics, make_registry, serve

log = logging.getLogger(__name__)

MAINTAIN_EVERY_S = 60.0


def build_sensors(settings: Mapping[str, Any], now_s: float, cloud: str | None = None
                  ) -> list[Sensor]:
    """Measured sources where the hardware has them, honest estimates where it has not."""
    from agent.sensors.network import NetworkSensor

    procfs_root: Path = settings["procfs_root"]
    if settings.get("replay"):
        from agent.sensors.replay import TraceError, open_replay

        try:
            return [open_replay(settings["replay"], now_s)]
        except TraceError as exc:
            raise ConfigError(f"--replay: {exc}") from None

    from agent.sensors.model import open_cpu_estimator, open_dram_estimator
    from agent.sensors.rapl import open_rapl

    sensors: list[Sensor] = []
    rapl = open_rapl(settings["sysfs_root"], now_s)
    measured: set[str] = set()
    if rapl is not None:
        sensors.append(rapl)
        measured = {device.component for device in rapl.describe()}
    # Estimate only what is not measured (many CPUs expose no RAPL dram domain).
    if "cpu" not in measured:
        try:
            sensors.append(open_cpu_estimator(procfs_root, cloud=cloud))
        except (SensorError, OSError, ValueError) as exc:
            log.error("no CPU power: no RAPL and the CPU estimator cannot run: %s", exc)
    if "dram" not in measured:
        try:
            sensors.append(open_dram_estimator(procfs_root))
        except (SensorError, OSError, ValueError) as exc:
            log.warning("no DRAM power estimate: %s", exc)
    if settings.get("nvml", True):
        from agent.sensors.nvidia import open_nvidia

        nvidia = open_nvidia(now_s)
        if nvidia is not None:
            sensors.append(nvidia)
    sensors.append(NetworkSensor(procfs_root, sysfs_root=settings["sysfs_root"]))
    return sensors


class StoreWorker(threading.Thread):
    """Writes buffered ticks and runs rollups off the tick loop.

    A slow or unreachable database then delays rows, never ticks: the writer keeps
    rows buffered (bounded) and retries, so measurements keep flowing to Prometheus.
    """

    def __init__(self, writer: Any, stop: threading.Event) -> None:
        super().__init__(name="joulestat-store", daemon=True)
        self.writer = writer
        self._stop_event = stop
        # Wake when a flush is due, not more often: idle wake-ups are most of an
        # idle agent's CPU time.
        self._every_s = writer.flush_interval_s

    def run(self) -> None:
        next_maintain = time.monotonic() + MAINTAIN_EVERY_S
        while not self._stop_event.wait(self._every_s):
            try:
                self.writer.maybe_flush(time.monotonic())
                if time.monotonic() >= next_maintain:
                    self.writer.maintain(time.time())
                    next_maintain = time.monotonic() + MAINTAIN_EVERY_S
            except Exception:  # the writer logs its own failures; never kill the thread
                log.exception("store worker error; retrying")


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
        worker = None
        if self.writer is not None:
            worker = StoreWorker(self.writer, self.stop)
            worker.start()
        next_tick = time.monotonic() + interval_s
        log.info("ticking every %.3g s", interval_s)
        while not self.stop.wait(max(next_tick - time.monotonic(), 0.0)):
            work_started = time.perf_counter()
            self._tick()
            self.metrics.observe_tick_work(time.perf_counter() - work_started)
            next_tick += interval_s
            now = time.monotonic()
            if next_tick <= now:  # late: skip missed slots, the next tick covers the gap
                missed = int((now - next_tick) // interval_s) + 1
                log.debug("tick ran late; skipping %d slot(s)", missed)
                next_tick += missed * interval_s
        # A clean stop counts the energy since the last tick, so nothing is lost.
        self._tick()
        if worker is not None:
            worker.join()
            self.writer.close()
        self.sampler.close()

    def _tick(self) -> None:
        tick = self.sampler.tick()
        self.metrics.observe(tick)
        if self.writer is not None:
            self.writer.add(tick)


def open_store(settings: Mapping[str, Any], node: NodeInfo, devices: list) -> Any:
    """Migrate the store if needed and return a writer; a bad URL stops the agent.

    Migrations run in a child process (``joulestat db upgrade``): Alembic and the ORM
    cost ~16 MiB that the long-running daemon would otherwise keep as its peak RSS.
    """
    from agent.store.engine import default_db_url, make_engine
    from agent.store.migrate import is_at_head
    from agent.store.writer import StoreWriter

    url = settings.get("db") or default_db_url()
    try:
        engine = make_engine(url)
        at_head = is_at_head(engine)
    except Exception as exc:
        raise ConfigError(f"--db {url}: cannot open the store: {exc}") from None
    if not at_head:
        shown = engine.url.render_as_string(hide_password=True)
        log.info("migrating the store at %s", shown)
        # The URL travels in the environment, not argv, so a password never shows in ps.
        result = subprocess.run(
            [sys.executable, "-m", "agent", "db", "upgrade"],
            env={**os.environ, "JOULESTAT_DB": url}, capture_output=True, text=True,
        )
        if result.returncode != 0:
            detail = result.stderr.strip().splitlines()[-1:] or ["no message"]
            raise ConfigError(f"--db {shown}: migration failed: {detail[0]}")
    return StoreWriter(engine, node, devices, raw_retention_s=settings["raw_retention"])


def run_agent(settings: Mapping[str, Any]) -> int:
    from agent.procfs import read_cpu_model

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())

    sensors = build_sensors(settings, time.monotonic(), detect_cloud(settings["sysfs_root"]))
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
        server.server_close()
    log.info("stopped cleanly")
    return 0
