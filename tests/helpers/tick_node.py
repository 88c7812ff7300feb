"""A node's whole agent pipeline over fake trees, for what one steady tick costs.

Why it exists: the agent's CPU per tick must follow its sensors and its jobs, never the
node's other processes (issue 48). What a tick reads and calls is counted on this node
by ``tests/unit/pipeline/test_tick_cost.py`` (exact file reads, bounded Python calls)
and timed stage by stage by ``benchmarks/tick_budget.py``; both build it here, so the
figures the guard holds and the budget the docs give are of the same tick.

The pipeline is the one ``joulestat agent`` builds (:func:`build_pipeline`: RAPL, the
network model, accounting, the node metrics and the store writer as sinks, on a
migrated SQLite store; OTLP off); only its clocks are driven. The node has:

- RAPL ``package-0`` and its ``dram`` zone (:class:`FakePowercap`), ``/proc/stat`` and
  ``/proc/net/dev`` with one NIC;
- ``unrelated`` sleeping processes that belong to no job;
- ``jobs`` jobs of :data:`JOB_PROCESSES` processes each: the registered process, which
  runs every tick, and its children, which sleep. Every :data:`CGROUP_EVERY`-th job runs
  in the cgroup ``joulestat run`` makes for it (cgroup v2: one counter per job); the
  others are read from their process trees (``task/<tid>/children`` files).

The procfs is laid out as the agent's own pid namespace (``<procfs>/self`` is this
process), so the agent reads it as it reads a real ``/proc``: through kept descriptors,
asking each process's CPU clock before its stat. :func:`fake_cpu_clock` is that clock
for the fake processes; install it over ``time.clock_gettime_ns`` while the node ticks.
"""

from __future__ import annotations

import errno
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from joulestat.attribution.registry import JobRegistry
from joulestat.cli.agent import AGENT_OPTIONS
from joulestat.host.cgroups import run_cgroup_name
from joulestat.host.proctree import NS_PER_TICK
from joulestat.pipeline.pipeline import Pipeline
from joulestat.runtime.assembly import Assembly, PipelineSettings, build_pipeline
from joulestat.runtime.settings import resolve
from tests.fakes.net_dev import write_net_dev
from tests.fakes.powercap import FakePowercap
from tests.fakes.procfs import HZ, FakeCgroups, FakeProc
from tests.helpers.store_rows import migrated_engine

JOB_PROCESSES = 3  # a job's registered process and its two children
CGROUP_EVERY = 5  # jobs 0, 5, 10, ... run in a cgroup of their own
ZONES = (("intel-rapl:0", "package-0", 20_000_000), ("intel-rapl:0:0", "dram", 5_000_000))
WALL_S = 1.7e9  # the ticks' wall clock: WALL_S + the node's monotonic now
FIRST_JOB_PID = 10_000
FIRST_UNRELATED_PID = 100_000


@dataclass
class FakeNode:
    """One agent over a fake node; :meth:`step` makes a second of work, :meth:`tick`
    ticks once over it."""

    pipeline: Pipeline
    built: Assembly
    registry: JobRegistry
    proc: FakeProc
    cgroups: FakeCgroups
    powercap: FakePowercap
    tree_jobs: list[str]  # job ids read from their process trees
    cgroup_jobs: list[str]  # job ids measured by their cgroups
    roots: dict[str, int]  # job id -> its registered process
    now_s: float = 1000.0
    energy_uj: dict[str, int] = field(default_factory=dict)
    ticks: int = 0  # the caller's count, for what it does every so many ticks

    @property
    def jobs(self) -> list[str]:
        return self.tree_jobs + self.cgroup_jobs

    def step(self, dt_s: float = 1.0) -> None:
        """Advance the node ``dt_s``: every job's registered process runs 10 ms (its
        cgroup's counter with it), the counters and RAPL move, each job counts a unit."""
        self.now_s += dt_s
        for job_id, pid in self.roots.items():
            self.proc.run(pid, 1 / HZ, busy_extra_s=1 / HZ)
            if job_id in self.cgroup_jobs:
                self.cgroups.add(cgroup_path(job_id), 1 / HZ)
            self.registry.count(job_id, "sample", 1)
        self.proc.write()
        for zone_id, _name, per_s_uj in ZONES:
            self.energy_uj[zone_id] += round(per_s_uj * dt_s)
            self.powercap.set_energy_uj(zone_id, self.energy_uj[zone_id])

    def tick(self) -> None:
        self.pipeline.tick()

    def close(self) -> None:
        self.pipeline.close()


def cgroup_path(job_id: str) -> str:
    """The v2 cgroup ``joulestat run`` makes for ``job_id`` below its own."""
    return f"/user.slice/{run_cgroup_name(job_id)}"


