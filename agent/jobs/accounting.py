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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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

        # Jobs ended during this tick still get its energy: they ran for part of it.
        active = [j for j in self.registry.jobs() if j.ended_s is None or j.ended_s > tick.t0_s]
        job_cpu_s: dict[str, float] = {}
        pid_to_job: dict[int, str] = {}
        if active:
            procs = proctree.read_all(self.procfs_root)
            for job in active:
                tree = proctree.descendants(job.pids, procs) if job.pids else set()
                ticks = sum(procs[pid].cpu_ticks for pid in tree)
                if not tree and job.final_cpu_s is not None:
                    ticks = round(job.final_cpu_s * proctree.CLOCK_TICKS_PER_S)
                previous = self._last_cpu_ticks.get(job.id)
                if previous is None:
                    previous = self._cpu_before_registration(job, tree, procs)
                self._last_cpu_ticks[job.id] = ticks
                job_cpu_s[job.id] = max(ticks - previous, 0) / proctree.CLOCK_TICKS_PER_S
                for pid in tree:
                    pid_to_job.setdefault(pid, job.id)
                if job.pids and not tree and job.ended_s is None:
                    log.info("job %s (%s): every process has exited; ending it", job.name, job.id)
                    self.registry.end(job.id, at_s=tick.t1_s)

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
        return TickResult(tick, shares, units, changed)

    @staticmethod
    def _cpu_before_registration(job: Job, tree: set[int],
                                 procs: dict[int, proctree.ProcStat]) -> int:
        """First sight of a job: CPU its processes used before it was registered.

        Processes that started (within a second) before registration, e.g. a server
        registered through the API hours after it started, count only from now;
        processes started with the job (``joulestat run`` spawns, then registers)
        count from their first instruction.
        """
        cutoff_ticks = (job.registered_boot_s - 1.0) * proctree.CLOCK_TICKS_PER_S
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
        }

    def restore(self, state: dict) -> None:
        """Resume from a checkpoint: process CPU times are cumulative, so the first tick
        after a restart attributes the whole gap by each job's CPU time in it."""
        try:
            self._last_busy_ticks = int(state["busy_ticks"])
            self._last_cpu_ticks = {str(k): int(v) for k, v in state["cpu_ticks"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning("job accounting checkpoint unusable (%s); starting afresh", exc)
            self.start()

    def forget(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            self._last_cpu_ticks.pop(job_id, None)

    def close(self) -> None:
        self._stat.close()


def _presence(job: Job, tick: Tick) -> float:
    """The part of (t0, t1] during which the job existed."""
    if tick.duration_s <= 0:
        return 1.0
    start = max(tick.t0_s, job.started_s)
    end = min(tick.t1_s, job.ended_s if job.ended_s is not None else tick.t1_s)
    return min(max((end - start) / tick.duration_s, 0.0), 1.0)
