"""Crash recovery of the sampler: the first tick after a restore covers exactly the gap;
sensors it cannot restore start from a baseline; unusable checkpoints are refused."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from joulestat.core.records import DeviceInfo
from joulestat.devices.estimators import DramModelSensor
from joulestat.devices.replay import ReplaySensor, load_trace, trace_energy_j
from joulestat.devices.sensor import Reading
from joulestat.pipeline.sampler import Sampler
from tests.fakes.proc_stat import FakeProc
from tests.helpers.checkpoint import TRACE, json_only, warned


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


WALL = 1.7e9  # wall clock = monotonic + WALL


def _sampler(sensors: list[Any], clock: Clock) -> Sampler:
    return Sampler(sensors, monotonic=clock, wall=lambda: clock.now + WALL)


def _build(tmp_path: Path, now_s: float) -> list[Any]:
    return [ReplaySensor(load_trace(tmp_path / "trace.csv"), now_s), DramModelSensor(tmp_path)]


def test_sampler_first_tick_after_restore_covers_exactly_the_gap(tmp_path: Path) -> None:
    (tmp_path / "trace.csv").write_text(TRACE)
    FakeProc(tmp_path).meminfo(8 * 1024 * 1024)
    trace = load_trace(tmp_path / "trace.csv")
    clock = Clock(100.0)
    first = _sampler(_build(tmp_path, 100.0), clock)
    first.start()
    totals: dict[tuple[str, str], float] = {}
    for _ in range(3):
        clock.now += 1.0
        for e in first.tick().entries:
            totals[(e.component, e.device)] = totals.get((e.component, e.device), 0.0) + e.energy_j
    state = json.loads(json.dumps(first.checkpoint()))
    json_only(state)
    assert state["mono_s"] == 103.0
    assert sorted(state["sensors"]) == ["model-dram", "replay"]
    assert sorted(map(tuple, state["last_j"])) == sorted(
        (k[0], k[1], k[2], v) for k, v in first._last_j.items())
    # kill -9 at 103; the new process opens its sensors at 107 and ticks at 110
    clock.now = 107.0
    second = _sampler(_build(tmp_path, 107.0), clock)
    assert second.restore(state) is True
    clock.now = 110.0
    tick = second.tick()
    assert tick.t0_s == pytest.approx(103.0 + WALL) and tick.t1_s == pytest.approx(110.0 + WALL)
    gap = {(e.component, e.device): e.energy_j for e in tick.entries}
    truth = trace_energy_j(trace, 3.0, 10.0)
    dram_w = DramModelSensor(tmp_path).power_w
    assert gap == pytest.approx({**truth, ("dram", "node"): dram_w * 7.0}, rel=1e-9)
    for key, joules in gap.items():
        totals[key] = totals.get(key, 0.0) + joules
    assert totals == pytest.approx(
        {**trace_energy_j(trace, 0.0, 10.0), ("dram", "node"): dram_w * 10.0}, rel=1e-9)
    clock.now = 111.0
    assert second.tick().t0_s == pytest.approx(110.0 + WALL)


def test_the_first_tick_after_a_restore_starts_where_the_checkpoints_tick_ended(
        tmp_path: Path) -> None:
    """The checkpoint keeps its tick's wall-clock end: the gap tick starts exactly
    there, though the wall clock has drifted against the monotonic one meanwhile (a
    hole of a millisecond in the stored ticks otherwise). A checkpoint without it (an
    older agent's) still restores, from its monotonic time."""
    (tmp_path / "trace.csv").write_text(TRACE)
    FakeProc(tmp_path).meminfo(8 * 1024 * 1024)
    clock = Clock(100.0)
    first = _sampler(_build(tmp_path, 100.0), clock)
    first.start()
    clock.now += 1.0
    ended = first.tick().t1_s
    state = json.loads(json.dumps(first.checkpoint()))
    assert state["wall_s"] == ended == 101.0 + WALL
    clock.now = 105.0
    drifted = Sampler(_build(tmp_path, 105.0), monotonic=clock,
                      wall=lambda: clock.now + WALL + 0.0007)
    assert drifted.restore(state) is True
    clock.now = 106.0
    assert drifted.tick().t0_s == ended
    older = {key: value for key, value in state.items() if key != "wall_s"}
    again = _sampler(_build(tmp_path, 105.0), clock)
    assert again.restore(older) is True
    clock.now = 107.0
    assert again.tick().t0_s == pytest.approx(101.0 + WALL)


class Constant:
    """A sensor at constant power whose restore can be made to fail."""

    def __init__(self, name: str, power_w: float, fail_restore: bool = False) -> None:
        self.name = name
        self.power_w = power_w
        self.fail_restore = fail_restore
        self.energy_j = 0.0
        self.last_s: float | None = None

    def describe(self) -> list[DeviceInfo]:
        return [DeviceInfo("cpu", self.name, "model:test")]

    def read(self, now_s: float) -> list[Reading]:
        if self.last_s is not None:
            self.energy_j += self.power_w * (now_s - self.last_s)
        self.last_s = now_s
        return [Reading("cpu", self.name, self.energy_j, "model:test")]

    def checkpoint(self) -> dict:
        return {"energy_j": self.energy_j, "last_s": self.last_s}

    def restore(self, state: dict) -> None:
        if self.fail_restore:
            raise RuntimeError("boom")
        self.energy_j, self.last_s = state["energy_j"], state["last_s"]

    def close(self) -> None:
        pass


def test_sampler_baselines_sensors_it_cannot_restore(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock(10.0)
    first = _sampler([Constant("a", 10.0), Constant("b", 20.0)], clock)
    first.start()
    clock.now = 11.0
    first.tick()
    state = json.loads(json.dumps(first.checkpoint()))
    state["last_j"].append(["cpu", "x", "rapl"])  # a malformed row is skipped
    clock.now = 15.0
    second = _sampler([Constant("a", 10.0), Constant("b", 20.0, fail_restore=True),
                       Constant("new", 5.0)], clock)
    assert second.restore(state) is True
    assert warned(caplog, "sensor b: restore failed") == 1
    assert warned(caplog, "malformed series row") == 1
    clock.now = 16.0
    tick = second.tick()
    assert tick.duration_s == pytest.approx(5.0)
    by_device = {e.device: e.energy_j for e in tick.entries}
    # a: the whole 5 s gap; b and new: only since the restore at 15 (their baseline)
    assert by_device == pytest.approx({"a": 50.0, "b": 20.0, "new": 5.0})


def test_a_series_row_of_no_component_measured_now_is_skipped_by_name(
        caplog: pytest.LogCaptureFixture) -> None:
    """A checkpoint of joulestat's development before its first release named the
    accelerator "gpu": that row is skipped with a warning naming it, so its series
    starts from a baseline (its gap is not counted); the other rows resume."""
    clock = Clock(10.0)
    first = _sampler([Constant("a", 10.0), Constant("b", 20.0)], clock)
    first.start()
    clock.now = 11.0
    first.tick()
    state = json.loads(json.dumps(first.checkpoint()))
    next(row for row in state["last_j"] if row[1] == "b")[0] = "gpu"
    clock.now = 15.0
    second = _sampler([Constant("a", 10.0), Constant("b", 20.0)], clock)
    assert second.restore(state) is True
    assert warned(caplog, "last_j component 'gpu'") == 1
    clock.now = 16.0
    assert {e.device: e.energy_j for e in second.tick().entries} == pytest.approx(
        {"a": 50.0})  # b: its baseline now
    clock.now = 17.0
    assert {e.device: e.energy_j for e in second.tick().entries} == pytest.approx(
        {"a": 10.0, "b": 20.0})


@pytest.mark.parametrize("mutate", [
    lambda s: {},
    lambda s: None,
    lambda s: {**s, "mono_s": 1e9},  # in the future: another boot
    lambda s: {**s, "mono_s": "11"},
    lambda s: {**s, "mono_s": math.inf},
    lambda s: {**s, "mono_s": True},
    lambda s: {**s, "last_j": {}},
    lambda s: {**s, "sensors": []},
    lambda s: {**s, "sensors": {"someone-else": {}}},
])
def test_sampler_refuses_unusable_checkpoints(mutate: Any) -> None:
    clock = Clock(10.0)
    first = _sampler([Constant("a", 10.0)], clock)
    first.start()
    clock.now = 11.0
    first.tick()
    state = json.loads(json.dumps(first.checkpoint()))
    clock.now = 20.0
    second = _sampler([Constant("a", 10.0)], clock)
    assert second.restore(mutate(state)) is False
    second.start()  # the caller's fallback still works
    clock.now = 21.0
    assert second.tick().entries[0].energy_j == pytest.approx(10.0)


def test_sampler_checkpoint_needs_a_baseline_and_survives_a_broken_sensor(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock(1.0)
    broken = Constant("broken", 1.0)
    sampler = _sampler([Constant("a", 1.0), broken], clock)
    with pytest.raises(RuntimeError):
        sampler.checkpoint()
    sampler.start()
    broken.checkpoint = None  # type: ignore[assignment,method-assign]
    for _ in range(3):
        assert sorted(sampler.checkpoint()["sensors"]) == ["a"]
    assert warned(caplog, "sensor broken: checkpoint failed") == 1
