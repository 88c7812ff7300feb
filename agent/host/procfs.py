"""Small, pure readers of procfs files that the estimators and attribution share.

Each reader takes the procfs mount point (``procfs_root``) so tests point it at a fake
tree and containers can pass a host mount such as ``/host/proc``; nothing here reads a
hard-coded ``/proc``. A file that exists but cannot be understood raises ``ValueError``
naming the file, so a broken mount is reported as such instead of turning into a silent
zero-watt estimate. ``OSError`` (missing file, permission) propagates unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# /proc/stat ``cpu`` fields in kernel order (proc(5)). ``guest`` and ``guest_nice`` follow
# ``steal`` but are already counted inside ``user`` and ``nice``, so they are left out of
# the total to avoid counting guest time twice.
_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

# aarch64 kernels print no "model name"; the core is named by implementer and part
# numbers. Names for Arm Ltd (0x41) parts from the Linux kernel's
# arch/arm64/include/asm/cputype.h; others are reported by number.
_ARM_PARTS = {
    ("0x41", "0xd03"): "ARM Cortex-A53",
    ("0x41", "0xd05"): "ARM Cortex-A55",
    ("0x41", "0xd07"): "ARM Cortex-A57",
    ("0x41", "0xd08"): "ARM Cortex-A72",
    ("0x41", "0xd09"): "ARM Cortex-A73",
    ("0x41", "0xd0a"): "ARM Cortex-A75",
    ("0x41", "0xd0b"): "ARM Cortex-A76",
    ("0x41", "0xd0c"): "ARM Neoverse-N1",
    ("0x41", "0xd40"): "ARM Neoverse-V1",
    ("0x41", "0xd49"): "ARM Neoverse-N2",
    ("0x41", "0xd4f"): "ARM Neoverse-V2",
}


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """The aggregate ``cpu`` line of /proc/stat, in jiffies (USER_HZ ticks), plus thread count.

    ``busy_jiffies`` follows Kepler's node busy ratio (total - idle - iowait) with one
    refinement: ``steal`` (time a VM's vCPU was runnable but the hypervisor ran someone
    else) is counted in the total but not as busy. On bare metal steal is 0 and the two
    definitions agree; on a VM, counting stolen time as busy would charge this guest for
    power another tenant drew.
    """

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int
    threads: int  # number of ``cpuN`` lines: online logical CPUs (vCPUs on a VM)

    @property
    def total_jiffies(self) -> int:
        return (
            self.user + self.nice + self.system + self.idle + self.iowait
            + self.irq + self.softirq + self.steal
        )

    @property
    def busy_jiffies(self) -> int:
        return self.total_jiffies - self.idle - self.iowait - self.steal


def read_cpu_times(procfs_root: Path) -> CpuTimes:
    """Parse ``<procfs_root>/stat`` into aggregate CPU times and the online thread count."""
    path = Path(procfs_root) / "stat"
    return parse_cpu_times(path.read_text(encoding="ascii", errors="replace"), path)


def parse_cpu_times(text: str, path: Path) -> CpuTimes:
    """The parsing half of :func:`read_cpu_times`, for callers that keep the file open."""
    aggregate: list[int] | None = None
    threads = 0
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        label, _, rest = line.partition(" ")
        if label == "cpu":
            try:
                values = [int(v) for v in rest.split()]
            except ValueError:
                raise ValueError(f"{path}: non-integer field in the 'cpu' line: {line!r}") from None
            if len(values) < 4:
                raise ValueError(
                    f"{path}: the 'cpu' line has {len(values)} fields, expected at least 4"
                )
            if any(v < 0 for v in values):
                raise ValueError(f"{path}: negative field in the 'cpu' line: {line!r}")
            aggregate = values
        elif label[3:].isdigit():
            threads += 1
    if aggregate is None:
        raise ValueError(f"{path}: no aggregate 'cpu' line")
    if threads == 0:
        raise ValueError(f"{path}: no per-CPU 'cpuN' lines")
    # Kernels before 2.6.11 lack iowait/irq/softirq/steal: those count as zero.
    padded = (aggregate + [0] * len(_STAT_FIELDS))[: len(_STAT_FIELDS)]
    return CpuTimes(*padded, threads=threads)


def _cpuinfo_pairs(procfs_root: Path) -> tuple[Path, list[tuple[str, str]]]:
    path = Path(procfs_root) / "cpuinfo"
    text = path.read_text(encoding="utf-8", errors="replace")
    pairs = []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            pairs.append((key.strip(), value.strip()))
    if not pairs:
        raise ValueError(f"{path}: no 'key : value' lines")
    return path, pairs


def _first(pairs: list[tuple[str, str]], key: str) -> str:
    for k, v in pairs:
        if k == key and v:
            return v
    return ""


def read_cpu_model(procfs_root: Path) -> str:
    """The CPU's marketing name from ``<procfs_root>/cpuinfo``, or ``"unknown"``.

    x86 prints ``model name``. 32-bit ARM kernels print ``Processor`` (or ``model name``
    on newer ones); aarch64 prints only implementer/part numbers, mapped to a core name
    where known; ``Hardware`` names the SoC; POWER prints ``cpu``. Keys are matched
    case-sensitively because x86's lowercase ``processor`` is just the CPU index.
    """
    _, pairs = _cpuinfo_pairs(procfs_root)
    model = _first(pairs, "model name")
    if model:
        return model
    implementer = _first(pairs, "CPU implementer").lower()
    part = _first(pairs, "CPU part").lower()
    if (implementer, part) in _ARM_PARTS:
        return _ARM_PARTS[(implementer, part)]
    for key in ("Processor", "Hardware", "cpu"):
        value = _first(pairs, key)
        if value:
            return value
    if implementer and part:
        return f"ARM implementer {implementer} part {part}"
    return "unknown"


def is_virtual_machine(procfs_root: Path) -> bool:
    """True when the x86 ``hypervisor`` CPUID flag appears in cpuinfo's ``flags``.

    The flag is set by every mainstream hypervisor (KVM/Nitro, Xen HVM, Hyper-V, VMware).
    ARM guests have no such flag, so on ARM this returns False; the estimator copes,
    because an ARM core is not in the TDP table and falls back to the per-vCPU model.
    """
    _, pairs = _cpuinfo_pairs(procfs_root)
    return any(k == "flags" and "hypervisor" in v.split() for k, v in pairs)


def read_cpu_sockets(procfs_root: Path) -> int:
    """Number of distinct ``physical id`` values in cpuinfo (CPU packages), at least 1.

    TDP is a per-package figure, so a two-socket server draws twice one TDP curve.
    Kernels or architectures that print no ``physical id`` count as one socket.
    """
    _, pairs = _cpuinfo_pairs(procfs_root)
    ids = {v for k, v in pairs if k == "physical id"}
    return max(1, len(ids))


def read_mem_total_bytes(procfs_root: Path) -> int:
    """``MemTotal`` from ``<procfs_root>/meminfo`` in bytes (the file's "kB" means KiB)."""
    path = Path(procfs_root) / "meminfo"
    text = path.read_text(encoding="ascii", errors="replace")
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key.strip() != "MemTotal":
            continue
        fields = rest.split()
        if len(fields) != 2 or fields[1] != "kB" or not fields[0].isdigit():
            raise ValueError(f"{path}: cannot parse MemTotal line {line!r}")
        return int(fields[0]) * 1024
    raise ValueError(f"{path}: no MemTotal line")
