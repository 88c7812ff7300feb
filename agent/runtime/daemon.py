"""The agent process: the shared tick loop over the pipeline, plus the threads beside it.

The schedule (start + k * interval, missed slots skipped, a final tick on stop) is
:mod:`joulestat.pipeline.tick_loop`'s, the same as embedded mode's; the daemon adds its per-tick
extras as hooks: how long each tick's work took (``joulestat_agent_tick_seconds``) and,
every minute, forgetting jobs ended longer ago than ``--job-retention``. Beside the
loop: the Prometheus endpoint, the job API, and a store thread that flushes rows so a
slow database delays rows, never ticks. The pipeline is built by :mod:`joulestat.runtime.assembly`.

A store that does not answer at start-up holds none of this up: the loop, the metrics
and the job API start at once, the writer spools, and when the store answers the jobs
that were running before the start are put back between two ticks
(:class:`joulestat.runtime.assembly.LateJobs`). When the writer finds the store can
never take its rows, the store thread stops the loop and :func:`run_agent` raises the
writer's message (exit 2).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from joulestat.attribution.registry import Job, JobRegistry
from joulestat.core.errors import ConfigError
from joulestat.host.serving_address import ServingAddressRule
from joulestat.host.usage import HostSettings
from joulestat.outputs.health import AgentHealth
from joulestat.outputs.prometheus import (
    JobMetrics,
    MetricsSettings,
    NodeMetrics,
    make_registry,
    serve,
)
from joulestat.pipeline.pipeline import Pipeline
from joulestat.pipeline.tick_loop import Every, SharedTick, TickHook, TickLoop
from joulestat.runtime.assembly import PipelineSettings, build_pipeline
from joulestat.runtime.serving import SERVING_CHECKPOINT, ServingUnits

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.api.server import ApiSettings
    from joulestat.runtime.settings import ResolvedSettings

log = logging.getLogger(__name__)

__all__ = ["AgentSettings", "Daemon", "StoreWorker", "run_agent"]

MAINTAIN_EVERY_S = 60.0  # forgetting ended jobs
_M_ARENA_MAX = -8  # glibc's mallopt() parameter (malloc.h)


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """What ``joulestat agent`` runs with: its pipeline's sections, and the two ports'."""

    pipeline: PipelineSettings
    metrics: MetricsSettings
    api: ApiSettings

    @classmethod
    def of(cls, resolved: ResolvedSettings) -> AgentSettings:
        from joulestat.api.server import ApiSettings

        return cls(PipelineSettings.of(resolved), resolved.section(MetricsSettings),
                   resolved.section(ApiSettings))


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
        # Here, not at the top: an agent without a store loads no store module.
        from joulestat.store.maintenance import ROLLUP_EVERY_S

        next_maintain = time.monotonic() + ROLLUP_EVERY_S
        wake = self.writer.wake
        while True:
            # The writer says when it is due: while the store is away that is its
            # reconnect probe (every 2 s), so rows go in within seconds of its return.
            due_in_s = getattr(self.writer, "due_in_s", None)
            wait_s = self._every_s if due_in_s is None else min(
                self._every_s, max(0.05, due_in_s(time.monotonic())))
            wake.wait(wait_s)
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
            if getattr(self.writer, "fatal", None):
                # The store can never take these rows (it came back at another
                # revision, never answered within --db-wait, or another writer holds
                # the node): the agent stops, and run_agent says why.
                self._stop_event.set()
                return


@dataclass
class Daemon:
    """Runs ticks until ``stop`` is set; every sink sees every tick exactly once.

    ``writer``: the store writer the store thread flushes (None: no store thread);
    ``node_metrics``: where each tick's work time is recorded (None: nowhere).
    """

    pipeline: Pipeline
    interval_s: float
    job_retention_s: float = 300.0
    stop: threading.Event = field(default_factory=threading.Event)
    writer: Any = None  # joulestat.store.writer.StoreWriter
    node_metrics: NodeMetrics | None = None
    late_jobs: TickHook | None = None  # joulestat.runtime.assembly.LateJobs
    serving: ServingUnits | None = None  # tokens from serving engines' metrics
    # The pipeline's tick as the job API also takes it on demand (None: the pipeline's).
    ticks: SharedTick | None = None

    def run(self) -> None:
        worker = None
        if self.writer is not None:
            worker = StoreWorker(self.writer, self.stop)
            worker.start()
        log.info("ticking every %.3g s", self.interval_s)
        tick = self.ticks if self.ticks is not None else self.pipeline.tick
        TickLoop(tick, self.interval_s, self.stop, self.hooks()).run()
        if worker is not None:
            self.writer.wake.set()
            worker.join()
        self.pipeline.close()

    def hooks(self) -> list[TickHook]:
        """What runs after each tick beside the pipeline: cheap, on the tick thread."""
        hooks: list[TickHook] = []
        metrics = self.node_metrics
        if metrics is not None:
            hooks.append(lambda _now_s, work_s: metrics.observe_tick_work(work_s))
        hooks.append(Every(MAINTAIN_EVERY_S, lambda _now_s: self._prune_ended_jobs()))
        if self.late_jobs is not None:
            hooks.append(self.late_jobs)
        if self.serving is not None:
            hooks.append(self.serving)
        return hooks

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
            if self.serving is not None:
                self.serving.forget(old)


def _limit_malloc_arenas(arenas: int = 1) -> None:
    """One glibc malloc arena for the whole agent, set before its threads start.

    glibc gives threads arenas of their own (up to 8 per core) as they contend, and each
    arena touched stays in RSS. The agent's threads (HTTP workers, the store thread)
    allocate little and seldom, and Python's small-object allocator runs under the GIL
    anyway, so one arena costs nothing measurable and saves about 0.4 MiB of RSS on a
    busy node (benchmarks/busy_node.py: 49.0 -> 48.6 MiB), against a 50 MiB budget.
    ``MALLOC_ARENA_MAX`` in the environment wins; elsewhere than glibc this does nothing.
    """
    import ctypes
    import os

    if os.environ.get("MALLOC_ARENA_MAX"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_ARENA_MAX, arenas)
    except (OSError, AttributeError) as exc:
        log.debug("malloc arenas left as they are: %s", exc)


def _raise_open_file_limit(wanted: int = 8192) -> None:
    """Raise the soft RLIMIT_NOFILE toward the hard one: each HTTP port caps its open
    connections at a quarter of it (agent/core/http_gate.py), and a 1,024 default halves
    what a flood of idle connections may hold before the oldest are evicted."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            log.debug("cannot raise the open-file limit from %d: %s", soft, exc)


