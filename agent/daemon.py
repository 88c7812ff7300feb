"""The agent process: a tick loop over the pipeline, plus the threads beside it.

Ticks are scheduled on the monotonic clock at start + k * interval. A tick that runs
late is not made up for: the next one integrates over the real elapsed time, so no
energy is lost or invented, and a stalled machine does not cause a burst of ticks.
Beside the loop: the Prometheus endpoint, the job API, and a store thread that
flushes rows so a slow database delays rows, never ticks.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent import __version__
from agent.config import ConfigError
from agent.identity import detect_cloud, detect_node_info
from agent.idle import IdleBaselines
from agent.jobs.accounting import JobAccounting
from agent.jobs.registry import JobRegistry
from agent.pipeline import Pipeline, read_boot_id
from agent.sampler import Sampler
from agent.sensors.factory import (
    build_sensors,
    device_processes_of,
    estimator_idle_w,
    find_sensor,
)
from agent.sinks.health import AgentHealth
from agent.sinks.prometheus import JobMetrics, NodeMetrics, make_registry, serve

log = logging.getLogger(__name__)

MAINTAIN_EVERY_S = 60.0  # forgetting ended jobs
# Rollups and pruning cost ~11 ms of CPU a run here; queries combine raw rows and
# rollups, so running them every 5 minutes changes no figure, only the table sizes.
ROLLUP_EVERY_S = 300.0


class StoreWorker(threading.Thread):
    """Writes buffered rows and runs rollups off the tick loop."""

    def __init__(self, writer: Any, stop: threading.Event) -> None:
        super().__init__(name="joulestat-store", daemon=True)
        self.writer = writer
        self._stop_event = stop
        # Wake when a flush is due or asked for (a job ended), not more often: idle
        # wake-ups are most of an idle agent's CPU time.
        self._every_s = writer.flush_interval_s

    def run(self) -> None:
        next_maintain = time.monotonic() + ROLLUP_EVERY_S
        wake = self.writer.wake
        while True:
            wake.wait(self._every_s)
            wake.clear()
            if self._stop_event.is_set():
                return
            try:
                self.writer.maybe_flush(time.monotonic())
                if time.monotonic() >= next_maintain:
                    self.writer.maintain(time.time())
                    next_maintain = time.monotonic() + ROLLUP_EVERY_S
            except Exception:  # the writer logs its own failures; never kill the thread
                log.exception("store worker error; retrying")


@dataclass
class Daemon:
    """Runs ticks until ``stop`` is set; every sink sees every tick exactly once."""

    pipeline: Pipeline
    interval_s: float
    job_retention_s: float = 300.0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        worker = None
        if self.pipeline.writer is not None:
            worker = StoreWorker(self.pipeline.writer, self.stop)
            worker.start()
        metrics = self.pipeline.metrics
        next_tick = time.monotonic() + self.interval_s
        next_prune = time.monotonic() + MAINTAIN_EVERY_S
        log.info("ticking every %.3g s", self.interval_s)
        while not self.stop.wait(max(next_tick - time.monotonic(), 0.0)):
            work_started = time.perf_counter()
            self.pipeline.tick()
            if metrics is not None:
                metrics.observe_tick_work(time.perf_counter() - work_started)
            now = time.monotonic()
            if now >= next_prune:
                self._prune_ended_jobs()
                next_prune = now + MAINTAIN_EVERY_S
            next_tick += self.interval_s
            if next_tick <= now:  # late: skip missed slots, the next tick covers the gap
                missed = int((now - next_tick) // self.interval_s) + 1
                log.debug("tick ran late; skipping %d slot(s)", missed)
                next_tick += missed * self.interval_s
        # A clean stop counts the energy since the last tick, so nothing is lost.
        self.pipeline.tick()
        if worker is not None:
            self.pipeline.writer.wake.set()
            worker.join()
        self.pipeline.close()

    def _prune_ended_jobs(self) -> None:
        """Forget jobs ended longer ago than the retention: they are in the store."""
        accounting = self.pipeline.accounting
        if accounting is None:
            return
        cutoff = time.time() - self.job_retention_s
        old = [j.id for j in accounting.registry.jobs() if j.ended_s and j.ended_s < cutoff]
        if old:
            accounting.registry.forget(old)
            accounting.forget(old)


def build_pipeline(settings: Mapping[str, Any], registry: JobRegistry, *,
                   with_metrics: bool) -> tuple[Pipeline, Any]:
    """The node's pipeline with its store; shared by the daemon and embedded mode.

    Returns the pipeline and the checkpoint found in the store (or None).
    """
    from agent.host.procfs import read_cpu_model
    from agent.jobs.discovery import ScanCache, sync_registry
    from agent.store.bootstrap import open_engine
    from agent.store.job_queries import load_checkpoint, load_running_jobs
    from agent.store.lease import NodeLease, NodeLeaseError, Writer
    from agent.store.writer import StoreWriter

    procfs_root = settings["procfs_root"]
    sensors = build_sensors(settings, time.monotonic(), detect_cloud(settings["sysfs_root"]))
    sampler = Sampler(sensors)
    node = detect_node_info(settings, read_cpu_model(procfs_root), __version__)
    devices = sampler.describe()
    log.info(
        "node %s (%s, region %s, cpu %s); sensors: %s",
        node.node, node.instance_type, node.region or "unknown", node.cpu_model,
        ", ".join(f"{d.component}/{d.device}={d.source}" for d in devices),
    )
    cpu_model = find_sensor(sensors, "model-cpu")
    kinds = settings.get("discover") or frozenset()
    scan_cache = ScanCache()  # a scan reads only processes new since the last one
    accounting = JobAccounting(
        registry,
        procfs_root,
        IdleBaselines(estimator_idle_w(sensors)),
        settings.get("idle_policy", "share"),
        device_processes=device_processes_of(sensors),
        discover=(lambda: sync_registry(registry, procfs_root, kinds, cache=scan_cache))
        if kinds else None,
        node_cpu_times=(lambda: cpu_model.last_times) if cpu_model is not None else None,
        # Jobs in cgroups of their own are read from <sysfs>/fs/cgroup (agent/host/).
        sysfs_root=settings["sysfs_root"],
    )
    engine = open_engine(settings.get("db"), wait_s=float(settings.get("db_wait") or 0.0))
    boot_id = read_boot_id(procfs_root)
    lease = NodeLease(node.node, Writer.this_process(boot_id, "agent" if with_metrics
                                                     else "embedded"), boot_id, procfs_root)
    try:
        writer = StoreWriter(engine, node, devices, raw_retention_s=settings["raw_retention"],
                             flush_interval_s=settings.get("flush_interval", 10.0),
                             spool=_open_spool(settings, node.node) if with_metrics else None,
                             lease=lease)
    except NodeLeaseError as exc:
        raise ConfigError(str(exc)) from None
    if writer.spool:  # rows from an outage before the last stop: into the store first, so
        writer.flush()  # the checkpoint and running jobs read below are the latest
    for job in load_running_jobs(engine, node.node):
        registry.restore(job)
        log.info("job %s (%s) was running before the restart; still tracking it",
                 job.name, job.id)
    metrics = None
    if with_metrics:
        metrics = NodeMetrics(node, sampler.sensor_errors_total)
        metrics.declare([(d.component, d.device, d.source) for d in devices])
        metrics.describe_devices(devices)
    pipeline = Pipeline(sampler, node, accounting, metrics, writer, boot_id)
    checkpoint = load_checkpoint(engine, node.node)
    if checkpoint is not None and lease.replaced is not None \
            and lease.replaced.writer.mode == "embedded":
        log.info("an embedded run wrote this node's ticks since the last checkpoint (%s); "
                 "not resuming from it, so no tick overlaps", lease.replaced.describe())
        checkpoint = None
    return pipeline, checkpoint


def _raise_open_file_limit(wanted: int = 8192) -> None:
    """Raise the soft RLIMIT_NOFILE toward the hard one: each HTTP port caps its open
    connections at a quarter of it (agent/http_gate.py), and a 1,024 default halves
    what a flood of idle connections may hold before the oldest are evicted."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            log.debug("cannot raise the open-file limit from %d: %s", soft, exc)


