"""A cgroup of its own for a command ``joulestat run`` starts, where the node allows it.

With its command in its own cgroup, a job's CPU time is one counter read per tick
(:mod:`joulestat.host.cgroupfs`) instead of a walk of its process tree, and it includes
every helper the command started, orphans and short-lived ones too. The cgroup is made
beside nothing and below the wrapper's own cgroup, named ``joulestat-job-<job id>``
(:func:`run_cgroup_name`), which is how the agent recognises it:

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
"""

from __future__ import annotations

import errno
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from joulestat.host.cgroupfs import V1_CPUACCT, V2, CgroupFs, CgroupRef, parse_proc_cgroup

log = logging.getLogger(__name__)

RUN_CGROUP_PREFIX = "joulestat-job-"


def run_cgroup_name(job_id: str) -> str:
    """The cgroup ``joulestat run`` makes for job ``job_id``'s command."""
    return RUN_CGROUP_PREFIX + job_id


def run_cgroup_path(job_id: str, path: str) -> str | None:
    """The cgroup ``joulestat run`` made for ``job_id`` that ``path`` lies in, or None."""
    name = run_cgroup_name(job_id)
    if name not in path:
        return None
    segments = path.split("/")
    for i, segment in enumerate(segments):
        if segment == name:
            return "/".join(segments[: i + 1])
    return None


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
