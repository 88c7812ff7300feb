"""The cgroup filesystem: where it is mounted, and a job cgroup's CPU-time counter.

A job whose processes live in a cgroup of their own is measured by one file per tick:
``cpu.stat`` ``usage_usec`` on cgroup v2 (there on every non-root cgroup, with or
without the cpu controller), ``cpuacct.usage`` (nanoseconds) on v1. Both count every
process that ever ran in the cgroup and its descendants, those that exited included,
so a job's short-lived helpers are never missed and nothing is counted twice.

Layouts, under a root that is normally ``<sysfs>/fs/cgroup``:

- unified (v2 only): ``<root>/cgroup.controllers`` exists;
- hybrid: v1 controllers in ``<root>/<controller>``, v2 at ``<root>/unified``;
- legacy (v1 only): ``<root>/cpuacct`` or ``<root>/cpu,cpuacct``.

``/proc/<pid>/cgroup`` names a process's cgroup in each hierarchy (``0::<path>`` for v2,
``<n>:cpu,cpuacct:<path>`` for v1); paths are relative to the reader's cgroup namespace,
so a path holding ``..`` (the process is outside the agent's namespace) is not read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from joulestat.host.kernel_file import KernelFile

log = logging.getLogger(__name__)

V2 = 2
V1_CPUACCT = 1


@dataclass(frozen=True, slots=True)
class CgroupRef:
    """A cgroup in one hierarchy: ``version`` 2, or 1 for the v1 cpuacct hierarchy."""

    version: int
    path: str  # as /proc/<pid>/cgroup names it, e.g. "/system.slice/docker-<id>.scope"

    def contains(self, other: CgroupRef) -> bool:
        """True when ``other`` is this cgroup or below it (the same hierarchy)."""
        if other.version != self.version:
            return False
        if self.path == "/" or other.path == self.path:
            return True
        return other.path.startswith(self.path.rstrip("/") + "/")

    @property
    def key(self) -> str:
        """A stable text form, for checkpoints: ``v2:/path``."""
        return f"v{self.version}:{self.path}"

    @classmethod
    def from_key(cls, key: str) -> CgroupRef:
        version, _, path = key.partition(":")
        if version not in ("v1", "v2") or not path.startswith("/"):
            raise ValueError(f"not a cgroup key: {key!r}")
        return cls(int(version[1]), path)

    def __str__(self) -> str:
        return f"cgroup v2 {self.path}" if self.version == V2 else f"cgroup v1 cpuacct {self.path}"


def parse_proc_cgroup(text: str) -> dict[int, str]:
    """{2: the v2 path, 1: the cpuacct path} from a ``/proc/<pid>/cgroup`` text."""
    found: dict[int, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _hid, controllers, path = parts
        if controllers == "" and parts[0] == "0":
            found[V2] = path.strip()
        elif "cpuacct" in controllers.split(","):
            found[V1_CPUACCT] = path.strip()
    return found


def _usage_usec_ns(text: str) -> int:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) * 1000
    raise ValueError("no usage_usec line")


class CgroupCounter:
    """One job cgroup's cumulative CPU time in ns, re-read with ``pread`` each tick."""

    def __init__(self, ref: CgroupRef, directory: Path) -> None:
        self.ref = ref
        self.directory = directory
        name = "cpu.stat" if ref.version == V2 else "cpuacct.usage"
        self._file = KernelFile(directory / name)

    def read_ns(self) -> int | None:
        """The counter, or None once the cgroup is gone (or was never readable)."""
        try:
            text = self._file.read_text()
            if self._file.unlinked():
                raise FileNotFoundError(self._file.path)
        except OSError:
            self._file.close()
            return None
        try:
            return _usage_usec_ns(text) if self.ref.version == V2 else int(text.strip())
        except ValueError:
            log.warning("%s: cannot parse the CPU counter %r", self._file.path, text[:80])
            return None

    def populated(self) -> bool:
        """Whether any process is left in the cgroup or below it."""
        if self.ref.version == V2:
            try:
                text = (self.directory / "cgroup.events").read_text()
            except OSError:
                return False
            return "populated 1" in text
        try:
            if (self.directory / "cgroup.procs").read_text().strip():
                return True
            return any((child / "cgroup.procs").read_text().strip()
                       for child in self.directory.iterdir() if child.is_dir())
        except OSError:
            return False

    def close(self) -> None:
        self._file.close()


class CgroupFs:
    """The cgroup hierarchies this node exposes under ``root`` that hold CPU counters."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.v2: Path | None = None
        self.v1_cpuacct: Path | None = None
        if (self.root / "cgroup.controllers").exists():
            self.v2 = self.root
        else:
            if (self.root / "unified" / "cgroup.controllers").exists():
                self.v2 = self.root / "unified"
            for name in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu"):
                if (self.root / name / "cpuacct.usage").exists():
                    self.v1_cpuacct = self.root / name
                    break

    @property
    def available(self) -> bool:
        return self.v2 is not None or self.v1_cpuacct is not None

    def describe(self) -> str:
        parts = []
        if self.v2 is not None:
            parts.append(f"v2 at {self.v2}")
        if self.v1_cpuacct is not None:
            parts.append(f"v1 cpuacct at {self.v1_cpuacct}")
        return ", ".join(parts) or f"no cgroup CPU counters under {self.root}"

    def refs(self, proc_cgroup_text: str) -> list[CgroupRef]:
        """A process's cgroups in the hierarchies mounted here, v2 first."""
        paths = parse_proc_cgroup(proc_cgroup_text)
        found = []
        if self.v2 is not None and V2 in paths:
            found.append(CgroupRef(V2, paths[V2]))
        if self.v1_cpuacct is not None and V1_CPUACCT in paths:
            found.append(CgroupRef(V1_CPUACCT, paths[V1_CPUACCT]))
        return found

    def directory(self, ref: CgroupRef) -> Path | None:
        """Where ``ref`` lives here; None for a path outside this namespace's view."""
        base = self.v2 if ref.version == V2 else self.v1_cpuacct
        if base is None or not ref.path.startswith("/") or ".." in ref.path.split("/"):
            return None
        return base / ref.path.lstrip("/")

    def counter(self, ref: CgroupRef) -> CgroupCounter | None:
        """An open counter for ``ref``, or None when it cannot be read here."""
        directory = self.directory(ref)
        if directory is None:
            return None
        counter = CgroupCounter(ref, directory)
        if counter.read_ns() is None:
            counter.close()
            return None
        return counter
