"""A fake /proc for the CPU and DRAM estimators: ``stat`` whose jiffies advance like a
kernel's over simulated time, ``cpuinfo`` and ``meminfo``.

(Not :class:`tests.fakes.procfs.FakeProc`, which fakes processes and cgroups.)
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType

USER_HZ = 100


def _rewrite_in_place(path: Path, text: str) -> None:
    """Write ``text`` over ``path``'s bytes in one ``pwrite``, keeping its inode: the agent
    keeps /proc/stat open and rereads it (joulestat.host.kernel_file), as the kernel's
    never changes inode. The counters only grow, so the text never gets shorter and no
    old byte is left over; a reader in another process sees one state or the next."""
    data = text.encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size > len(data):
            os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    finally:
        os.close(fd)


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
        _rewrite_in_place(self.root / "stat", "\n".join(lines) + "\nintr 0\n")

    def drive(self, load: float, hz: float = 50) -> LoadDriver:
        """Advance ``stat`` in real time at ``load`` (changed with ``set_load``)."""
        driver = LoadDriver(self, load, hz)
        driver.start()
        return driver

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


class LoadDriver(threading.Thread):
    """Advances a :class:`FakeProc`'s jiffies in real time at a load the test sets: a
    node whose busy share is what the test says, whatever else the machine runs."""

    def __init__(self, proc: FakeProc, load: float, hz: float) -> None:
        super().__init__(name="fake-proc-load", daemon=True)
        self._proc, self.load, self._period_s = proc, load, 1.0 / hz
        self._stopping = threading.Event()

    def run(self) -> None:
        import time

        last = time.monotonic()
        while not self._stopping.wait(self._period_s):
            now = time.monotonic()
            self._proc.advance(now - last, self.load)
            last = now

    def stop(self) -> None:
        self._stopping.set()
        self.join()

    def __enter__(self) -> LoadDriver:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
