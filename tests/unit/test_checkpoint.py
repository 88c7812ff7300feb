"""Crash recovery: checkpoint -> JSON -> a new sensor (or sampler) restores -> no gap, no double.

Every sensor test runs three instances over the same fake hardware: A reads until the
"kill -9" and is checkpointed; B is opened at restart (mid-gap, as the daemon would) and
restored from the JSON text of A's checkpoint; C never stops and is the ground truth. After
the gap B's cumulative energy must equal C's.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest

from agent.sampler import Sampler
from agent.sensors.base import DeviceInfo, Reading
from agent.sensors.model import CpuModelSensor, DramModelSensor
from agent.sensors.network import NetworkSensor
from agent.sensors.nvidia import NvidiaSensor, open_nvidia
from agent.sensors.power_model import METHOD_CCF_VCPU, build_cpu_model
from agent.sensors.rapl import RaplSensor, open_rapl
from agent.sensors.replay import ReplaySensor, load_trace, trace_energy_j
from tests.fakes.nvml import FakeGpu, FakeNvml
from tests.fakes.powercap import FakePowercap
from tests.unit.test_model_sensor import FakeProc
from tests.unit.test_network import _write as write_net_dev

EXACT = 1e-12  # "to float precision": relative tolerance for sums taken in another order


def _json_only(value: Any, where: str = "checkpoint") -> None:
    """Fail unless ``value`` is built only of str, int, float, list and dict."""
    assert not isinstance(value, bool) and value is not None, where
    if isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str), f"{where}: key {key!r}"
            _json_only(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _json_only(item, f"{where}[{i}]")
    else:
        assert isinstance(value, str | int | float), f"{where}: {type(value).__name__}"


def _via_json(state: dict) -> dict:
    _json_only(state)
    return json.loads(json.dumps(state))


def _energy(readings: list[Reading]) -> dict[tuple[str, str], float]:
    return {(r.component, r.device): r.energy_j for r in readings}


def _warned(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


# --- RAPL -------------------------------------------------------------------------------

RANGE_UJ = 100_000_000  # 100 J: small, so the counter wraps every few simulated seconds


class RaplHardware:
    """package-0 at 20 W and its dram at 3 W, raw counters set from simulated time."""

    def __init__(self, root: Path, range_uj: int = RANGE_UJ) -> None:
        self.tree = FakePowercap(root)
        self.range_uj = range_uj
        self.tree.add_zone("intel-rapl:0", "package-0", max_energy_range_uj=range_uj)
        self.tree.add_zone("intel-rapl:0:0", "dram", max_energy_range_uj=range_uj)
        self.wraps = 0
        self.at(0.0)

    def at(self, t_s: float) -> None:
        for zone_id, start_uj, power_w in (("intel-rapl:0", 70_000_000, 20.0),
                                           ("intel-rapl:0:0", 1_000_000, 3.0)):
            absolute_uj = start_uj + round(power_w * t_s * 1e6)
            self.tree.set_energy_uj(zone_id, absolute_uj % self.range_uj)
            if zone_id == "intel-rapl:0":
                self.wraps = absolute_uj // self.range_uj


def _rapl(hw: RaplHardware, now_s: float) -> RaplSensor:
    sensor = open_rapl(hw.tree.root, now_s=now_s)
    assert sensor is not None
    return sensor


def test_rapl_resumes_across_a_gap_with_a_wrap_inside_it(tmp_path: Path) -> None:
    hw = RaplHardware(tmp_path)
    a, c = _rapl(hw, 0.0), _rapl(hw, 0.0)
    for t in (1.0, 2.0, 3.0, 4.0, 5.0):
        hw.at(t)
        assert _energy(a.read(t)) == _energy(c.read(t))
    state = _via_json(a.checkpoint())
    wraps_before_gap = hw.wraps
    # killed at t=5 (raw package counter 70 J); the counter wraps at t=6.5, inside the gap
    for t in (6.0, 7.0):
        hw.at(t)
        c.read(t)
    b = _rapl(hw, 7.0)  # the restarted agent opens its sensor mid-gap
    b.restore(state)
    hw.at(7.5)
    assert hw.wraps == wraps_before_gap + 1
    got, truth = _energy(b.read(7.5)), _energy(c.read(7.5))
    assert got == truth  # integer µJ: exactly equal
    assert got[("cpu", "package-0")] == pytest.approx(20.0 * 7.5)
    assert got[("dram", "package-0")] == pytest.approx(3.0 * 7.5)
    hw.at(9.0)
    assert _energy(b.read(9.0)) == _energy(c.read(9.0)) == {
        ("cpu", "package-0"): pytest.approx(180.0), ("dram", "package-0"): pytest.approx(27.0)}


def test_rapl_ceiling_applies_over_the_real_gap(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bogus step is judged against the gap's real length, not a one-second tick."""
    hw = RaplHardware(tmp_path, range_uj=10**15)
    a = _rapl(hw, 0.0)
    hw.at(1.0)
    a.read(1.0)
    state = _via_json(a.checkpoint())
    b = _rapl(hw, 3.0)
    b.restore(state)
    hw.tree.set_energy_uj("intel-rapl:0", 70_000_000 + 20_000_000 + 9_000_000_000)  # 9 kJ
    # 9 kJ in 3 s is over 2 kW: dropped; over a 5 s gap it would pass (see below)
    assert _energy(b.read(4.0))[("cpu", "package-0")] == pytest.approx(20.0)
    assert _warned(caplog, "dropped a jump") == 1
    c = _rapl(hw, 6.0)
    c.restore(state)
    assert _energy(c.read(6.0))[("cpu", "package-0")] == pytest.approx(9020.0)


