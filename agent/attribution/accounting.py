"""Per tick: what each running job gets of the node's energy, and its running totals.

The host-usage layer (:class:`joulestat.host.usage.HostUsage`) reads what the node and the
jobs did over the tick: node busy time, each job's CPU time from its cgroup or its
process tree, which job holds each accelerator. This module only turns that snapshot
into shares (:func:`joulestat.attribution.shares.attribute`), adds them to the jobs' totals and
ends jobs none of whose processes is left. Exporters ask :meth:`JobAccounting.snapshot`
for an immutable copy of the totals, so they never read jobs a tick is changing.
Both the daemon and embedded mode (``joulestat run`` with no agent) use it, which is
why they give the same job energy on the same trace.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from joulestat.attribution.agent_labels import policy_labels
from joulestat.attribution.idle import IdleBaselines
from joulestat.attribution.registry import Job, JobRegistry
from joulestat.attribution.shares import DeviceUse, IdlePolicy, TickUsage, attribute
from joulestat.core.records import JobRecord, Share
from joulestat.core.tick import Tick
from joulestat.host.cgroup_jobs import JobWant
from joulestat.host.cgroups import own_cgroup_path
from joulestat.host.pod_names import PodNames
from joulestat.host.procfs import CpuTimes
from joulestat.host.usage import DeviceProcesses, HostUsage, UsageSnapshot

log = logging.getLogger(__name__)

__all__ = ["AttributionSettings", "JobAccounting", "LiveJobFigures", "Snapshot", "TickResult"]


@dataclass(frozen=True, slots=True)
class AttributionSettings:
    """How this layer divides the node's energy, from the options of the same names:
    the idle policy, which schedulers' processes become jobs (``--discover``) and where
    their pods' names come from (``--kube-pods``), and how many running jobs the
    registry tracks at once (``--max-jobs``)."""

    idle_policy: IdlePolicy
    discover: frozenset[str]
    kube_pods: PodNames
    max_jobs: int


@dataclass
class TickResult:
    tick: Tick
    shares: list[Share]
    units: dict[str, dict[str, float]]  # job id -> unit -> count added during the tick
    # Jobs registered, ended or relabelled since the last tick, as records for the
    # store: snapshots taken under the registry's lock (JobRegistry.take_changes).
    changed_jobs: list[JobRecord]
    # The ids of the jobs whose end this tick covers: their figures are complete once
    # its rows are stored, and whoever stores them says so (JobRegistry.mark_final).
    finished_ids: list[str] = field(default_factory=list)
    usage: UsageSnapshot | None = None  # what the host layer read for this tick


class LiveJobFigures(NamedTuple):
    """One job's figures as of the end of a tick; never changed once made. A named
    tuple, not a frozen dataclass: a scrape copies every job, and a tuple is made four
    times faster (1 us a job here, against 4)."""

    id: str
    name: str
    kind: str
    started_s: float
    ended_s: float | None
    dynamic_j: Mapping[str, float]  # per component
    idle_j: Mapping[str, float]
    units: Mapping[str, float]

    @property
    def energy_j(self) -> Mapping[str, float]:
        return {c: self.dynamic_j.get(c, 0.0) + self.idle_j.get(c, 0.0)
                for c in sorted(set(self.dynamic_j) | set(self.idle_j))}


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The last tick's usage and every job's totals, for exporters to read without a lock."""

    t1_s: float
    usage: UsageSnapshot | None
    jobs: Mapping[str, LiveJobFigures]


