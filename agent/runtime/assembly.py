"""Building a node's pipeline from settings: sensors, accounting, sinks and the store.

Both the daemon (:mod:`joulestat.runtime.daemon`) and embedded mode
(:mod:`joulestat.runtime.embedded`) build their pipeline here, so a job measured by
either runs through the same sensors, attribution and writer; keeping it below both is
what lets embedded mode build one without importing the daemon.

The pipeline itself names no sink (:mod:`joulestat.pipeline.pipeline`); what is built here is
returned as an :class:`Assembly`, which also names the parts that other threads use
directly: the store thread flushes the writer, the job API persists new jobs through
it, the health metrics read its counters, and the Prometheus endpoint serves the node
metrics.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from joulestat.attribution.accounting import JobAccounting
from joulestat.attribution.idle import IdleBaselines
from joulestat.attribution.registry import Job, JobRegistry
from joulestat.core.errors import ConfigError
from joulestat.core.losses import LossReason
from joulestat.core.redact import redact_url
from joulestat.core.version import __version__
from joulestat.devices.factory import (
    build_sensors,
    cpu_estimator_of,
    device_processes_of,
    device_state_of,
    known_idle_w_of,
)
from joulestat.host.identity import NodeSettings, detect_cloud, detect_node_info
from joulestat.pipeline.pipeline import CHECKPOINT_MAX_AGE_S, Pipeline, read_boot_id
from joulestat.pipeline.sampler import Sampler

if TYPE_CHECKING:  # pragma: no cover - typing only
    from sqlalchemy.engine import Engine

    from joulestat.attribution.accounting import AttributionSettings
    from joulestat.core.records import NodeInfo, StoredJob
    from joulestat.devices.factory import DeviceSettings
    from joulestat.host.usage import HostSettings
    from joulestat.outputs.otlp import OtlpExporter, OtlpSettings
    from joulestat.outputs.prometheus import NodeMetrics
    from joulestat.pipeline.sink import Sink
    from joulestat.pipeline.tick_loop import TickSettings
    from joulestat.runtime.settings import ResolvedSettings
    from joulestat.store.access import StoreWait
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
    # The agent's OTLP export (None, or no endpoint: none); embedded mode exports nothing.
    otlp: OtlpSettings | None = None

    @classmethod
    def of(cls, resolved: ResolvedSettings, **store: float) -> PipelineSettings:
        """The sections of a command's resolved settings; ``store`` overrides fields of
        the store's section (embedded mode waits for no store: ``db_wait_s=0``)."""
        from joulestat.attribution.accounting import AttributionSettings
        from joulestat.devices.factory import DeviceSettings
        from joulestat.host.usage import HostSettings
        from joulestat.outputs.otlp import OtlpSettings
        from joulestat.pipeline.tick_loop import TickSettings
        from joulestat.store.writer import StoreSettings

        return cls(resolved.section(DeviceSettings), resolved.section(HostSettings),
                   resolved.section(NodeSettings), resolved.section(AttributionSettings),
                   resolved.section(StoreSettings, **store), resolved.section(TickSettings),
                   resolved.section(OtlpSettings))


@dataclass
class Assembly:
    """A node's pipeline, the checkpoint to start it from, and the sinks used by name.

    ``late_jobs``: when the store did not answer at start (the agent measures while it
    waits), what puts back the jobs that were running before the start once it answers;
    a tick hook (None: the store answered, and they are back already)."""

    pipeline: Pipeline
    writer: StoreWriter  # also in pipeline.sinks
    node_metrics: NodeMetrics | None  # also in pipeline.sinks, when built with metrics
    checkpoint: Checkpoint | None  # found in the store (or spool); pass to pipeline.start()
    late_jobs: LateJobs | None = None
    otlp: OtlpExporter | None = None  # also in pipeline.sinks, when --otlp-endpoint is set


