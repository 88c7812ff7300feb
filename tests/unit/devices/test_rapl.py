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
from tests.helpers.agent_process import wait_for

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


def test_implausible_jump_is_filled_at_recent_power_and_logged(
    tree: FakePowercap, caplog: pytest.LogCaptureFixture
) -> None:
    tree.add_zone("intel-rapl:0", "package-0", energy_uj=0)
    sensor = _opened(tree)
    tree.set_energy_uj("intel-rapl:0", 100_000_000)
    first = sensor.read(1.0)[0]
    assert (first.energy_j, first.filled) == (pytest.approx(100.0), False)
    tree.set_energy_uj("intel-rapl:0", 100_000_000 + 50_000_000_000)  # 50 kJ in 1 s
    jump = sensor.read(2.0)[0]
    # Not the 50 kJ, not 0 J: the tick at the zone's recent 100 W, said to be filled.
    assert (jump.energy_j, jump.filled) == (pytest.approx(200.0), True)
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "jump" in warnings[0].getMessage()
    assert sensor.faults_total()["jump"] == 1
    # Counting resumes from the new value, and the event's end is said with its energy.
    tree.set_energy_uj("intel-rapl:0", 100_000_000 + 50_000_000_000 + 80_000_000)
    after = sensor.read(3.0)[0]
    assert (after.energy_j, after.filled) == (pytest.approx(280.0), False)
    end = _warnings(caplog)[-1].getMessage()
    assert "100.0 J filled" in end and "fill:rapl" in end


def test_counter_glitching_backwards_is_not_counted_as_a_wrap(
    tree: FakePowercap, caplog: pytest.LogCaptureFixture
) -> None:
    tree.add_zone("intel-rapl:0", "package-0", energy_uj=100_000_000)
    sensor = _opened(tree)
    tree.set_energy_uj("intel-rapl:0", 99_000_000)  # back 1 J: a "wrap" of ~262 kJ
    reading = sensor.read(1.0)[0]
    # No power known yet to fill with: 0 J, but never called measured.
    assert (reading.energy_j, reading.filled) == (0.0, True)
    assert "backwards" in _warnings(caplog)[0].getMessage()
    assert sensor.faults_total()["backwards"] == 1


def test_backwards_without_known_range_restarts(
    tree: FakePowercap, caplog: pytest.LogCaptureFixture
) -> None:
    tree.add_zone("intel-rapl:0", "package-0", energy_uj=5_000_000)
    tree.write_raw("intel-rapl:0", "max_energy_range_uj", "garbage\n")
    sensor = _opened(tree)
    tree.set_energy_uj("intel-rapl:0", 1_000_000)
    assert sensor.read(1.0)[0].energy_j == 0.0
    tree.set_energy_uj("intel-rapl:0", 3_000_000)
    reading = sensor.read(2.0)[0]
    assert (reading.energy_j, reading.filled) == (pytest.approx(2.0), False)


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
        readings = sensor.read(float(tick))
        energy = _by_key(readings)
        assert energy[("cpu", "package-1")] == pytest.approx(tick * 10.0)
        # Reported as filled (no power known yet for it, so 0 J), never as measured.
        bad = next(r for r in readings if r.device == "package-0")
        assert (bad.energy_j, bad.filled) == (0.0, True)
    assert len(_warnings(caplog)) == 1  # one line for three bad ticks
    # Recovery: counting resumes over the whole gap, the end is said, and a new problem
    # is a new event, said again.
    tree.set_energy_uj("intel-rapl:0", 4_000_000)
    tree.set_energy_uj("intel-rapl:1", 40_000_000)
    assert _by_key(sensor.read(4.0))[("cpu", "package-0")] == pytest.approx(4.0)
    assert len(_warnings(caplog)) == 2 and "unreadable from" in _warnings(caplog)[1].getMessage()
    tree.write_raw("intel-rapl:0", "energy_uj", "x\n")
    tree.set_energy_uj("intel-rapl:1", 50_000_000)
    sensor.read(5.0)
    assert len(_warnings(caplog)) == 3
    assert sensor.faults_total()["unreadable"] == 2


def test_vanished_energy_file_does_not_stop_others(
    tree: FakePowercap, caplog: pytest.LogCaptureFixture
) -> None:
    sensor = _opened(tree, {"intel-rapl:0": "package-0", "intel-rapl:0:0": "dram"})
    (tree.zone_dir("intel-rapl:0:0") / "energy_uj").unlink()
    tree.set_energy_uj("intel-rapl:0", 2_000_000)
    readings = sensor.read(1.0)
    tree.set_energy_uj("intel-rapl:0", 4_000_000)
    sensor.read(2.0)
    assert _by_key(readings)[("cpu", "package-0")] == pytest.approx(2.0)
    dram = next(r for r in readings if r.component == "dram")
    assert dram.filled  # filled while unreadable, never a measured 0
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
        # Polled every 5 ms until the counter has wrapped three times (about 0.75 s at
        # 60 W), however slowly the machine runs; the deadline only stops a broken driver.
        deadline = time.monotonic() + 60.0
        while not (driver.wraps >= 3 and driver.energy_j > 45.0):
            assert time.monotonic() < deadline, (driver.wraps, driver.energy_j)
            sensor.read(time.monotonic())
            time.sleep(0.005)
    truth_j = driver.energy_j
    measured_j = sensor.read(time.monotonic())[0].energy_j
    assert driver.wraps >= 3
    assert truth_j > 45.0
    assert measured_j == pytest.approx(truth_j, rel=1e-3)


