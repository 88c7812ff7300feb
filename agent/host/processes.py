"""The processes the agent follows, read without scanning the node.

Each followed process is read through descriptors kept open on ``/proc/<pid>/stat``,
``/proc/<pid>/schedstat`` and ``/proc/<pid>/task/<tid>/children`` (one per thread: a
child is listed under the thread that forked it) and re-read with ``pread``. A kept
descriptor also pins the process it was opened on: once that process is gone, reads
fail (``ESRCH``), so a recycled pid can never pass for the process being followed.

Walking a job's tree from its registered processes through the ``children`` files each
tick finds exactly the processes a whole-node scan would (both follow the kernel's
current parent links), at a cost that follows the jobs' processes, not the node's.
Where a kernel gives no ``children`` files (built without ``CONFIG_PROC_CHILDREN``, or a
fake tree in a test), :meth:`ProcessTable.children` says so and the caller falls back to
a rate-limited scan (:func:`joulestat.host.proctree.read_all`).

Most of a busy node's job processes sleep through most ticks. A process's CPU clock
(``clock_gettime`` on ``CLOCK_PROCESS_CPUTIME`` of another pid: every thread's exact run
time in ns, one 1.7 µs system call) that has not moved since the last read means the
process has not run: it has used no CPU, forked nothing, reaped nothing, made no
thread, so its last stat and children stand, and the stat read and parse and the
children reads are skipped (measured on the 2-vCPU VM: ``pread`` of stat 5.4 µs plus
3-6 µs of parsing, a children file 1.1 µs each). Where the procfs is another pid
namespace's (a host ``/proc`` mounted into a container), pids there are not ours to
ask the clock about, and the main thread's ``schedstat`` run time stands in, for
single-threaded processes only. One thing changes a sleeping process's family without
it running: orphans reparented to it when a process below it exits (a subreaper). So
the tick after any followed process vanished reads everything in full.

Descriptors are capped (``max_open_fds``, by default a quarter of the soft open-file
limit and at most 1,024) so a job with thousands of processes cannot starve the agent's
HTTP ports of descriptors; past the cap, files are opened by path each read and the
process's start time guards against pid reuse instead.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path

from joulestat.host.kernel_file import read_bytes
from joulestat.host.proctree import ProcStat, parse_stat

log = logging.getLogger(__name__)

MAX_KEPT_FDS = 1024
_READ_BYTES = 4096


def default_fd_budget() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_KEPT_FDS
    return max(0, min(MAX_KEPT_FDS, soft // 4))


def _cpu_clock(pid: int) -> int:
    """The clock id of ``pid``'s CPU time, all threads (the kernel's
    ``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``, which glibc's
    ``clock_getcpuclockid`` returns)."""
    return (~pid << 3) | 2


@dataclass(slots=True)
class _Followed:
    stat: ProcStat  # as last read
    stat_fd: int | None  # None: past the descriptor budget, opened by path each read
    sched_fd: int | None = None  # schedstat, kept where the CPU clock cannot be asked
    sched: bytes | int = b""  # run time as last read (CPU clock ns, or schedstat text)
    fresh: bool = True  # stat re-read this tick (else: the process has not run)
    children: list[int] | None = None  # as last read
    children_fds: dict[int, int | None] = field(default_factory=dict)  # tid -> fd


class ProcessTable:
    """Stat and children of followed processes, through kept descriptors."""

    def __init__(self, procfs_root: Path, max_open_fds: int | None = None) -> None:
        self.root = os.fspath(procfs_root)
        self.max_open_fds = default_fd_budget() if max_open_fds is None else max_open_fds
        # Only a real procfs fails reads on a dead process's descriptor; a fake tree's
        # files would read on after removal, so there every read goes by path.
        self.keeps_fds = os.path.isdir(os.path.join(self.root, "self"))
        self.uses_cpu_clock = _same_pid_namespace(self.root)
        self._followed: dict[int, _Followed] = {}
        self._open_fds = 0
        self.children_supported: bool | None = None  # None until first tried
        self._vanished = False  # a followed process went away during this tick
        self._full = True  # read everything this tick (the first, or after a vanish)
        self.full_reads = 0  # stat reads that were not skipped (tests, benchmark)

    def begin_tick(self) -> None:
        """Call before each tick's reads."""
        self._full, self._vanished = self._vanished, False

    # -- stat -------------------------------------------------------------------------

    def visit(self, pid: int) -> tuple[ProcStat, list[int] | None] | None:
        """:meth:`stat` and :meth:`children` at once: the walk's hot path, where a
        sleeping process costs one CPU-clock read and two dictionary lookups."""
        entry = self._followed.get(pid)
        if entry is not None and self.uses_cpu_clock and not self._full \
                and entry.children is not None:
            try:
                ran = time.clock_gettime_ns((~pid << 3) | 2)
            except OSError:
                self._gone(pid)
                return None
            if ran == entry.sched:
                entry.fresh = False
                return entry.stat, entry.children
        stat = self.stat(pid)
        if stat is None:
            return None
        return stat, self.children(pid, stat)

    def stat(self, pid: int) -> ProcStat | None:
        """The process's stat now, or None when it is gone (or its pid was reused)."""
        entry = self._followed.get(pid)
        if entry is None:
            return self._first_read(pid)
        if self.uses_cpu_clock or entry.sched_fd is not None:
            try:
                ran = self._run_time(pid, entry.sched_fd)
            except OSError:
                self._gone(pid)
                return None
            if ran == entry.sched and not self._full and (
                    self.uses_cpu_clock or entry.stat.threads == 1):
                entry.fresh = False
                return entry.stat
            entry.sched = ran
        try:
            if entry.stat_fd is not None:
                data = os.pread(entry.stat_fd, _READ_BYTES, 0)
            else:
                data = read_bytes(f"{self.root}/{pid}/stat")
            stat = parse_stat(data)
        except (OSError, ValueError, IndexError):
            self._gone(pid)
            return None
        if stat.start_ticks != entry.stat.start_ticks:  # by path only: a recycled pid
            self._gone(pid)
            return None
        self.full_reads += 1
        entry.stat, entry.fresh = stat, True
        return stat

    def _first_read(self, pid: int) -> ProcStat | None:
        path = f"{self.root}/{pid}/stat"
        fds: list[int] = []
        sched_fd: int | None = None
        try:
            if self.keeps_fds and self._open_fds + 2 <= self.max_open_fds:
                fds.append(self._open(path))
                if not self.uses_cpu_clock:
                    sched_fd = self._open_optional(f"{self.root}/{pid}/schedstat")
                    if sched_fd is not None:
                        fds.append(sched_fd)
                sched = self._run_time(pid, sched_fd)
                stat = parse_stat(os.pread(fds[0], _READ_BYTES, 0))
            else:
                sched = self._run_time(pid, None)
                stat = parse_stat(read_bytes(path))
        except (OSError, ValueError, IndexError):
            for fd in fds:
                self._close(fd)
            return None
        self.full_reads += 1
        self._followed[pid] = _Followed(stat, fds[0] if fds else None, sched_fd, sched)
        return stat

    def _run_time(self, pid: int, sched_fd: int | None) -> bytes | int:
        """How long the process has run, read before its stat: anything it does after
        this read shows in the next one. OSError when the process is gone."""
        if self.uses_cpu_clock:
            return time.clock_gettime_ns(_cpu_clock(pid))
        if sched_fd is not None:
            return os.pread(sched_fd, 256, 0)
        return b""

    # -- children ---------------------------------------------------------------------

    def children(self, pid: int, stat: ProcStat) -> list[int] | None:
        """The live children of ``pid`` (all its threads'), or None when this kernel or
        tree gives no children files. ``stat`` is what :meth:`stat` just returned."""
        entry = self._followed.get(pid)
        if entry is None or self.children_supported is False:
            return None
        if not entry.fresh and entry.children is not None:
            return entry.children  # it has not run: it forked and reaped nothing
        tids = [pid] if stat.threads <= 1 else self._tids(pid)
        if tids is None:
            return None
        for gone in [t for t in entry.children_fds if t not in tids]:
            fd = entry.children_fds.pop(gone)
            if fd is not None:
                self._close(fd)
        found: list[int] = []
        for tid in tids:
            data = self._read_children(entry, pid, tid)
            if data is None:
                if tid != pid:
                    continue  # a thread that exited since the listing: its children moved
                return self._no_children_file(pid)
            found.extend(int(word) for word in data.split())
        self.children_supported = True
        entry.children = found
        return found

    def _no_children_file(self, pid: int) -> list[int] | None:
        """Why the main thread's children file could not be read: the process is gone
        (no children to follow), or this kernel or tree has no such files (None)."""
        if not os.path.isdir(f"{self.root}/{pid}"):
            return []
        if not os.path.exists(f"{self.root}/{pid}/task/{pid}/children") \
                and self.children_supported is None:
            self.children_supported = False
            log.info("%s/<pid>/task/<tid>/children do not exist (a kernel without "
                     "CONFIG_PROC_CHILDREN?): new processes of jobs are found by a /proc "
                     "scan every few seconds instead", self.root)
        return None

    def _tids(self, pid: int) -> list[int] | None:
        try:
            return [int(name) for name in os.listdir(f"{self.root}/{pid}/task")
                    if name.isdigit()]
        except OSError:
            return None

    def _read_children(self, entry: _Followed, pid: int, tid: int) -> bytes | None:
        path = f"{self.root}/{pid}/task/{tid}/children"
        fd = entry.children_fds.get(tid)
        try:
            if fd is not None:
                return _pread_all(fd)
            if tid not in entry.children_fds and self.keeps_fds \
                    and self._open_fds < self.max_open_fds:
                fd = self._open(path)
                entry.children_fds[tid] = fd
                return _pread_all(fd)
            entry.children_fds.setdefault(tid, None)
            return read_bytes(path)
        except OSError as exc:
            if fd is not None:
                entry.children_fds.pop(tid, None)
                self._close(fd)
            if exc.errno not in (errno.ENOENT, errno.ESRCH):
                log.debug("cannot read %s: %s", path, exc)
            return None

    # -- bookkeeping ------------------------------------------------------------------

    def retain(self, pids: set[int]) -> None:
        """Stop following every process not in ``pids`` (closing its descriptors)."""
        for pid in [p for p in self._followed if p not in pids]:
            self.drop(pid)

    def _gone(self, pid: int) -> None:
        self._vanished = True
        self.drop(pid)

    def drop(self, pid: int) -> None:
        entry = self._followed.pop(pid, None)
        if entry is None:
            return
        for fd in (entry.stat_fd, entry.sched_fd, *entry.children_fds.values()):
            if fd is not None:
                self._close(fd)

    def _open(self, path: str) -> int:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._open_fds += 1
        return fd

    def _open_optional(self, path: str) -> int | None:
        """A file some kernels lack (schedstat needs CONFIG_SCHED_INFO)."""
        try:
            return self._open(path)
        except FileNotFoundError:
            return None

    def _close(self, fd: int) -> None:
        self._open_fds -= 1
        try:
            os.close(fd)
        except OSError:
            pass

    def close(self) -> None:
        for pid in list(self._followed):
            self.drop(pid)


def _same_pid_namespace(root: str) -> bool:
    """Whether pids under ``root`` are this process's pids (``<root>/self`` is us)."""
    try:
        return int(os.readlink(os.path.join(root, "self"))) == os.getpid()
    except (OSError, ValueError):
        return False


def _pread_all(fd: int) -> bytes:
    data = os.pread(fd, _READ_BYTES, 0)
    if len(data) < _READ_BYTES:
        return data
    chunks, offset = [data], len(data)
    while chunk := os.pread(fd, 65536, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)
