"""What a sensor can do is declared, never probed: the factory (and everything after it)
asks a sensor's ``Capabilities``; every sensor answers the whole ``Sensor`` protocol, with
``{}`` where it cannot; and a problem a sensor has is said once per cause until it
recovers (:class:`joulestat.core.logs.LogOnce`, the one log-once helper)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from joulestat.core.logs import LogOnce
from joulestat.core.records import DeviceInfo
from joulestat.core.tick import Component
from joulestat.devices.accelerator import EmptySensor
from joulestat.devices.amd import open_amd
from joulestat.devices.estimators import CpuModelSensor, DramModelSensor
from joulestat.devices.factory import (
    DeviceSettings,
    build_sensors,
    cpu_estimator_of,
    device_processes_of,
    device_state_of,
    known_idle_w_of,
)
from joulestat.devices.gaudi import open_gaudi
from joulestat.devices.network import NetworkSensor
from joulestat.devices.neuron import open_neuron
from joulestat.devices.replay import ReplaySensor, load_trace
from joulestat.devices.sensor import (
    Capabilities,
    DeviceProcesses,
    DeviceState,
    DeviceStates,
    Reading,
    Sensor,
    SeriesKey,
)
from tests.fakes.amdsmi import FakeAmdGpu, FakeAmdsmi
from tests.fakes.hlml import FakeHlml, FakeHpu
from tests.fakes.net_dev import write_net_dev
from tests.fakes.neuron import FakeNeuron, monitor_report, write_monitor
from tests.fakes.nvml import FakeGpu
from tests.fakes.proc_stat import FakeProc
from tests.helpers.checkpoint import TRACE, RaplHardware, ccf_cpu, nvidia_at, rapl_at

ACCELERATOR = Component.ACCELERATOR


@dataclass
class FakeSensor(Sensor):
    """A sensor with every answer ready, whether or not its capabilities admit it: what the
    factory takes from it shows whether the factory asked the capability or the method."""

    name: str
    capabilities: Capabilities = field(default_factory=Capabilities)
    processes: DeviceProcesses = field(default_factory=dict)
    states: DeviceStates = field(default_factory=dict)
    idle_w: dict[SeriesKey, float] = field(default_factory=dict)

    def describe(self) -> list[DeviceInfo]:
        return [DeviceInfo(ACCELERATOR, self.name, "fake")]

    def read(self, now_s: float) -> list[Reading]:
        return [Reading(ACCELERATOR, self.name, 0.0, "fake")]

    def close(self) -> None:
        return None

    def checkpoint(self) -> dict:
        return {}

    def restore(self, state: dict) -> None:
        return None

    def device_processes(self) -> DeviceProcesses:
        return self.processes

    def device_state(self) -> DeviceStates:
        return self.states

    def known_idle_w(self) -> dict[SeriesKey, float]:
        return self.idle_w


# -- the factory asks capabilities -------------------------------------------------------


def test_per_process_use_comes_only_from_sensors_that_declare_it() -> None:
    declared = FakeSensor("a", Capabilities(per_process=True),
                          processes={(ACCELERATOR, "a"): ({1: 50.0}, {1})})
    undeclared = FakeSensor("b", processes={(ACCELERATOR, "b"): ({2: 10.0}, {2})})
    combined = device_processes_of([declared, undeclared])
    assert combined is not None
    assert combined() == {(ACCELERATOR, "a"): ({1: 50.0}, {1})}
    assert device_processes_of([undeclared]) is None  # attribution then splits by CPU time


def test_gauges_come_only_from_sensors_that_declare_live_state() -> None:
    declared = FakeSensor("a", Capabilities(live_state=True),
                          states={(ACCELERATOR, "a"): DeviceState(1.5e9, 2.0**30)})
    undeclared = FakeSensor("b", states={(ACCELERATOR, "b"): DeviceState(9e8, 1.0)})
    combined = device_state_of([undeclared, declared])
    assert combined is not None
    assert combined() == {(ACCELERATOR, "a"): DeviceState(1.5e9, 2.0**30)}
    assert device_state_of([undeclared]) is None


def test_known_idle_power_comes_only_from_sensors_that_declare_it() -> None:
    declared = FakeSensor("a", Capabilities(known_idle=True),
                          idle_w={(ACCELERATOR, "a"): 42.0})
    undeclared = FakeSensor("b", idle_w={(ACCELERATOR, "b"): 7.0})
    assert known_idle_w_of([declared, undeclared]) == {(ACCELERATOR, "a"): 42.0}
    assert known_idle_w_of([undeclared]) == {}


def test_the_cpu_estimator_is_found_by_its_type(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    cpu = ccf_cpu(proc)
    assert cpu_estimator_of([FakeSensor("model-cpu"), cpu]) is cpu  # not by its name
    assert cpu_estimator_of([FakeSensor("model-cpu")]) is None


def test_a_node_without_counters_gets_estimators_whose_idle_power_attribution_keeps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """build_sensors on a VM with no RAPL, no NVML and no vendor library: the CPU and DRAM
    estimators and the network model, and idle power known for exactly the two estimates
    (the network model has none: it is per byte)."""
    for module in ("amdsmi", "pyhlml"):
        monkeypatch.setitem(sys.modules, module, None)
    proc = FakeProc(tmp_path / "proc", threads=2)
    proc.cpuinfo("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", vm=True)
    proc.meminfo(8 * 1024 * 1024)
    write_net_dev(proc.root, {"eth0": (0, 0)})
    (tmp_path / "sys").mkdir()
    settings = DeviceSettings(sysfs_root=tmp_path / "sys", procfs_root=proc.root, replay=None,
                              nvml=False, neuron_max_power_w=None, neuron_monitor=None)
    sensors = build_sensors(settings, 0.0, cloud="aws")
    assert [s.name for s in sensors] == ["model-cpu", "model-dram", "network"]
    cpu, dram = sensors[0], sensors[1]
    assert isinstance(cpu, CpuModelSensor) and isinstance(dram, DramModelSensor)
    assert known_idle_w_of(sensors) == {("cpu", "node"): cpu.idle_power_w,
                                        ("dram", "node"): dram.idle_power_w}
    assert cpu_estimator_of(sensors) is cpu
    assert device_processes_of(sensors) is None and device_state_of(sensors) is None


# -- every sensor answers the whole protocol ---------------------------------------------

Build = Callable[[Path, pytest.MonkeyPatch], Sensor]


def _neuron(tmp_path: Path, _mp: pytest.MonkeyPatch) -> Sensor:
    fake = FakeNeuron(tmp_path)
    fake.add_device(0, "Inferentia2")
    fake.set_power(0, 40.0)
    monitor = tmp_path / "monitor.jsonl"
    write_monitor(monitor, monitor_report([(7, "a", {0: 50.0})]))
    return open_neuron(tmp_path, 100.0, monitor)


def _proc(tmp_path: Path) -> FakeProc:
    proc = FakeProc(tmp_path / "proc")
    proc.meminfo(1024 * 1024)
    write_net_dev(proc.root, {"eth0": (0, 0)})
    return proc


def _amd(tmp_path: Path, mp: pytest.MonkeyPatch) -> Sensor:
    fake = FakeAmdsmi([FakeAmdGpu()]).install(mp)
    return open_amd(0.0, probe=lambda: fake.advance(0.5))


def _gaudi(tmp_path: Path, mp: pytest.MonkeyPatch) -> Sensor:
    FakeHlml([FakeHpu()]).install(mp)
    return open_gaudi(0.0)


def _replay(tmp_path: Path, _mp: pytest.MonkeyPatch) -> Sensor:
    (tmp_path / "trace.csv").write_text(TRACE)
    return ReplaySensor(load_trace(tmp_path / "trace.csv"), 0.0)


SENSORS: dict[str, tuple[Build, Capabilities]] = {
    "rapl": (lambda tmp, _mp: rapl_at(RaplHardware(tmp / "sys"), 0.0),
             Capabilities(energy_counter=True)),
    "nvidia": (lambda _tmp, mp: nvidia_at(mp, [FakeGpu()], 0.0),
               Capabilities(energy_counter=True, per_process=True, live_state=True)),
    "amd": (_amd, Capabilities(energy_counter=True, per_process=True, live_state=True)),
    "gaudi": (_gaudi, Capabilities(energy_counter=True)),
    "neuron": (_neuron, Capabilities(power_only=True, estimate=True, per_process=True)),
    "model-cpu": (lambda tmp, _mp: ccf_cpu(_proc(tmp)),
                  Capabilities(estimate=True, known_idle=True)),
    "model-dram": (lambda tmp, _mp: DramModelSensor(_proc(tmp).root),
                   Capabilities(estimate=True, known_idle=True)),
    "network": (lambda tmp, _mp: NetworkSensor(_proc(tmp).root), Capabilities(estimate=True)),
    "replay": (_replay, Capabilities(power_only=True, known_idle=True)),
    "empty": (lambda _tmp, _mp: EmptySensor("amd", "amdsmi not installed"), Capabilities()),
}


@pytest.mark.parametrize("kind", sorted(SENSORS))
def test_every_sensor_declares_what_it_answers(kind: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    build, expected = SENSORS[kind]
    sensor = build(tmp_path, monkeypatch)
    assert sensor.capabilities == expected
    sensor.read(0.0)
    sensor.read(1.0)
    processes, states, idle_w = (sensor.device_processes(), sensor.device_state(),
                                 sensor.known_idle_w())
    described = {(d.component, d.device) for d in sensor.describe()}
    # Without the capability the answer is empty; with it, it is about its own devices.
    assert bool(processes) == expected.per_process and set(processes) <= described
    assert bool(states) == expected.live_state and set(states) <= described
    assert bool(idle_w) == expected.known_idle and set(idle_w) <= described
    assert all(watts >= 0 for watts in idle_w.values())
    sensor.close()


def test_a_replayed_trace_knows_its_lowest_level_as_idle(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    sensor = _replay(tmp_path, monkeypatch)
    assert known_idle_w_of([sensor]) == {("cpu", "package-0"): 20.0,
                                         ("accelerator", "gpu0"): 100.0}


# -- components are an enum whose members are their strings ------------------------------


def test_a_component_is_its_string_wherever_it_goes() -> None:
    assert [str(c) for c in Component] == ["cpu", "dram", "accelerator", "net", "platform",
                                           "other"]
    assert Component.ACCELERATOR == "accelerator" and f"{Component.CPU}" == "cpu"
    assert {"cpu": 1.0}[Component.CPU] == 1.0  # a row read back as a plain string matches
    assert {Component.DRAM: 2.0}["dram"] == 2.0
    assert json.dumps({Component.NET: Component.PLATFORM}) == '{"net": "platform"}'


# -- one log-once helper -----------------------------------------------------------------


def _said(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "test.logonce" and r.levelno == level]


def test_log_once_says_each_cause_once_until_recovery_then_again(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="test.logonce")
    once = LogOnce(logging.getLogger("test.logonce"))
    for tick in range(3):
        once.problem("zone-0", "unreadable", "zone-0: cannot read (tick %d)", tick)
    assert _said(caplog, logging.WARNING) == ["zone-0: cannot read (tick 0)"]
    assert once.problem("zone-0", "malformed", "zone-0: malformed")  # a new cause
    assert not once.problem("zone-0", "unreadable", "zone-0: cannot read again")
    assert once.problem("zone-1", "unreadable", "zone-1: cannot read")  # keys apart
    assert once.failing("zone-0") and once.failing("zone-1")
    assert once.recovered("zone-0", "%s: reading normally again", "zone-0")
    assert not once.recovered("zone-0", "said only once")
    assert _said(caplog, logging.INFO) == ["zone-0: reading normally again"]
    assert not once.failing("zone-0") and once.failing("zone-1")
    assert once.problem("zone-0", "unreadable", "zone-0: cannot read, after recovering")
    assert _said(caplog, logging.WARNING) == [
        "zone-0: cannot read (tick 0)", "zone-0: malformed", "zone-1: cannot read",
        "zone-0: cannot read, after recovering"]
    assert not once.recovered("never-failed", "never said")
    assert "never said" not in caplog.text


def test_a_failing_gpu_is_said_once_through_the_shared_helper(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Through a sensor, as the daemon sees it: AMD's counter reads fail on every tick,
    one warning (the fault's start); they heal, one more (its end, with what was
    filled); they fail again, a third (a new fault)."""
    fake = FakeAmdsmi([FakeAmdGpu(uuid="amd-a")]).install(monkeypatch)
    sensor = open_amd(0.0, probe=lambda: fake.advance(0.5))
    caplog.set_level(logging.INFO, logger="joulestat.devices.amd")
    fake.gpus[0].fail.add("amdsmi_get_energy_count")
    for tick in range(1, 4):
        sensor.read(float(tick))
    fake.gpus[0].fail.clear()
    fake.advance(1.0)  # the counter moves on: the fault is over
    sensor.read(4.0)
    fake.gpus[0].fail.add("amdsmi_get_energy_count")
    sensor.read(5.0)
    records = [r for r in caplog.records if r.name == "joulestat.devices.amd"]
    assert [r.levelno for r in records] == [logging.WARNING] * 3, records
    assert "read failed" in records[0].getMessage() and "amd-a" in records[0].getMessage()
    assert "unreadable from" in records[1].getMessage()
    assert "read failed" in records[2].getMessage()