class LateJobs:
    """The jobs that were running before this start, when the store that holds them did
    not answer at start: loaded once it does, put back between two ticks.

    :meth:`load` runs on the store thread as the writer's ``after_open``, after the spool
    is written back (as a start that finds its store loads them after replaying the
    spool, so a job that ended during an earlier outage is not taken for running);
    :meth:`__call__` is a tick hook, so the registry and the accounting change on the
    tick thread, between ticks, never under one.

    What the wait costs them, said in the log: a restored job is measured from its
    return on, so what it drew between this start and then is the node's unattributed
    energy, not its own. A job the registry already holds (registered during the wait,
    or found again by discovery) keeps its live figures.
    """

    def __init__(self, engine: Engine, node: str, registry: JobRegistry,
                 accounting: JobAccounting, cgroup_root: Path) -> None:
        self.engine, self.node, self.cgroup_root = engine, node, cgroup_root
        self.registry, self.accounting = registry, accounting
        self._lock = threading.Lock()
        self._loaded: list[StoredJob] | None = None
        self._done = False
        self.restored = 0
        self.pipeline: Pipeline | None = None  # whose energy since start the wait cost
        self._since_s = time.time()

    @property
    def pending(self) -> bool:
        """True until the jobs are back in the registry (the job API answers 503, not
        404, for a job it does not know meanwhile: it may be one of them)."""
        return not self._done

    def load(self) -> None:
        """Read them (StoreError when the store cannot be read: the writer retries)."""
        from joulestat.store.durability import load_unsettled_jobs

        jobs = load_unsettled_jobs(self.engine, self.node)
        with self._lock:
            self._loaded = jobs

    def __call__(self, _now_s: float, _work_s: float) -> None:
        with self._lock:
            jobs, self._loaded = self._loaded, None
        if jobs is None:
            return
        known = {job.id for job in self.registry.jobs()}
        waited = [stored for stored in jobs if stored.record.id not in known]
        if waited and self.pipeline is not None:
            # Until now the node's energy went to unattributed: the jobs that ran were
            # not in the registry. Said with its amount, and counted (issue 47).
            lost_j, waited_s = self.pipeline.node_energy_j, time.time() - self._since_s
            if self.pipeline.losses is not None:
                self.pipeline.losses.add(LossReason.JOBS_RESTORED_LATE, lost_j, waited_s)
            log.warning("%d job(s) running before the restart restored only now, %.1f s "
                        "after the start, once the store answered: the node's %.1f J "
                        "since the start are unattributed, those jobs' shares of it "
                        "included", len(waited), waited_s, lost_j)
        for stored in jobs:
            record = stored.record
            if record.id in known:
                continue
            # A checkpoint resumed from the spool may hold this job's CPU counters of
            # before the start: its first tick must not take all that time as one tick's.
            self.accounting.forget([record.id])
            self.registry.restore(restored_job(stored, self.cgroup_root))
            self.restored += 1
            log.info("job %s (%s) was running before the restart; tracking it again now "
                     "that the store answers (what it drew while the store was away is "
                     "the node's unattributed energy)", record.name, record.id)
        self._done = True


def restored_job(stored: StoredJob, cgroup_root: Path) -> Job:
    """A job that was running before this start, to put back in the registry, with the
    processes now in the cgroup ``joulestat run`` made for it added to its stored pids:
    a command started just before a crash may have none stored yet, and its cgroup is
    where it is found again (:func:`joulestat.host.cgroup_jobs.pids_in_run_cgroup`)."""
    from joulestat.attribution.agent_labels import CPU_SOURCE
    from joulestat.host.cgroup_jobs import pids_in_run_cgroup

    job = Job.from_stored(stored)
    source = job.agent_labels.get(CPU_SOURCE)
    if job.ended_s is None and source:
        found = pids_in_run_cgroup(cgroup_root, job.id, source) - job.pids
        if found:
            log.info("job %s: processes %s found again in its cgroup (%s)", job.id,
                     ", ".join(map(str, sorted(found)[:5])), source)
            job.pids |= found
    return job


