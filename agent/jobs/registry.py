"""The jobs this node knows about, and the validation every way in shares.

A job arrives through the HTTP API, ``joulestat run``, the in-process client or
discovery; whichever way, it passes through :func:`JobRegistry.register`, so a name
with a path separator or a label with a control character is refused the same way
everywhere, with a message saying which field is wrong.
"""

from __future__ import annotations

import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = ("training", "inference", "other")
MAX_NAME_CHARS = 200
MAX_LABELS = 32
MAX_PIDS = 1024
MAX_UNIT_COUNT = 1e15  # per call, and per job and unit in total
MAX_UNITS_PER_JOB = 32
JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
LABEL_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
UNIT_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
PID_MAX = 4_194_304  # Linux's pid_max ceiling (2^22)


class JobError(ValueError):
    """Input a caller can fix; ``status`` is the HTTP status the API answers with."""

    status = 400


class JobNotFound(JobError):
    status = 404


class JobConflict(JobError):
    status = 409


class JobLimit(JobError):
    """The agent already tracks its maximum of live jobs (``--max-jobs``)."""

    status = 429


def _has_control(text: str) -> bool:
    return any(ord(ch) < 32 or ord(ch) == 127 for ch in text)


def validate_name(name: Any) -> str:
    if not isinstance(name, str):
        raise JobError(f"name: expected a string, got {type(name).__name__}")
    name = name.strip()
    if not name:
        raise JobError("name: must not be empty")
    if len(name) > MAX_NAME_CHARS:
        raise JobError(f"name: at most {MAX_NAME_CHARS} characters, got {len(name)}")
    if _has_control(name):
        raise JobError("name: must not contain control characters")
    # "/" is allowed: Kubernetes names pods namespace/pod, and so do discovered jobs.
    if "\\" in name:
        raise JobError("name: must not contain a backslash")
    return name


def validate_kind(kind: Any) -> str:
    if kind not in KINDS:
        raise JobError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    return kind


def validate_job_id(job_id: Any) -> str:
    if not isinstance(job_id, str) or not JOB_ID_RE.match(job_id):
        raise JobError(
            "job_id: 1-128 characters of letters, digits and . _ : @ -, starting with a "
            f"letter or digit; got {job_id!r}"
        )
    return job_id


def validate_labels(labels: Any) -> dict[str, str]:
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise JobError(f"labels: expected an object of strings, got {type(labels).__name__}")
    if len(labels) > MAX_LABELS:
        raise JobError(f"labels: at most {MAX_LABELS}, got {len(labels)}")
    clean: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not LABEL_KEY_RE.match(key):
            raise JobError(f"labels: key {key!r} must match {LABEL_KEY_RE.pattern}")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise JobError(f"labels.{key}: expected a string, got {type(value).__name__}")
        text = str(value)
        if len(text) > 256 or _has_control(text):
            raise JobError(f"labels.{key}: at most 256 characters, no control characters")
        clean[key] = text
    return clean


def validate_pids(pids: Any) -> set[int]:
    if pids is None:
        return set()
    if not isinstance(pids, list | tuple | set | frozenset):
        raise JobError(f"pids: expected a list of process ids, got {type(pids).__name__}")
    if len(pids) > MAX_PIDS:
        raise JobError(f"pids: at most {MAX_PIDS}, got {len(pids)}")
    for pid in pids:
        if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= PID_MAX:
            raise JobError(f"pids: {pid!r} is not a process id (1..{PID_MAX})")
    return set(pids)