def _open_spool(settings: Mapping[str, Any], node: str) -> Any:
    """The node agent's spool (embedded runs have none: they flush as they end)."""
    import re

    from agent.store.engine import data_dir
    from agent.store.spool import Spool

    directory = settings.get("spool_dir") or (
        data_dir() / "spool" / re.sub(r"[^A-Za-z0-9._-]", "_", node))
    try:
        spool = Spool(directory, int(settings.get("spool_max") or 256 * 1024**2))
    except OSError as exc:
        raise ConfigError(f"--spool-dir {directory}: {exc.strerror or exc}") from None
    log.info("spool for store outages: %s (up to %d MiB)%s", directory,
             spool.max_bytes // 1024**2,
             f"; {spool.bytes} bytes from before this start" if spool.bytes else "")
    return spool


def run_agent(settings: Mapping[str, Any]) -> int:
    from agent.jobs.api import ApiServer

    _raise_open_file_limit()
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())

    registry = JobRegistry(max_live_jobs=int(settings["max_jobs"]))
    pipeline, checkpoint = build_pipeline(settings, registry, with_metrics=True)
    servers: list[Any] = []
    apis: list[Any] = []

    def api_rejections() -> dict[str, int]:
        busy = sum(api.busy_rejections for api in apis)
        return {"busy": busy, "max_jobs": registry.limit_rejections}

    try:
        port = int(settings["metrics_port"])
        if port:
            job_metrics = JobMetrics(registry, settings["job_retention"],
                                     settings["max_job_series"])
            health = AgentHealth(pipeline.writer, api_rejections)
            host = settings["metrics_host"]
            try:
                servers.append(serve(make_registry(pipeline.metrics, job_metrics, health),
                                     host, port))
            except OSError as exc:
                raise ConfigError(f"--metrics-port {port} on {host}: "
                                  f"{exc.strerror or exc}") from None
            log.info("metrics on http://%s:%d/metrics", host, port)
        api_port = int(settings["api_port"])
        if api_port:
            api = ApiServer(registry, settings["api_host"], api_port,
                            token=settings.get("api_token"), node=pipeline.node.node,
                            interval_s=float(settings["interval"]),
                            persist=pipeline.writer.save_job_now)
            try:
                api.start()
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            except OSError as exc:
                raise ConfigError(f"--api-port {api_port} on {settings['api_host']}: "
                                  f"{exc.strerror or exc}") from None
            servers.append(api)
            apis.append(api)
            log.info("job API on http://%s:%d/v1/jobs", settings["api_host"], api.port)
    except ConfigError:
        pipeline.close()
        for server in servers:
            _close(server)
        raise

    pipeline.start(checkpoint, now_s=time.time())
    Daemon(pipeline, float(settings["interval"]), settings["job_retention"], stop).run()
    for server in servers:
        _close(server)
    log.info("stopped cleanly")
    return 0


def _close(server: Any) -> None:
    close = getattr(server, "close", None) or server.server_close
    close()