def build_pipeline(settings: PipelineSettings, registry: JobRegistry, *,
                   with_metrics: bool, api_url: str | None = None,
                   monotonic: Callable[[], float] = time.monotonic,
                   wall: Callable[[], float] = time.time) -> Assembly:
    """The node's pipeline with its store; shared by the daemon and embedded mode.

    ``with_metrics``: the node agent's build (Prometheus node metrics, a spool for store
    outages, the lease taken as ``agent``); else embedded mode's (neither, ``embedded``).
    ``api_url``: where the agent's job API will answer, recorded with its lease.
    ``monotonic`` and ``wall``: the clocks the sensors open and the sampler ticks on
    (a test's fake clock: one clock for both, or a counter's first read would lie on
    another time line than its ticks).
    """
    # Imported here: the store and prometheus_client cost start-up time that a command
    # importing this module for its names alone should not pay.
    from joulestat.attribution.discovered import sync_registry
    from joulestat.host.discovery import ScanCache
    from joulestat.host.kube import pods_for
    from joulestat.host.procfs import read_cpu_model
    from joulestat.store.access import open_engine
    from joulestat.store.durability import (
        NodeLease,
        NodeLeaseError,
        Writer,
        load_checkpoint,
        load_unsettled_jobs,
    )
    from joulestat.store.writer import StoreWriter

    otlp = settings.otlp if with_metrics else None
    if otlp is not None and otlp.otlp_endpoint is not None:
        from joulestat.outputs.otlp import check_settings

        check_settings(otlp)  # a missing extra or a bad endpoint stops the start here
    procfs_root = settings.host.procfs_root
    cgroup_root = Path(settings.host.sysfs_root) / "fs" / "cgroup"  # as `joulestat run`'s
    sensors = build_sensors(settings.devices, monotonic(),
                            detect_cloud(settings.devices.sysfs_root))
    sampler = Sampler(sensors, monotonic, wall)
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
    # Embedded mode waits for no store (db_wait_s 0) and has no spool to measure into.
    engine, wait = (_agent_store(store) if with_metrics
                    else (open_engine(store.db, wait_s=store.db_wait_s), None))
    boot_id = read_boot_id(procfs_root)
    lease = NodeLease(node.node, Writer.this_process(
        boot_id, "agent" if with_metrics else "embedded", api_url, store.flush_interval_s),
        boot_id, procfs_root)
    late_jobs = None
    if wait is not None and accounting is not None:
        late_jobs = LateJobs(engine, node.node, registry, accounting, cgroup_root)
    try:
        spool = _open_spool(store, node.node) if with_metrics else None
        writer = StoreWriter(engine, node, devices, raw_retention_s=store.raw_retention_s,
                             flush_interval_s=store.flush_interval_s, spool=spool,
                             lease=lease, wait=wait,
                             after_open=late_jobs.load if late_jobs is not None else None,
                             # the registry's jobs become final once their rows are stored
                             on_final=registry.mark_final)
    except NodeLeaseError as exc:
        engine.dispose()
        raise ConfigError(str(exc)) from None
    except ConfigError:
        engine.dispose()
        raise
    if wait is not None:
        assert spool is not None
        log.warning(
            "store %s does not answer (%s): measuring meanwhile, with metrics and the job "
            "API served; rows wait in the spool %s and go in once it answers (probed every "
            "2 s, for up to --db-wait %.0f s, then the agent stops); the jobs running "
            "before this start are restored then", redact_url(wait.url), wait.reason,
            spool.directory, wait.wait_s)
        checkpoint = _spool_checkpoint(spool)
        if checkpoint is None:
            log.warning("no checkpoint in the spool: if an agent ran on this boot less than "
                        "%.0f s ago, the time since it stopped is not measured (its "
                        "checkpoint is in the store)", CHECKPOINT_MAX_AGE_S)
        metrics = _node_metrics(node, sampler, sensors, devices) if with_metrics else None
        exporter = _otlp_exporter(otlp, node, metrics, accounting)
        pipeline = Pipeline(sampler, node, accounting, _sinks(metrics, exporter, writer),
                            boot_id, losses=writer.losses)
        late_jobs.pipeline = pipeline
        return Assembly(pipeline, writer, metrics, checkpoint, late_jobs, exporter)
    if writer.spool:  # rows from an outage before the last stop: into the store first, so
        writer.flush()  # the checkpoint and running jobs read below are the latest
    for stored in load_unsettled_jobs(engine, node.node):
        registry.restore(restored_job(stored, cgroup_root))
        log.info("job %s (%s) was running before the restart; still tracking it",
                 stored.record.name, stored.record.id)
    metrics = _node_metrics(node, sampler, sensors, devices) if with_metrics else None
    exporter = _otlp_exporter(otlp, node, metrics, accounting)
    pipeline = Pipeline(sampler, node, accounting, _sinks(metrics, exporter, writer), boot_id,
                        losses=writer.losses)
    checkpoint = load_checkpoint(engine, node.node)
    if checkpoint is not None and lease.replaced is not None \
            and lease.replaced.writer.mode == "embedded":
        log.info("an embedded run wrote this node's ticks since the last checkpoint (%s); "
                 "not resuming from it, so no tick overlaps", lease.replaced.describe())
        checkpoint = None
    return Assembly(pipeline, writer, metrics, checkpoint, otlp=exporter)


