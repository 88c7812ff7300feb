"""NVIDIA sensor against a fake pynvml: energy path, power path, failures, old bindings."""

from __future__ import annotations

import dataclasses
import logging
import math
import sys

import pytest

from joulestat.devices.nvidia import open_nvidia
from tests.fakes import nvml as fake
from tests.fakes.nvml import FakeGpu, FakeNvml, FakeUtilSample

LOGGER = "joulestat.devices.nvidia"


def _logged(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno >= level]


def test_fake_matches_the_real_pynvml_api() -> None:
    """Every function and error code the fake offers exists, with that value, in pynvml."""
    import pynvml as real

    for name in fake.FAKE_FUNCTIONS:
        assert callable(getattr(real, name)), name
    for code in ("NOT_SUPPORTED", "GPU_IS_LOST", "LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED",
                 "NOT_FOUND"):
        assert getattr(real, f"NVML_ERROR_{code}") == getattr(fake, f"NVML_ERROR_{code}")
    assert real.NVML_SUCCESS == fake.NVML_SUCCESS
    assert real.NVML_DEVICE_MIG_ENABLE == fake.NVML_DEVICE_MIG_ENABLE
    assert issubclass(real.NVMLError, Exception)
    # NVMLError(code) builds the code's subclass in both; the sensor relies on .value
    for module in (real, fake):
        err = module.NVMLError(module.NVML_ERROR_NOT_FOUND)
        assert type(err) is module.NVMLError_NotFound and isinstance(err, module.NVMLError)
        assert err.value == module.NVML_ERROR_NOT_FOUND
    for struct, fields in fake.FAKE_STRUCT_FIELDS.items():
        real_fields = {name for name, _ in getattr(real, struct)._fields_}
        assert set(fields) <= real_fields, (struct, set(fields) - real_fields)
    assert {f.name for f in dataclasses.fields(fake.FakeProcessInfo)} == set(
        fake.FAKE_STRUCT_FIELDS["c_nvmlProcessInfo_t"])
    assert {f.name for f in dataclasses.fields(fake.FakeUtilSample)} == set(
        fake.FAKE_STRUCT_FIELDS["c_nvmlProcessUtilizationSample_t"])