def fake_cpu_clock(proc: FakeProc, real: Callable[[int], int] = time.clock_gettime_ns
                   ) -> Callable[[int], int]:
    """``time.clock_gettime_ns`` where a process's CPU clock (the id glibc's
    ``clock_getcpuclockid`` makes of a pid) is the fake process's CPU time, and any
    other clock is the real one; a process not in ``proc`` is gone (ESRCH), as the
    kernel says."""

    def clock_gettime_ns(clock_id: int) -> int:
        if clock_id >= 0 or clock_id & 7 != 2:
            return real(clock_id)
        found = proc.procs.get(~(clock_id >> 3))
        if found is None:
            raise OSError(errno.ESRCH, os.strerror(errno.ESRCH))
        return found.cpu_ticks * NS_PER_TICK

    return clock_gettime_ns


@contextmanager
def fake_node(tmp: Path, jobs: int, unrelated: int,
              install_clock: Callable[[Callable[[int], int]], None]) -> Iterator[FakeNode]:
    """The node (see the module doc), started, warmed up by three ticks, then closed.
    ``install_clock`` puts :func:`fake_cpu_clock` in place of ``time.clock_gettime_ns``
    (``monkeypatch.setattr`` in a test) before the agent first reads a process."""
    proc = FakeProc(tmp / "proc")
    (proc.root / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Test CPU\n\n")
    (proc.root / "meminfo").write_text("MemTotal:       16384000 kB\n")
    write_net_dev(proc.root, {"lo": (100, 100), "eth0": (5_000, 7_000)})
    sysfs = tmp / "sys"
    powercap = FakePowercap(sysfs)
    energy = {}
    for zone_id, name, _per_s in ZONES:
        powercap.add_zone(zone_id, name, energy_uj=1_000_000)
        energy[zone_id] = 1_000_000
    cgroups = FakeCgroups(sysfs / "fs" / "cgroup")
    for i in range(unrelated):
        proc.add(FIRST_UNRELATED_PID + i, start_s=500)
    tree_jobs, cgroup_jobs, roots = [], [], {}
    for j in range(jobs):
        job_id = f"job{j:03d}"
        root = FIRST_JOB_PID + j * 10
        in_cgroup = j % CGROUP_EVERY == 0
        line = f"0::{cgroup_path(job_id)}\n" if in_cgroup else "0::/user.slice\n"
        pids = [root + k for k in range(JOB_PROCESSES)]
        proc.add(root, start_s=900, cgroup=line)
        for pid in pids[1:]:
            proc.add(pid, ppid=root, start_s=900, cgroup=line)
        if in_cgroup:
            cgroups.make(cgroup_path(job_id), procs=tuple(pids))
            cgroup_jobs.append(job_id)
        else:
            tree_jobs.append(job_id)
        roots[job_id] = root
    proc.write()
    # <procfs>/self is this process: the agent takes the tree for its own pid namespace.
    (proc.root / str(os.getpid())).mkdir()
    (proc.root / "self").symlink_to(str(os.getpid()))
    proc.watch = set(roots.values())  # only the registered processes change from now on
    install_clock(fake_cpu_clock(proc))

    db_url = f"sqlite:///{tmp / 'store.db'}"
    with migrated_engine(db_url):
        pass
    settings = resolve({"sysfs_root": str(sysfs), "procfs_root": str(proc.root),
                        "db": db_url, "node": "n1", "instance_type": "test.xlarge",
                        "region": "us-east-1", "cloud_metadata": False, "nvml": False,
                        "spool_dir": str(tmp / "spool")}, AGENT_OPTIONS, env={})
    node: FakeNode | None = None
    registry = JobRegistry(clock=lambda: WALL_S + (node.now_s if node else 1000.0))
    built = build_pipeline(PipelineSettings.of(settings), registry, with_metrics=True,
                           monotonic=lambda: node.now_s if node else 1000.0,
                           wall=lambda: WALL_S + (node.now_s if node else 1000.0))
    node = FakeNode(built.pipeline, built, registry, proc, cgroups, powercap, tree_jobs,
                    cgroup_jobs, roots, energy_uj=energy)
    try:
        built.pipeline.start()
        for job_id, root in roots.items():
            registry.register(job_id, "training", [root], job_id=job_id)
        for _ in range(3):  # baselines, first sight of every process and cgroup
            node.step()
            node.tick()
        yield node
    finally:
        node.close()


# -- What a tick does, counted ---------------------------------------------------------

@dataclass
class IoCount:
    """The file work done while :func:`counting_io` was open, by file (relative to the
    node's directory; a kept descriptor is named by the file it is open on).

    ``reads``: a file read whole, by path (an open) or again through a kept descriptor (a
    ``pread`` at offset 0); ``listings``: directories listed; ``stats``: files stat'ed
    (``fstat`` of a kept descriptor included); ``cpu_clocks``: processes whose CPU clock
    was read; ``calls``: every system call above, by name."""

    reads: Counter[str] = field(default_factory=Counter)
    listings: Counter[str] = field(default_factory=Counter)
    stats: Counter[str] = field(default_factory=Counter)
    cpu_clocks: Counter[int] = field(default_factory=Counter)
    calls: Counter[str] = field(default_factory=Counter)


@contextmanager
def counting_io(base: Path) -> Iterator[IoCount]:
    """Count the file system calls this process makes (see :class:`IoCount`) by putting
    counting wrappers in place of ``os.open``, ``io.open``, ``os.read``, ``os.pread``,
    ``os.listdir``, ``os.scandir``, ``os.stat``, ``os.lstat``, ``os.fstat`` and
    ``time.clock_gettime_ns`` until the block ends; the code under count is unchanged."""
    import builtins
    import io

    count = IoCount()
    readlink = os.readlink

    def name(path: object) -> str:  # made relative to ``base`` once the count is over
        return os.fsdecode(path) if isinstance(path, str | bytes | os.PathLike) else str(path)

    def of_fd(fd: int) -> str:
        try:
            return readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return f"fd {fd}"

    originals: list[tuple[object, str, object]] = []

    def wrap(owner: object, attr: str, make: Callable[[Callable], Callable]) -> None:
        real = getattr(owner, attr)
        originals.append((owner, attr, real))
        setattr(owner, attr, make(real))

    def opening(call: str) -> Callable[[Callable], Callable]:
        def make(real: Callable) -> Callable:
            def wrapper(file: object, *args: object, **kwargs: object) -> object:
                count.calls[call] += 1
                if not isinstance(file, int):
                    count.reads[name(file)] += 1
                return real(file, *args, **kwargs)
            return wrapper
        return make

    def preading(real: Callable) -> Callable:
        def pread(fd: int, size: int, offset: int) -> bytes:
            count.calls["pread"] += 1
            if offset == 0:
                count.reads[of_fd(fd)] += 1
            return real(fd, size, offset)
        return pread

    def listing(call: str) -> Callable[[Callable], Callable]:
        def make(real: Callable) -> Callable:
            def wrapper(path: object = ".", *args: object, **kwargs: object) -> object:
                count.calls[call] += 1
                count.listings[name(path)] += 1
                return real(path, *args, **kwargs)
            return wrapper
        return make

    def stating(call: str) -> Callable[[Callable], Callable]:
        def make(real: Callable) -> Callable:
            def wrapper(path: object, *args: object, **kwargs: object) -> object:
                count.calls[call] += 1
                count.stats[of_fd(path) if isinstance(path, int) else name(path)] += 1
                return real(path, *args, **kwargs)
            return wrapper
        return make

    def reading(real: Callable) -> Callable:
        def read(fd: int, size: int) -> bytes:
            count.calls["read"] += 1
            return real(fd, size)
        return read

    def clocking(real: Callable) -> Callable:
        def clock_gettime_ns(clock_id: int) -> int:
            if clock_id < 0:  # a process's CPU clock
                count.calls["clock_gettime(cpu)"] += 1
                count.cpu_clocks[~(clock_id >> 3)] += 1
            return real(clock_id)
        return clock_gettime_ns

    try:
        wrap(os, "open", opening("open"))
        wrap(io, "open", opening("io.open"))
        wrap(builtins, "open", opening("io.open"))
        wrap(os, "read", reading)
        wrap(os, "pread", preading)
        wrap(os, "listdir", listing("listdir"))
        wrap(os, "scandir", listing("scandir"))
        for call in ("stat", "lstat", "fstat"):
            wrap(os, call, stating(call))
        wrap(time, "clock_gettime_ns", clocking)
        yield count
    finally:
        for owner, attr, real in reversed(originals):
            setattr(owner, attr, real)
        # Every file by its real path under ``base`` (a RAPL zone is opened through its
        # class/powercap link; a kept descriptor names the file itself).
        root = os.path.realpath(base) + "/"
        for counter in (count.reads, count.listings, count.stats):
            named = Counter({_under(root, key): n for key, n in counter.items()})
            counter.clear()
            counter.update(named)


def _under(root: str, path: str) -> str:
    real = os.path.realpath(path)
    return real[len(root):] if real.startswith(root) else path


@contextmanager
def counting_calls() -> Iterator[Counter[str]]:
    """Count the Python function calls this thread makes (``sys.setprofile``'s "call"
    events) until the block ends, by the file of the function called; the tests' own
    functions (fakes, wrappers) are left out. The collector is off meanwhile: what it
    runs (finalizers) depends on when it runs, not on the tick."""
    import gc
    import sys

    calls: Counter[str] = Counter()
    tests = os.fspath(Path(__file__).resolve().parents[1]) + "/"

    def profile(frame: object, event: str, _arg: object) -> None:
        if event == "call":
            filename = frame.f_code.co_filename  # type: ignore[attr-defined]
            if not filename.startswith(tests):
                calls[filename] += 1

    enabled = gc.isenabled()
    gc.disable()
    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(None)
        if enabled:
            gc.enable()
