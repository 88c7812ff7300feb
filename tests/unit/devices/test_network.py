"""Network model sensor against fake /proc/net/dev files."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulestat.devices.network import DEFAULT_J_PER_BYTE, NetworkSensor, parse_net_dev
from tests.fakes.net_dev import HEADER, net_dev_line, write_net_dev


def _energy(sensor: NetworkSensor, now_s: float = 0.0) -> dict[str, float]:
    return {r.device: r.energy_j for r in sensor.read(now_s)}


def test_parse_sums_rx_and_tx_bytes() -> None:
    text = HEADER + net_dev_line("eth0", 1000, 234) + "    lo:5 1 0 0 0 0 0 0 5 1 0 0 0 0 0 0\n"
    assert parse_net_dev(text) == {"eth0": 1234, "lo": 10}
    with pytest.raises(ValueError):
        parse_net_dev(HEADER + "eth0: 1 2 3\n")


def test_counts_bytes_since_open_times_coefficient_and_excludes_lo(tmp_path: Path) -> None:
    write_net_dev(tmp_path, {"lo": (10**9, 10**9), "eth0": (5000, 5000)})
    sensor = NetworkSensor(tmp_path, j_per_byte=2e-6)
    write_net_dev(tmp_path, {"lo": (9 * 10**9, 9 * 10**9), "eth0": (6000, 7000)})
    readings = sensor.read(1.0)
    assert [(r.component, r.device, r.source) for r in readings] == [
        ("net", "eth0", "model:network")
    ]
    assert readings[0].energy_j == pytest.approx(3000 * 2e-6)
    assert [d.device for d in sensor.describe()] == ["eth0"]


def test_virtual_interfaces_are_not_counted_twice(tmp_path: Path) -> None:
    counters = {"eth0": (0, 0), "docker0": (0, 0), "veth1a2b": (0, 0), "cni0": (0, 0),
                "eth0.100": (0, 0), "tun0": (0, 0)}
    write_net_dev(tmp_path, counters)
    sensor = NetworkSensor(tmp_path)
    write_net_dev(tmp_path, {k: (10**6, 10**6) for k in counters})
    assert _energy(sensor) == {"eth0": pytest.approx(2 * 10**6 * DEFAULT_J_PER_BYTE)}


def test_sysfs_decides_physical_interfaces_when_given(tmp_path: Path) -> None:
    procfs, sysfs = tmp_path / "proc", tmp_path / "sys"
    (sysfs / "class" / "net" / "enp1s0" / "device").mkdir(parents=True)
    (sysfs / "class" / "net" / "bridge7").mkdir(parents=True)
    write_net_dev(procfs, {"enp1s0": (0, 0), "bridge7": (0, 0)})
    sensor = NetworkSensor(procfs, j_per_byte=1.0, sysfs_root=sysfs)
    write_net_dev(procfs, {"enp1s0": (5, 5), "bridge7": (5, 5)})
    assert _energy(sensor) == {"enp1s0": 10.0}


def test_counter_reset_rebaselines_and_counts_zero_that_tick(tmp_path: Path) -> None:
    write_net_dev(tmp_path, {"eth0": (1000, 1000)})
    sensor = NetworkSensor(tmp_path, j_per_byte=1.0)
    write_net_dev(tmp_path, {"eth0": (1500, 1500)})
    assert _energy(sensor) == {"eth0": 1000.0}
    write_net_dev(tmp_path, {"eth0": (100, 50)})  # reset
    assert _energy(sensor) == {"eth0": 1000.0}
    write_net_dev(tmp_path, {"eth0": (300, 150)})
    assert _energy(sensor) == {"eth0": 1300.0}


def test_interfaces_appear_and_vanish(tmp_path: Path) -> None:
    write_net_dev(tmp_path, {"eth0": (0, 0)})
    sensor = NetworkSensor(tmp_path, j_per_byte=1.0)
    write_net_dev(tmp_path, {"eth0": (10, 0), "eth1": (500, 500)})
    assert _energy(sensor) == {"eth0": 10.0, "eth1": 0.0}  # eth1 counts from first sight
    write_net_dev(tmp_path, {"eth0": (20, 0), "eth1": (600, 500)})
    assert _energy(sensor) == {"eth0": 20.0, "eth1": 100.0}
    write_net_dev(tmp_path, {"eth0": (30, 0)})  # eth1 gone: keeps its total
    assert _energy(sensor) == {"eth0": 30.0, "eth1": 100.0}
    write_net_dev(tmp_path, {"eth0": (30, 0), "eth1": (900, 900)})  # recreated: from now again
    assert _energy(sensor) == {"eth0": 30.0, "eth1": 100.0}
    write_net_dev(tmp_path, {"eth0": (30, 0), "eth1": (950, 900)})
    assert _energy(sensor) == {"eth0": 30.0, "eth1": 150.0}


def test_malformed_file_raises_oserror_for_the_sampler(tmp_path: Path) -> None:
    write_net_dev(tmp_path, {"eth0": (0, 0)})
    sensor = NetworkSensor(tmp_path)
    (tmp_path / "net" / "dev").write_text(HEADER + "  eth0: x 2 3 4 5 6 7 8 9\n")
    with pytest.raises(OSError):
        sensor.read(0.0)


def test_default_coefficient_is_node_level_not_whole_internet() -> None:
    cloud_carbon_footprint_j_per_byte = 0.001 * 3.6e6 / 1e9  # 0.001 kWh/GB
    assert 1e-10 <= DEFAULT_J_PER_BYTE <= 1e-8
    assert DEFAULT_J_PER_BYTE < cloud_carbon_footprint_j_per_byte / 100
    with pytest.raises(ValueError):
        NetworkSensor(Path("/nonexistent"), j_per_byte=-1.0)


def test_unreadable_at_open_counts_from_first_good_read(tmp_path: Path) -> None:
    sensor = NetworkSensor(tmp_path, j_per_byte=1.0)  # no net/dev yet
    with pytest.raises(OSError):
        sensor.read(0.0)
    write_net_dev(tmp_path, {"eth0": (100, 100)})
    assert _energy(sensor) == {"eth0": 0.0}
    write_net_dev(tmp_path, {"eth0": (150, 100)})
    assert _energy(sensor) == {"eth0": 50.0}


def test_kernel_file_rereads_and_survives_replacement(tmp_path) -> None:
    from joulestat.host.kernel_file import KernelFile

    path = tmp_path / "dev"
    path.write_text("one")
    kernel_file = KernelFile(path)
    assert kernel_file.read_text() == "one"
    path.write_text("two, longer")  # same inode, rewritten in place
    assert kernel_file.read_text() == "two, longer"
    replacement = tmp_path / "new"
    replacement.write_text("three")
    replacement.replace(path)  # a new inode: the kept descriptor still shows the old file
    kernel_file.close()
    assert kernel_file.read_text() == "three"
    path.unlink()
    kernel_file.close()
    try:
        kernel_file.read_text()
    except FileNotFoundError:
        pass
    else:
        raise AssertionError("a missing file must raise")
