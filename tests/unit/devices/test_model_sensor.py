"""Estimator sensors on a fake /proc whose counters advance over simulated time."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulestat.devices.estimators import (
    DEVICE_NODE,
    CpuModelSensor,
    DramModelSensor,
    open_cpu_estimator,
    open_estimators,
)
from joulestat.devices.power_model import (
    METHOD_CCF_VCPU,
    METHOD_TDP_CURVE,
    build_cpu_model,
    load_power_models,
)
from joulestat.devices.sensor import SensorError
from tests.fakes.proc_stat import FakeProc

KNOWN_CPU = "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz"  # in CodeCarbon's table


def ccf_sensor(proc: FakeProc) -> CpuModelSensor:
    return CpuModelSensor(proc.root, build_cpu_model(METHOD_CCF_VCPU, proc.threads))


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path)


@pytest.fixture
def sensor(proc: FakeProc) -> CpuModelSensor:
    """A CCF vCPU sensor on ``proc``, its baseline read at t = 0 s."""
    sensor = ccf_sensor(proc)
    sensor.read(0.0)
    return sensor


def test_first_read_is_the_baseline(proc: FakeProc) -> None:
    proc.advance(500, load=0.9)  # history before the sensor opened must not count
    sensor = ccf_sensor(proc)
    [reading] = sensor.read(1000.0)
    assert (reading.component, reading.device, reading.energy_j) == ("cpu", DEVICE_NODE, 0.0)
    assert reading.source == "model:ccf-vcpu"


def test_energy_is_power_at_the_interval_load_times_elapsed(
        proc: FakeProc, sensor: CpuModelSensor) -> None:
    proc.advance(1.0, load=0.5)
    [reading] = sensor.read(1.0)
    assert sensor.last_load == pytest.approx(0.5)
    assert reading.energy_j == pytest.approx(sensor.model.power_w(0.5) * 1.0)


def test_a_late_tick_is_charged_for_the_real_elapsed_time(
        proc: FakeProc, sensor: CpuModelSensor) -> None:
    proc.advance(1.0, load=0.4)
    on_time_j = sensor.read(1.0)[0].energy_j
    proc.advance(3.0, load=0.4)  # the next tick came 3 s later, same load
    late_j = sensor.read(4.0)[0].energy_j - on_time_j
    assert on_time_j > 0
    assert late_j == pytest.approx(3 * on_time_j)


def test_load_follows_each_interval_not_the_history(
        proc: FakeProc, sensor: CpuModelSensor) -> None:
    proc.advance(2.0, load=1.0)
    busy_j = sensor.read(2.0)[0].energy_j
    proc.advance(2.0, load=0.0)
    idle_j = sensor.read(4.0)[0].energy_j - busy_j
    assert busy_j == pytest.approx(sensor.model.power_w(1.0) * 2)
    assert idle_j == pytest.approx(sensor.idle_power_w * 2)


def test_stolen_time_is_not_busy(proc: FakeProc, sensor: CpuModelSensor) -> None:
    proc.advance(1.0, load=1.0, steal=0.5)  # ran flat out half the time, stolen the rest
    sensor.read(1.0)
    assert sensor.last_load == pytest.approx(0.5)


def test_no_time_elapsed_adds_nothing(proc: FakeProc, sensor: CpuModelSensor) -> None:
    proc.advance(1.0, load=0.7)
    first = sensor.read(1.0)[0].energy_j
    assert sensor.read(1.0)[0].energy_j == first
    assert sensor.read(0.5)[0].energy_j == first


def test_interval_shorter_than_a_jiffy_reuses_the_last_load(
        proc: FakeProc, sensor: CpuModelSensor) -> None:
    proc.advance(1.0, load=0.8)
    before = sensor.read(1.0)[0].energy_j
    after = sensor.read(1.001)[0].energy_j  # /proc/stat unchanged
    assert after - before == pytest.approx(sensor.model.power_w(0.8) * 0.001)


def test_malformed_stat_is_a_sensor_error(tmp_path: Path, sensor: CpuModelSensor) -> None:
    (tmp_path / "stat").write_text("cpu  1 2 three 4\ncpu0 1 2 3 4\n")
    with pytest.raises(SensorError, match="stat"):
        sensor.read(1.0)


def test_dram_sensor_integrates_constant_power(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    proc.meminfo(8 * 1024 * 1024)  # 8 GiB
    sensor = DramModelSensor(tmp_path)
    expected_w = 8 * load_power_models().dram.w_per_gib
    assert sensor.power_w == pytest.approx(expected_w)
    assert sensor.idle_power_w == sensor.power_w
    assert sensor.read(100.0)[0].energy_j == 0.0
    [reading] = sensor.read(102.5)
    assert reading.energy_j == pytest.approx(expected_w * 2.5)
    assert (reading.component, reading.device, reading.source) == ("dram", DEVICE_NODE,
                                                                    "model:dram-gib")
    assert sensor.describe()[0].model == "8.00 GiB MemTotal"


def test_vm_gets_ccf_vcpu_even_for_a_cpu_in_the_table(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path, threads=2)
    proc.cpuinfo(KNOWN_CPU, vm=True)
    proc.meminfo(4 * 1024 * 1024)
    cpu, dram = open_estimators(tmp_path)
    assert cpu.describe()[0].source == "model:ccf-vcpu"
    assert cpu.describe()[0].model == KNOWN_CPU
    aws = load_power_models().vcpu["aws"]
    assert cpu.idle_power_w == pytest.approx(2 * aws.min_w)
    assert dram.describe()[0].component == "dram"


def test_bare_metal_known_cpu_gets_the_tdp_curve_per_socket(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path, threads=8)
    proc.cpuinfo(KNOWN_CPU, vm=False, sockets=2)
    sensor = open_cpu_estimator(tmp_path)
    assert sensor.model.method == METHOD_TDP_CURVE
    assert sensor.model.sockets == 2
    tdp_w = sensor.model.tdp_w
    assert tdp_w is not None and tdp_w > 0
    curve = load_power_models().tdp_curve
    assert sensor.idle_power_w == pytest.approx(2 * tdp_w * curve.ratio(0.0))


def test_bare_metal_unknown_cpu_falls_back_to_per_thread(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path, threads=6)
    proc.cpuinfo("Mystery Silicon 1", vm=False)
    sensor = open_cpu_estimator(tmp_path, cloud="gcp")
    assert sensor.source == "model:ccf-vcpu"
    assert sensor.idle_power_w == pytest.approx(6 * load_power_models().vcpu["gcp"].min_w)


def test_cpu_model_override_wins(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    proc.cpuinfo("Mystery Silicon 1", vm=False)
    sensor = open_cpu_estimator(tmp_path, cpu_model_override=KNOWN_CPU)
    assert sensor.cpu_name == KNOWN_CPU
    assert sensor.model.method == METHOD_TDP_CURVE


def test_missing_meminfo_leaves_out_only_dram(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    proc.cpuinfo("Mystery Silicon 1", vm=True)
    sensors = open_estimators(tmp_path)
    assert [s.describe()[0].component for s in sensors] == ["cpu"]


def test_missing_stat_cannot_open_the_cpu_estimator(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text("model name\t: X 1\nflags\t: fpu\n")
    with pytest.raises(SensorError, match="CPU estimator"):
        open_estimators(tmp_path)
