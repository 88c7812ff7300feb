"""Building a node's pipeline from settings: sensors, accounting, sinks and the store.

Both the daemon (:mod:`joulestat.runtime.daemon`) and embedded mode
(:mod:`joulestat.runtime.embedded`) build their pipeline here, so a job measured by
either runs through the same sensors, attribution and writer; keeping it below both is
what lets embedded mode build one without importing the daemon.

The pipeline itself names no sink (:mod:`joulestat.runtime.pipeline`); what is built here is
returned as an :class:`Assembly`, which also names the parts that other threads use
directly: the store thread flushes the writer, the job API persists new jobs through
it, the health metrics read its counters, and the Prometheus endpoint serves the node
metrics.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from joulestat.attribution.accounting import JobAccounting
from joulestat.attribution.idle import IdleBaselines
from joulestat.attribution.registry import JobRegistry
from joulestat.attribution.sampler import Sampler
from joulestat.core.errors import ConfigError
from joulestat.core.version import __version__
from joulestat.devices.factory import (
    build_sensors,
    cpu_estimator_of,
    device_processes_of,
    device_state_of,
    known_idle_w_of,
)
from joulestat.host.identity import detect_cloud, detect_node_info
from joulestat.runtime.pipeline import Pipeline, read_boot_id

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.outputs.prometheus import NodeMetrics
    from joulestat.outputs.sink import Sink
    from joulestat.store.durability import Checkpoint, Spool
    from joulestat.store.writer import StoreWriter

log = logging.getLogger(__name__)


@dataclass
class Assembly:
    """A node's pipeline, the checkpoint to start it from, and the sinks used by name."""

    pipeline: Pipeline
    writer: StoreWriter  # also in pipeline.sinks
    node_metrics: NodeMetrics | None  # also in pipeline.sinks, when built with metrics
    checkpoint: Checkpoint | None  # found in the store; pass to pipeline.start()


def build_pipeline(settings: Mapping[str, Any], registry: JobRegistry, *,
                   with_metrics: bool) -> Assembly:
    """The node's pipeline with its store; shared by the daemon and embedded mode.

    ``with_metrics``: the node agent's build (Prometheus node metrics, a spool for store
    outages, the lease taken as ``agent``); else embedded mode's (neither, ``embedded``).
    """
    # Imported here: the store and prometheus_client cost start-up time that a command
    # importing this module for its names alone should not pay.
    from joulestat.attribution.discovery import ScanCache, sync_registry
    from joulestat.attribution.kube import pods_from_settings
    from joulestat.host.procfs import read_cpu_model
    from joulestat.store.durability import (
        NodeLease,
        NodeLeaseError,
        Writer,
        load_checkpoint,
        load_running_jobs,
    )
    from joulestat.store.engine import open_engine
    from joulestat.store.writer import StoreWriter

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
    cpu_model = cpu_estimator_of(sensors)
    kinds = settings.get("discover") or frozenset()
    scan_cache = ScanCache()  # a scan reads only processes new since the last one
    pods = pods_from_settings(settings)  # names pods namespace/pod (None: pod-<uid8>)
    accounting = JobAccounting(
        registry,
        procfs_root,
        IdleBaselines(known_idle_w_of(sensors)),
        settings.get("idle_policy", "share"),
        device_processes=device_processes_of(sensors),
        discover=(lambda: sync_registry(registry, procfs_root, kinds, cache=scan_cache,
                                        pods=pods))
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
        from joulestat.outputs.prometheus import NodeMetrics

        metrics = NodeMetrics(node, sampler.sensor_errors_total,
                              device_state=device_state_of(sensors))
        metrics.declare([(d.component, d.device, d.source) for d in devices])
        metrics.describe_devices(devices)
    # The node metrics first, as before sinks were a list: a tick is exported before
    # it is buffered for the store.
    sinks: list[Sink] = [metrics, writer] if metrics is not None else [writer]
    pipeline = Pipeline(sampler, node, accounting, sinks, boot_id)
    checkpoint = load_checkpoint(engine, node.node)
    if checkpoint is not None and lease.replaced is not None \
            and lease.replaced.writer.mode == "embedded":
        log.info("an embedded run wrote this node's ticks since the last checkpoint (%s); "
                 "not resuming from it, so no tick overlaps", lease.replaced.describe())
        checkpoint = None
    return Assembly(pipeline, writer, metrics, checkpoint)


def _open_spool(settings: Mapping[str, Any], node: str) -> Spool:
    """The node agent's spool (embedded runs have none: they flush as they end)."""
    from joulestat.store.durability import Spool
    from joulestat.store.engine import data_dir

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