def _sinks(metrics: NodeMetrics | None, exporter: OtlpExporter | None,
           writer: StoreWriter) -> list[Sink]:
    """The node metrics first, as before sinks were a list: a tick is exported before it
    is buffered for the store. The OTLP exporter right after them, since it copies what
    they hold after the tick."""
    return [sink for sink in (metrics, exporter, writer) if sink is not None]


def _otlp_exporter(settings: OtlpSettings | None, node: NodeInfo,
                   metrics: NodeMetrics | None, accounting: JobAccounting | None
                   ) -> OtlpExporter | None:
    """The OTLP sink when ``--otlp-endpoint`` is set (the agent only: it reads the node
    metrics the Prometheus endpoint serves, built whether or not that port is open)."""
    if settings is None or settings.otlp_endpoint is None or metrics is None:
        return None
    from joulestat.outputs.otlp import OtlpExporter

    exporter = OtlpExporter(settings, node, metrics.values,
                            accounting.snapshot if accounting is not None else None)
    log.info("exporting OTLP (%s) to %s every %.3g s", settings.otlp_protocol,
             exporter.endpoint, settings.otlp_interval_s)
    return exporter


def _node_metrics(node: Any, sampler: Sampler, sensors: Any, devices: Any) -> NodeMetrics:
    from joulestat.outputs.prometheus import NodeMetrics

    metrics = NodeMetrics(node, sampler.sensor_errors_total,
                          device_state=device_state_of(sensors),
                          sensor_faults=sampler.sensor_faults_total)
    metrics.declare([(d.component, d.device, d.source) for d in devices])
    metrics.describe_devices(devices)
    return metrics


def _agent_store(settings: StoreSettings) -> tuple[Engine, StoreWait | None]:
    """The agent's engine, and a :class:`StoreWait` when the store does not answer yet.

    A URL that can never work and a store at another revision stop the agent here, at
    once, as before. A store that does not answer no longer holds the start: the agent
    measures meanwhile and its writer opens the store when it answers
    (:class:`joulestat.store.access.StoreWait`); ``--db-wait 0`` still gives up at once.
    """
    from joulestat.store.access import (
        StoreAway,
        StoreWait,
        check_writer_store,
        waited_message,
        writer_engine,
    )

    engine, url = writer_engine(settings.db)
    try:
        check_writer_store(engine, url)
    except StoreAway as exc:
        if settings.db_wait_s <= 0:
            engine.dispose()
            raise ConfigError(waited_message(url, "--db", 0.0, exc.detail)) from None
        return engine, StoreWait(engine, url, "--db", settings.db_wait_s, exc)
    except ConfigError:
        engine.dispose()
        raise
    return engine, None


def _spool_checkpoint(spool: Spool) -> Checkpoint | None:
    """The newest checkpoint in the spool, for a start whose store does not answer: the
    spool's segments are newer than the store, so a crash during an outage resumes from
    it (the store's own is read by no one until it answers, and is older)."""
    from joulestat.store.durability import Checkpoint

    found = spool.latest_checkpoint()
    if found is None:
        return None
    try:
        state = found["state"]
        if isinstance(state, str):
            state = json.loads(state)
        if not isinstance(state, dict):
            raise TypeError("not a JSON object")
        return Checkpoint(float(found["saved_s"]), str(found["boot_id"]), state)
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("the spool's checkpoint is unusable (%s); starting afresh", exc)
        return None


def _open_spool(settings: StoreSettings, node: str) -> Spool:
    """The node agent's spool (embedded runs have none: they flush as they end)."""
    from joulestat.store.durability import Spool
    from joulestat.store.engine import data_dir

    directory = settings.spool_dir or (
        data_dir() / "spool" / re.sub(r"[^A-Za-z0-9._-]", "_", node))
    try:
        spool = Spool(directory, settings.spool_max_bytes, exclusive=True)
    except OSError as exc:
        raise ConfigError(f"--spool-dir {directory}: {exc.strerror or exc}") from None
    log.info("spool for store outages: %s (up to %d MiB)%s", directory,
             spool.max_bytes // 1024**2,
             f"; {spool.bytes} bytes from before this start" if spool.bytes else "")
    return spool
