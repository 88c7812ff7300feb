"""procfs readers against fake /proc files written into tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulestat.host.procfs import (
    is_virtual_machine,
    read_cpu_model,
    read_cpu_sockets,
    read_cpu_times,
    read_mem_total_bytes,
)

STAT = """\
cpu  100 20 30 400 50 6 7 8 90 10
cpu0 50 10 15 200 25 3 3 4 45 5
cpu1 50 10 15 200 25 3 4 4 45 5
intr 12345 0 0
ctxt 999
btime 1700000000
processes 42
"""

X86_VM_CPUINFO = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
physical id\t: 0
flags\t\t: fpu vme de pse tsc msr hypervisor lahf_lm

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
physical id\t: 0
flags\t\t: fpu vme de pse tsc msr hypervisor lahf_lm
"""


def write(root: Path, name: str, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(text)
    return root


def test_cpu_times_busy_excludes_idle_iowait_and_steal(tmp_path: Path) -> None:
    times = read_cpu_times(write(tmp_path, "stat", STAT))
    # guest (90) and guest_nice (10) are already inside user/nice: not added again.
    assert times.total_jiffies == 100 + 20 + 30 + 400 + 50 + 6 + 7 + 8
    assert times.busy_jiffies == 100 + 20 + 30 + 6 + 7
    assert times.steal == 8
    assert times.threads == 2


def test_cpu_times_old_kernel_with_four_fields(tmp_path: Path) -> None:
    times = read_cpu_times(write(tmp_path, "stat", "cpu 10 0 5 85\ncpu0 10 0 5 85\n"))
    assert (times.total_jiffies, times.busy_jiffies, times.iowait, times.steal) == (100, 15, 0, 0)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("cpu0 1 2 3 4\n", "no aggregate 'cpu' line"),
        ("cpu  1 2 x 4\ncpu0 1 2 3 4\n", "non-integer"),
        ("cpu  1 2\ncpu0 1 2 3 4\n", "at least 4"),
        ("cpu  1 2 3 4\nintr 5\n", "no per-CPU"),
    ],
)
def test_malformed_stat_names_the_file(tmp_path: Path, text: str, problem: str) -> None:
    root = write(tmp_path, "stat", text)
    with pytest.raises(ValueError, match=problem) as info:
        read_cpu_times(root)
    assert str(root / "stat") in str(info.value)


def test_missing_stat_is_an_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_cpu_times(tmp_path)


def test_x86_model_vm_flag_and_sockets(tmp_path: Path) -> None:
    root = write(tmp_path, "cpuinfo", X86_VM_CPUINFO)
    assert read_cpu_model(root) == "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"
    assert is_virtual_machine(root) is True
    assert read_cpu_sockets(root) == 1


def test_bare_metal_two_sockets(tmp_path: Path) -> None:
    blocks = [
        f"processor\t: {n}\nmodel name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz\n"
        f"physical id\t: {n % 2}\nflags\t\t: fpu vme sse2 ht\n"
        for n in range(4)
    ]
    root = write(tmp_path, "cpuinfo", "\n".join(blocks))
    assert is_virtual_machine(root) is False
    assert read_cpu_sockets(root) == 2


def test_hypervisor_must_be_a_whole_flag(tmp_path: Path) -> None:
    root = write(tmp_path, "cpuinfo", "model name\t: X 1\nflags\t: fpu nothypervisor\n")
    assert is_virtual_machine(root) is False


def test_aarch64_core_named_from_implementer_and_part(tmp_path: Path) -> None:
    text = (
        "processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd evtstrm\n"
        "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\n"
        "CPU part\t: 0xd0c\nCPU revision\t: 1\n"
    )
    root = write(tmp_path, "cpuinfo", text)
    assert read_cpu_model(root) == "ARM Neoverse-N1"
    assert read_cpu_sockets(root) == 1
    assert is_virtual_machine(root) is False


def test_aarch64_unknown_part_is_reported_by_number(tmp_path: Path) -> None:
    root = write(tmp_path, "cpuinfo", "CPU implementer\t: 0xc0\nCPU part\t: 0xac3\n")
    assert read_cpu_model(root) == "ARM implementer 0xc0 part 0xac3"


def test_arm32_processor_then_hardware(tmp_path: Path) -> None:
    root = write(tmp_path, "cpuinfo",
                 "Processor\t: ARMv7 Processor rev 4 (v7l)\nHardware\t: BCM2835\n")
    assert read_cpu_model(root) == "ARMv7 Processor rev 4 (v7l)"
    root2 = write(tmp_path / "b", "cpuinfo", "processor\t: 0\nHardware\t: BCM2835\n")
    assert read_cpu_model(root2) == "BCM2835"


def test_power_cpu_key(tmp_path: Path) -> None:
    root = write(tmp_path, "cpuinfo", "processor\t: 0\ncpu\t\t: POWER9 (raw), altivec supported\n")
    assert read_cpu_model(root) == "POWER9 (raw), altivec supported"


def test_no_name_at_all_is_unknown(tmp_path: Path) -> None:
    root = write(tmp_path, "cpuinfo", "processor\t: 0\nflags\t: fpu\n")
    assert read_cpu_model(root) == "unknown"


def test_empty_cpuinfo_names_the_file(tmp_path: Path) -> None:
    root = write(tmp_path, "cpuinfo", "garbage without separators\n")
    with pytest.raises(ValueError, match="cpuinfo"):
        read_cpu_model(root)


def test_mem_total_bytes(tmp_path: Path) -> None:
    root = write(tmp_path, "meminfo",
                 "MemFree:        1000 kB\nMemTotal:       16384000 kB\nBuffers: 1 kB\n")
    assert read_mem_total_bytes(root) == 16384000 * 1024


@pytest.mark.parametrize(
    "text", ["MemFree: 1 kB\n", "MemTotal: lots kB\n", "MemTotal: 1024 MB\n", "MemTotal:\n"]
)
def test_malformed_meminfo_names_the_file(tmp_path: Path, text: str) -> None:
    root = write(tmp_path, "meminfo", text)
    with pytest.raises(ValueError, match="meminfo"):
        read_mem_total_bytes(root)
