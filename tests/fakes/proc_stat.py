"""A fake /proc for the CPU and DRAM estimators: ``stat`` whose jiffies advance like a
kernel's over simulated time, ``cpuinfo`` and ``meminfo``.

(Not :class:`tests.fakes.procfs.FakeProc`, which fakes processes and cgroups.)
"""

from __future__ import annotations

from pathlib import Path

USER_HZ = 100


class FakeProc:
    """/proc/stat advancing like a kernel: every thread accrues USER_HZ jiffies a second."""

    def __init__(self, root: Path, threads: int = 4) -> None:
        self.root = root
        self.threads = threads
        self.busy = 0
        self.idle = 0
        self.steal = 0
        root.mkdir(parents=True, exist_ok=True)
        self._write()

    def advance(self, seconds: float, load: float, steal: float = 0.0) -> None:
        jiffies = round(seconds * USER_HZ * self.threads)
        stolen = round(jiffies * steal)
        busy = round((jiffies - stolen) * load)
        self.busy += busy
        self.steal += stolen
        self.idle += jiffies - stolen - busy
        self._write()

    def _write(self) -> None:
        # user nice system idle iowait irq softirq steal guest guest_nice
        lines = [f"cpu  {self.busy} 0 0 {self.idle} 0 0 0 {self.steal} 0 0"]
        lines += [f"cpu{n} 0 0 0 0 0 0 0 0 0 0" for n in range(self.threads)]
        (self.root / "stat").write_text("\n".join(lines) + "\nintr 0\n")

    def cpuinfo(self, model: str, vm: bool, sockets: int = 1) -> None:
        flags = "fpu sse2 hypervisor" if vm else "fpu sse2"
        blocks = [
            f"processor\t: {n}\nmodel name\t: {model}\nphysical id\t: {n % sockets}\n"
            f"flags\t\t: {flags}\n"
            for n in range(self.threads)
        ]
        (self.root / "cpuinfo").write_text("\n".join(blocks))

    def meminfo(self, kib: int) -> None:
        (self.root / "meminfo").write_text(f"MemTotal:       {kib} kB\nMemFree: 1 kB\n")