def validate_units(unit: Any, count: Any) -> tuple[str, float]:
    if not isinstance(unit, str) or not UNIT_RE.match(unit):
        raise JobError(f"unit: a lowercase word ({UNIT_RE.pattern}), got {unit!r}")
    if isinstance(count, bool) or not isinstance(count, int | float):
        raise JobError(f"count: expected a number, got {type(count).__name__}")
    if not math.isfinite(count) or count < 0 or count > MAX_UNIT_COUNT:
        raise JobError(f"count: a finite number between 0 and {MAX_UNIT_COUNT:g}, got {count}")
    return unit, float(count)


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
    units: dict[str, float] = field(default_factory=dict)
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
    # `joulestat run` waits for it so its summary is the stored total.
    final: bool = False

    @property
    def status(self) -> str:
        return "running" if self.ended_s is None else "ended"

    @property
    def energy_j(self) -> float:
        return sum(self.dynamic_j.values()) + sum(self.idle_j.values())

    def to_json(self) -> dict[str, Any]:
        components = sorted(set(self.dynamic_j) | set(self.idle_j))
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "labels": dict(self.labels),
            "pids": sorted(self.pids),
            "origin": self.origin,
            "status": self.status,
            "started_at": self.started_s,
            "ended_at": self.ended_s,
            "units": dict(self.units),
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

    def register(
        self,
        name: Any,
        kind: Any = "other",
        pids: Any = None,
        labels: Any = None,
        job_id: Any = None,
        origin: str = "api",
    ) -> Job:
        """A new job, or the running one with this ``job_id`` (its pids are added).

        Registering the same ``job_id`` twice is how a multi-process or multi-node job
        joins up, so it is not an error; a different name or kind under one id is.
        """
        name, kind = validate_name(name), validate_kind(kind)
        pid_set, label_map = validate_pids(pids), validate_labels(labels)
        job_id = validate_job_id(job_id) if job_id is not None else uuid.uuid4().hex
        with self._lock:
            existing = self._jobs.get(job_id)
            if existing is not None:
                if (existing.name, existing.kind) != (name, kind):
                    raise JobConflict(
                        f"job_id {job_id!r} is already {existing.kind} job {existing.name!r}"
                    )
                if (not pid_set <= existing.pids or existing.ended_s is not None
                        or any(existing.labels.get(k) != v for k, v in label_map.items())):
                    if existing.ended_s is not None:
                        self._admit(job_id)
                        self._unsettled.pop(job_id, None)
                    existing.pids |= pid_set
                    if existing.pids:
                        self._measured[job_id] = existing
                    existing.labels.update(label_map)
                    existing.ended_s = None
                    existing.final = False
                    self._changed[job_id] = existing
                return existing
            self._admit(job_id)
            job = Job(job_id, name, kind, label_map, pid_set, self._clock(), origin)
            self._jobs[job_id] = job
            if pid_set:
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
        """Put back a job loaded from the store after a restart (never refused)."""
        with self._lock:
            if job.id not in self._jobs:
                self._jobs[job.id] = job
                self._changed[job.id] = job
                if job.ended_s is None:
                    self._live.add(job.id)
                if job.pids:
                    self._measured[job.id] = job

    def get(self, job_id: str) -> Job:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise JobNotFound(f"no job with id {job_id!r}")
        return job

    def count(self, job_id: str, unit: Any, count: Any) -> Job:
        unit, amount = validate_units(unit, count)
        with self._lock:
            job = self.get(job_id)
            if job.ended_s is not None:
                raise JobConflict(f"job {job_id!r} has ended: units must be counted before "
                                  "its end")
            total = job.units.get(unit, 0.0) + amount
            if total > MAX_UNIT_COUNT:
                raise JobError(f"count: job {job_id!r} would have {total:g} {unit}, over the "
                               f"limit of {MAX_UNIT_COUNT:g} per unit")
            if unit not in job.units and len(job.units) >= MAX_UNITS_PER_JOB:
                raise JobError(f"unit: job {job_id!r} already counts {MAX_UNITS_PER_JOB} "
                               "kinds of unit")
            job.units[unit] = total
            deltas = self._unit_deltas.setdefault(job_id, {})
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
        """Jobs with processes (running, or ended and not yet forgotten)."""
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

    def take_changes(self) -> tuple[list[Job], dict[str, dict[str, float]]]:
        """Jobs registered, ended or re-labelled, and units counted, since the last call."""
        with self._lock:
            changed, self._changed = list(self._changed.values()), {}
            units, self._unit_deltas = self._unit_deltas, {}
        return changed, units

    def forget(self, job_ids: Iterable[str]) -> None:
        with self._lock:
            for job_id in job_ids:
                self._jobs.pop(job_id, None)
                self._live.discard(job_id)
                self._measured.pop(job_id, None)
                self._unsettled.pop(job_id, None)
