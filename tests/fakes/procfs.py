"""A fake /proc (node busy counter, processes with CPU time) and fake cgroup trees.

Laid out as the kernel does: ``<root>/stat``, ``<root>/<pid>/stat`` (utime in field 14,
num_threads in 20, starttime in 22), ``<root>/<pid>/task/<pid>/children`` (left out to
play a kernel without ``CONFIG_PROC_CHILDREN``) and ``<root>/<pid>/cgroup``; cgroup v2
directories with ``cpu.stat`` (``usage_usec``) and ``cgroup.events``, v1 cpuacct ones with
``cpuacct.usage`` (ns) and ``cgroup.procs``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from joulestat.host.proctree import CLOCK_TICKS_PER_S

HZ = CLOCK_TICKS_PER_S


@dataclass
class FakeProcess:
    ppid: int
    cpu_ticks: int
    start_ticks: int
    cgroup: str = "0::/user.slice\n"


class FakeProc:
    """A /proc with a node-wide busy counter and processes whose CPU time we set."""

    def __init__(self, root: Path, children_files: bool = True) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.children_files = children_files
        self.watch: set[int] | None = None  # when set, write() rewrites only these pids
        self.busy = 0
        self.procs: dict[int, FakeProcess] = {}
        self.write()

    def add(self, pid: int, ppid: int = 1, cpu_s: float = 0.0, start_s: float = 1000.0,
            cgroup: str = "0::/user.slice\n") -> None:
        self.procs[pid] = FakeProcess(ppid, round(cpu_s * HZ), round(start_s * HZ), cgroup)

    def run(self, pid: int, cpu_s: float, busy_extra_s: float = 0.0) -> None:
        """``pid`` uses ``cpu_s`` more CPU; the node is busy that long plus ``busy_extra_s``."""
        self.procs[pid].cpu_ticks += round(cpu_s * HZ)
        self.busy += round((cpu_s + busy_extra_s) * HZ)

    def exit(self, pid: int, reaped_by_parent: bool = True) -> None:
        """``pid`` exits; its parent's cutime takes its whole time when it reaps it."""
        gone = self.procs.pop(pid)
        if reaped_by_parent and gone.ppid in self.procs:
            self.procs[gone.ppid].cpu_ticks += gone.cpu_ticks
        for child in self.procs.values():  # orphans go to init
            if child.ppid == pid:
                child.ppid = 1

    def write(self) -> None:
        (self.root / "stat").write_text(f"cpu  {self.busy} 0 0 100000 0 0 0 0 0 0\n"
                                        f"cpu0 {self.busy} 0 0 100000 0 0 0 0 0 0\n")
        if self.watch is None:
            for path in self.root.iterdir():
                if path.name.isdigit() and int(path.name) not in self.procs:
                    shutil.rmtree(path)
        kids_of: dict[int, list[int]] = {}  # once, not a pass over every process per pid
        for child, proc in self.procs.items():
            kids_of.setdefault(proc.ppid, []).append(child)
        for pid, proc in self.procs.items():
            if self.watch is not None and pid not in self.watch:
                continue
            directory = self.root / str(pid)
            directory.mkdir(exist_ok=True)
            fields = ["S", str(proc.ppid)] + ["0"] * 9 + [str(proc.cpu_ticks), "0", "0", "0"]
            fields += ["20", "0", "1", "0", str(proc.start_ticks), "0"]
            (directory / "stat").write_text(f"{pid} (p {pid}) {' '.join(fields)}\n")
            (directory / "cgroup").write_text(proc.cgroup)
            if self.children_files:
                task = directory / "task" / str(pid)
                task.mkdir(parents=True, exist_ok=True)
                kids = " ".join(str(c) for c in kids_of.get(pid, ()))
                (task / "children").write_text(kids + (" " if kids else ""))


class FakeCgroups:
    """A cgroup root: ``v2`` (unified), ``hybrid`` (v1 controllers + ``unified``) or ``v1``."""

    def __init__(self, root: Path, layout: str = "v2") -> None:
        self.root = root
        self.layout = layout
        if layout == "v2":
            self.base = root
            root.mkdir(parents=True, exist_ok=True)
            (root / "cgroup.controllers").write_text("cpu io memory pids\n")
            (root / "cgroup.procs").write_text("")
        else:
            if layout == "hybrid":
                (root / "unified").mkdir(parents=True, exist_ok=True)
                (root / "unified" / "cgroup.controllers").write_text("")
            self.base = root / "cpu,cpuacct"
            self.base.mkdir(parents=True, exist_ok=True)
            (self.base / "cpuacct.usage").write_text("0\n")
            (self.base / "cgroup.procs").write_text("")

    @property
    def v1(self) -> bool:
        return self.layout != "v2"

    def proc_line(self, path: str) -> str:
        """The /proc/<pid>/cgroup text of a process in ``path``."""
        if self.v1:
            return f"9:name=systemd:/\n4:cpu,cpuacct:{path}\n0::/\n"
        return f"0::{path}\n"

    def make(self, path: str, usage_s: float = 0.0, procs: tuple[int, ...] = ()) -> None:
        directory = self.base / path.lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        self.set(path, usage_s, procs)

    def set(self, path: str, usage_s: float, procs: tuple[int, ...] | None = None) -> None:
        directory = self.base / path.lstrip("/")
        if self.v1:
            (directory / "cpuacct.usage").write_text(f"{round(usage_s * 1e9)}\n")
        else:
            (directory / "cpu.stat").write_text(
                f"usage_usec {round(usage_s * 1e6)}\nuser_usec 0\nsystem_usec 0\n")
        if procs is not None:
            (directory / "cgroup.procs").write_text("".join(f"{p}\n" for p in procs))
            if not self.v1:
                (directory / "cgroup.events").write_text(
                    f"populated {1 if procs else 0}\nfrozen 0\n")

    def add(self, path: str, cpu_s: float) -> None:
        """Processes in ``path`` used ``cpu_s`` more: its counter and its parents' grow."""
        parts = [p for p in path.split("/") if p]
        for i in range(len(parts), 0, -1):
            directory = self.base.joinpath(*parts[:i])
            counter = directory / ("cpuacct.usage" if self.v1 else "cpu.stat")
            if not counter.exists():
                continue
            text = counter.read_text()
            now_s = int(text.split()[1 if not self.v1 else 0]) / (1e6 if not self.v1 else 1e9)
            procs = None
            self.set("/" + "/".join(parts[:i]), now_s + cpu_s, procs)

    def remove(self, path: str) -> None:
        shutil.rmtree(self.base / path.lstrip("/"))
