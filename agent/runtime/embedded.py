"""Embedded mode: measure one job in-process when no agent runs on the node.

``joulestat run`` and the in-process client fall back to this. It builds the same
:class:`joulestat.pipeline.pipeline.Pipeline` as the daemon
(:mod:`joulestat.runtime.assembly`: same sensors, attribution and store writer) and
ticks it on a background thread with the same loop (:mod:`joulestat.pipeline.tick_loop`),
so a job measured here and one measured by an agent on the same trace get the same
energy. Having no store thread, it flushes the writer from
that loop. It saves no crash checkpoint: that belongs to the node's agent. It lives at
the top of the package, not in ``joulestat.attribution``, because it assembles a whole pipeline
with its store.

It also serves the job API on a loopback port of its own, with a random token, so the
programs the job starts (``JOULESTAT_AGENT_URL``/``JOULESTAT_API_TOKEN``/
``JOULESTAT_JOB_ID`` in their environment, see :mod:`joulestat.client.context`) count their
units into this job instead of starting a second in-process measurement.
"""

from __future__ import annotations

import logging
import secrets
import threading
import uuid
from typing import TYPE_CHECKING, Any

from joulestat.attribution.agent_labels import validate_agent_labels
from joulestat.attribution.registry import Job, JobRegistry
from joulestat.core.validation import (
    validate_job_id,
    validate_kind,
    validate_labels,
    validate_name,
    validate_pids,
)
from joulestat.pipeline.tick_loop import Every, SharedTick, TickLoop

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.reports.figures import FiguresFromStore
    from joulestat.runtime.assembly import PipelineSettings
    from joulestat.runtime.settings import ResolvedSettings

log = logging.getLogger(__name__)

EMBEDDED_OPTIONS = (
    "config", "db", "interval", "sysfs_root", "procfs_root", "node", "instance_type",
    "region", "cloud_metadata", "flush_interval", "raw_retention", "replay", "nvml",
    "idle_policy",
)


def embedded_settings(resolved: ResolvedSettings | None = None) -> PipelineSettings:
    """An embedded run's pipeline sections: from ``resolved`` (a command's own settings,
    flags included), else from env and the TOML file. An embedded run discovers no jobs
    (the options it does not offer keep their defaults) and waits for no store (its
    program is waiting: a store that does not answer is said at once)."""
    from joulestat.runtime.assembly import PipelineSettings
    from joulestat.runtime.settings import resolve

    if resolved is None:
        resolved = resolve({}, EMBEDDED_OPTIONS)
    return PipelineSettings.of(resolved, db_wait_s=0.0)


