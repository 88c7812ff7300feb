"""Power limits, clocks and memory in use: read once at start (limits) or at a scrape
(clock, memory), never on the tick, and exported as the node's device gauges."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from joulestat.core.records import NodeInfo
from joulestat.devices.accelerator import combined_device_state
from joulestat.devices.amd import AmdSensor, open_amd
from joulestat.devices.gaudi import GaudiSensor, open_gaudi
from joulestat.devices.nvidia import NvidiaSensor, open_nvidia
from joulestat.devices.sensor import DeviceState
from joulestat.outputs.prometheus import NodeMetrics, make_registry
from tests.fakes.amdsmi import FakeAmdGpu, FakeAmdsmi
from tests.fakes.hlml import FakeHlml, FakeHpu
from tests.fakes.nvml import NVML_ERROR_GPU_IS_LOST, FakeGpu, FakeNvml

GPU0 = ("accelerator", "gpu0")
STATE_CALLS = ("nvmlDeviceGetClockInfo", "nvmlDeviceGetMemoryInfo")


def _nvidia(monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu]
            ) -> tuple[FakeNvml, NvidiaSensor]:
    fake = FakeNvml(gpus).install(monkeypatch)
    sensor = open_nvidia(now_s=0.0)
    assert sensor is not None
    return fake, sensor


def test_nvidia_power_limit_is_device_info_and_state_is_read_off_the_tick(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake, sensor = _nvidia(monkeypatch, [
        FakeGpu(uuid="GPU-a", name="Tesla T4", power_limit_mw=70_000, sm_clock_mhz=1590,
                memory_used_bytes=3 * 2**30),
        FakeGpu(uuid="GPU-b", power_limit_mw=None, sm_clock_mhz=None,
                memory_used_bytes=None)])
    assert [d.power_limit_w for d in sensor.describe()] == [70.0, None]
    assert sensor.capabilities.live_state
    for t in (1.0, 2.0, 3.0):  # ticks: energy and processes only
        sensor.read(t)
        sensor.device_processes()
    assert not any(fake.calls.get(name) for name in STATE_CALLS)
    states = sensor.device_state()
    assert states == {GPU0: DeviceState(1590e6, 3 * 2**30),
                      ("accelerator", "gpu1"): DeviceState(None, None)}
    asked = dict(fake.calls)
    sensor.device_state()
    # GPU-b refused both with NOT_SUPPORTED: asked once, never again; GPU-a each time
    assert {n: fake.calls[n] - asked[n] for n in STATE_CALLS} == dict.fromkeys(STATE_CALLS, 1)
    sensor.close()
    assert sensor.device_state() == {}


def test_nvidia_state_failing_leaves_the_figure_out_and_heals(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(sm_clock_mhz=1410, memory_used_bytes=2**20)
    _fake, sensor = _nvidia(monkeypatch, [gpu])
    gpu.fail["nvmlDeviceGetClockInfo"] = NVML_ERROR_GPU_IS_LOST
    assert sensor.device_state()[GPU0] == DeviceState(None, 2**20)
    del gpu.fail["nvmlDeviceGetClockInfo"]  # not NOT_SUPPORTED: asked again next scrape
    assert sensor.device_state()[GPU0] == DeviceState(1410e6, 2**20)


def test_amd_and_gaudi_limits_and_amd_state(monkeypatch: pytest.MonkeyPatch) -> None:
    amd = FakeAmdsmi([FakeAmdGpu(uuid="a", gfx_clock_mhz=1700, vram_used_mib=2048),
                      FakeAmdGpu(uuid="b", power_limit_uw="N/A")]).install(monkeypatch)
    sensor = open_amd(0.0, probe=lambda: amd.advance(0.5))
    assert isinstance(sensor, AmdSensor) and sensor.capabilities.live_state
    assert [d.power_limit_w for d in sensor.describe()] == [750.0, None]
    assert sensor.device_state() == {
        ("accelerator", "amdgpu0"): DeviceState(1700e6, 2048 * 2**20),
        ("accelerator", "amdgpu1"): DeviceState(2100e6, 1024 * 2**20)}
    amd.gpus[1].fail.add("amdsmi_get_gpu_vram_usage")
    assert set(sensor.device_state()) == {("accelerator", "amdgpu0")}
    FakeHlml([FakeHpu(power_limit_mw=550_000)]).install(monkeypatch)
    gaudi = open_gaudi(0.0)
    assert isinstance(gaudi, GaudiSensor) and not gaudi.capabilities.live_state
    assert [d.power_limit_w for d in gaudi.describe()] == [550.0]
    assert gaudi.device_state() == {}


def test_the_scrape_exports_limits_clocks_and_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake, sensor = _nvidia(monkeypatch, [FakeGpu(name="Tesla T4", power_limit_mw=70_000,
                                                  sm_clock_mhz=585, memory_used_bytes=512)])
    state = combined_device_state([sensor])
    assert state is not None
    metrics = NodeMetrics(NodeInfo("n1", "g4dn.xlarge", "us-east-1", "Xeon", "0"), {},
                          device_state=state)
    metrics.describe_devices(sensor.describe())
    text = generate_latest(make_registry(metrics)).decode()
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for family in text_string_to_metric_families(text) for s in family.samples}
    labels = (("component", "accelerator"), ("device", "gpu0"))
    assert found[("joulestat_node_device_power_limit_watts", labels)] == 70.0
    assert found[("joulestat_node_device_clock_hertz", labels)] == 585e6
    assert found[("joulestat_node_device_memory_used_bytes", labels)] == 512.0

    def broken() -> dict:
        raise RuntimeError("driver gone")

    quiet = NodeMetrics(NodeInfo("n1", "", "", "", "0"), {}, device_state=broken)
    assert b"joulestat_node_device_clock_hertz" in generate_latest(make_registry(quiet))


def test_a_scrape_of_eight_gpus_reads_each_state_once_a_gpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What a scrape asks the driver: each GPU's state calls once, whatever the number of
    scrapes before it (nothing accumulates), and never a call the tick makes. Counted,
    not timed: a timing would say more about the machine than about the code."""
    fake, sensor = _nvidia(monkeypatch, [FakeGpu(uuid=f"GPU-{i}") for i in range(8)])
    sensor.device_state()
    fake.calls.clear()
    sensor.device_state()
    once = dict(fake.calls)
    assert once and all(count == 8 for count in once.values()), once
    for _ in range(99):
        sensor.device_state()
    assert fake.calls == {name: 100 * 8 for name in once}
    assert not {"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage"} & set(once)
