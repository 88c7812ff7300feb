"""The sampler's ticks: energy integrated over the real elapsed time, a failing sensor
leaving the others to tick, a counter going backwards counted as zero, and ticks that
stay contiguous however far apart the clocks are read."""

from __future__ import annotations

import logging

import pytest

from joulestat.core.records import DeviceInfo
from joulestat.devices.sensor import Reading, SensorError
from joulestat.pipeline.sampler import Sampler


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class ConstantPower:
    """Integrates a constant power over the timestamps it is handed."""

    def __init__(self, name: str, power_w: float, component: str = "cpu") -> None:
        self.name = name
        self.power_w = power_w
        self.component = component
        self.opened: float | None = None
        self.fail = False

    def describe(self) -> list[DeviceInfo]:
        return [DeviceInfo(self.component, "d0", "model:test")]

    def read(self, now_s: float) -> list[Reading]:
        if self.fail:
            raise SensorError("device vanished")
        if self.opened is None:
            self.opened = now_s
        return [Reading(self.component, "d0", self.power_w * (now_s - self.opened), "model:test")]

    def close(self) -> None:
        pass


def test_ticks_integrate_over_real_elapsed_time() -> None:
    clock = Clock()
    sampler = Sampler([ConstantPower("a", 10.0)], monotonic=clock, wall=lambda: clock.now + 1e9)
    sampler.start()
    clock.now += 1.0
    tick = sampler.tick()
    assert tick.entries[0].energy_j == pytest.approx(10.0)
    clock.now += 3.5  # a late tick covers the whole gap, not the nominal interval
    tick = sampler.tick()
    assert tick.duration_s == pytest.approx(3.5)
    assert tick.entries[0].energy_j == pytest.approx(35.0)
    assert tick.power_w(tick.entries[0]) == pytest.approx(10.0)


def test_a_failing_sensor_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    good, bad = ConstantPower("good", 5.0), ConstantPower("bad", 7.0, component="accelerator")
    sampler = Sampler([good, bad], monotonic=clock)
    sampler.start()
    bad.fail = True
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            clock.now += 1.0
            tick = sampler.tick()
            assert [e.component for e in tick.entries] == ["cpu"]
    assert sum("bad failed" in r.message for r in caplog.records) == 1  # logged once
    assert sampler.sensor_errors_total["bad"] == 3
    bad.fail = False
    clock.now += 1.0
    tick = sampler.tick()
    by_component = {e.component: e.energy_j for e in tick.entries}
    # the gap's energy arrives with the first good reading: nothing is lost
    assert by_component["accelerator"] == pytest.approx(7.0 * 4)


def test_counter_going_backwards_counts_zero() -> None:
    values = iter([10.0, 12.0, 3.0, 4.0])

    class Sensor(ConstantPower):
        def read(self, now_s: float) -> list[Reading]:
            return [Reading("cpu", "d0", next(values), "rapl")]

    sampler = Sampler([Sensor("s", 0)], monotonic=Clock())
    sampler.start()
    assert sampler.tick().entries[0].energy_j == 2.0
    assert sampler.tick().entries[0].energy_j == 0.0
    assert sampler.tick().entries[0].energy_j == 1.0


@pytest.mark.parametrize(("first_end_s", "stepped_to_s"), [
    (1_001.004, 900.0),      # read 4 ms late, then the wall clock steps back 100 s
    (1_000.9996, 1_103.0),   # read 0.4 ms early, then it steps forward 100 s
], ids=["overlap", "hole"])
def test_ticks_stay_contiguous_when_the_clocks_are_read_apart(first_end_s: float,
                                                              stepped_to_s: float) -> None:
    """Seen under two CPU burners (test_fleet): preempted between reading the monotonic
    and the wall clock, a tick ended 4 ms after the next one started; and the other way
    round, a wall clock read a little early made the next tick start after the last one
    ended (stored in whole milliseconds, 1 ms apart, seen after a kill -9 in
    test_crash_recovery). The next tick starts where the last ended; a real wall-clock
    step, back or forward, keeps its monotonic length."""
    mono = Clock()
    wall = {"now": 1_000.0}
    sampler = Sampler([ConstantPower("a", 10.0)], monotonic=mono, wall=lambda: wall["now"])
    sampler.start()
    mono.now += 1.0
    wall["now"] = first_end_s
    first = sampler.tick()
    mono.now += 1.0
    wall["now"] = 1_002.0  # read on time
    second = sampler.tick()
    assert second.t0_s == first.t1_s == first_end_s
    assert second.t1_s == pytest.approx(1_002.0)
    assert second.entries[0].energy_j == pytest.approx(10.0)  # energy: monotonic, unchanged
    mono.now += 1.0
    wall["now"] = stepped_to_s
    stepped = sampler.tick()
    assert stepped.t1_s - stepped.t0_s == pytest.approx(1.0)