def _api_url(host: str, port: int) -> str | None:
    """The job API's URL as a client on this node would give it (None: no API, or a
    port chosen at start, not known yet)."""
    if not port:
        return None
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host == "::" else (
        f"[{host}]" if ":" in host else host)
    return f"http://{shown}:{port}"


def _serving_rule(host: HostSettings) -> ServingAddressRule:
    """Where jobs' serving metrics may be fetched from: one rule for the job API, which
    refuses a registration that breaks it, and for every fetch."""
    rule = ServingAddressRule(host.serving_metrics_allow, host.procfs_root)
    if rule.allow:
        log.info("serving metrics may be fetched from this node and %s", ", ".join(rule.allow))
    return rule


def run_agent(settings: AgentSettings) -> int:
    from joulestat.api.job_tokens import JOB_SECRET_FILE, load_job_secret
    from joulestat.api.server import ApiServer
    from joulestat.reports.figures import FiguresFromStore

    _limit_malloc_arenas()
    _raise_open_file_limit()
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())

    registry = JobRegistry(max_live_jobs=settings.pipeline.attribution.max_jobs)
    metrics, api_settings = settings.metrics, settings.api
    built = build_pipeline(settings.pipeline, registry, with_metrics=True,
                           api_url=_api_url(api_settings.api_host, api_settings.api_port))
    interval_s = settings.pipeline.tick.interval_s
    pipeline, writer = built.pipeline, built.writer
    serving_rule = _serving_rule(settings.pipeline.host)
    ticks = SharedTick(pipeline.tick)  # the loop's, and the job API's for figures now
    servers: list[Any] = []
    apis: list[Any] = []

    def api_rejections() -> dict[str, int]:
        busy = sum(api.busy_rejections for api in apis)
        return {"busy": busy, "max_jobs": registry.limit_rejections}

    try:
        port = metrics.metrics_port
        if port and built.node_metrics is not None:
            job_metrics = None
            if pipeline.accounting is not None:  # copies the jobs when scraped
                job_metrics = JobMetrics(pipeline.accounting.snapshot,
                                         metrics.job_retention_s, metrics.max_job_series)
            health = AgentHealth(writer, api_rejections)
            host = metrics.metrics_host
            try:
                servers.append(serve(make_registry(built.node_metrics, job_metrics, health),
                                     host, port))
            except OSError as exc:
                raise ConfigError(f"--metrics-port {port} on {host}: "
                                  f"{exc.strerror or exc}") from None
            log.info("metrics on http://%s:%d/metrics", host, port)
        api_port = api_settings.api_port
        if api_port:
            # Job tokens derive from a secret kept beside the spool (0600), so a
            # registrant still ends its job after the agent restarts.
            spool = writer.outage.spool
            secret = load_job_secret(None if spool is None else spool.directory / JOB_SECRET_FILE)
            api = ApiServer(registry, api_settings.api_host, api_port,
                            token=api_settings.api_token, node=pipeline.node.node,
                            interval_s=interval_s, persist=writer.save_job_now,
                            job_secret=secret,
                            procfs_root=settings.pipeline.host.procfs_root,
                            store_state=lambda: _store_state(writer, built.late_jobs),
                            figures=FiguresFromStore(writer.engine, writer.flush,
                                                     ticks=ticks),
                            serving_rule=serving_rule,
                            final_tick=lambda: ticks.since(time.monotonic()),
                            ended_job=_ended_job(writer.engine, pipeline.node.node))
            try:
                api.start()
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            except OSError as exc:
                raise ConfigError(f"--api-port {api_port} on {api_settings.api_host}: "
                                  f"{exc.strerror or exc}") from None
            servers.append(api)
            apis.append(api)
            log.info("job API on http://%s:%d/v1/jobs", api_settings.api_host, api.port)
    except ConfigError:
        pipeline.close()
        for server in servers:
            _close(server)
        raise

    serving = ServingUnits(registry, interval_s, rule=serving_rule,
                           last_tick=lambda: pipeline.last_tick)
    # Resumed from the checkpoint, the first tick covers the time the agent was down, and
    # a serving job's tokens of that time count from the engine's counters it last saw.
    pipeline.checkpoint_parts[SERVING_CHECKPOINT] = serving
    pipeline.start(built.checkpoint, now_s=time.time())
    serving.start()
    Daemon(pipeline, interval_s, metrics.job_retention_s, stop,
           writer=writer, node_metrics=built.node_metrics, late_jobs=built.late_jobs,
           serving=serving, ticks=ticks).run()
    serving.close()
    for server in servers:
        _close(server)
    if writer.fatal is not None:
        raise ConfigError(writer.fatal)
    log.info("stopped cleanly")
    return 0


def _ended_job(engine: Any, node: str) -> Callable[[str], Job | None]:
    """For the job API: a job that ended on this node, as stored, so final (None: not
    there, or the store cannot be read now, which the API answers as unknown)."""
    from joulestat.store.durability import load_ended_job
    from joulestat.store.engine import StoreError

    def ended_job(job_id: str) -> Job | None:
        try:
            stored = load_ended_job(engine, node, job_id)
        except StoreError as exc:
            log.debug("job API: job %s not read from the store: %s", job_id, exc)
            return None
        if stored is None:
            return None
        job = Job.from_stored(stored)
        job.final = True  # ended and stored: its figures will not change
        return job

    return ended_job


def _store_state(writer: Any, late_jobs: Any) -> str:
    """The store as the job API's health answer says it: ``waiting`` (not answered
    since start-up: the jobs running before the start are not known yet, and requests
    naming one are answered 503), ``away`` (an outage after start), else ``up``."""
    if writer.waiting or (late_jobs is not None and late_jobs.pending):
        return "waiting"
    return "away" if writer.failing else "up"


def _close(server: Any) -> None:
    close = getattr(server, "close", None) or server.server_close
    close()
