"""Jobs in cgroups of their own: the cgroup ``joulestat run`` makes for its command, and
one counter read per job cgroup per tick.

**A cgroup for a command** ``joulestat run`` starts, where the node allows it. With its
command in its own cgroup, a job's CPU time is one counter read per tick
(:mod:`joulestat.host.cgroups`) instead of a walk of its process tree, and it includes
every helper the command started, orphans and short-lived ones too. The cgroup is made
below the wrapper's own cgroup, named ``joulestat-job-<job id>``
(:func:`joulestat.host.cgroups.run_cgroup_name`), which is how the agent recognises it:

- cgroup v2 first, where the wrapper's own cgroup is writable (root, or a delegated
  subtree such as systemd's ``user@<uid>.service``). No controller is enabled in it, so
  the command is scheduled and limited exactly as before; only ``cpu.stat`` is used.
- else the v1 ``cpuacct`` hierarchy, where writable. Where ``cpu`` and ``cpuacct`` are
  mounted together the new cgroup is also a ``cpu`` group of default weight, so the
  command competes with its siblings as one group: a small scheduling change, said here.
- else nothing: the agent reads the command's process tree, and the run says why.

The child enters the cgroup between ``fork`` and ``exec`` (:meth:`JobCgroup.enter`), so
its first instruction and every process it starts are inside. The wrapper removes the
cgroup once the job's last tick is stored; a cgroup that still holds processes (orphans
the command left running) is left in place, and the log says so.

**Measuring jobs by their cgroups.** A job has a cgroup of its own when one of its
registered processes lives in a cgroup named for it (``own_cgroup``: a pod, Slurm job or
container cgroup whose discovered id is the job's, or the ``joulestat-job-<id>`` cgroup
``joulestat run`` made). That cgroup's counter then measures every process in it, so its
registered processes there are not walked (they are "covered"). Nesting keeps a process
in one job. Anything measured inside a job's cgroup on behalf of another job, a
``joulestat run`` cgroup inside a container, or a process registered through the API
inside a pod, has its CPU time subtracted from the innermost job cgroup holding it. A
subtraction larger than the cgroup's own delta (the other job's first tick may count
time from before it was registered) is carried to the next tick rather than dropped, so
over time nothing is counted twice. A job cgroup's first reading is its baseline,
unless every registered process in it started with the job (within a second of
registration): then the cgroup was made for the job and counts from zero, as a process
tree counts from its first instruction.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from joulestat.host.cgroups import (
    V1_CPUACCT,
    V2,
    CgroupCounter,
    CgroupFs,
    CgroupRef,
    parse_proc_cgroup,
    run_cgroup_name,
)
from joulestat.host.kernel_file import read_bytes
from joulestat.host.proctree import CLOCK_TICKS_PER_S, NS_PER_S, ProcStat

log = logging.getLogger(__name__)


class JobWant(NamedTuple):
    """What the host layer needs of a job to measure it (a tuple: one is made per job
    per tick, and a frozen dataclass takes several times longer to build)."""

    id: str
    pids: tuple[int, ...]  # registered processes, in registration order
    registered_boot_s: float  # CLOCK_BOOTTIME at registration
    final_cpu_s: float | None = None  # the wrapper's wait4() total, once it has ended


def pids_in_run_cgroup(cgroup_root: Path, job_id: str, cpu_source: str) -> set[int]:
    """The processes in the cgroup ``joulestat run`` made for ``job_id``, which its
    ``cpu_source`` agent label names; empty when the label names none (or another job's),
    or the cgroup is gone.

    Why: a job restored after a restart must be found again by its cgroup. A command
    started in the seconds before a ``kill -9`` of the agent may have no stored pid
    (issue 47: after the restart ``"pids": []`` and 0 J, "final"), but its cgroup,
    named for the job, still holds it and everything it started."""
    ref = CgroupRef.from_text(cpu_source)
    if ref is None or not ref.path.rstrip("/").endswith("/" + run_cgroup_name(job_id)):
        return set()
    directory = CgroupFs(cgroup_root).directory(ref)
    if directory is None:
        return set()
    try:
        text = read_bytes(str(directory / "cgroup.procs")).decode()
    except (OSError, UnicodeDecodeError):
        return set()
    return {int(word) for word in text.split() if word.isdigit()}


# -- A cgroup of its own for a command ``joulestat run`` starts, where the node allow ----

@dataclass
class JobCgroup:
    """A made cgroup and a descriptor on its ``cgroup.procs``, open until :meth:`release`."""

    ref: CgroupRef
    directory: Path
    procs_fd: int
    made: bool  # False when it existed already (another step of the same job id)

    def enter(self) -> None:
        """Move the calling process in. Runs in the child between fork and exec, so it
        only writes to a descriptor opened beforehand: no import, no lock, no allocation
        worth the name."""
        os.write(self.procs_fd, b"0")

    def release(self, wait_s: float = 2.0) -> bool:
        """Close it and remove it once empty (True when removed or already gone)."""
        try:
            os.close(self.procs_fd)
        except OSError:
            pass
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.directory.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                    log.warning("%s still holds processes (orphans of the job?); left in "
                                "place: %s", self.directory, exc.strerror or exc)
                    return False
                time.sleep(0.05)  # the last process is still being reaped


@dataclass(frozen=True)
class Placement:
    """Where a run's command goes: its own cgroup, or none and why."""

    cgroup: JobCgroup | None
    reason: str  # for the log: the cgroup made, or why there is none

    @property
    def cpu_source(self) -> str:
        """The job's ``cpu_source`` label: how its CPU time can be read."""
        return str(self.cgroup.ref) if self.cgroup is not None else "process tree"


def place(cgroup_root: Path, job_id: str, procfs_root: Path = Path("/proc")) -> Placement:
    """Make ``job_id``'s cgroup below this process's own, v2 first, then v1 cpuacct."""
    fs = CgroupFs(cgroup_root)
    if not fs.available:
        return Placement(None, f"no cgroup CPU counters under {cgroup_root}")
    try:
        own = parse_proc_cgroup((Path(procfs_root) / "self" / "cgroup").read_text())
    except OSError as exc:
        return Placement(None, f"cannot read {procfs_root}/self/cgroup: {exc.strerror}")
    reasons = []
    for version, base in ((V2, fs.v2), (V1_CPUACCT, fs.v1_cpuacct)):
        if base is None or version not in own:
            continue
        ref = CgroupRef(version, _join(own[version], run_cgroup_name(job_id)))
        cgroup, why = _make(fs, ref)
        if cgroup is not None:
            return Placement(cgroup, f"in {cgroup.ref} ({cgroup.directory})")
        reasons.append(why)
    return Placement(None, "; ".join(reasons) or "this process is in no cgroup mounted "
                     f"under {cgroup_root}")


def _join(parent: str, name: str) -> str:
    return parent.rstrip("/") + "/" + name


def _make(fs: CgroupFs, ref: CgroupRef) -> tuple[JobCgroup | None, str]:
    directory = fs.directory(ref)
    if directory is None:
        return None, f"{ref}: outside this cgroup namespace's view"
    made = False
    try:
        directory.mkdir()
        made = True
    except FileExistsError:
        pass
    except OSError as exc:
        return None, f"cannot make {directory}: {exc.strerror or exc}"
    try:
        fd = os.open(directory / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        if made:
            _remove_quietly(directory)
        return None, f"cannot write {directory}/cgroup.procs: {exc.strerror or exc}"
    counter = fs.counter(ref)
    if counter is not None:
        counter.close()
    else:
        os.close(fd)
        if made:
            _remove_quietly(directory)
        return None, f"{directory} has no readable CPU counter"
    return JobCgroup(ref, directory, fd, made), ""


def _remove_quietly(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:
        pass


# -- Jobs measured by their own cgroups: one counter read per job cgroup per tick ------

# (job id, a cgroup path one of its processes is in) -> that job's own cgroup path, or None
OwnCgroup = Callable[[str, str], str | None]


@dataclass(slots=True)
class _Unit:
    counter: CgroupCounter | None  # None once the cgroup is gone
    last_ns: int | None  # None until first read
    made_for_job: bool = False  # counted from zero: it holds the job's processes alone


class CgroupUnits:
    """The job cgroups in use, their baselines, and the nesting between them."""

    def __init__(self, procfs_root: Path, cgroup_root: Path | None,
                 own_cgroup: OwnCgroup | None) -> None:
        self._procfs = os.fspath(procfs_root)
        fs = CgroupFs(cgroup_root) if cgroup_root is not None and own_cgroup else None
        self.fs = fs if fs is not None and fs.available else None
        if cgroup_root is not None and own_cgroup is not None:
            log.debug("cgroups: %s", fs.describe() if fs else "none")
        self._own = own_cgroup
        self._units: dict[str, dict[CgroupRef, _Unit]] = {}
        self._restored: dict[str, dict[CgroupRef, int]] = {}
        self._carry_ns: dict[str, int] = {}
        # Per process (pid, start ticks): its cgroups, and per job the own cgroup it is in.
        self._refs: dict[tuple[int, int], tuple[CgroupRef, ...]] = {}
        self._own_of: dict[tuple[str, int, int], CgroupRef | None] = {}
        self._parents: dict[tuple[CgroupRef, ...], CgroupRef | None] = {}
        self._unreadable: set[CgroupRef] = set()

    # -- which jobs have cgroups --------------------------------------------------------

    def update(self, jobs: Sequence[JobWant], roots_of: Mapping[str, list[int]],
               alive: Mapping[int, ProcStat]) -> set[tuple[str, int]]:
        """Find the jobs' own cgroups from their live registered processes; returns the
        (job, pid) pairs whose process those cgroups measure."""
        covered: set[tuple[str, int]] = set()
        if self.fs is None:
            return covered
        for job in jobs:
            for pid in roots_of[job.id]:
                key = (job.id, pid, alive[pid].start_ticks)
                if key not in self._own_of:
                    self._own_of[key] = self._find_own(job.id, pid, alive[pid])
                ref = self._own_of[key]
                if ref is not None and self._unit(job.id, ref) is not None:
                    covered.add((job.id, pid))
        return covered

    def _find_own(self, job_id: str, pid: int, stat: ProcStat) -> CgroupRef | None:
        for ref in self.refs_of(pid, stat):
            path = self._own(job_id, ref.path) if self._own is not None else None
            if path is not None:
                return CgroupRef(ref.version, path)
        return None

    def refs_of(self, pid: int, stat: ProcStat) -> tuple[CgroupRef, ...]:
        key = (pid, stat.start_ticks)
        refs = self._refs.get(key)
        if refs is None:
            refs = self._read_refs(pid)
            self._refs[key] = refs
        return refs

    def _read_refs(self, pid: int) -> tuple[CgroupRef, ...]:
        if self.fs is None:
            return ()
        try:
            text = read_bytes(f"{self._procfs}/{pid}/cgroup").decode("utf-8", "replace")
        except OSError:
            return ()
        return tuple(self.fs.refs(text))

    def _unit(self, job_id: str, ref: CgroupRef) -> _Unit | None:
        units = self._units.setdefault(job_id, {})
        for known, unit in units.items():
            if known.contains(ref):
                return unit
        assert self.fs is not None
        counter = self.fs.counter(ref)
        if counter is None:
            if ref not in self._unreadable:
                self._unreadable.add(ref)
                log.info("job %s: %s cannot be read here; its process tree is read instead",
                         job_id, ref)
            return None
        units[ref] = unit = _Unit(counter, self._restored.get(job_id, {}).pop(ref, None))
        self._parents.clear()
        return unit

    def of(self, job_id: str) -> list[CgroupRef]:
        return list(self._units.get(job_id, ()))

    def any(self) -> bool:
        return any(self._units.values())

    # -- per tick -----------------------------------------------------------------------

    def deltas(self, jobs: Sequence[JobWant], roots_of: Mapping[str, list[int]],
               alive: Mapping[int, ProcStat], tree_ns: Mapping[str, int],
               trees: Mapping[str, set[int]]) -> dict[str, int]:
        """Each cgroup-measured job's CPU ns over the tick, nested jobs taken out.
        ``tree_ns`` is what each job's process trees used, ``trees`` those trees."""
        if not self.any():
            return {}
        own_delta: dict[CgroupRef, int] = {}
        owner: dict[CgroupRef, str] = {}
        for job in jobs:
            for ref, unit in self._units.get(job.id, {}).items():
                delta = self._read(job, ref, unit, roots_of[job.id], alive)
                if delta is not None:
                    own_delta[ref], owner[ref] = delta, job.id
        if not own_delta:
            return {}
        effective = dict(own_delta)
        for ref, delta in own_delta.items():  # a job cgroup inside another
            parent = self._innermost((ref,), exclude=ref)
            if parent in effective:
                effective[parent] -= delta
        for job_id, ns in tree_ns.items():  # a process tree inside a job cgroup
            roots = sorted(p for p in roots_of[job_id] if p in trees[job_id])
            if ns and roots:
                parent = self._innermost(self.refs_of(roots[0], alive[roots[0]]))
                if parent in effective:
                    effective[parent] -= ns
        out: dict[str, int] = {}
        for ref, ns in effective.items():
            out[owner[ref]] = out.get(owner[ref], 0) + ns
        for job_id, ns in list(out.items()):
            total = ns + self._carry_ns.pop(job_id, 0)
            out[job_id] = max(total, 0)
            if total < 0:
                self._carry_ns[job_id] = total
        return out

    def _read(self, job: JobWant, ref: CgroupRef, unit: _Unit, roots: list[int],
              alive: Mapping[int, ProcStat]) -> int | None:
        now = unit.counter.read_ns() if unit.counter is not None else None
        if now is None:
            if unit.counter is not None:
                unit.counter.close()
                unit.counter = None
                log.info("job %s: %s is gone; its CPU time is counted to the last read",
                         job.id, ref)
            return self._final(job, unit)
        if unit.last_ns is None:
            cutoff = (job.registered_boot_s - 1.0) * CLOCK_TICKS_PER_S
            inside = [p for p in roots
                      if any(ref.contains(r) for r in self.refs_of(p, alive[p]))]
            unit.made_for_job = bool(inside) and all(alive[p].start_ticks >= cutoff
                                                     for p in inside)
            unit.last_ns = 0 if unit.made_for_job else now
        delta, unit.last_ns = now - unit.last_ns, now
        return max(delta, 0)  # negative: a new cgroup under the same path; start over

    def _final(self, job: JobWant, unit: _Unit) -> int | None:
        """A cgroup removed before its last tick was read (``joulestat run`` removes its
        own once the job's summary is stored, or gives up waiting): the wrapper's wait4()
        total stands in for the counter when the cgroup held the job alone from zero, so
        the job's last moments are counted, and only once."""
        if job.final_cpu_s is None or not unit.made_for_job or unit.last_ns is None \
                or len(self._units.get(job.id, ())) != 1:
            return None
        final_ns = round(job.final_cpu_s * NS_PER_S)
        if final_ns <= unit.last_ns:
            return None
        delta, unit.last_ns = final_ns - unit.last_ns, final_ns
        return delta

    def _innermost(self, refs: Sequence[CgroupRef],
                   exclude: CgroupRef | None = None) -> CgroupRef | None:
        """The deepest job cgroup (other than ``exclude``) holding any of ``refs``; cached
        until the set of job cgroups changes, so a tick costs a lookup per job."""
        key = (*refs, *(() if exclude is None else (exclude,)))
        try:  # one lookup where ``in`` then ``[]`` made two (a ref's hash is Python code)
            return self._parents[key]
        except KeyError:
            pass
        best: CgroupRef | None = None
        for units in self._units.values():
            for unit in units:
                if unit != exclude and any(unit.contains(r) for r in refs) and (
                        best is None or len(unit.path) > len(best.path)):
                    best = unit
        self._parents[key] = best
        return best

    def populated(self, job_id: str) -> bool:
        """Whether any of the job's cgroups still holds a process."""
        return any(u.counter is not None and u.counter.populated()
                   for u in self._units.get(job_id, {}).values())

    def job_of_pid(self, pid: int) -> str | None:
        """The job whose cgroup holds ``pid`` (the innermost), for accelerator processes."""
        if self.fs is None or not self.any():
            return None
        refs = self._read_refs(pid)
        unit = self._innermost(refs)
        if unit is None:
            return None
        return next((job_id for job_id, units in self._units.items() if unit in units), None)

    # -- state ---------------------------------------------------------------------------

    def checkpoint(self) -> dict:
        return {
            "cgroup_ns": {job: {ref.key: u.last_ns for ref, u in units.items()
                                if u.last_ns is not None}
                          for job, units in self._units.items() if units},
            "carry_ns": dict(self._carry_ns),
        }

    def restore(self, state: Mapping) -> None:
        restored = {str(job): {CgroupRef.from_key(k): int(v) for k, v in units.items()}
                    for job, units in state.get("cgroup_ns", {}).items()}
        carry = {str(k): int(v) for k, v in state.get("carry_ns", {}).items()}
        self._restored, self._carry_ns = restored, carry

    def forget_processes(self, alive: set[int]) -> None:
        """Drop what is cached about processes that are no longer registered and alive."""
        if len(self._refs) + len(self._own_of) <= 2 * len(alive) + 64:
            return  # small enough: prune only once it has grown (checked each tick)
        self._refs = {k: v for k, v in self._refs.items() if k[0] in alive}
        self._own_of = {k: v for k, v in self._own_of.items() if k[1] in alive}

    def forget(self, job_ids: set[str]) -> None:
        for job_id in job_ids:
            for unit in self._units.pop(job_id, {}).values():
                if unit.counter is not None:
                    unit.counter.close()
            self._restored.pop(job_id, None)
            self._carry_ns.pop(job_id, None)
        self._parents.clear()

    def close(self) -> None:
        self.forget(set(self._units))