class JobAccounting:
    def __init__(
        self,
        registry: JobRegistry,
        procfs_root: Path,
        idle: IdleBaselines,
        idle_policy: IdlePolicy = IdlePolicy.SHARE,
        device_processes: Callable[[], DeviceProcesses] | None = None,
        discover: Callable[[], None] | None = None,
        discover_every_s: float = 5.0,
        node_cpu_times: Callable[[], CpuTimes | None] | None = None,
        sysfs_root: Path | str | None = None,
    ) -> None:
        self.registry = registry
        self.procfs_root = Path(procfs_root)
        self.idle = idle
        self.idle_policy = idle_policy
        # Every job this divides energy for says under which idle policy (its agent
        # label idle_policy): a report of it must not leave a reader to guess.
        registry.set_own_agent_labels(policy_labels(idle_policy))
        self._discover = discover
        self._discover_every_s = discover_every_s
        self._next_discovery = 0.0
        # Where the node's cgroups are (None: every job is read from its process tree).
        cgroup_root = Path(sysfs_root) / "fs" / "cgroup" if sysfs_root is not None else None
        self.host = HostUsage(self.procfs_root, cgroup_root, own_cgroup=own_cgroup_path,
                              node_cpu_times=node_cpu_times,
                              device_processes=device_processes)
        self._last: tuple[float, UsageSnapshot | None] = (0.0, None)

    def start(self) -> None:
        self.host.start()

    def snapshot(self, wait_s: float | None = None) -> Snapshot | None:
        """Every job's figures as of the last tick, copied whole for an exporter to read
        at leisure. Ticks add shares under the registry's lock, so the copy, taken under
        it, never holds half a tick. With ``wait_s``, None when the lock stays held that
        long (an exporter then serves its previous copy rather than wait)."""
        lock = self.registry.lock
        if not lock.acquire(timeout=-1 if wait_s is None else wait_s):
            return None
        try:
            jobs = {job.id: LiveJobFigures(
                job.id, job.name, job.kind, job.started_s, job.ended_s,
                dict(job.dynamic_j), dict(job.idle_j), dict(job.units))
                for job in self.registry.jobs()}
            t1_s, usage = self._last
        finally:
            lock.release()
        return Snapshot(t1_s, usage, MappingProxyType(jobs))

    def on_tick(self, tick: Tick) -> TickResult:
        if self._discover is not None and time.monotonic() >= self._next_discovery:
            self._next_discovery = time.monotonic() + self._discover_every_s
            try:
                self._discover()
            except Exception as exc:  # discovery is best effort; ticks go on
                log.warning("job discovery failed: %s", exc)
        # Jobs ended during this tick still get its energy: they ran for part of it. Only
        # jobs with processes take part: a job with none has nothing to attribute to.
        with self.registry.lock:
            active = [j for j in self.registry.measured_jobs()
                      if j.ended_s is None or j.ended_s > tick.t0_s]
            wants = [JobWant(j.id, tuple(j.pids), j.registered_boot_s, j.final_cpu_s)
                     for j in active]
        usage = self.host.read(wants)
        by_id = {job.id: job for job in active}
        for job_id in sorted(usage.gone):
            job = by_id[job_id]
            if job.ended_s is None:
                log.info("job %s (%s): every process has exited; ending it", job.name, job.id)
                self.registry.end(job.id, at_s=tick.t1_s)
        tick_usage = TickUsage(
            node_busy_cpu_s=usage.node_busy_cpu_s,
            job_cpu_s=dict(usage.job_cpu_s),
            devices={key: DeviceUse(d.utilization, d.holders)
                     for key, d in usage.devices.items()},
            running_jobs=tuple(job.id for job in active),
            # Only a job that started or ended inside the tick was there for part of it.
            presence={job.id: _presence(job, tick) for job in active
                      if job.ended_s is not None or job.started_s > tick.t0_s},
        )
        shares = attribute(tick, tick_usage, self.idle.update(tick), self.idle_policy)
        with self.registry.lock:
            for share in shares:
                job = by_id.get(share.job) if share.job is not None else None
                if job is None:
                    continue
                component = share.component
                job.dynamic_j[component] = job.dynamic_j.get(component, 0.0) + share.dynamic_j
                job.idle_j[component] = job.idle_j.get(component, 0.0) + share.idle_j
        changed, units = self.registry.take_changes()
        self._last = (tick.t1_s, usage)
        finished = [job.id for job in self.registry.take_finished(tick.t1_s)]
        return TickResult(tick, shares, units, changed, finished, usage)

    def checkpoint(self) -> dict:
        """Counters needed to attribute the gap after a crash (see Pipeline.restore)."""
        return {**self.host.checkpoint(), "idle": self.idle.checkpoint()}

    def restore(self, state: dict) -> None:
        """Resume from a checkpoint: CPU times are cumulative, so the first tick after a
        restart attributes the whole gap by each job's CPU time in it."""
        try:
            self.host.restore(state)
            self.idle.restore(state.get("idle"))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning("job accounting checkpoint unusable (%s); starting afresh", exc)
            self.start()

    def forget(self, job_ids: list[str]) -> None:
        self.host.forget(job_ids)

    def close(self) -> None:
        self.host.close()


def _presence(job: Job, tick: Tick) -> float:
    """The part of (t0, t1] during which the job existed."""
    if tick.duration_s <= 0:
        return 1.0
    start = max(tick.t0_s, job.started_s)
    end = min(tick.t1_s, job.ended_s if job.ended_s is not None else tick.t1_s)
    return min(max((end - start) / tick.duration_s, 0.0), 1.0)
