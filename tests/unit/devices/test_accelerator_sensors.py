"""AMD, Gaudi and Neuron sensors against their fakes: units, sources, failure modes."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from joulestat.devices.accelerator import CounterTrack, EmptySensor
from joulestat.devices.amd import AmdSensor, open_amd
from joulestat.devices.gaudi import GaudiSensor, open_gaudi
from joulestat.devices.neuron import (
    NeuronSensor,
    open_neuron,
    parse_monitor_report,
    parse_power_utilization,
)
from joulestat.devices.sensor import Capabilities
from tests.fakes.amdsmi import FakeAmdGpu, FakeAmdsmi
from tests.fakes.hlml import FakeHlml, FakeHpu
from tests.fakes.neuron import FakeNeuron, monitor_report, write_monitor

# -- shared -----------------------------------------------------------------------------


def test_counter_going_back_starts_a_new_baseline_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    track = CounterTrack("dev", 1e-3)
    assert track.update(1_000) == 0.0
    assert track.update(3_000) == pytest.approx(2.0)
    with caplog.at_level(logging.WARNING):
        assert track.update(500) == pytest.approx(2.0)  # reset: nothing negative
    assert track.update(1_500) == pytest.approx(3.0)  # counts on from the new baseline
    assert track.resets == 1
    assert len([r for r in caplog.records if "went back" in r.message]) == 1


# -- AMD --------------------------------------------------------------------------------


def test_amd_missing_library_is_an_empty_sensor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # import raises ImportError
    sensor = open_amd(0.0)
    assert isinstance(sensor, EmptySensor) and "joulestat[amd]" in sensor.why


@pytest.mark.parametrize("old_key", [False, True])
def test_amd_energy_accumulator_times_resolution(monkeypatch: pytest.MonkeyPatch,
                                                 old_key: bool) -> None:
    fake = FakeAmdsmi([FakeAmdGpu(accumulator=10_000, old_key=old_key)]).install(monkeypatch)
    sensor = open_amd(0.0, probe=lambda: fake.advance(0.5))
    assert isinstance(sensor, AmdSensor)
    assert sensor.capabilities == Capabilities(energy_counter=True, per_process=True,
                                               live_state=True)
    [info] = sensor.describe()
    assert (info.component, info.device, info.source, info.model) == (
        "accelerator", "amdgpu0", "amdsmi", "AMD Instinct MI300X")
    start_j = fake.gpus[0].energy_j
    fake.gpus[0].add_joules(1234.5)
    [reading] = sensor.read(1.0)
    assert reading.energy_j == pytest.approx(fake.gpus[0].energy_j - start_j, rel=1e-4)
    assert reading.energy_j == pytest.approx(1234.5, rel=1e-3)


def test_amd_broken_counter_falls_back_to_power(monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeAmdsmi([FakeAmdGpu(counter_works=False, power_w=400.0)]).install(monkeypatch)
    with caplog.at_level(logging.WARNING):
        sensor = open_amd(0.0, probe=lambda: fake.advance(0.5))
    assert isinstance(sensor, AmdSensor)
    assert sensor.describe()[0].source == "amdsmi_power"
    assert sensor.capabilities.power_only
    assert "did not advance" in caplog.text
    assert sensor.read(10.0)[0].energy_j == pytest.approx(4000.0)


def test_amd_counter_disagreeing_with_power_is_not_trusted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeAmdGpu(power_w=300.0)
    fake = FakeAmdsmi([gpu]).install(monkeypatch)
    sensor = open_amd(0.0, probe=lambda: gpu.add_joules(300.0 * 0.5 * 5))  # 5x too fast
    assert sensor.describe()[0].source == "amdsmi_power"
    assert fake.shutdown_calls == 0


def test_amd_device_failing_and_vanishing_is_filled_at_its_recent_power(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeAmdsmi([FakeAmdGpu(), FakeAmdGpu(uuid="amd-1")]).install(monkeypatch)
    sensor = open_amd(0.0, probe=lambda: fake.advance(0.5))
    for gpu in fake.gpus:
        gpu.add_joules(100.0)
    first = [r.energy_j for r in sensor.read(1.0)]
    fake.gpus[0].fail.add("amdsmi_get_energy_count")
    fake.gpus[1].add_joules(50.0)
    readings = sensor.read(2.0)
    second = [r.energy_j for r in readings]
    # Device 0's second is filled at its recent power, and said to be filled.
    assert second[0] == pytest.approx(2 * first[0], rel=1e-3) and readings[0].filled
    assert second[1] == pytest.approx(first[1] + 50.0, rel=1e-3) and not readings[1].filled
    fake.gpus.pop()  # device 1 vanishes: its second is filled at its recent power, the
    third = sensor.read(3.0)  # mean of its reads so far: (100 J + 50 J) / 2 s
    assert third[1].energy_j == pytest.approx(second[1] + 75.0, rel=1e-3) and third[1].filled
    assert sensor.faults_total()["unreadable"] == 2


def test_amd_process_use_is_the_gfx_delta(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeAmdGpu(processes=[{"pid": 10, "engine_usage": {"gfx": 0}},
                                {"pid": 11, "engine_usage": {"gfx": 0}}])
    fake = FakeAmdsmi([gpu]).install(monkeypatch)
    sensor = open_amd(0.0, probe=lambda: fake.advance(0.5))
    assert sensor.device_processes() == {("accelerator", "amdgpu0"): ({}, {10, 11})}
    gpu.processes = [{"pid": 10, "engine_usage": {"gfx": 300}},
                     {"pid": 11, "engine_usage": {"gfx": 100}}]
    use, holders = sensor.device_processes()[("accelerator", "amdgpu0")]
    assert use == {10: 300.0, 11: 100.0} and holders == {10, 11}


# -- Gaudi ------------------------------------------------------------------------------


def test_gaudi_missing_library_and_failed_init(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyhlml", None)
    assert isinstance(open_gaudi(0.0), EmptySensor)
    FakeHlml([FakeHpu()], init_fails=True).install(monkeypatch)
    assert isinstance(open_gaudi(0.0), EmptySensor)


def test_gaudi_energy_counter_mj_and_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeHlml([FakeHpu(energy_mj=5_000_000)]).install(monkeypatch)
    sensor = open_gaudi(0.0)
    assert isinstance(sensor, GaudiSensor) and sensor.capabilities.energy_counter
    [info] = sensor.describe()
    assert (info.device, info.source, info.model) == ("gaudi0", "hlml", "HL-225")
    fake.hpus[0].energy_mj = 5_250_500
    assert sensor.read(1.0)[0].energy_j == pytest.approx(250.5)
    fake.hpus[0].energy_mj = 1_000  # driver reload: a new baseline, the second filled
    reset = sensor.read(2.0)[0]
    assert (reset.energy_j, reset.filled) == (pytest.approx(250.5 * 2), True)
    fake.hpus[0].energy_mj = 101_000
    assert sensor.read(3.0)[0].energy_j == pytest.approx(250.5 * 2 + 100)
    assert sensor.faults_total()["backwards"] == 1


def test_gaudi_power_fallback_in_mw(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeHlml([FakeHpu(energy_mj=None, power_mw=200_000)]).install(monkeypatch)
    sensor = open_gaudi(0.0)
    assert sensor.describe()[0].source == "hlml_power"
    fake.hpus[0].power_mw = 400_000
    assert sensor.read(2.0)[0].energy_j == pytest.approx((200 + 400) / 2 * 2)


def test_gaudi_failing_device_is_filled_at_its_recent_power(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeHlml([FakeHpu(energy_mj=0)]).install(monkeypatch)
    sensor = open_gaudi(0.0)
    fake.hpus[0].energy_mj = 10_000
    sensor.read(1.0)
    fake.hpus[0].fail.add("hlmlDeviceGetTotalEnergyConsumption")
    with caplog.at_level(logging.WARNING):
        for t in (2.0, 3.0, 4.0):
            reading = sensor.read(t)[0]
            assert (reading.energy_j, reading.filled) == (pytest.approx(10.0 * t), True)
    assert caplog.text.count("HLML read failed") == 1  # one event, said once
    assert sensor.faults_total()["unreadable"] == 1


# -- Neuron -----------------------------------------------------------------------------


def test_neuron_power_file_format() -> None:
    sample = parse_power_utilization("POWER_STATUS_VALID,1700000000,10.5,40.0,25.25\n")
    assert sample is not None and sample.avg_pct == 25.25 and sample.unix_s == 1.7e9
    nodata = parse_power_utilization("NO_DATA\n")
    assert nodata is not None and nodata.status == "NO_DATA"
    assert parse_power_utilization("POWER_STATUS_VALID,x,1,2\n") is None


def test_neuron_absent_and_unconfigured(tmp_path: Path) -> None:
    assert isinstance(open_neuron(tmp_path, 100.0), EmptySensor)
    FakeNeuron(tmp_path).add_device(0)
    unconfigured = open_neuron(tmp_path, None)
    assert isinstance(unconfigured, EmptySensor) and "max-power" in unconfigured.why


@pytest.mark.parametrize("layout", ["stats/power/utilization",
                                    "stats/hardware/power/utilization"])
def test_neuron_paths_are_discovered_and_power_is_percent_of_max(tmp_path: Path,
                                                                 layout: str) -> None:
    fake = FakeNeuron(tmp_path)
    fake.add_device(0, "Inferentia2", layout)
    fake.add_device(1, "Inferentia2", layout)
    sensor = open_neuron(tmp_path, 200.0)
    assert isinstance(sensor, NeuronSensor)
    assert [(d.device, d.model, d.source) for d in sensor.describe()] == [
        ("neuron0", "AWS Inferentia2", "neuron"), ("neuron1", "AWS Inferentia2", "neuron")]
    fake.set_power(0, 50.0)
    fake.set_power(1, 25.0)
    sensor.read(0.0)
    readings = sensor.read(10.0)
    assert [r.energy_j for r in readings] == pytest.approx([1000.0, 500.0])


def test_neuron_no_data_stale_and_vanishing_count_nothing(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    fake = FakeNeuron(tmp_path)
    fake.add_device(0)
    sensor = open_neuron(tmp_path, 100.0)
    sensor.read(0.0)
    with caplog.at_level(logging.WARNING):
        assert sensor.read(5.0)[0].energy_j == 0.0  # NO_DATA
        assert sensor.read(6.0)[0].energy_j == 0.0
        fake.set_power(0, 50.0, unix_s=1.0)  # stale
        assert sensor.read(7.0)[0].energy_j == 0.0
        fake.set_power(0, 50.0)
        assert sensor.read(9.0)[0].energy_j == pytest.approx(100.0)
        fake.remove_device(0)
        assert sensor.read(11.0)[0].energy_j == pytest.approx(100.0)
    assert caplog.text.count("NO_DATA") == 1


def test_neuron_monitor_estimate_and_processes(tmp_path: Path) -> None:
    fake = FakeNeuron(tmp_path)
    fake.add_device(0)
    monitor = tmp_path / "neuron-monitor.jsonl"
    write_monitor(monitor, monitor_report([(101, "bert", {0: 60.0}), (102, "", {1: 20.0})]))
    sensor = open_neuron(tmp_path, 100.0, monitor)
    assert sensor.capabilities.per_process
    assert [d.source for d in sensor.describe()] == ["model:neuron-util", "neuron"]
    sensor.read(0.0)
    # NO_DATA from the driver: estimated from mean core utilisation (40 %) x 100 W
    measured, estimated = sensor.read(10.0)
    assert (measured.energy_j, estimated.energy_j) == (0.0, pytest.approx(400.0))
    assert sensor.device_processes() == {("accelerator", "neuron0"): ({101: 60.0, 102: 20.0},
                                                              {101, 102})}
    fake.set_power(0, 30.0)  # the driver's figure wins once valid: no double count
    measured, estimated = sensor.read(20.0)
    assert (measured.energy_j, estimated.energy_j) == (pytest.approx(300.0),
                                                       pytest.approx(400.0))
    with open(monitor, "a") as handle:
        handle.write('{"neuron_runtime_data": [')  # a line still being written
    assert sensor.device_processes()[("accelerator", "neuron0")][1] == {101, 102}


def test_neuron_monitor_maps_cores_to_devices() -> None:
    report = parse_monitor_report(
        monitor_report([(7, "t", {0: 100.0, 3: 50.0})], devices=2, cores_per_device=2), 2)
    assert report.device_util_pct == {0: 50.0, 1: 25.0}
    assert report.processes[1] == ({7: 50.0}, {7})


def test_neuron_monitor_file_is_read_from_its_tail(tmp_path: Path) -> None:
    from joulestat.devices.neuron import read_monitor_file

    monitor = tmp_path / "neuron-monitor.jsonl"
    for pid in range(1, 400):  # a file far longer than the first tail read
        write_monitor(monitor, monitor_report([(pid, "", {0: 10.0})]))
    with open(monitor, "a") as handle:
        handle.write('{"neuron_runtime_data": [')  # a line still being written
    report = read_monitor_file(monitor, 1)
    assert report is not None and report.processes[0] == ({399: 10.0}, {399})


def test_amd_counter_reset_is_a_new_baseline(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeAmdsmi([FakeAmdGpu(accumulator=5_000_000)]).install(monkeypatch)
    sensor = open_amd(0.0, probe=lambda: fake.advance(0.5))
    fake.gpus[0].add_joules(100.0)
    assert sensor.read(1.0)[0].energy_j == pytest.approx(100.0, rel=1e-3)
    fake.gpus[0].accumulator = 10  # GPU reset: a new baseline, its second filled
    reset = sensor.read(2.0)[0]
    assert (reset.energy_j, reset.filled) == (pytest.approx(200.0, rel=1e-3), True)
    fake.gpus[0].add_joules(50.0)
    assert sensor.read(3.0)[0].energy_j == pytest.approx(250.0, rel=1e-3)
