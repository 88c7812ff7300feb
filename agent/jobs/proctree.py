"""Process trees and their CPU time, read from ``<procfs>/<pid>/stat``.

A job's CPU time is the sum, over the live processes of its tree, of
``utime + stime + cutime + cstime``. Counting the children's fields too is what keeps
the sum continuous when a child exits: the kernel moves a reaped child's whole time
into its parent's ``cutime``/``cstime``, so nothing vanishes and nothing is counted
twice. (A process orphaned to init takes its time with it; ``joulestat run`` makes
itself a child subreaper so its job's orphans come back to it.)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class ProcStat:
    pid: int
    ppid: int
    cpu_ticks: int  # utime + stime + cutime + cstime, in clock ticks
    start_ticks: int  # start time since boot: with pid, identifies the process across reuse


def parse_stat(text: str) -> ProcStat:
    """Parse one ``/proc/<pid>/stat`` line; the command name may hold spaces and ')'."""
    pid_text, _, rest = text.partition(" (")
    fields = rest.rsplit(") ", 1)[1].split()
    # fields[0] is state (field 3); utime is field 14 -> fields[11]
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return ProcStat(
        pid=int(pid_text),
        ppid=int(fields[1]),
        cpu_ticks=utime + stime + max(cutime, 0) + max(cstime, 0),
        start_ticks=int(fields[19]),
    )


def read_all(procfs_root: Path) -> dict[int, ProcStat]:
    """Every process's stat; processes that exit while we read are skipped."""
    found: dict[int, ProcStat] = {}
    try:
        entries = os.listdir(procfs_root)
    except OSError as exc:
        log.warning("cannot list %s: %s", procfs_root, exc)
        return found
    for name in entries:
        if not name.isdigit():
            continue
        try:
            stat = parse_stat((procfs_root / name / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
        found[stat.pid] = stat
    return found


def descendants(roots: Iterable[int], procs: dict[int, ProcStat]) -> set[int]:
    """``roots`` (those still alive) and every live process below them."""
    children: dict[int, list[int]] = {}
    for stat in procs.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    tree: set[int] = set()
    stack = [pid for pid in roots if pid in procs]
    while stack:
        pid = stack.pop()
        if pid in tree:
            continue
        tree.add(pid)
        stack.extend(children.get(pid, ()))
    return tree


def tree_cpu_s(pids: Iterable[int], procs: dict[int, ProcStat]) -> float:
    return sum(procs[pid].cpu_ticks for pid in pids if pid in procs) / CLOCK_TICKS_PER_S


def exclusive_trees(roots_by_job: Iterable[tuple[str, Iterable[int]]],
                    procs: dict[int, ProcStat]) -> dict[str, set[int]]:
    """Each live process in at most one job: the job of its nearest registered ancestor.

    ``roots_by_job`` is (job id, registered pids) in registration order. A process
    registered by two jobs belongs to the later one (a job started inside another takes
    its processes from it), and a job's tree stops where another job's registered
    process begins. So two jobs never count the same CPU time, however they nest.
    """
    pairs = [(job_id, list(roots)) for job_id, roots in roots_by_job]
    owner_of_root: dict[int, str] = {}
    for job_id, roots in pairs:
        for pid in roots:
            if pid in procs:
                owner_of_root[pid] = job_id
    trees: dict[str, set[int]] = {job_id: set() for job_id, _ in pairs}
    if not owner_of_root:
        return trees
    children: dict[int, list[int]] = {}
    for stat in procs.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
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
