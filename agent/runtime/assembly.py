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
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
from joulestat.host.identity import NodeSettings, detect_cloud, detect_node_info
from joulestat.runtime.pipeline import Pipeline, read_boot_id

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.attribution.accounting import AttributionSettings
    from joulestat.devices.factory import DeviceSettings
    from joulestat.host.usage import HostSettings
    from joulestat.outputs.prometheus import NodeMetrics
    from joulestat.outputs.sink import Sink
    from joulestat.runtime.settings import ResolvedSettings
    from joulestat.runtime.tick_loop import TickSettings
    from joulestat.store.durability import Checkpoint, Spool
    from joulestat.store.writer import StoreSettings, StoreWriter

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    """Everything a node's pipeline is built from: each layer's own section, so a layer
    is handed its section and nothing else (the daemon and embedded mode alike)."""

    devices: DeviceSettings
    host: HostSettings
    node: NodeSettings
    attribution: AttributionSettings
    store: StoreSettings
    tick: TickSettings

    @classmethod
    def of(cls, resolved: ResolvedSettings, **store: float) -> PipelineSettings:
        """The sections of a command's resolved settings; ``store`` overrides fields of
        the store's section (embedded mode waits for no store: ``db_wait_s=0``)."""
        from joulestat.attribution.accounting import AttributionSettings
        from joulestat.devices.factory import DeviceSettings
        from joulestat.host.usage import HostSettings
        from joulestat.runtime.tick_loop import TickSettings
        from joulestat.store.writer import StoreSettings

        return cls(resolved.section(DeviceSettings), resolved.section(HostSettings),
                   resolved.section(NodeSettings), resolved.section(AttributionSettings),
                   resolved.section(StoreSettings, **store), resolved.section(TickSettings))


@dataclass
class Assembly:
    """A node's pipeline, the checkpoint to start it from, and the sinks used by name."""

    pipeline: Pipeline
    writer: StoreWriter  # also in pipeline.sinks
    node_metrics: NodeMetrics | None  # also in pipeline.sinks, when built with metrics
    checkpoint: Checkpoint | None  # found in the store; pass to pipeline.start()


def build_pipeline(settings: PipelineSettings, registry: JobRegistry, *,
                   with_metrics: bool) -> Assembly:
    """The node's pipeline with its store; shared by the daemon and embedded mode.

    ``with_metrics``: the node agent's build (Prometheus node metrics, a spool for store
    outages, the lease taken as ``agent``); else embedded mode's (neither, ``embedded``).
    """
    # Imported here: the store and prometheus_client cost start-up time that a command
    # importing this module for its names alone should not pay.
    from joulestat.attribution.discovery import ScanCache, sync_registry
    from joulestat.attribution.kube import pods_for
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

    procfs_root = settings.host.procfs_root
    sensors = build_sensors(settings.devices, time.monotonic(),
                            detect_cloud(settings.devices.sysfs_root))
    sampler = Sampler(sensors)
    node = detect_node_info(settings.node, read_cpu_model(procfs_root), __version__)
    devices = sampler.describe()
    log.info(
        "node %s (%s, region %s, cpu %s); sensors: %s",
        node.node, node.instance_type, node.region or "unknown", node.cpu_model,
        ", ".join(f"{d.component}/{d.device}={d.source}" for d in devices),
    )
    cpu_model = cpu_estimator_of(sensors)
    kinds = settings.attribution.discover
    scan_cache = ScanCache()  # a scan reads only processes new since the last one
    # names pods namespace/pod (None: pod-<uid8>)
    pods = pods_for(settings.attribution, node.node)
    accounting = JobAccounting(
        registry,
        procfs_root,
        IdleBaselines(known_idle_w_of(sensors)),
        settings.attribution.idle_policy,
        device_processes=device_processes_of(sensors),
        discover=(lambda: sync_registry(registry, procfs_root, kinds, cache=scan_cache,
                                        pods=pods))
        if kinds else None,
        node_cpu_times=(lambda: cpu_model.last_times) if cpu_model is not None else None,
        # Jobs in cgroups of their own are read from <sysfs>/fs/cgroup (agent/host/).
        sysfs_root=settings.host.sysfs_root,
    )
    store = settings.store
    engine = open_engine(store.db, wait_s=store.db_wait_s)
    boot_id = read_boot_id(procfs_root)
    lease = NodeLease(node.node, Writer.this_process(boot_id, "agent" if with_metrics
                                                     else "embedded"), boot_id, procfs_root)
    try:
        writer = StoreWriter(engine, node, devices, raw_retention_s=store.raw_retention_s,
                             flush_interval_s=store.flush_interval_s,
                             spool=_open_spool(store, node.node) if with_metrics else None,
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
                              device_state=device_state_of(sensors),
                              sensor_faults=sampler.sensor_faults_total)
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


def _open_spool(settings: StoreSettings, node: str) -> Spool:
    """The node agent's spool (embedded runs have none: they flush as they end)."""
    from joulestat.store.durability import Spool
    from joulestat.store.engine import data_dir

    directory = settings.spool_dir or (
        data_dir() / "spool" / re.sub(r"[^A-Za-z0-9._-]", "_", node))
    try:
        spool = Spool(directory, settings.spool_max_bytes)
    except OSError as exc:
        raise ConfigError(f"--spool-dir {directory}: {exc.strerror or exc}") from None
    log.info("spool for store outages: %s (up to %d MiB)%s", directory,
             spool.max_bytes // 1024**2,
             f"; {spool.bytes} bytes from before this start" if spool.bytes else "")
    return spool