class EmbeddedJob:
    def __init__(
        self,
        name: str,
        kind: str,
        labels: dict[str, str] | None,
        pids: set[int],
        job_id: str | None = None,
        settings: PipelineSettings | None = None,
        reason: str = "no agent answered",
        agent_labels: dict[str, str] | None = None,
    ) -> None:
        # Its accounting records the idle policy it attributes under on every job here
        # (the agent label idle_policy), as an agent's does.
        self._registry = JobRegistry()
        # Validate before any sensor is opened: bad input fails fast and clearly. The job
        # itself is registered once the pipeline ticks, so its lifetime starts with
        # measurement, as it does under an agent that is already running.
        self._fields = (validate_name(name), validate_kind(kind), sorted(validate_pids(pids)),
                        validate_labels(labels),
                        validate_job_id(job_id) if job_id is not None else uuid.uuid4().hex)
        self._agent_labels = validate_agent_labels(agent_labels)
        self.id = self._fields[4]
        self.job: Job | None = None
        self._settings = settings if settings is not None else embedded_settings()
        # Where serving metrics may be fetched from: this node only (an embedded run
        # offers no allowlist; an agent does, --serving-metrics-allow).
        from joulestat.host.serving_address import ServingAddressRule

        host = self._settings.host
        self._serving_rule = ServingAddressRule(host.serving_metrics_allow, host.procfs_root)
        self._pipeline: Any = None
        self._writer: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reason = reason
        self._api: Any = None
        self._figures: FiguresFromStore | None = None
        self._ticks: SharedTick | None = None
        self.api_url: str | None = None
        self.api_token = secrets.token_urlsafe(24)

    @property
    def job_token(self) -> str | None:
        """This job's credential at its own API (the registrant's, given to children so
        their track() and count() may count into it); None before start."""
        return None if self._api is None or self.job is None else self._api.job_token(self.id)

    def start(self) -> EmbeddedJob:
        """Open the sensors and the store, and start measuring; what cannot be opened (a
        store that does not answer, a sensor refused) raises, with nothing left open:
        the in-process client then goes on without measuring, and says why."""
        try:
            return self._start()
        except BaseException:
            self._close_partial()
            raise

    def _start(self) -> EmbeddedJob:
        from joulestat.api.server import ApiServer
        from joulestat.reports.figures import FiguresFromStore
        from joulestat.runtime.assembly import build_pipeline

        built = build_pipeline(self._settings, self._registry, with_metrics=False)
        self._pipeline, self._writer = built.pipeline, built.writer
        self._pipeline.save_checkpoints = False
        if self._pipeline.accounting is not None:  # stderr here is the user's
            self._pipeline.accounting.host.source_log_level = logging.DEBUG
        self._pipeline.start(None)
        name, kind, pids, labels, job_id = self._fields
        self.job = self._registry.register(name, kind, pids, labels, job_id, origin="embedded",
                                           agent_labels=self._agent_labels)
        self._ticks = SharedTick(self._pipeline.tick)  # the loop's, and figures' now
        self._figures = FiguresFromStore(self._writer.engine, self._writer.flush,
                                         ticks=self._ticks)
        self._api = ApiServer(self._registry, "127.0.0.1", 0, token=self.api_token,
                              node=self._pipeline.node.node,
                              interval_s=self._settings.tick.interval_s, mode="embedded",
                              figures=self._figures, serving_rule=self._serving_rule)
        self._api.start()
        self.api_url = f"http://127.0.0.1:{self._api.port}"
        self._thread = threading.Thread(target=self._loop, name="joulestat-embedded",
                                        daemon=True)
        self._thread.start()
        log.info("%s: measuring job %s in-process (embedded mode)", self._reason, self.id)
        return self

    def _close_partial(self) -> None:
        """Close what a failed :meth:`start` opened; never raises over its error."""
        steps = [self._api.close if self._api is not None else None,
                 # stored ended, not left running
                 (lambda: self._registry.end(self.id)) if self.job is not None else None,
                 self._pipeline.close if self._pipeline is not None else None]
        for step in steps:
            try:
                if step is not None:
                    step()
            except Exception:
                log.debug("closing a failed in-process measurement", exc_info=True)
        self._api = self._pipeline = self._writer = None
        self.api_url = None

    def _loop(self) -> None:
        from joulestat.runtime.serving import ServingUnits

        writer = self._writer

        def flush(now_s: float) -> None:
            writer.wake.clear()
            writer.maybe_flush(now_s)

        # Flush every flush interval, or at once when the writer asks (a job ended and
        # its final figures should be stored before anyone reads them).
        flush_hook = Every(writer.flush_interval_s, flush, asked=writer.wake.is_set)
        pipeline = self._pipeline
        serving = ServingUnits(self._registry, self._settings.tick.interval_s,
                               rule=self._serving_rule,
                               last_tick=lambda: pipeline.last_tick if pipeline else None)
        serving.start()
        try:
            assert self._ticks is not None, "the loop runs after start()"
            TickLoop(self._ticks, self._settings.tick.interval_s, self._stop,
                     [flush_hook, serving]).run()
        finally:
            serving.close()

    def add_pid(self, pid: int, labels: dict[str, str] | None = None,
                agent_labels: dict[str, str] | None = None) -> None:
        """Attach a process started after :meth:`start` (``joulestat run`` spawns then adds);
        ``labels`` and ``agent_labels``, when given, are merged into the job's (the run's
        ``cpu_source`` agent label changes when CMD could not enter its cgroup)."""
        name, kind, _pids, start_labels, job_id = self._fields
        labels = validate_labels(labels) if labels is not None else start_labels
        self._registry.register(name, kind, [pid], labels, job_id, origin="embedded",
                                agent_labels=agent_labels)

    def count(self, unit: str, count: float) -> None:
        self._registry.count(self.id, unit, count)

    def end(self, cpu_s: float | None = None) -> dict[str, Any]:
        """Stop sampling after one last tick that covers the job's final moments."""
        # The API first: no job registers behind the sweep below, and every unit
        # counted through it until now is in the final tick.
        if self._api is not None:
            self._api.close()
        self._registry.end(self.id, cpu_s=cpu_s)
        for other in self._registry.jobs(running_only=True):
            # Jobs its programs registered apart through its API: nothing measures them
            # once this one stops, so they end with it.
            log.info("job %s (%s) ends with the in-process measurement of %s",
                     other.name, other.id, self.id)
            self._registry.end(other.id)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()  # the loop's final tick covers the job's last moments
        if self._pipeline is not None:
            self._pipeline.close()
        self._figures = None  # its engine is closed with the pipeline
        assert self.job is not None, "end() before start()"
        return self.job.to_json()

    def figures(self) -> FiguresFromStore:
        """Where this job's figures and report come from (the integrations ask it, as
        they ask an agent's API): the running store writer's, flushing first; after
        :meth:`end`, a reader of the same store."""
        from joulestat.reports.figures import FiguresFromStore
        from joulestat.store.access import open_reader_engine

        if self._figures is None:
            self._figures = FiguresFromStore(open_reader_engine(self._settings.store.db))
        return self._figures
