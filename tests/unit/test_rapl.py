"""RAPL sensor against fake powercap trees: mapping, wraps, bad values, permissions."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import pytest

from joulestat.devices import rapl
from joulestat.devices.rapl import RaplSensor, open_rapl, wrap_delta_uj
from tests.fakes.powercap import FakePowercap

LOGGER = "joulestat.devices.rapl"


@pytest.fixture
def tree(tmp_path: Path) -> FakePowercap:
    return FakePowercap(tmp_path)


def _server(tree: FakePowercap) -> None:
    """Two sockets with core/uncore/dram sub-zones, plus psys: a typical server listing."""
    for pkg in (0, 1):
        tree.add_zone(f"intel-rapl:{pkg}", f"package-{pkg}")
        tree.add_zone(f"intel-rapl:{pkg}:0", "core")
        tree.add_zone(f"intel-rapl:{pkg}:1", "uncore")
        tree.add_zone(f"intel-rapl:{pkg}:2", "dram")
    tree.add_zone("intel-rapl:2", "psys")


def _opened(tree: FakePowercap, zones: dict[str, str] | None = None,
            now_s: float = 0.0) -> RaplSensor:
    """The sensor over ``tree``'s zones once ``zones`` (id: name) are added (there must be
    one)."""
    for zone_id, name in (zones or {}).items():
        tree.add_zone(zone_id, name)
    sensor = open_rapl(tree.root, now_s=now_s)
    assert sensor is not None
    return sensor


def _by_key(readings: list) -> dict[tuple[str, str], float]:
    return {(r.component, r.device): r.energy_j for r in readings}


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


def test_maps_zones_to_components_and_skips_core_uncore(tree: FakePowercap) -> None:
    _server(tree)
    sensor = _opened(tree)
    infos = {(d.component, d.device): d for d in sensor.describe()}
    assert set(infos) == {
        ("cpu", "package-0"), ("cpu", "package-1"),
        ("dram", "package-0"), ("dram", "package-1"),
        ("platform", "psys"),
    }
    assert infos[("cpu", "package-1")].index == 1
    assert infos[("dram", "package-1")].index == 1
    assert all(d.source == "rapl" for d in infos.values())


def test_core_and_uncore_not_added_on_top_of_package(tree: FakePowercap) -> None:
    _server(tree)
    sensor = _opened(tree)
    tree.set_energy_uj("intel-rapl:0", 50_000_000)  # 50 J for the whole package
    tree.set_energy_uj("intel-rapl:0:0", 30_000_000)  # of which cores 30 J
    tree.set_energy_uj("intel-rapl:0:1", 15_000_000)  # and uncore 15 J
    tree.set_energy_uj("intel-rapl:0:2", 7_000_000)
    readings = sensor.read(1.0)
    energy = _by_key(readings)
    assert energy[("cpu", "package-0")] == pytest.approx(50.0)
    assert energy[("dram", "package-0")] == pytest.approx(7.0)
    cpu_total = sum(r.energy_j for r in readings if r.component == "cpu")
    assert cpu_total == pytest.approx(50.0)
    assert all(r.source == "rapl" for r in readings)


def test_psys_is_platform(tree: FakePowercap) -> None:
    tree.add_zone("intel-rapl:0", "package-0")
    tree.add_zone("intel-rapl:1", "psys", energy_uj=1_000_000)
    sensor = _opened(tree)
    tree.set_energy_uj("intel-rapl:1", 21_000_000)
    energy = _by_key(sensor.read(1.0))
    assert energy[("platform", "psys")] == pytest.approx(20.0)
    assert ("cpu", "psys") not in energy


def test_top_level_dram_zone_gets_its_own_device(tree: FakePowercap) -> None:
    sensor = _opened(tree, {"intel-rapl:0": "package-0", "intel-rapl:1": "dram"})
    assert ("dram", "dram-1") in {(d.component, d.device) for d in sensor.describe()}


def test_mmio_duplicate_of_msr_zone_is_skipped(tree: FakePowercap) -> None:
    sensor = _opened(tree, {"intel-rapl:0": "package-0", "intel-rapl-mmio:0": "package-0"})
    assert [(d.component, d.device) for d in sensor.describe()] == [("cpu", "package-0")]
    tree.set_energy_uj("intel-rapl:0", 10_000_000)
    tree.set_energy_uj("intel-rapl-mmio:0", 10_000_000)
    assert sensor.read(1.0) == [rapl.Reading("cpu", "package-0", 10.0, "rapl")]


def test_mmio_zone_alone_is_reported(tree: FakePowercap) -> None:
    sensor = _opened(tree, {"intel-rapl-mmio:0": "package-0"})
    tree.set_energy_uj("intel-rapl-mmio:0", 3_000_000)
    assert _by_key(sensor.read(1.0)) == {("cpu", "package-0"): pytest.approx(3.0)}


def test_wrap_delta_formula() -> None:
    assert wrap_delta_uj(100, 250, 1000) == 150
    assert wrap_delta_uj(900, 50, 1000) == 150  # (1000 - 900) + 50
    assert wrap_delta_uj(900, 50, None) is None


def test_several_wraps_match_ground_truth_in_simulated_time(tree: FakePowercap) -> None:
    """Varying power over 20 s, counter range 40 J: ~8 wraps, error within 0.1 %."""
    range_uj = 40_000_000
    tree.add_zone("intel-rapl:0", "package-0", energy_uj=range_uj - 1_000,
                  max_energy_range_uj=range_uj)
    sensor = _opened(tree, now_s=100.0)

    def energy_j(t: float) -> float:  # integral of 15 + 5 sin(t) W from 0 to t
        return 15.0 * t + 5.0 * (1.0 - math.cos(t))

    dt, steps = 0.05, 400
    start_uj = range_uj - 1_000
    wraps = 0
    for i in range(1, steps + 1):
        t = i * dt
        absolute_uj = start_uj + int(energy_j(t) * 1e6)
        wraps = absolute_uj // range_uj
        tree.set_energy_uj("intel-rapl:0", absolute_uj % range_uj)
        reading = sensor.read(100.0 + t)[0]
    truth_j = energy_j(steps * dt)
    assert wraps >= 5
    assert reading.energy_j == pytest.approx(truth_j, rel=1e-3)
    assert abs(reading.energy_j - truth_j) < 2e-6  # whole-µJ rounding only


def test_wrap_is_not_mistaken_for_an_implausible_jump(
    tree: FakePowercap, caplog: pytest.LogCaptureFixture
) -> None:
    tree.add_zone("intel-rapl:0", "package-0", energy_uj=999_000_000,
                  max_energy_range_uj=1_000_000_000)
    sensor = _opened(tree)
    tree.set_energy_uj("intel-rapl:0", 4_000_000)  # wrapped: 1 J + 4 J in 1 s
    assert sensor.read(1.0)[0].energy_j == pytest.approx(5.0)
    assert not _warnings(caplog)


def test_implausible_jump_is_dropped_and_logged(
    tree: FakePowercap, caplog: pytest.LogCaptureFixture
) -> None:
    tree.add_zone("intel-rapl:0", "package-0", energy_uj=0)
    sensor = _opened(tree)
    tree.set_energy_uj("intel-rapl:0", 100_000_000)
    assert sensor.read(1.0)[0].energy_j == pytest.approx(100.0)
    tree.set_energy_uj("intel-rapl:0", 100_000_000 + 50_000_000_000)  # 50 kJ in 1 s
    assert sensor.read(2.0)[0].energy_j == pytest.approx(100.0)
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "dropped" in warnings[0].getMessage()
    # Counting resumes from the new value.
    tree.set_energy_uj("intel-rapl:0", 100_000_000 + 50_000_000_000 + 80_000_000)
    assert sensor.read(3.0)[0].energy_j == pytest.approx(180.0)


def test_counter_glitching_backwards_is_not_counted_as_a_wrap(
    tree: FakePowercap, caplog: pytest.LogCaptureFixture
) -> None:
    tree.add_zone("intel-rapl:0", "package-0", energy_uj=100_000_000)
    sensor = _opened(tree)
    tree.set_energy_uj("intel-rapl:0", 99_000_000)  # back 1 J: a "wrap" of ~262 kJ
    assert sensor.read(1.0)[0].energy_j == 0.0
    assert "backwards" in _warnings(caplog)[0].getMessage()


def test_backwards_without_known_range_restarts(
    tree: FakePowercap, caplog: pytest.LogCaptureFixture
) -> None:
    tree.add_zone("intel-rapl:0", "package-0", energy_uj=5_000_000)
    tree.write_raw("intel-rapl:0", "max_energy_range_uj", "garbage\n")
    sensor = _opened(tree)
    tree.set_energy_uj("intel-rapl:0", 1_000_000)
    assert sensor.read(1.0)[0].energy_j == 0.0
    tree.set_energy_uj("intel-rapl:0", 3_000_000)
    assert sensor.read(2.0)[0].energy_j == pytest.approx(2.0)


def test_permission_error_returns_none_with_one_line_naming_the_fix(
    tree: FakePowercap, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _server(tree)
    real_read = rapl._read_text

    def root_only(path: Path) -> str:
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real_read(path)

    monkeypatch.setattr(rapl, "_read_text", root_only)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    assert open_rapl(tree.root, now_s=0.0) is None
    lines = [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.INFO]
    assert len(lines) == 1
    message = lines[0].getMessage()
    assert lines[0].levelno == logging.WARNING
    assert "root" in message and "chmod o+r" in message and "energy_uj" in message
    assert "estimator" in message


def test_permission_error_on_psys_only_keeps_packages(
    tree: FakePowercap, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _server(tree)
    real_read = rapl._read_text
    psys_dir = tree.zone_dir("intel-rapl:2")

    def psys_root_only(path: Path) -> str:
        if path == psys_dir / "energy_uj" or path.resolve() == psys_dir / "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real_read(path)

    monkeypatch.setattr(rapl, "_read_text", psys_root_only)
    sensor = _opened(tree)
    assert ("platform", "psys") not in {(d.component, d.device) for d in sensor.describe()}
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "intel-rapl:2" in warnings[0].getMessage()


def test_malformed_zone_does_not_stop_others_and_logs_once(
    tree: FakePowercap, caplog: pytest.LogCaptureFixture
) -> None:
    sensor = _opened(tree, {"intel-rapl:0": "package-0", "intel-rapl:1": "package-1"})
    for tick, text in enumerate(("12abc\n", "\n", "-5\n"), start=1):
        tree.write_raw("intel-rapl:0", "energy_uj", text)
        tree.set_energy_uj("intel-rapl:1", tick * 10_000_000)
        energy = _by_key(sensor.read(float(tick)))
        assert energy[("cpu", "package-1")] == pytest.approx(tick * 10.0)
        # Left out, not repeated: the sampler then covers the gap with one entry.
        assert ("cpu", "package-0") not in energy
    assert len(_warnings(caplog)) == 1  # one line for three bad ticks
    # Recovery: counting resumes over the whole gap, and a new problem is logged again.
    tree.set_energy_uj("intel-rapl:0", 4_000_000)
    assert _by_key(sensor.read(4.0))[("cpu", "package-0")] == pytest.approx(4.0)
    tree.write_raw("intel-rapl:0", "energy_uj", "x\n")
    sensor.read(5.0)
    assert len(_warnings(caplog)) == 2


def test_vanished_energy_file_does_not_stop_others(
    tree: FakePowercap, caplog: pytest.LogCaptureFixture
) -> None:
    sensor = _opened(tree, {"intel-rapl:0": "package-0", "intel-rapl:0:0": "dram"})
    (tree.zone_dir("intel-rapl:0:0") / "energy_uj").unlink()
    tree.set_energy_uj("intel-rapl:0", 2_000_000)
    energy = _by_key(sensor.read(1.0))
    sensor.read(2.0)
    assert energy[("cpu", "package-0")] == pytest.approx(2.0)
    assert ("dram", "package-0") not in energy  # left out while unreadable
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "cannot read" in warnings[0].getMessage()


def test_absent_powercap_returns_none_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert open_rapl(tmp_path, now_s=0.0) is None
    FakePowercap(tmp_path)  # the directory exists but holds no zones
    assert open_rapl(tmp_path, now_s=0.0) is None
    assert not _warnings(caplog)


def test_only_core_zones_returns_none(tree: FakePowercap) -> None:
    tree.add_zone("intel-rapl:0", "package-0")
    tree.add_zone("intel-rapl:0:0", "core")
    (tree.zone_dir("intel-rapl:0") / "name").unlink()  # package name unreadable
    assert open_rapl(tree.root, now_s=0.0) is None


def test_real_time_driver_with_wraps_matches_ground_truth(tree: FakePowercap) -> None:
    """The sensor polled while a thread drives the counter through several wraps."""
    # The range is fixed before the sensor opens, as hardware's is.
    tree.add_zone("intel-rapl:0", "package-0", energy_uj=123_456,
                  max_energy_range_uj=15_000_000)
    sensor = open_rapl(tree.root)  # baseline at the real monotonic clock
    assert sensor is not None
    with tree.drive("intel-rapl:0", power_w=60.0, wrap_uj=15_000_000, hz=500) as driver:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            sensor.read(time.monotonic())
            time.sleep(0.005)
    truth_j = driver.energy_j
    measured_j = sensor.read(time.monotonic())[0].energy_j
    assert driver.wraps >= 3
    assert truth_j > 45.0
    assert measured_j == pytest.approx(truth_j, rel=1e-3)


def test_fake_driver_pause_stops_the_counter(tree: FakePowercap) -> None:
    tree.add_zone("intel-rapl:0", "package-0", max_energy_range_uj=10**12)
    with tree.drive("intel-rapl:0", power_w=100.0, hz=1000) as driver:
        time.sleep(0.05)
        tree.pause("intel-rapl:0")
        frozen_uj = tree.energy_uj("intel-rapl:0")
        time.sleep(0.05)
        assert tree.energy_uj("intel-rapl:0") == frozen_uj
        assert driver.energy_j == pytest.approx(frozen_uj / 1e6)
        assert 4.0 <= driver.energy_j <= 50.0


def test_a_zone_unreadable_for_ten_seconds_is_one_long_entry_not_a_spike(
    tree: FakePowercap,
) -> None:
    """The defect: a RAPL file missing for 10 s showed as zeros, then one spike of 10 s
    of energy in a 1 s tick. Now the tick after the gap holds one entry covering it."""
    from joulestat.attribution.sampler import Sampler

    tree.add_zone("intel-rapl:0", "package-0")
    clock = {"t": 100.0}
    sensor = _opened(tree, now_s=100.0)
    sampler = Sampler([sensor], monotonic=lambda: clock["t"], wall=lambda: 1000.0 + clock["t"])
    sampler.start()
    path = tree.zone_dir("intel-rapl:0") / "energy_uj"
    powers = []
    for second in range(1, 16):
        clock["t"] = 100.0 + second
        if 3 <= second < 13:
            path.unlink(missing_ok=True)  # the file is gone for ten ticks
        else:
            tree.set_energy_uj("intel-rapl:0", second * 20_000_000)  # 20 W
        tick = sampler.tick()
        for entry in tick.entries:
            powers.append((second, tick.entry_duration_s(entry), tick.power_w(entry)))
    assert [s for s, _, _ in powers] == [1, 2, 13, 14, 15]  # nothing while unreadable
    gap = powers[2]
    assert gap[1] == pytest.approx(11.0)  # from the last good read (t=2) to t=13
    assert [round(p, 6) for _, _, p in powers] == [20.0] * 5, powers  # no spike, no zero