def test_rapl_long_gap_warns_that_wraps_may_hide(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hw = RaplHardware(tmp_path)
    a = _rapl(hw, 0.0)
    hw.at(1.0)
    a.read(1.0)
    state = _via_json(a.checkpoint())
    b = _rapl(hw, 30.0)
    b.restore(state)
    hw.at(30.0)
    b.read(30.0)
    assert _warned(caplog, "lower bound") == 2  # package and dram, once each
    hw.at(31.0)
    b.read(31.0)
    assert _warned(caplog, "lower bound") == 2  # an ordinary tick after it: no more


def test_rapl_restore_skips_what_does_not_match(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hw = RaplHardware(tmp_path)
    a = _rapl(hw, 0.0)
    hw.at(2.0)
    a.read(2.0)
    state = _via_json(a.checkpoint())
    zones = state["zones"]
    zones["intel-rapl:9"] = {"energy_uj": 1, "prev_s": 0.0, "total_uj": 5}  # gone now
    zones["intel-rapl:0:0"]["total_uj"] = "12"  # wrong type: this zone is skipped
    b = _rapl(hw, 2.0)
    b.restore(state)
    assert _warned(caplog, "intel-rapl:9") == 1
    assert _warned(caplog, "intel-rapl:0:0") == 1
    hw.at(3.0)
    energy = _energy(b.read(3.0))
    assert energy[("cpu", "package-0")] == pytest.approx(60.0)  # restored: 40 J + 20 J
    assert energy[("dram", "package-0")] == pytest.approx(3.0)  # fresh since its open at 2 s
    for bad in ({"zones": {"intel-rapl:0": {"energy_uj": RANGE_UJ + 1, "prev_s": 0.0,
                                            "total_uj": 0}}},
                {"zones": {"intel-rapl:0": {"energy_uj": -1, "prev_s": 0.0, "total_uj": 0}}},
                {"zones": {"intel-rapl:0": {"energy_uj": 1, "prev_s": math.nan,
                                            "total_uj": 0}}},
                {"zones": {"intel-rapl:0": {"energy_uj": True, "prev_s": 0.0, "total_uj": 0}}},
                {"zones": {"intel-rapl:0": [1, 2]}}, {"zones": [1]}, {}, []):
        fresh = _rapl(hw, 3.0)
        fresh.restore(bad)  # type: ignore[arg-type]
        hw.at(4.0)
        assert _energy(fresh.read(4.0))[("cpu", "package-0")] == pytest.approx(20.0), bad
        hw.at(3.0)


# --- NVML -------------------------------------------------------------------------------


def _nvidia(monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu], now_s: float) -> NvidiaSensor:
    FakeNvml(gpus).install(monkeypatch)
    sensor = open_nvidia(now_s=now_s)
    assert sensor is not None
    return sensor


def test_nvml_energy_counter_resumes_across_the_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = [FakeGpu(uuid="GPU-a", energy_mj=7_000_000), FakeGpu(uuid="GPU-b", energy_mj=0)]
    a, c = _nvidia(monkeypatch, gpus, 0.0), _nvidia(monkeypatch, gpus, 0.0)

    def at(t: float) -> None:
        gpus[0].energy_mj = 7_000_000 + round(300_000 * t)  # 300 W
        gpus[1].energy_mj = round(150_000 * t)

    for t in (1.0, 2.0):
        at(t)
        a.read(t)
        c.read(t)
    state = _via_json(a.checkpoint())
    assert set(state["gpus"]) == {"GPU-a", "GPU-b"}
    at(5.0)
    c.read(5.0)
    b = _nvidia(monkeypatch, gpus, 6.0)
    b.restore(state)
    at(10.0)
    got, truth = _energy(b.read(10.0)), _energy(c.read(10.0))
    assert got == pytest.approx(truth, rel=EXACT)
    assert got == pytest.approx({("gpu", "gpu0"): 3000.0, ("gpu", "gpu1"): 1500.0})


def test_nvml_power_path_integrates_across_the_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Power rising linearly through the gap: one trapezoid over it equals the tick-by-tick sum."""
    gpus = [FakeGpu(uuid="GPU-old", energy_mj=None, power_mw=100_000)]
    a, c = _nvidia(monkeypatch, gpus, 0.0), _nvidia(monkeypatch, gpus, 0.0)
    for t in (1.0, 2.0, 3.0):
        a.read(t)
        c.read(t)
    state = _via_json(a.checkpoint())
    for t, mw in ((4.0, 120_000), (5.0, 140_000)):
        gpus[0].power_mw = mw
        c.read(t)
    b = _nvidia(monkeypatch, gpus, 5.0)
    b.restore(state)
    gpus[0].power_mw = 160_000
    got, truth = _energy(b.read(6.0)), _energy(c.read(6.0))
    assert got == pytest.approx(truth, rel=EXACT)
    assert got[("gpu", "gpu0")] == pytest.approx(300.0 + 110.0 + 130.0 + 150.0)


def test_nvml_restore_matches_by_uuid_and_skips_the_rest(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gpus = [FakeGpu(uuid="GPU-a", energy_mj=0), FakeGpu(uuid="GPU-b", energy_mj=0),
            FakeGpu(uuid="GPU-c", energy_mj=0)]
    a = _nvidia(monkeypatch, gpus, 0.0)
    for gpu in gpus:
        gpu.energy_mj = 100_000
    a.read(1.0)
    state = _via_json(a.checkpoint())
    state["gpus"]["GPU-c"]["last_mj"] = -5  # malformed
    # After restart: GPU-a is gone, so GPU-b now sits at index 0 and GPU-c at 1. Both are
    # skipped: continuing them under other gpuN names would feed one board's total to another.
    survivors = [FakeGpu(uuid="GPU-b", energy_mj=100_000), FakeGpu(uuid="GPU-c", energy_mj=100_000)]
    b = _nvidia(monkeypatch, survivors, 2.0)
    b.restore(state)
    assert _warned(caplog, "GPU-a is not present") == 1
    assert _warned(caplog, "was gpu1, is gpu0") == 1
    assert _warned(caplog, "GPU-c ignored") == 1
    for gpu in survivors:
        gpu.energy_mj = 150_000
    assert _energy(b.read(3.0)) == {("gpu", "gpu0"): pytest.approx(50.0),
                                    ("gpu", "gpu1"): pytest.approx(50.0)}
    # The same GPU at the same index but another measurement path is skipped as well.
    state["gpus"]["GPU-a"]["source"] = "nvml_power"
    d = _nvidia(monkeypatch, gpus, 3.0)
    d.restore(state)
    assert _warned(caplog, "measured via 'nvml_power' then") == 1
    gpus[0].energy_mj = 130_000
    assert _energy(d.read(4.0))[("gpu", "gpu0")] == pytest.approx(30.0)
    for bad in (None, [], {"gpus": []}, {"gpus": {"GPU-a": 3}}):
        d.restore(bad)  # type: ignore[arg-type]
    assert _energy(d.read(5.0))[("gpu", "gpu0")] == pytest.approx(30.0)


# --- CPU and DRAM estimators -----------------------------------------------------------


def _cpu(proc: FakeProc) -> CpuModelSensor:
    return CpuModelSensor(proc.root, build_cpu_model(METHOD_CCF_VCPU, proc.threads))


def test_cpu_model_resumes_from_the_kernel_counters(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    a, c = _cpu(proc), _cpu(proc)
    a.read(100.0)
    c.read(100.0)
    for t, load in ((101.0, 0.5), (102.0, 0.9), (103.0, 0.3)):
        proc.advance(1.0, load=load)
        a.read(t)
        c.read(t)
    state = _via_json(a.checkpoint())
    for t in (104.0, 105.0):  # constant load through the gap: the reference may tick in it
        proc.advance(1.0, load=0.7)
        c.read(t)
    b = _cpu(proc)  # opened at restart; never read before restore
    b.restore(state)
    proc.advance(1.0, load=0.7)
    got, truth = _energy(b.read(106.0)), _energy(c.read(106.0))
    assert got == pytest.approx(truth, rel=EXACT)
    assert b.last_load == pytest.approx(0.7)


def test_cpu_model_restores_the_last_load_for_a_jiffy_less_interval(tmp_path: Path) -> None:
    """Restarted within one jiffy: no counter moved, so the saved load is what applies."""
    proc = FakeProc(tmp_path)
    a, c = _cpu(proc), _cpu(proc)
    a.read(0.0)
    c.read(0.0)
    proc.advance(1.0, load=0.8)
    a.read(1.0)
    c.read(1.0)
    b = _cpu(proc)
    b.restore(_via_json(a.checkpoint()))
    got, truth = _energy(b.read(1.004)), _energy(c.read(1.004))
    assert got == pytest.approx(truth, rel=EXACT)
    assert b.last_load == pytest.approx(0.8)


def test_cpu_model_charges_the_gap_at_its_average_load(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    a = _cpu(proc)
    a.read(0.0)
    proc.advance(1.0, load=1.0)
    [before] = a.read(1.0)
    state = _via_json(a.checkpoint())
    proc.advance(3.0, load=0.2)
    proc.advance(1.0, load=1.0)  # 4 s gap, average load (0.6 + 0.4) / 4 = 0.4
    b = _cpu(proc)
    b.restore(state)
    [after] = b.read(5.0)
    expected = before.energy_j + b.model.power_w(0.4) * 4.0
    assert after.energy_j == pytest.approx(expected, rel=EXACT)
    assert b.last_load == pytest.approx(0.4)


def test_cpu_model_ignores_a_malformed_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc = FakeProc(tmp_path)
    a = _cpu(proc)
    a.read(0.0)
    proc.advance(1.0, load=1.0)
    a.read(1.0)
    good = _via_json(a.checkpoint())
    bads: list[Any] = [None, {}, {**good, "last_load": 1.5}, {**good, "energy_j": "9"},
                       {**good, "times": {**good["times"], "idle": 1.5}},
                       {**good, "times": [1, 2]}]
    for bad in bads:
        b = _cpu(proc)
        b.restore(bad)
        assert _energy(b.read(2.0)) == {("cpu", "node"): 0.0}, bad  # a fresh baseline
    assert _warned(caplog, "cpu estimator checkpoint ignored") == len(bads)


def test_dram_model_resumes_with_constant_power_over_the_gap(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    proc.meminfo(16 * 1024 * 1024)
    a, c = DramModelSensor(tmp_path), DramModelSensor(tmp_path)
    for t in (10.0, 11.0, 12.5):
        a.read(t)
        c.read(t)
    state = _via_json(a.checkpoint())
    c.read(15.0)
    b = DramModelSensor(tmp_path)
    b.restore(state)
    got, truth = _energy(b.read(20.0)), _energy(c.read(20.0))
    assert got == pytest.approx(truth, rel=EXACT)
    assert got[("dram", "node")] == pytest.approx(b.power_w * 10.0)
    fresh = DramModelSensor(tmp_path)
    fresh.restore({"energy_j": 5.0, "prev_s": "soon"})
    assert _energy(fresh.read(30.0)) == {("dram", "node"): 0.0}


# --- Network ----------------------------------------------------------------------------


def test_network_resumes_byte_counters(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_net_dev(tmp_path, {"eth0": (1000, 1000), "eth1": (0, 0)})
    a, c = NetworkSensor(tmp_path, j_per_byte=1e-6), NetworkSensor(tmp_path, j_per_byte=1e-6)
    write_net_dev(tmp_path, {"eth0": (5000, 3000), "eth1": (100, 0)})
    a.read(1.0)
    c.read(1.0)
    state = _via_json(a.checkpoint())
    write_net_dev(tmp_path, {"eth0": (9000, 8000), "eth1": (300, 0)})
    c.read(2.0)
    b = NetworkSensor(tmp_path, j_per_byte=1e-6)  # its own baseline mid-gap
    b.restore(state)
    write_net_dev(tmp_path, {"eth0": (20000, 10000), "eth1": (400, 0)})
    got, truth = _energy(b.read(3.0)), _energy(c.read(3.0))
    assert got == pytest.approx(truth, rel=EXACT)
    assert got == pytest.approx({("net", "eth0"): 28000e-6, ("net", "eth1"): 400e-6})
    # eth1 removed before the restart: skipped with a warning; a new coefficient applies
    # to the gap only, never to the energy already reported.
    write_net_dev(tmp_path, {"eth0": (20000, 10000)})
    d = NetworkSensor(tmp_path, j_per_byte=2e-6)
    d.restore(_via_json(b.checkpoint()))
    assert _warned(caplog, "eth1 is not present") == 1
    write_net_dev(tmp_path, {"eth0": (21000, 10000)})
    assert _energy(d.read(4.0)) == {("net", "eth0"): pytest.approx(28000e-6 + 1000 * 2e-6)}


# --- Replay -----------------------------------------------------------------------------

TRACE = ("t_s,component,device,watts\n"
         "0,cpu,package-0,50\n0,gpu,gpu0,300\n4,cpu,package-0,80\n6,gpu,gpu0,100\n"
         "9,cpu,package-0,20\n")


def test_replay_trace_time_runs_on_through_the_gap(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(TRACE)
    a, c = ReplaySensor(load_trace(path), 100.0), ReplaySensor(load_trace(path), 100.0)
    for t in (101.0, 102.0, 103.0):
        a.read(t)
        c.read(t)
    state = _via_json(a.checkpoint())
    b = ReplaySensor(load_trace(path), opened_s=108.0)  # restarted at 108
    b.restore(state)
    got = _energy(b.read(111.0))
    assert got == _energy(c.read(111.0))
    assert got == pytest.approx({("cpu", "package-0"): 50 * 4 + 80 * 5 + 20 * 2,
                                 ("gpu", "gpu0"): 300 * 6 + 100 * 5})
    # Another trace under the same name: the saved energies do not match, so it is ignored.
    path.write_text(TRACE.replace("0,cpu,package-0,50", "0,cpu,package-0,55"))
    other = ReplaySensor(load_trace(path), opened_s=108.0)
    other.restore(state)
    assert _warned(caplog, "replay checkpoint ignored") == 1
    assert other.opened_s == 108.0
    for bad in ({**state, "energy_j": [["cpu", "package-0"]]}, {**state, "opened_s": None},
                {**state, "energy_j": [["net", "eth9", 0.0]]}, "x"):
        other.restore(bad)  # type: ignore[arg-type]
        assert other.opened_s == 108.0


# --- Sampler ----------------------------------------------------------------------------


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
    _json_only(state)
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
    assert _warned(caplog, "sensor b: restore failed") == 1
    assert _warned(caplog, "malformed series row") == 1
    clock.now = 16.0
    tick = second.tick()
    assert tick.duration_s == pytest.approx(5.0)
    by_device = {e.device: e.energy_j for e in tick.entries}
    # a: the whole 5 s gap; b and new: only since the restore at 15 (their baseline)
    assert by_device == pytest.approx({"a": 50.0, "b": 20.0, "new": 5.0})


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
    assert _warned(caplog, "sensor broken: checkpoint failed") == 1


@pytest.mark.parametrize("bad", [None, [], "x", 5, {"zones": 1, "gpus": [], "ifaces": "eth0"}])
def test_every_sensor_warns_and_carries_on_after_garbage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    bad: Any,
) -> None:
    hw = RaplHardware(tmp_path / "sys")
    proc = FakeProc(tmp_path / "proc")
    proc.meminfo(1024 * 1024)
    write_net_dev(proc.root, {"eth0": (0, 0)})
    (tmp_path / "trace.csv").write_text(TRACE)
    sensors = [_rapl(hw, 0.0), _nvidia(monkeypatch, [FakeGpu()], 0.0), _cpu(proc),
               DramModelSensor(proc.root), NetworkSensor(proc.root),
               ReplaySensor(load_trace(tmp_path / "trace.csv"), 0.0)]
    for sensor in sensors:
        sensor.read(0.0)
        before = sensor.checkpoint()
        caplog.clear()
        sensor.restore(bad)
        assert _warned(caplog, "ignored") == 1, sensor.name
        assert sensor.checkpoint() == before, sensor.name