def test_fake_driver_pause_stops_the_counter(tree: FakePowercap) -> None:
    tree.add_zone("intel-rapl:0", "package-0", max_energy_range_uj=10**12)
    started = time.monotonic()
    with tree.drive("intel-rapl:0", power_w=100.0, hz=1000) as driver:
        wait_for(lambda: driver.energy_j >= 4.0, every_s=0.005)
        # pause() returns once the driver's thread has made its last write and ended:
        # nothing moves the file after it, however long the test takes from here.
        tree.pause("intel-rapl:0")
        elapsed_s = time.monotonic() - started
        frozen_uj = tree.energy_uj("intel-rapl:0")
        assert driver.stop() == pytest.approx(frozen_uj / 1e6)  # stopped: no later write
        assert tree.energy_uj("intel-rapl:0") == frozen_uj
        assert driver.energy_j == pytest.approx(frozen_uj / 1e6)
        # At 100 W for at most the time it ran: no more than that, and no less than asked.
        assert 4.0 <= driver.energy_j <= 100.0 * elapsed_s


def _ticking(tree: FakePowercap, sensor: RaplSensor, start_s: float = 100.0):
    """A sampler over ``sensor`` on a hand-driven clock: (sampler, clock dict)."""
    from joulestat.pipeline.sampler import Sampler

    clock = {"t": start_s}
    sampler = Sampler([sensor], monotonic=lambda: clock["t"], wall=lambda: 1000.0 + clock["t"])
    sampler.start()
    return sampler, clock


def test_a_zone_unreadable_for_ten_seconds_is_filled_then_reconciled(
    tree: FakePowercap,
) -> None:
    """A RAPL file missing for 10 s once showed as zeros then a spike; later as one long
    entry after the gap. Now every tick has its entry at the recent power, labelled
    fill:rapl while the file is gone and on the tick that reconciles the gap, and the
    total is the counter's, exact."""
    tree.add_zone("intel-rapl:0", "package-0")
    sensor = _opened(tree, now_s=100.0)
    sampler, clock = _ticking(tree, sensor)
    path = tree.zone_dir("intel-rapl:0") / "energy_uj"
    rows = []
    for second in range(1, 16):
        clock["t"] = 100.0 + second
        if 3 <= second < 13:
            path.unlink(missing_ok=True)  # the file is gone for ten ticks
        else:
            tree.set_energy_uj("intel-rapl:0", second * 20_000_000)  # 20 W all along
        tick = sampler.tick()
        for entry in tick.entries:
            rows.append((second, entry.source, tick.entry_duration_s(entry), tick.power_w(entry)))
    assert [s for s, *_ in rows] == list(range(1, 16))  # an entry every tick
    assert {s for s, source, *_ in rows if source == "fill:rapl"} == set(range(3, 14))
    assert all(d == pytest.approx(1.0) for *_, d, _ in rows)
    assert [round(p, 6) for *_, p in rows] == [20.0] * 15, rows  # no spike, no zero
    assert sensor.faults_total()["unreadable"] == 1


def test_a_frozen_counter_is_filled_and_reconciled_when_it_catches_up(
    tree: FakePowercap, caplog: pytest.LogCaptureFixture
) -> None:
    tree.add_zone("intel-rapl:0", "package-0")
    sensor = _opened(tree, now_s=100.0)
    sampler, clock = _ticking(tree, sensor)
    truth_uj = 0
    sources = []
    total_j = 0.0
    for second in range(1, 21):
        clock["t"] = 100.0 + second
        truth_uj += 30_000_000 if second < 14 else 10_000_000  # 30 W, then 10 W
        if not 5 <= second < 11:  # frozen for six ticks, then the true value again
            tree.set_energy_uj("intel-rapl:0", truth_uj)
        tick = sampler.tick()
        (entry,) = tick.entries
        sources.append(entry.source)
        total_j += entry.energy_j
        assert entry.energy_j > 1.0  # never a near-zero tick
    assert sources[4:11] == ["fill:rapl"] * 7 and set(sources[:4] + sources[11:]) == {"rapl"}
    assert total_j == pytest.approx(truth_uj / 1e6)  # the catch-up made the gap exact
    assert sensor.faults_total()["frozen"] == 1
    said = [r.getMessage() for r in _warnings(caplog)]
    assert len(said) == 2 and "frozen" in said[0] and "(6.0 s)" in said[1]


