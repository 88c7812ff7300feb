"""Process trees and their CPU time, read from ``<procfs>/<pid>/stat``.

A job's CPU time is the sum, over the live processes of its tree, of
``utime + stime + cutime + cstime``. Counting the children's fields too is what keeps
the sum continuous when a child exits: the kernel moves a reaped child's whole time
into its parent's ``cutime``/``cstime``, so nothing vanishes and nothing is counted
twice. (A process orphaned to init takes its time with it.)

This module holds the pure parts (parsing, the ownership rule) and the whole-node scan
that :mod:`joulestat.host.processes` falls back to where a kernel gives no
``/proc/<pid>/task/<tid>/children`` files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
NS_PER_S = 1_000_000_000
NS_PER_TICK = NS_PER_S // CLOCK_TICKS_PER_S  # 10 ms at USER_HZ 100: exact in integers


@dataclass(slots=True)
class ProcStat:
    """One process's stat line, the fields the agent uses. Not frozen only because a
    frozen dataclass takes twice as long to build, and one is built per process read:
    treat it as immutable."""

    pid: int
    ppid: int
    cpu_ticks: int  # utime + stime + cutime + cstime, in clock ticks
    start_ticks: int  # start time since boot: with pid, identifies the process across reuse
    threads: int = 1  # num_threads: how many task/<tid>/children files it has

    @property
    def cpu_ns(self) -> int:
        return self.cpu_ticks * NS_PER_TICK


def parse_stat(text: str | bytes) -> ProcStat:
    """Parse one ``/proc/<pid>/stat`` line; the command name may hold spaces and ')'."""
    data = text.encode() if isinstance(text, str) else text
    # fields[0] is state (field 3); utime is field 14 -> fields[11]; the rest unsplit.
    fields = data[data.rindex(b")") + 2:].split(None, 20)
    cutime, cstime = int(fields[13]), int(fields[14])
    return ProcStat(
        int(data[:data.index(b" ")]),
        int(fields[1]),
        int(fields[11]) + int(fields[12]) + (cutime if cutime > 0 else 0)
        + (cstime if cstime > 0 else 0),
        int(fields[19]),
        int(fields[17]) or 1,
    )


def read_all(procfs_root: Path) -> dict[int, ProcStat]:
    """Every process's stat; processes that exit while we read are skipped. A scan of
    the whole node: its cost grows with the node's processes, so callers use it only
    where nothing cheaper can answer."""
    from joulestat.host.kernel_file import list_pids, read_bytes

    root = os.fspath(procfs_root)
    found: dict[int, ProcStat] = {}
    for pid in list_pids(root):
        try:
            stat = parse_stat(read_bytes(f"{root}/{pid}/stat"))
        except (OSError, ValueError, IndexError):
            continue
        found[stat.pid] = stat
    return found


def descendants(roots: Iterable[int], procs: Mapping[int, ProcStat]) -> set[int]:
    """``roots`` (those still alive) and every live process below them."""
    return exclusive_trees([("", roots)], procs)[""]


def tree_cpu_s(pids: Iterable[int], procs: Mapping[int, ProcStat]) -> float:
    return sum(procs[pid].cpu_ticks for pid in pids if pid in procs) / CLOCK_TICKS_PER_S


def children_of(procs: Mapping[int, ProcStat]) -> dict[int, list[int]]:
    """ppid -> its live children, from one scan."""
    children: dict[int, list[int]] = {}
    for stat in procs.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    return children


def owners_of_roots(roots_by_job: Iterable[tuple[str, Iterable[int]]],
                    alive: Mapping[int, object] | set[int]) -> dict[int, str]:
    """Registered pid -> its job; a pid registered by two jobs belongs to the later one."""
    owner: dict[int, str] = {}
    for job_id, roots in roots_by_job:
        for pid in roots:
            if pid in alive:
                owner[pid] = job_id
    return owner


def exclusive_trees(roots_by_job: Iterable[tuple[str, Iterable[int]]],
                    procs: Mapping[int, ProcStat]) -> dict[str, set[int]]:
    """Each live process in at most one job: the job of its nearest registered ancestor.

    ``roots_by_job`` is (job id, registered pids) in registration order. A process
    registered by two jobs belongs to the later one (a job started inside another takes
    its processes from it), and a job's tree stops where another job's registered
    process begins. So two jobs never count the same CPU time, however they nest.
    """
    pairs = [(job_id, list(roots)) for job_id, roots in roots_by_job]
    owner_of_root = owners_of_roots(pairs, procs)
    trees: dict[str, set[int]] = {job_id: set() for job_id, _ in pairs}
    if not owner_of_root:
        return trees
    children = children_of(procs)
    seen: set[int] = set()
    for root, job_id in owner_of_root.items():
        tree = trees[job_id]
        stack = [root]
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            tree.add(pid)
            stack.extend(c for c in children.get(pid, ()) if c not in owner_of_root)
    return trees
