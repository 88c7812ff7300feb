"""One tick of host usage: node busy time, each job's CPU time, who used each device.

:class:`HostUsage` reads, per tick, only what the running jobs need:

- the node's busy CPU time (``/proc/stat``, or the CPU estimator's parse of it);
- per job, its CPU time from the cheapest exact source: the counter of the job's own
  cgroup where it has one (:mod:`joulestat.host.cgroup_jobs`: one file per job), else the
  ``/proc/<pid>/stat`` of its processes, found from its registered ones through
  ``/proc/<pid>/task/<tid>/children`` (:mod:`joulestat.host.processes`). A whole ``/proc``
  scan happens only where those files do not exist, and at most every
  :data:`SCAN_EVERY_S`;
- per accelerator, which jobs its processes belong to.

and hands back an immutable :class:`UsageSnapshot`. The guarantees of the process-tree
method are kept as they were:

- a process belongs to one job, the job of its nearest registered ancestor (a pid
  registered by two jobs belongs to the later); inside a job's cgroup, a job registered
  on some of its processes takes them from it (their CPU time is subtracted);
- a job's CPU time is Σ ``utime + stime + cutime + cstime`` over its live processes,
  so a child's exit hands its time to its parent without loss or double count; CPU
  time a process used before its job was registered is not the job's (a process
  started with its job, within a second, counts from its first instruction);
- when a process changes job, the CPU time it had moves between the two jobs'
  baselines (:meth:`HostUsage._moves`), so neither counts it twice.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from joulestat.host.cgroup_jobs import CgroupUnits, JobWant, OwnCgroup
from joulestat.host.kernel_file import KernelFile
from joulestat.host.processes import ProcessTable
from joulestat.host.procfs import CpuTimes, parse_cpu_times
from joulestat.host.proctree import CLOCK_TICKS_PER_S, NS_PER_S, NS_PER_TICK, ProcStat, read_all

log = logging.getLogger(__name__)

SCAN_EVERY_S = 5.0  # at most one whole-/proc scan this often, and only without children files

# (component, device) -> (pid -> utilization, pids holding a context)
DeviceProcesses = Mapping[tuple[str, str], tuple[Mapping[int, float], set[int]]]


@dataclass(frozen=True, slots=True)
class DeviceJobs:
    """Who used one accelerator during the tick."""

    utilization: Mapping[str, float]  # job -> summed per-process utilization
    holders: tuple[str, ...]  # jobs holding a context on it


@dataclass(frozen=True, slots=True)
class UsageSnapshot:
    """What the node and its jobs did over one tick; never changed once made."""

    node_busy_cpu_s: float
    job_cpu_s: Mapping[str, float]
    job_sources: Mapping[str, str]  # job -> "process tree" or "cgroup v2 /path"
    gone: frozenset[str]  # jobs none of whose processes (or cgroups) is left
    devices: Mapping[tuple[str, str], DeviceJobs]
    pid_to_job: Mapping[int, str]  # the processes followed by tree this tick


@dataclass(frozen=True, slots=True)
class HostSettings:
    """Where this layer reads, from the options of the same names: procfs (processes,
    node busy time) and sysfs (the cgroup filesystem at ``<sysfs>/fs/cgroup``); a fake
    tree of each in tests. And where it may fetch a job's serving metrics from besides
    this node (:mod:`joulestat.host.serving_address`)."""

    procfs_root: Path
    sysfs_root: Path
    serving_metrics_allow: tuple[str, ...]


class HostUsage:
    """Reads a tick's usage for the jobs it is given; keeps the baselines between ticks."""

    def __init__(
        self,
        procfs_root: Path,
        cgroup_root: Path | None = None,
        *,
        own_cgroup: OwnCgroup | None = None,
        node_cpu_times: Callable[[], CpuTimes | None] | None = None,
        device_processes: Callable[[], DeviceProcesses] | None = None,
        max_open_fds: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.procfs_root = Path(procfs_root)
        self._stat = KernelFile(self.procfs_root / "stat")
        self._node_cpu_times = node_cpu_times
        self._device_processes = device_processes
        self._clock = clock
        self.table = ProcessTable(self.procfs_root, max_open_fds)
        self.units = CgroupUnits(self.procfs_root, cgroup_root, own_cgroup)
        self._last_busy_ticks: int | None = None
        self._last_cpu_ns: dict[str, int] = {}  # per job: its process trees' CPU, last tick
        # pid -> (owning job, its cpu ns, its start ticks) at the last tick.
        self._owners: dict[int, tuple[str, int, int]] = {}
        self._root_start: dict[tuple[str, int], int] = {}  # (job, pid) -> start at first sight
        self._dead_roots: set[tuple[str, int]] = set()
        self._sources: dict[str, tuple[tuple, str]] = {}  # job -> (what it is read by, said)
        self._scan: dict[int, list[int]] = {}
        self._scan_at: float | None = None
        self.scans = 0  # whole-/proc scans so far (the benchmark and tests read it)
        # The agent says each job's source at INFO; embedded mode, whose stderr is the
        # user's, lowers it (the run's cpu_source label says it there).
        self.source_log_level = logging.INFO

    # -- node --------------------------------------------------------------------------

    def start(self) -> None:
        self._last_busy_ticks = self._busy_ticks()

    def _busy_ticks(self) -> int:
        times = self._node_cpu_times() if self._node_cpu_times is not None else None
        if times is None:
            times = parse_cpu_times(self._stat.read_text(), self._stat.path)
        return times.busy_jiffies

    def _node_busy_s(self) -> float:
        busy_ticks = self._busy_ticks()
        busy_s = 0.0
        if self._last_busy_ticks is not None:
            busy_s = max(busy_ticks - self._last_busy_ticks, 0) / CLOCK_TICKS_PER_S
        self._last_busy_ticks = busy_ticks
        return busy_s

    # -- one tick ----------------------------------------------------------------------

    def read(self, jobs: Sequence[JobWant]) -> UsageSnapshot:
        """The tick's usage of ``jobs`` (those with processes, in registration order)."""
        busy_s = self._node_busy_s()
        self.table.begin_tick()
        if not jobs:
            self._owners = {}
            self.table.retain(set())
            return UsageSnapshot(busy_s, {}, {}, frozenset(), {}, {})
        alive, roots_of = self._roots(jobs)
        owner_of_root = {pid: job.id for job in jobs for pid in roots_of[job.id]}
        covered = self.units.update(jobs, roots_of, alive)
        trees, stats = self._trees([job.id for job in jobs], owner_of_root, alive, covered)
        pid_to_job = {pid: job_id for job_id, tree in trees.items() for pid in tree}
        moved_in, moved_out = self._moves(pid_to_job, stats)

        tree_ns: dict[str, int] = {}
        for job in jobs:
            tree = trees[job.id]
            if not tree and self.units.of(job.id):
                continue  # measured by its cgroup alone
            ns = sum(stats[pid].cpu_ticks for pid in tree) * NS_PER_TICK
            if not roots_of[job.id] and job.final_cpu_s is not None:
                ns = round(job.final_cpu_s * NS_PER_S)
            previous = self._last_cpu_ns.get(job.id)
            arrived = moved_in.get(job.id, {})
            if previous is None:
                previous = _before_registration(job, tree - arrived.keys(), stats)
            previous += sum(arrived.values()) - moved_out.get(job.id, 0)
            self._last_cpu_ns[job.id] = ns
            tree_ns[job.id] = max(ns - previous, 0)
        cgroup_ns = self.units.deltas(jobs, roots_of, alive, tree_ns, trees)

        job_cpu_s = {job.id: (tree_ns.get(job.id, 0) + cgroup_ns.get(job.id, 0)) / NS_PER_S
                     for job in jobs}
        gone = frozenset(job.id for job in jobs
                         if job.pids and not roots_of[job.id] and not self.units.populated(job.id))
        self._owners = {pid: (job_id, stats[pid].cpu_ns, stats[pid].start_ticks)
                        for pid, job_id in pid_to_job.items()}
        self.table.retain(set(stats) | set(alive))
        self.units.forget_processes(set(alive))
        return UsageSnapshot(busy_s, job_cpu_s, self._log_sources(jobs, trees), gone,
                             self._devices(pid_to_job), pid_to_job)

    def _roots(self, jobs: Sequence[JobWant]) -> tuple[dict[int, ProcStat], dict[str, list[int]]]:
        """Live registered processes, and each job's. A registered pid whose start time
        changed is a recycled pid: the process the job was given has gone."""
        alive: dict[int, ProcStat] = {}
        roots_of: dict[str, list[int]] = {}
        for job in jobs:
            live = []
            for pid in job.pids:
                key = (job.id, pid)
                if key in self._dead_roots:
                    continue
                stat = alive.get(pid) or self.table.stat(pid)
                if stat is None or self._root_start.setdefault(key, stat.start_ticks) \
                        != stat.start_ticks:
                    self._dead_roots.add(key)
                    continue
                alive[pid] = stat
                live.append(pid)
            roots_of[job.id] = live
        if len(self._root_start) + len(self._dead_roots) > 2 * len(alive) + 256:
            # Discovered jobs' pid sets churn: keep only what the jobs still name.
            named = {(job.id, pid) for job in jobs for pid in job.pids}
            self._root_start = {k: v for k, v in self._root_start.items() if k in named}
            self._dead_roots &= named
        return alive, roots_of

    def _trees(self, job_ids: list[str], owner_of_root: Mapping[int, str],
               alive: Mapping[int, ProcStat], covered: set[tuple[str, int]]
               ) -> tuple[dict[str, set[int]], dict[int, ProcStat]]:
        """Each registered process not measured by a cgroup, and its descendants down to
        the next registered process: the job's tree (the rule of
        :func:`joulestat.host.proctree.exclusive_trees`, walked through children files)."""
        trees: dict[str, set[int]] = {job_id: set() for job_id in job_ids}
        stats: dict[int, ProcStat] = {}
        table = self.table
        for root, job_id in owner_of_root.items():
            if (job_id, root) in covered or root in stats:
                continue
            tree = trees[job_id]
            stat = alive[root]
            stats[root] = stat
            tree.add(root)
            children = table.children(root, stat)
            if children is None:
                children = self._scanned_children(root)
            stack = [(c, root) for c in children if c not in owner_of_root]
            while stack:
                pid, parent = stack.pop()
                if pid in stats:
                    continue
                seen = table.visit(pid)
                if seen is None or seen[0].ppid != parent:
                    continue
                stat, children = seen
                stats[pid] = stat
                tree.add(pid)
                if children is None:
                    children = self._scanned_children(pid)
                for child in children:
                    if child not in owner_of_root:
                        stack.append((child, pid))
        return trees, stats

    def _scanned_children(self, pid: int) -> list[int]:
        """Children from the last whole-/proc scan, taken at most every SCAN_EVERY_S."""
        now = self._clock()
        if self._scan_at is None or now - self._scan_at >= SCAN_EVERY_S:
            self._scan_at = now
            self.scans += 1
            self._scan = {}
            for stat in read_all(self.procfs_root).values():
                self._scan.setdefault(stat.ppid, []).append(stat.pid)
        return self._scan.get(pid, [])

    def _moves(self, pid_to_job: Mapping[int, str], stats: Mapping[int, ProcStat]
               ) -> tuple[dict[str, dict[int, int]], dict[str, int]]:
        """Processes that changed job since the last tick: per new job {pid: its ns then},
        which its baseline takes over, and per old job the ns that left it."""
        moved_in: defaultdict[str, dict[int, int]] = defaultdict(dict)
        moved_out: defaultdict[str, int] = defaultdict(int)
        for pid, job_id in pid_to_job.items():
            old = self._owners.get(pid)
            if old is None or old[0] == job_id or old[2] != stats[pid].start_ticks:
                continue
            moved_in[job_id][pid] = old[1]
            moved_out[old[0]] += old[1]
        return moved_in, moved_out

    def _log_sources(self, jobs: Sequence[JobWant], trees: Mapping[str, set[int]]
                     ) -> dict[str, str]:
        """Each job's CPU source, said in the log once and whenever it changes."""
        sources = {}
        for job in jobs:
            units = self.units.of(job.id)
            key = (tuple(units), bool(trees.get(job.id)) or not units)
            known = self._sources.get(job.id)
            if known is not None and known[0] == key:
                sources[job.id] = known[1]
                continue
            parts = [str(ref) for ref in units] + (["process tree"] if key[1] else [])
            source = " + ".join(parts)
            self._sources[job.id] = (key, source)
            sources[job.id] = source
            log.log(self.source_log_level, "job %s: CPU time from its %s", job.id, source)
        return sources

    def _devices(self, pid_to_job: Mapping[int, str]) -> dict[tuple[str, str], DeviceJobs]:
        if self._device_processes is None or not (pid_to_job or self.units.any()):
            return {}
        try:
            processes = self._device_processes()
        except Exception as exc:
            log.warning("cannot read accelerator processes: %s", exc)
            return {}
        devices: dict[tuple[str, str], DeviceJobs] = {}
        for key, (utilization, holders) in processes.items():
            owner = {pid: pid_to_job.get(pid) or self.units.job_of_pid(pid)
                     for pid in set(utilization) | set(holders)}
            util_by_job: dict[str, float] = {}
            for pid, value in utilization.items():
                job_id = owner[pid]
                if job_id is not None:
                    util_by_job[job_id] = util_by_job.get(job_id, 0.0) + value
            holding = tuple(sorted({j for p in holders if (j := owner[p]) is not None}))
            devices[key] = DeviceJobs(util_by_job, holding)
        return devices

    # -- baselines across restarts and job ends ----------------------------------------

    def checkpoint(self) -> dict:
        """Counters needed to measure the gap after a crash (JSON-safe)."""
        return {
            "busy_ticks": self._last_busy_ticks,
            "cpu_ns": dict(self._last_cpu_ns),
            # Replaced, never changed in place, each tick: no copy needed (json.dumps
            # writes the int keys as strings and the tuples as lists).
            "process_owners": self._owners,
            **self.units.checkpoint(),
        }

    def restore(self, state: Mapping) -> None:
        """Resume from :meth:`checkpoint` (or the clock-tick form earlier versions saved).
        Raises KeyError, TypeError or ValueError on a state it cannot use."""
        busy = int(state["busy_ticks"])
        if "cpu_ns" in state:
            cpu = {str(k): int(v) for k, v in state["cpu_ns"].items()}
            owners = {int(p): (str(j), int(ns), int(s))
                      for p, (j, ns, s) in state.get("process_owners", {}).items()}
        else:  # before cgroups: per-job and per-process CPU in clock ticks
            cpu = {str(k): int(v) * NS_PER_TICK for k, v in state["cpu_ticks"].items()}
            owners = {int(p): (str(j), int(t) * NS_PER_TICK, int(s))
                      for p, (j, t, s) in state.get("owners", {}).items()}
        self.units.restore(state)
        self._last_busy_ticks, self._last_cpu_ns, self._owners = busy, cpu, owners

    def forget(self, job_ids: Sequence[str]) -> None:
        gone = set(job_ids)
        for job_id in gone:
            self._last_cpu_ns.pop(job_id, None)
            self._sources.pop(job_id, None)
        self._owners = {pid: o for pid, o in self._owners.items() if o[0] not in gone}
        self._root_start = {k: v for k, v in self._root_start.items() if k[0] not in gone}
        self._dead_roots = {k for k in self._dead_roots if k[0] not in gone}
        self.units.forget(gone)

    def close(self) -> None:
        self._stat.close()
        self.table.close()
        self.units.close()


def _before_registration(job: JobWant, tree: set[int], stats: Mapping[int, ProcStat]) -> int:
    """First sight of a job: CPU its processes used before it was registered.

    Processes that started (within a second) before registration, e.g. a server
    registered through the API hours after it started, count only from now;
    processes started with the job (``joulestat run`` spawns, then registers)
    count from their first instruction.
    """
    cutoff = registration_cutoff_ticks(job)
    return sum(stats[pid].cpu_ns for pid in tree if stats[pid].start_ticks < cutoff)


def registration_cutoff_ticks(job: JobWant) -> float:
    """Processes started before this (a second of slack) ran before the job was known."""
    return (job.registered_boot_s - 1.0) * CLOCK_TICKS_PER_S