def test_a_catch_up_below_the_fills_never_takes_joules_back(
    tree: FakePowercap, caplog: pytest.LogCaptureFixture
) -> None:
    """The power fell during a freeze: the counter catches up with less than was filled.
    No tick goes below 0 J (the filled ticks were split among jobs already): the fills
    stand, the closing tick holds 0 J of fill, and the fault's end line says by how much
    the fills overshot."""
    tree.add_zone("intel-rapl:0", "package-0")
    sensor = _opened(tree, now_s=100.0)
    sampler, clock = _ticking(tree, sensor)
    truth_uj, energies, sources = 0, [], []
    for second in range(1, 19):
        clock["t"] = 100.0 + second
        truth_uj += 40_000_000 if second <= 10 else 25_000_000  # 40 W, then 25 W
        if not 11 <= second < 15:  # frozen for four ticks, then the true value again
            tree.set_energy_uj("intel-rapl:0", truth_uj)
        (entry,) = sampler.tick().entries
        energies.append(entry.energy_j)
        sources.append(entry.source)
    # 4 ticks filled at 40 W = 160 J; the counter says 5 x 25 = 125 J over the gap.
    assert energies[10:15] == pytest.approx([40.0] * 4 + [0.0])
    assert sources[10:15] == ["fill:rapl"] * 5 and min(energies) >= 0.0
    assert sum(energies) == pytest.approx(10 * 40.0 + 160.0 + 3 * 25.0)
    said = [r.getMessage() for r in _warnings(caplog)]
    assert "35.0 J less than was filled; the fills stand" in said[-1], said


def test_a_frozen_counter_that_never_catches_up_keeps_its_fill(tree: FakePowercap) -> None:
    tree.add_zone("intel-rapl:0", "package-0")
    sensor = _opened(tree, now_s=100.0)
    sampler, clock = _ticking(tree, sensor)
    shown_uj, total_j = 0, 0.0
    for second in range(1, 16):
        clock["t"] = 100.0 + second
        if not 5 <= second < 11:  # the counter stops for six ticks and resumes from there
            shown_uj += 25_000_000
            tree.set_energy_uj("intel-rapl:0", shown_uj)
        total_j += sum(e.energy_j for e in sampler.tick().entries)
    assert total_j == pytest.approx(15 * 25.0)  # the six lost ticks filled at 25 W


def test_a_reset_a_jump_and_a_shrunk_range_are_filled_and_counted(
    tree: FakePowercap, caplog: pytest.LogCaptureFixture
) -> None:
    tree.add_zone("intel-rapl:0", "package-0", energy_uj=5_000_000_000,
                  max_energy_range_uj=10**13)
    sensor = _opened(tree, now_s=100.0)
    sampler, clock = _ticking(tree, sensor)
    shown_uj, total_j, sources = 5_000_000_000, 0.0, []
    for second in range(1, 31):
        clock["t"] = 100.0 + second
        shown_uj += 40_000_000  # 40 W
        if second == 8:
            shown_uj = 0  # reset to 0
        if second == 15:
            shown_uj += 10**12  # +1e6 J
        if second == 22:
            tree.write_raw("intel-rapl:0", "max_energy_range_uj", f"{shown_uj - 1}\n")
            shown_uj = 0  # the counter wrapped at a range smaller than at start
        tree.set_energy_uj("intel-rapl:0", shown_uj)
        (entry,) = sampler.tick().entries
        total_j += entry.energy_j
        sources.append(entry.source)
    assert total_j == pytest.approx(30 * 40.0, rel=0.01)
    # The wrap at the new, smaller range is a plausible one: measured, the change counted.
    assert [i + 1 for i, s in enumerate(sources) if s != "rapl"] == [8, 15]
    faults = sensor.faults_total()
    assert (faults["backwards"], faults["jump"], faults["range_changed"]) == (1, 1, 1)
    assert any("max_energy_range_uj changed" in r.getMessage() for r in _warnings(caplog))


def test_a_zone_that_appears_is_measured_from_the_next_read(
    tree: FakePowercap, caplog: pytest.LogCaptureFixture
) -> None:
    sensor = _opened(tree, {"intel-rapl:0": "package-0"})
    tree.add_zone("intel-rapl:1", "package-1", energy_uj=7_000_000)
    assert ("cpu", "package-1") in _by_key(sensor.read(1.0))  # its baseline
    tree.set_energy_uj("intel-rapl:1", 9_000_000)
    assert _by_key(sensor.read(2.0))[("cpu", "package-1")] == pytest.approx(2.0)
    assert any("intel-rapl:1" in r.getMessage() and "appeared" in r.getMessage()
               for r in _warnings(caplog))
    assert ("cpu", "package-1") in {(d.component, d.device) for d in sensor.describe()}


def test_a_filled_total_survives_a_checkpoint(tree: FakePowercap) -> None:
    tree.add_zone("intel-rapl:0", "package-0")
    sensor = _opened(tree)
    tree.set_energy_uj("intel-rapl:0", 10_000_000)
    sensor.read(1.0)
    sensor.read(2.0)  # frozen: 10 J filled
    state = sensor.checkpoint()
    again = _opened(tree)
    again.restore(state)
    tree.set_energy_uj("intel-rapl:0", 12_000_000)
    assert again.read(2.2)[0].energy_j == pytest.approx(22.0)
