"""The jobs this node knows about.

A job arrives through the HTTP API, ``joulestat run``, the in-process client or
discovery; whichever way, it passes through :func:`JobRegistry.register`, which checks
it with :mod:`joulestat.core.validation`, so it is refused the same way
everywhere, with a message saying which field is wrong.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from joulestat.attribution.agent_labels import merge_agent_labels, validate_agent_labels
from joulestat.core.model_units import BUSY, MAX_MODELS_PER_JOB, split_key
from joulestat.core.records import JobRecord, StoredJob
from joulestat.core.serving_trace import ServingTrace
from joulestat.core.validation import (
    MAX_LABELS,
    MAX_UNIT_COUNT,
    MAX_UNITS_PER_JOB,
    JobConflict,
    JobError,
    JobLimit,
    JobNotFound,
    validate_busy_total,
    validate_instance_type,
    validate_job_id,
    validate_kind,
    validate_labels,
    validate_name,
    validate_pids,
    validate_units,
)

__all__ = ["Job", "JobRegistry"]

# The origin `joulestat run` registers its jobs with (agent/cli/run.py).
RUN_ORIGIN = "run"


@dataclass
class Job:
    """One job as this node sees it; energy is what this node attributed to it."""

    id: str
    name: str
    kind: str
    labels: dict[str, str]
    pids: set[int]
    started_s: float
    origin: str = "api"  # api, run, client, discovered:<scheduler>
    ended_s: float | None = None
    # The instance type the job says it runs as (``joulestat demo``'s placeholder setups,
    # a run told --instance-type); None: the node's. Stored on the job's node row, where
    # pricing and comparisons read a job's type.
    instance_type: str | None = None
    units: dict[str, float] = field(default_factory=dict)
    # Per model, what it counted and its busy seconds (``busy_s``), from the per-model
    # units (joulestat.core.model_units); kept apart so ``units`` lists only plain units.
    models: dict[str, dict[str, float]] = field(default_factory=dict)
    # CLOCK_BOOTTIME at registration: processes started before it (minus a second of
    # slack) were running before the job was known, so only their later CPU counts.
    registered_boot_s: float = field(default_factory=lambda: time.clock_gettime(
        time.CLOCK_BOOTTIME))
    # Total CPU seconds of the job's processes when it ended, from the wrapper's
    # wait4() rusage: it lets the last tick count CPU used after the last scan.
    final_cpu_s: float | None = None
    dynamic_j: dict[str, float] = field(default_factory=dict)  # per component
    idle_j: dict[str, float] = field(default_factory=dict)
    # True once the job has ended, the tick covering its end has been attributed and
    # those rows are committed to the store: its figures will not change any more.
    # `joulestat run` waits for it so its summary is the stored total. Set through
    # JobRegistry.mark_final, by whoever stores the ticks (or by the pipeline when
    # nothing does): the store is handed records, never this object.
    final: bool = False
    # What joulestat recorded about how it measured the job (cpu_source, idle_policy:
    # joulestat.attribution.agent_labels), apart from the user's labels.
    agent_labels: dict[str, str] = field(default_factory=dict)
    # A serving job's latency on this node, per model and kind (ttft, itl, e2e): JSON-able
    # histograms (joulestat.runtime.serving), stored on its job_nodes row.
    latency: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # A serving job's load over time on this node (joulestat.runtime.serving), stored
    # on its job_nodes row; replaced whole, never changed in place.
    serving_trace: ServingTrace | None = None

    @property
    def status(self) -> str:
        return "running" if self.ended_s is None else "ended"

    @property
    def energy_j(self) -> float:
        return sum(self.dynamic_j.values()) + sum(self.idle_j.values())

    def record(self) -> JobRecord:
        """A snapshot of what the store keeps of this job on this node (call it under
        the registry's lock: ticks and requests change the job). The labels and pids
        are copied; ``latency`` is shared, as the registry only ever replaces it whole
        (:meth:`JobRegistry.set_latency`), never changes it in place."""
        return JobRecord(
            id=self.id, name=self.name, kind=self.kind, labels=dict(self.labels),
            pids=frozenset(self.pids), started_s=self.started_s, origin=self.origin,
            ended_s=self.ended_s, instance_type=self.instance_type,
            agent_labels=dict(self.agent_labels), latency=self.latency,
            serving_trace=self.serving_trace)

    @classmethod
    def from_stored(cls, stored: StoredJob) -> Job:
        """A running job of before a restart, as its node stored it, to put back in the
        registry (:meth:`JobRegistry.restore`): it goes on from the energy and units
        the node recorded for it."""
        record = stored.record
        return cls(
            id=record.id, name=record.name, kind=record.kind, labels=dict(record.labels),
            pids=set(record.pids), started_s=record.started_s, origin=record.origin,
            ended_s=record.ended_s, instance_type=record.instance_type,
            units=dict(stored.units), dynamic_j=dict(stored.dynamic_j),
            idle_j=dict(stored.idle_j), agent_labels=dict(record.agent_labels),
            latency=dict(record.latency), serving_trace=record.serving_trace)

    def to_json(self) -> dict[str, Any]:
        components = sorted(set(self.dynamic_j) | set(self.idle_j))
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "labels": dict(self.labels),
            "agent_labels": dict(sorted(self.agent_labels.items())),
            "pids": sorted(self.pids),
            "origin": self.origin,
            "instance_type": self.instance_type,
            "status": self.status,
            "started_at": self.started_s,
            "ended_at": self.ended_s,
            "units": dict(self.units),
            "models": {model: dict(counts) for model, counts in sorted(self.models.items())},
            "energy_j": {
                c: self.dynamic_j.get(c, 0.0) + self.idle_j.get(c, 0.0) for c in components
            },
            "dynamic_energy_j": sum(self.dynamic_j.values()),
            "idle_energy_j": sum(self.idle_j.values()),
            "total_energy_j": self.energy_j,
            "final": self.final,
        }


class JobRegistry:
    """Thread-safe: the API thread registers and counts, the tick loop attributes."""

    def __init__(self, clock: Callable[[], float] = time.time,
                 max_live_jobs: int | None = None) -> None:
        self._clock = clock
        # A cap on jobs not yet ended: each costs memory and per-scrape work, and a
        # client registering in a loop must not take the node's agent down with it.
        self.max_live_jobs = max_live_jobs
        self.limit_rejections = 0  # registrations refused at the cap (a health metric)
        self._live: set[str] = set()
        # Jobs with processes: the only ones a tick attributes energy to, so per-tick
        # work follows them, not every job registered (a job with no pids only counts).
        # One more: a `joulestat run` job, registered just before its command starts
        # (its token must be in the command's environment) and given the command's
        # process a moment later; it lives from its registration, so it is measured from
        # then (an idle share, no CPU yet), or the moment between would be its lifetime
        # without its energy (tens of ms on a loaded machine).
        self._measured: dict[str, Job] = {}
        # Ended jobs whose final tick has not been attributed yet (see take_finished).
        self._unsettled: dict[str, Job] = {}
        # Public so the tick loop can update job totals and a scrape can read them
        # consistently; re-entrant so registry calls may be made while holding it.
        self.lock = threading.RLock()
        self._lock = self.lock
        self._jobs: dict[str, Job] = {}
        # What changed since the tick loop last asked (take_changes): the registry is
        # where jobs change, so it keeps the list rather than the loop diffing every job.
        self._changed: dict[str, Job] = {}
        self._unit_deltas: dict[str, dict[str, float]] = {}
        # Agent labels this registry's owner records on every job it holds: the idle
        # policy it attributes under (set_own_agent_labels).
        self._own_agent_labels: dict[str, str] = {}

    def set_own_agent_labels(self, agent_labels: dict[str, str]) -> None:
        """Record ``agent_labels`` on every job held, and on every one registered or
        restored from now on. The accounting calls it with its idle policy
        (:func:`joulestat.attribution.agent_labels.policy_labels`): whatever way a job
        comes in, its stored record then says under which policy it was attributed. A
        job that held another policy becomes ``mixed``
        (:func:`~joulestat.attribution.agent_labels.merge_agent_labels`)."""
        with self._lock:
            self._own_agent_labels = dict(agent_labels)
            for job in self._jobs.values():
                merged = merge_agent_labels(job.agent_labels, agent_labels)
                if merged != job.agent_labels:
                    job.agent_labels = merged
                    self._changed[job.id] = job

    def register(
        self,
        name: Any,
        kind: Any = "other",
        pids: Any = None,
        labels: Any = None,
        job_id: Any = None,
        origin: str = "api",
        instance_type: Any = None,
        agent_labels: Any = None,
    ) -> Job:
        """A new job, or the running one with this ``job_id`` (its pids are added).

        Registering the same ``job_id`` twice is how a multi-process or multi-node job
        joins up, so it is not an error; a different name or kind under one id is. The
        labels given are merged into the job's key by key (a key given again takes the
        new value, a key not given keeps its own; none is removed), so a load test can
        add its latency percentiles at a stage's end; past :data:`MAX_LABELS` in all the
        registration is refused. Registering an ended job's id again reopens it.
        ``instance_type``, when given, is what the job runs as on this node (a later
        registration that gives one replaces it); else the node's own.
        ``agent_labels`` (``cpu_source`` only: :mod:`joulestat.attribution.agent_labels`)
        merge the same way, apart from the labels and not counted against their limit;
        the registry adds its own (:meth:`set_own_agent_labels`).
        """
        name, kind = validate_name(name), validate_kind(kind)
        own_type = validate_instance_type(instance_type) if instance_type is not None else None
        pid_set, label_map = validate_pids(pids), validate_labels(labels)
        agent_map = validate_agent_labels(agent_labels)
        job_id = validate_job_id(job_id) if job_id is not None else uuid.uuid4().hex
        with self._lock:
            existing = self._jobs.get(job_id)
            if existing is not None:
                if (existing.name, existing.kind) != (name, kind):
                    raise JobConflict(
                        f"job_id {job_id!r} is already {existing.kind} job {existing.name!r}"
                    )
                merged = len(existing.labels.keys() | label_map.keys())
                if merged > MAX_LABELS:
                    raise JobError(f"labels: job {job_id!r} would have {merged} labels with "
                                   f"these, over the limit of {MAX_LABELS}")
                agent_merged = merge_agent_labels(existing.agent_labels, agent_map)
                if (not pid_set <= existing.pids or existing.ended_s is not None
                        or any(existing.labels.get(k) != v for k, v in label_map.items())
                        or (own_type is not None and own_type != existing.instance_type)
                        or agent_merged != existing.agent_labels):
                    if existing.ended_s is not None:
                        self._admit(job_id)
                        self._unsettled.pop(job_id, None)
                    existing.pids |= pid_set
                    if existing.pids:
                        self._measured[job_id] = existing
                    existing.labels.update(label_map)
                    if own_type is not None:
                        existing.instance_type = own_type
                    existing.agent_labels = agent_merged
                    existing.ended_s = None
                    existing.final = False
                    self._changed[job_id] = existing
                return existing
            self._admit(job_id)
            job = Job(job_id, name, kind, label_map, pid_set, self._clock(), origin,
                      instance_type=own_type,
                      agent_labels={**agent_map, **self._own_agent_labels})
            self._jobs[job_id] = job
            if pid_set or origin == RUN_ORIGIN:
                self._measured[job_id] = job
            self._changed[job_id] = job
            return job

    def _admit(self, job_id: str) -> None:
        """Count ``job_id`` as live, or refuse it past the cap (caller holds the lock)."""
        cap = self.max_live_jobs
        if cap is not None and job_id not in self._live and len(self._live) >= cap:
            self.limit_rejections += 1
            raise JobLimit(f"the agent already tracks {len(self._live)} running jobs, its "
                           f"limit (--max-jobs {cap}): end some, or raise the limit")
        self._live.add(job_id)

    def restore(self, job: Job) -> None:
        """Put back a job loaded from the store after a restart (never refused); it gets
        this registry's own agent labels (an idle policy other than the one it was
        attributed under before makes it ``mixed``)."""
        with self._lock:
            if job.id not in self._jobs:
                job.agent_labels = merge_agent_labels(job.agent_labels,
                                                      self._own_agent_labels)
                self._jobs[job.id] = job
                self._changed[job.id] = job
                if job.ended_s is None:
                    self._live.add(job.id)
                else:  # ended after the last stored tick: its last ticks are still due
                    self._unsettled[job.id] = job
                if job.pids:
                    self._measured[job.id] = job

    def get(self, job_id: str) -> Job:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise JobNotFound(f"no job with id {job_id!r}")
        return job

    def set_latency(self, job_id: str, latency: dict[str, dict[str, dict[str, Any]]]) -> None:
        """Replace a serving job's latency histograms (JSON-able, per model and kind);
        they are stored with the job's next save. JobNotFound for an unknown id."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                raise JobNotFound(f"no job with id {job_id!r}")
            if job.latency != latency:
                job.latency = latency
                self._changed[job_id] = job

    def set_serving_trace(self, job_id: str, trace: ServingTrace) -> None:
        """Replace a serving job's trace; stored with the job's next save. JobNotFound
        for an unknown id."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                raise JobNotFound(f"no job with id {job_id!r}")
            job.serving_trace = trace
            self._changed[job_id] = job

    def count(self, job_id: str, unit: Any, count: Any) -> Job:
        """Add ``count`` of ``unit`` to a running job. A per-model unit
        (``inference@model-a``, :mod:`joulestat.core.model_units`) is kept per model and also
        added to the plain unit (``inference``), except ``busy_s@model-a``; every cap is
        checked before anything is added."""
        unit, amount = validate_units(unit, count)
        base, model = split_key(unit) or (unit, None)
        with self._lock:
            job = self.get(job_id)
            if job.ended_s is not None:
                raise JobConflict(f"job {job_id!r} has ended: units must be counted before "
                                  "its end")
            if model is not None and model not in job.models and (
                    len(job.models) >= MAX_MODELS_PER_JOB):
                raise JobError(f"unit: job {job_id!r} already counts for "
                               f"{MAX_MODELS_PER_JOB} models")
            plain = None if base == BUSY else _added(job.units, base, amount, job_id,
                                                     MAX_UNITS_PER_JOB)
            by_model = None if model is None else _added(job.models.get(model, {}), base,
                                                         amount, job_id, None, unit)
            if base == BUSY and by_model is not None:
                validate_busy_total(by_model, self._clock() - job.started_s)
            deltas = self._unit_deltas.setdefault(job_id, {})
            if plain is not None:
                job.units[base] = plain
                deltas[base] = deltas.get(base, 0.0) + amount
            if model is not None and by_model is not None:
                job.models.setdefault(model, {})[base] = by_model
                deltas[unit] = deltas.get(unit, 0.0) + amount
            return job

    def end(self, job_id: str, at_s: float | None = None, cpu_s: Any = None) -> Job:
        if cpu_s is not None and (isinstance(cpu_s, bool) or not isinstance(cpu_s, int | float)
                                  or not math.isfinite(cpu_s) or cpu_s < 0):
            raise JobError(f"cpu_s: expected a non-negative number of seconds, got {cpu_s!r}")
        with self._lock:
            job = self.get(job_id)
            if job.ended_s is None:
                self._live.discard(job_id)
                self._unsettled[job_id] = job
                job.ended_s = self._clock() if at_s is None else at_s
                if cpu_s is not None:
                    job.final_cpu_s = float(cpu_s)
                self._changed[job_id] = job
            return job

    def measured_jobs(self) -> list[Job]:
        """Jobs with processes (running, or ended and not yet forgotten), and `run` jobs
        waiting for their command's process."""
        with self._lock:
            return list(self._measured.values())

    def take_finished(self, until_s: float) -> list[Job]:
        """Ended jobs whose end is at or before ``until_s`` (a tick's end), once each."""
        with self._lock:
            done = [j for j in self._unsettled.values()
                    if j.ended_s is not None and j.ended_s <= until_s]
            for job in done:
                del self._unsettled[job.id]
        return done

    @property
    def live_count(self) -> int:
        return len(self._live)

    def jobs(self, running_only: bool = False) -> list[Job]:
        with self._lock:
            jobs = list(self._jobs.values())
        return [j for j in jobs if not running_only or j.ended_s is None]

    def set_pids(self, job_id: str, pids: Any) -> None:
        """Replace a discovered job's processes (discovery sees the whole set each scan)."""
        pid_set = validate_pids(sorted(pids))
        with self._lock:
            job = self.get(job_id)
            if job.pids != pid_set:
                job.pids = pid_set
                self._changed[job_id] = job
                if pid_set:
                    self._measured[job_id] = job

    def take_changes(self) -> tuple[list[JobRecord], dict[str, dict[str, float]]]:
        """Jobs registered, ended or re-labelled, as records for the store (snapshots
        taken here, under the lock, once per change), and units counted, since the last
        call."""
        with self._lock:
            changed = [job.record() for job in self._changed.values()]
            self._changed = {}
            units, self._unit_deltas = self._unit_deltas, {}
        return changed, units

    def mark_final(self, job_ids: Iterable[str]) -> None:
        """Make these ended jobs ``final``: their figures will not change any more.

        Called by whoever stores ticks once the rows of the tick that covered each
        job's end are committed (the store writer, from its thread, handed this method
        by the runtime), or by the pipeline right after that tick when nothing stores
        ticks. By id, so the store never holds the registry's live jobs; a job
        reopened since (registered again, running) is left as it is, and an id this
        registry no longer holds is skipped."""
        with self._lock:
            for job_id in job_ids:
                job = self._jobs.get(job_id)
                if job is not None and job.ended_s is not None:
                    job.final = True

    def forget(self, job_ids: Iterable[str]) -> None:
        with self._lock:
            for job_id in job_ids:
                self._jobs.pop(job_id, None)
                self._live.discard(job_id)
                self._measured.pop(job_id, None)
                self._unsettled.pop(job_id, None)


def _added(counts: dict[str, float], unit: str, amount: float, job_id: str,
           max_kinds: int | None, shown: str | None = None) -> float:
    """``counts[unit] + amount``, or JobError past the per-unit total or ``max_kinds``."""
    total = counts.get(unit, 0.0) + amount
    if total > MAX_UNIT_COUNT:
        raise JobError(f"count: job {job_id!r} would have {total:g} {shown or unit}, over "
                       f"the limit of {MAX_UNIT_COUNT:g} per unit")
    if max_kinds is not None and unit not in counts and len(counts) >= max_kinds:
        raise JobError(f"unit: job {job_id!r} already counts {max_kinds} kinds of unit")
    return total