def test_energy_counter_path(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = [FakeGpu(uuid="GPU-a", energy_mj=5_000_000), FakeGpu(uuid="GPU-b", energy_mj=0)]
    nvml = FakeNvml(gpus).install(monkeypatch)
    sensor = open_nvidia(now_s=0.0)
    assert sensor is not None
    infos = sensor.describe()
    assert [(d.device, d.uuid, d.index, d.source) for d in infos] == [
        ("gpu0", "GPU-a", 0, "nvml_energy"), ("gpu1", "GPU-b", 1, "nvml_energy"),
    ]
    assert infos[0].model == "NVIDIA H100 80GB HBM3" and infos[0].component == "accelerator"
    gpus[0].energy_mj = 5_000_000 + 350_250  # 350.25 J since open
    gpus[1].energy_mj = 700_000
    gpus[0].power_mw = 999_999  # ignored on this path
    readings = sensor.read(1.0)
    assert [(r.component, r.device, r.source) for r in readings] == [
        ("accelerator", "gpu0", "nvml_energy"), ("accelerator", "gpu1", "nvml_energy"),
    ]
    assert readings[0].energy_j == pytest.approx(350.25)
    assert readings[1].energy_j == pytest.approx(700.0)
    sensor.close()
    sensor.close()  # idempotent
    assert nvml.shutdown_calls == 1


def test_energy_counter_reset_restarts_without_losing_the_total(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpus = [FakeGpu(energy_mj=1_000_000)]
    FakeNvml(gpus).install(monkeypatch)
    sensor = open_nvidia(now_s=0.0)
    assert sensor is not None
    gpus[0].energy_mj = 1_100_000
    assert sensor.read(1.0)[0].energy_j == pytest.approx(100.0)
    gpus[0].energy_mj = 20_000  # driver reloaded: a new baseline, the second filled
    reset = sensor.read(2.0)[0]
    assert (reset.energy_j, reset.filled, reset.source) == (pytest.approx(200.0), True,
                                                            "nvml_energy")
    gpus[0].energy_mj = 50_000
    assert sensor.read(3.0)[0].energy_j == pytest.approx(230.0)


def test_power_path_integrates_accurately(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pre-Volta GPU: a 250 +- 100 W sine sampled every 0.1 s for 60 s, within 0.1 %."""
    gpus = [FakeGpu(energy_mj=None, power_mw=250_000)]
    FakeNvml(gpus).install(monkeypatch)

    def power_w(t: float) -> float:
        return 250.0 + 100.0 * math.sin(t)

    sensor = open_nvidia(now_s=10.0)
    assert sensor is not None
    assert sensor.describe()[0].source == "nvml_power"
    dt, steps = 0.1, 600
    for i in range(1, steps + 1):
        t = i * dt
        gpus[0].power_mw = round(power_w(t) * 1000)
        reading = sensor.read(10.0 + t)[0]
    truth_j = 250.0 * 60.0 + 100.0 * (1.0 - math.cos(60.0))
    assert reading.source == "nvml_power"
    assert reading.energy_j == pytest.approx(truth_j, rel=1e-3)


def test_power_path_uses_real_elapsed_time_and_trapezoid(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = [FakeGpu(energy_mj=None, power_mw=100_000)]
    FakeNvml(gpus).install(monkeypatch)
    sensor = open_nvidia(now_s=0.0)
    assert sensor is not None
    gpus[0].power_mw = 300_000
    assert sensor.read(2.0)[0].energy_j == pytest.approx(400.0)  # (100 + 300) / 2 * 2 s
    assert sensor.read(2.5)[0].energy_j == pytest.approx(550.0)  # + 300 W * 0.5 s


def test_no_driver_returns_none_silently(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    for nvml in (FakeNvml(init_error=fake.NVML_ERROR_LIBRARY_NOT_FOUND),
                 FakeNvml(init_error=fake.NVML_ERROR_DRIVER_NOT_LOADED),
                 FakeNvml(init_oserror=True)):
        nvml.install(monkeypatch)
        assert open_nvidia(now_s=0.0) is None
        assert nvml.init_calls == 1
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the package itself is missing
    assert open_nvidia(now_s=0.0) is None
    assert _logged(caplog, logging.DEBUG)
    assert not _logged(caplog, logging.INFO)


def test_driver_without_gpus_returns_none_and_shuts_down(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml([]).install(monkeypatch)
    assert open_nvidia(now_s=0.0) is None
    assert nvml.shutdown_calls == 1


def test_per_device_error_does_not_stop_others_and_logs_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gpus = [FakeGpu(uuid="GPU-a", energy_mj=0), FakeGpu(uuid="GPU-b", energy_mj=0)]
    FakeNvml(gpus).install(monkeypatch)
    sensor = open_nvidia(now_s=0.0)
    assert sensor is not None
    gpus[0].fail["nvmlDeviceGetTotalEnergyConsumption"] = fake.NVML_ERROR_GPU_IS_LOST
    for tick in (1, 2, 3):
        gpus[0].energy_mj = tick * 10_000
        gpus[1].energy_mj = tick * 20_000
        readings = sensor.read(float(tick))
        # No power known yet to fill with: 0 J, said to be filled, never a measured 0.
        assert readings[0].energy_j == 0.0 and readings[0].filled
        assert readings[1].energy_j == pytest.approx(tick * 20.0) and not readings[1].filled
    warnings = _logged(caplog, logging.WARNING)
    assert len(warnings) == 1 and "GPU is lost" in warnings[0].getMessage()
    del gpus[0].fail["nvmlDeviceGetTotalEnergyConsumption"]
    gpus[0].energy_mj = 40_000
    gpus[1].energy_mj = 80_000
    assert sensor.read(4.0)[0].energy_j == pytest.approx(40.0)
    ended = _logged(caplog, logging.WARNING)[-1].getMessage()
    assert len(_logged(caplog, logging.WARNING)) == 2 and "unreadable from" in ended
    gpus[0].fail["nvmlDeviceGetTotalEnergyConsumption"] = fake.NVML_ERROR_UNKNOWN
    gpus[1].energy_mj = 100_000
    sensor.read(5.0)
    warnings = _logged(caplog, logging.WARNING)
    assert len(warnings) == 3 and "Unknown Error" in warnings[-1].getMessage()  # a new one
    assert sensor.faults_total()["unreadable"] == 2


def test_unmeasurable_device_is_skipped_others_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = FakeGpu(uuid="GPU-x", energy_mj=None,
                     fail={"nvmlDeviceGetPowerUsage": fake.NVML_ERROR_NOT_SUPPORTED})
    FakeNvml([broken, FakeGpu(uuid="GPU-ok")]).install(monkeypatch)
    sensor = open_nvidia(now_s=0.0)
    assert sensor is not None
    assert [(d.device, d.uuid) for d in sensor.describe()] == [("gpu1", "GPU-ok")]


def test_bytes_names_and_uuids_from_old_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([FakeGpu(name="Tesla V100-SXM2-16GB", uuid="GPU-v100")],
             bytes_strings=True).install(monkeypatch)
    sensor = open_nvidia(now_s=0.0)
    assert sensor is not None
    info = sensor.describe()[0]
    assert info.model == "Tesla V100-SXM2-16GB" and info.uuid == "GPU-v100"
    assert isinstance(info.model, str) and isinstance(info.uuid, str)


def test_device_processes_reports_contexts_and_mean_sm_utilisation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    busy = FakeGpu(uuid="GPU-a", compute_pids=[10, 11], graphics_pids=[12, 10], util_samples=[
        FakeUtilSample(pid=10, timeStamp=1_000, smUtil=40),
        FakeUtilSample(pid=11, timeStamp=1_500, smUtil=10),
        FakeUtilSample(pid=10, timeStamp=2_000, smUtil=60),
    ])
    idle = FakeGpu(uuid="GPU-b", energy_mj=None)  # power-path GPUs are asked too
    FakeNvml([busy, idle]).install(monkeypatch)
    sensor = open_nvidia(now_s=0.0)
    assert sensor is not None
    assert sensor.device_processes() == {
        ("accelerator", "gpu0"): ({10: 50.0, 11: 10.0}, {10, 11, 12}),
        ("accelerator", "gpu1"): ({}, set()),  # NOT_FOUND: no samples, no failure
    }
    # nothing newer than 2000 µs: no utilisation, the context holders still reported
    busy.compute_pids.remove(11)
    assert sensor.device_processes()[("accelerator", "gpu0")] == ({}, {10, 12})
    busy.util_samples.append(FakeUtilSample(pid=12, timeStamp=3_000, smUtil=90))
    assert sensor.device_processes()[("accelerator", "gpu0")] == ({12: 90.0}, {10, 12})
    assert busy.util_asked_us == [0, 2_000, 2_000]
    assert idle.util_asked_us == [0, 0, 0]


def test_device_processes_drops_samples_older_than_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver that returns its whole buffer must not have old samples counted again."""
    gpu = FakeGpu(util_ignores_timestamp=True, compute_pids=[7],
                  util_samples=[FakeUtilSample(pid=7, timeStamp=100, smUtil=80)])
    FakeNvml([gpu]).install(monkeypatch)
    sensor = open_nvidia(now_s=0.0)
    assert sensor is not None
    assert sensor.device_processes()[("accelerator", "gpu0")] == ({7: 80.0}, {7})
    assert sensor.device_processes()[("accelerator", "gpu0")] == ({}, {7})
    gpu.util_samples.append(FakeUtilSample(pid=7, timeStamp=200, smUtil=20))
    assert sensor.device_processes()[("accelerator", "gpu0")] == ({7: 20.0}, {7})


def test_device_processes_skips_a_failing_device_and_logs_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    gpus = [FakeGpu(uuid="GPU-a", compute_pids=[1]), FakeGpu(uuid="GPU-b", compute_pids=[2])]
    FakeNvml(gpus).install(monkeypatch)
    sensor = open_nvidia(now_s=0.0)
    assert sensor is not None
    gpus[0].fail["nvmlDeviceGetGraphicsRunningProcesses"] = fake.NVML_ERROR_GPU_IS_LOST
    for _ in range(3):
        assert sensor.device_processes() == {("accelerator", "gpu1"): ({}, {2})}
    warnings = _logged(caplog, logging.WARNING)
    assert len(warnings) == 1 and "GPU is lost" in warnings[0].getMessage()
    del gpus[0].fail["nvmlDeviceGetGraphicsRunningProcesses"]
    gpus[1].fail["nvmlDeviceGetProcessUtilization"] = fake.NVML_ERROR_UNKNOWN
    assert sensor.device_processes() == {("accelerator", "gpu0"): ({}, {1})}
    assert len(_logged(caplog, logging.WARNING)) == 2
    assert any("work again" in r.getMessage() for r in _logged(caplog, logging.INFO))


def test_device_processes_without_utilisation_support_still_lists_pids(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    gpu = FakeGpu(compute_pids=[5], fail={
        "nvmlDeviceGetProcessUtilization": fake.NVML_ERROR_NOT_SUPPORTED})
    FakeNvml([gpu]).install(monkeypatch)
    sensor = open_nvidia(now_s=0.0)
    assert sensor is not None
    for _ in range(2):
        assert sensor.device_processes() == {("accelerator", "gpu0"): ({}, {5})}
    assert not _logged(caplog, logging.WARNING)
    assert sum("not supported" in r.getMessage() for r in _logged(caplog, logging.INFO)) == 1
