"""Per tick: who ran (process trees, discovery, GPU processes) and what they get.

This is the bridge between the sampler's node-level tick and
:func:`agent.attribution.attribute`: it measures the node's busy CPU time and each
running job's process-tree CPU time over the same tick, maps accelerator processes to
jobs, learns idle baselines, then adds each job's share to its running totals.
Both the daemon and embedded mode (``joulestat run`` with no agent) use it, which is
why they give the same job energy on the same trace.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agent.attribution import DeviceUse, Share, TickUsage, attribute
from agent.idle import IdleBaselines
from agent.jobs import proctree
from agent.jobs.registry import Job, JobRegistry
from agent.procfs import CpuTimes, parse_cpu_times
from agent.sensors.kernel_file import KernelFile
from agent.tick import Tick

log = logging.getLogger(__name__)

# (component, device) -> (pid -> utilization, pids holding a context)
DeviceProcesses = Mapping[tuple[str, str], tuple[Mapping[int, float], set[int]]]


@dataclass
class TickResult:
    tick: Tick
    shares: list[Share]
    units: dict[str, dict[str, float]]  # job id -> unit -> count added during the tick
    changed_jobs: list[Job]  # registered, ended or relabelled since the last tick
    # Jobs whose end this tick covers: their figures are complete once its rows are stored.
    finished_jobs: list[Job] = field(default_factory=list)


class JobAccounting:
    def __init__(
        self,
        registry: JobRegistry,
        procfs_root: Path,
        idle: IdleBaselines,
        idle_policy: str = "share",
        device_processes: Callable[[], DeviceProcesses] | None = None,
        discover: Callable[[], None] | None = None,
        discover_every_s: float = 5.0,
        node_cpu_times: Callable[[], CpuTimes | None] | None = None,
    ) -> None:
        self.registry = registry
        self.procfs_root = Path(procfs_root)
        self.idle = idle
        self.idle_policy = idle_policy
        self._device_processes = device_processes
        self._discover = discover
        self._discover_every_s = discover_every_s
        self._next_discovery = 0.0
        self._stat = KernelFile(self.procfs_root / "stat")
        # The CPU estimator already parsed /proc/stat this tick: reuse it when it exists.
        self._node_cpu_times = node_cpu_times
        self._last_busy_ticks: int | None = None
        self._last_cpu_ticks: dict[str, int] = {}
        # pid -> (owning job, its cpu ticks, its start ticks) at the last tick: when a
        # process changes job (a job registered inside another), its CPU time so far
        # moves from one job's baseline to the other's instead of being counted twice.
        self._owners: dict[int, tuple[str, int, int]] = {}

    def start(self) -> None:
        self._last_busy_ticks = self._busy_ticks()

    def _busy_ticks(self) -> int:
        times = self._node_cpu_times() if self._node_cpu_times is not None else None
        if times is None:
            times = parse_cpu_times(self._stat.read_text(), self._stat.path)
        return times.busy_jiffies

    def on_tick(self, tick: Tick) -> TickResult:
        if self._discover is not None and time.monotonic() >= self._next_discovery:
            self._next_discovery = time.monotonic() + self._discover_every_s
            try:
                self._discover()
            except Exception as exc:  # discovery is best effort; ticks go on
                log.warning("job discovery failed: %s", exc)
        busy_ticks = self._busy_ticks()
        node_busy_s = 0.0
        if self._last_busy_ticks is not None:
            node_busy_s = max(busy_ticks - self._last_busy_ticks, 0) / proctree.CLOCK_TICKS_PER_S
        self._last_busy_ticks = busy_ticks

        # Jobs ended during this tick still get its energy: they ran for part of it. Only
        # jobs with processes take part: a job with none has nothing to attribute to.
        active = [j for j in self.registry.measured_jobs()
                  if j.ended_s is None or j.ended_s > tick.t0_s]
        job_cpu_s: dict[str, float] = {}
        pid_to_job: dict[int, str] = {}
        if active:
            procs = proctree.read_all(self.procfs_root)
            trees = proctree.exclusive_trees(((j.id, j.pids) for j in active), procs)
            pid_to_job = {pid: job_id for job_id, tree in trees.items() for pid in tree}
            moved_in, moved_out = self._moves(pid_to_job, procs)
            for job in active:
                tree = trees[job.id]
                alive = any(pid in procs for pid in job.pids)
                ticks = sum(procs[pid].cpu_ticks for pid in tree)
                if not alive and job.final_cpu_s is not None:
                    ticks = round(job.final_cpu_s * proctree.CLOCK_TICKS_PER_S)
                previous = self._last_cpu_ticks.get(job.id)
                arrived = moved_in.get(job.id, {})
                if previous is None:
                    previous = self._cpu_before_registration(job, tree - arrived.keys(), procs)
                previous += sum(arrived.values()) - moved_out.get(job.id, 0)
                self._last_cpu_ticks[job.id] = ticks
                job_cpu_s[job.id] = max(ticks - previous, 0) / proctree.CLOCK_TICKS_PER_S
                if job.pids and not alive and job.ended_s is None:
                    log.info("job %s (%s): every process has exited; ending it", job.name, job.id)
                    self.registry.end(job.id, at_s=tick.t1_s)
            self._owners = {pid: (job_id, procs[pid].cpu_ticks, procs[pid].start_ticks)
                            for pid, job_id in pid_to_job.items()}
        else:
            self._owners = {}

        usage = TickUsage(
            node_busy_cpu_s=node_busy_s,
            job_cpu_s=job_cpu_s,
            devices=self._device_use(pid_to_job),
            running_jobs=tuple(job.id for job in active),
            presence={job.id: _presence(job, tick) for job in active},
        )
        shares = attribute(tick, usage, self.idle.update(tick), self.idle_policy)
        by_id = {job.id: job for job in active}
        with self.registry.lock:
            for share in shares:
                job = by_id.get(share.job) if share.job is not None else None
                if job is None:
                    continue
                component = share.component
                job.dynamic_j[component] = job.dynamic_j.get(component, 0.0) + share.dynamic_j
                job.idle_j[component] = job.idle_j.get(component, 0.0) + share.idle_j
        changed, units = self.registry.take_changes()
        return TickResult(tick, shares, units, changed, self.registry.take_finished(tick.t1_s))

    def _moves(self, pid_to_job: Mapping[int, str], procs: Mapping[int, proctree.ProcStat]
               ) -> tuple[dict[str, dict[int, int]], dict[str, int]]:
        """Processes that changed job since the last tick: per new job {pid: its ticks
        then}, which its baseline takes over, and per old job the ticks that left it."""
        moved_in: defaultdict[str, dict[int, int]] = defaultdict(dict)
        moved_out: defaultdict[str, int] = defaultdict(int)
        for pid, job_id in pid_to_job.items():
            old = self._owners.get(pid)
            if old is None or old[0] == job_id or old[2] != procs[pid].start_ticks:
                continue
            moved_in[job_id][pid] = old[1]
            moved_out[old[0]] += old[1]
        return moved_in, moved_out

    @staticmethod
    def _cpu_before_registration(job: Job, tree: set[int],
                                 procs: dict[int, proctree.ProcStat]) -> int:
        """First sight of a job: CPU its processes used before it was registered.

        Processes that started (within a second) before registration, e.g. a server
        registered through the API hours after it started, count only from now;
        processes started with the job (``joulestat run`` spawns, then registers)
        count from their first instruction.
        """
        cutoff_ticks = _registration_cutoff_ticks(job)
        return sum(procs[pid].cpu_ticks for pid in tree if procs[pid].start_ticks < cutoff_ticks)

    def _device_use(self, pid_to_job: dict[int, str]) -> dict[tuple[str, str], DeviceUse]:
        if self._device_processes is None or not pid_to_job:
            return {}
        try:
            processes = self._device_processes()
        except Exception as exc:
            log.warning("cannot read accelerator processes: %s", exc)
            return {}
        devices: dict[tuple[str, str], DeviceUse] = {}
        for key, (utilization, holders) in processes.items():
            util_by_job: dict[str, float] = {}
            for pid, value in utilization.items():
                job_id = pid_to_job.get(pid)
                if job_id is not None:
                    util_by_job[job_id] = util_by_job.get(job_id, 0.0) + value
            holding = tuple(sorted({pid_to_job[p] for p in holders if p in pid_to_job}))
            devices[key] = DeviceUse(util_by_job, holding)
        return devices

    def checkpoint(self) -> dict:
        """Counters needed to attribute the gap after a crash (see Pipeline.restore)."""
        return {
            "busy_ticks": self._last_busy_ticks,
            "cpu_ticks": dict(self._last_cpu_ticks),
            "owners": {str(pid): list(owner) for pid, owner in self._owners.items()},
            "idle": self.idle.checkpoint(),
        }

    def restore(self, state: dict) -> None:
        """Resume from a checkpoint: process CPU times are cumulative, so the first tick
        after a restart attributes the whole gap by each job's CPU time in it."""
        try:
            self._last_busy_ticks = int(state["busy_ticks"])
            self._last_cpu_ticks = {str(k): int(v) for k, v in state["cpu_ticks"].items()}
            self._owners = {int(pid): (str(job), int(ticks), int(start)) for pid, (
                job, ticks, start) in state.get("owners", {}).items()}
            self.idle.restore(state.get("idle"))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning("job accounting checkpoint unusable (%s); starting afresh", exc)
            self.start()

    def forget(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            self._last_cpu_ticks.pop(job_id, None)
        gone = set(job_ids)
        self._owners = {pid: o for pid, o in self._owners.items() if o[0] not in gone}

    def close(self) -> None:
        self._stat.close()


def _registration_cutoff_ticks(job: Job) -> float:
    """Processes started before this (a second of slack) ran before the job was known."""
    return (job.registered_boot_s - 1.0) * proctree.CLOCK_TICKS_PER_S


def _presence(job: Job, tick: Tick) -> float:
    """The part of (t0, t1] during which the job existed."""
    if tick.duration_s <= 0:
        return 1.0
    start = max(tick.t0_s, job.started_s)
    end = min(tick.t1_s, job.ended_s if job.ended_s is not None else tick.t1_s)
    return min(max((end - start) / tick.duration_s, 0.0), 1.0)
