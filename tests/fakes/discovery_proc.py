"""A fake ``/proc/<pid>`` as job discovery reads it: stat (for the parent), cgroup (which
pod, container or Slurm job) and environ (SageMaker's variables)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

# A login session's cgroup: a process that belongs to no scheduler.
SESSION = "0::/user.slice/user-1000.slice/session-3.scope\n"


def add_proc(
    root: Path,
    pid: int,
    cgroup: str | None = SESSION,
    env: Mapping[str, str] | None = None,
    ppid: int = 1,
) -> Path:
    """A fake ``/proc/<pid>`` with stat, cgroup and environ (omitted when None)."""
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} (python) S {ppid} " + "0 " * 48 + "\n")
    if cgroup is not None:
        (d / "cgroup").write_text(cgroup)
    environ = {"PATH": "/usr/bin", "HOME": "/root", **(env or {})}
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in environ.items()))
    return d
