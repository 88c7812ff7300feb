"""A fake ``pynvml`` module with configurable GPUs, for tests on machines without NVIDIA.

It exposes the same function names, argument shapes, units and error type as
nvidia-ml-py (``NVMLError(value)`` with a ``.value`` code; the codes below have the same
numbers as in pynvml). ``FAKE_FUNCTIONS`` lists what it implements so a test can check
every name still exists in the real package, and ``FAKE_STRUCT_FIELDS`` the attributes its
process and utilisation objects carry, for the same check against pynvml's ctypes structs.
As in pynvml, ``NVMLError(code)`` builds the matching subclass where the fake has one
(``NVMLError(NVML_ERROR_NOT_FOUND)`` is an ``NVMLError_NotFound``).

Install with ``FakeNvml(...).install(monkeypatch)``, which puts the module in
``sys.modules["pynvml"]`` for the duration of the test.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.module import FakeModule

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

_ERROR_TEXT = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}

FAKE_FUNCTIONS = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetAttributes",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMemoryInfo",
)
NVML_CLOCK_SM = 1  # pynvml's clock type of the SM clock
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1

# pynvml ctypes struct -> the fields the fake's objects of that kind carry.
FAKE_STRUCT_FIELDS = {
    "c_nvmlProcessInfo_t": ("pid", "usedGpuMemory"),
    "c_nvmlProcessUtilizationSample_t": ("pid", "timeStamp", "smUtil", "memUtil"),
    "c_nvmlDeviceAttributes": ("gpuInstanceSliceCount",),
    "c_nvmlMemory_t": ("total", "free", "used"),
}


class NVMLError(Exception):
    """Same shape as pynvml.NVMLError: constructed from an error code kept in ``.value``."""

    def __new__(cls, value: int) -> NVMLError:
        # pynvml maps a code to its NVMLError_<Name> subclass at construction.
        subclass = _SUBCLASSES.get(value) if cls is NVMLError else None
        return Exception.__new__(subclass or cls)

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _ERROR_TEXT.get(self.value, f"NVML Error with code {self.value}")


class NVMLError_NotFound(NVMLError):
    """What nvmlDeviceGetProcessUtilization raises when no sample is newer than asked."""


_SUBCLASSES: dict[int, type[NVMLError]] = {NVML_ERROR_NOT_FOUND: NVMLError_NotFound}


@dataclass(frozen=True)
class FakeProcessInfo:
    """An entry of nvmlDeviceGet{Compute,Graphics}RunningProcesses."""

    pid: int
    usedGpuMemory: int = 0  # pynvml's field name


@dataclass(frozen=True)
class FakeUtilSample:
    """An entry of nvmlDeviceGetProcessUtilization; ``timeStamp`` in µs."""

    pid: int
    timeStamp: int  # pynvml's field name
    smUtil: int
    memUtil: int = 0


@dataclass(frozen=True)
class FakeDeviceAttributes:
    """What nvmlDeviceGetAttributes returns for a MIG device (the one field used)."""

    gpuInstanceSliceCount: int  # pynvml's field name


@dataclass(frozen=True)
class FakeMemory:
    """What nvmlDeviceGetMemoryInfo returns (bytes), pynvml's c_nvmlMemory_t fields."""

    total: int
    free: int
    used: int


@dataclass
class FakeMigInstance:
    """A MIG instance: its size in GPU slices (1g, 2g, 3g, 4g, 7g) and its processes."""

    slices: int
    compute_pids: list[int] = field(default_factory=list)


@dataclass
class FakeGpu:
    """One device. ``energy_mj=None`` means no energy counter (pre-Volta): NOT_SUPPORTED.

    ``fail`` maps a function name to the error code it raises for this device; tests
    change it between reads to break and heal a device.
    """

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    energy_mj: int | None = 0
    power_mw: int = 100_000
    fail: dict[str, int] = field(default_factory=dict)
    compute_pids: list[int] = field(default_factory=list)
    graphics_pids: list[int] = field(default_factory=list)
    # Every sample the driver holds; a call returns those newer than its timestamp
    # (all of them when ``util_ignores_timestamp``, as some drivers do), or NOT_FOUND.
    util_samples: list[FakeUtilSample] = field(default_factory=list)
    util_ignores_timestamp: bool = False
    util_asked_us: list[int] = field(default_factory=list)  # timestamps passed, in order
    # None: no MIG (mode disabled). A list: MIG enabled, one slot per entry (None: empty).
    mig_instances: list[FakeMigInstance | None] | None = None
    # Device info and state; None: the call answers NOT_SUPPORTED.
    power_limit_mw: int | None = 700_000
    sm_clock_mhz: int | None = 1980
    memory_total_bytes: int = 80 * 2**30
    memory_used_bytes: int | None = 0


@dataclass
class _Handle:
    index: int
    mig: int | None = None  # a MIG device's slot on its parent GPU


class FakeNvml(FakeModule):
    """Builds the fake module over a list of GPUs and records init/shutdown calls."""

    MODULE_NAME = "pynvml"

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        init_error: int | None = None,
        init_oserror: bool = False,
        bytes_strings: bool = False,
    ) -> None:
        self.gpus = list(gpus or [])
        self.init_error = init_error
        self.init_oserror = init_oserror
        self.bytes_strings = bytes_strings
        self.init_calls = 0
        self.initialised = False
        self.calls: dict[str, int] = {}  # device function name -> calls, for cost checks
        super().__init__()

    def _gpu(self, handle: Any, func: str) -> FakeGpu:
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        self.calls[func] = self.calls.get(func, 0) + 1
        gpu = self.gpus[handle.index]
        if func in gpu.fail:
            raise NVMLError(gpu.fail[func])
        return gpu

    def _string(self, text: str) -> str | bytes:
        return text.encode() if self.bytes_strings else text

    def _build(self) -> types.ModuleType:
        mod = types.ModuleType("pynvml")
        mod.NVMLError = NVMLError  # type: ignore[attr-defined]
        for code_name, code in list(globals().items()):
            if code_name.startswith(("NVML_ERROR_", "NVML_SUCCESS")):
                setattr(mod, code_name, code)

        def nvmlInit() -> None:
            self.init_calls += 1
            if self.init_oserror:
                raise OSError("libnvidia-ml.so.1: cannot open shared object file")
            if self.init_error is not None:
                raise NVMLError(self.init_error)
            self.initialised = True

        def nvmlShutdown() -> None:
            if not self.initialised:
                raise NVMLError(NVML_ERROR_UNINITIALIZED)
            self.shutdown_calls += 1
            self.initialised = False

        def nvmlDeviceGetCount() -> int:
            if not self.initialised:
                raise NVMLError(NVML_ERROR_UNINITIALIZED)
            return len(self.gpus)

        def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
            if not self.initialised:
                raise NVMLError(NVML_ERROR_UNINITIALIZED)
            self._gpu(_Handle(index), "nvmlDeviceGetHandleByIndex")
            return _Handle(index)

        def nvmlDeviceGetUUID(handle: _Handle) -> str | bytes:
            return self._string(self._gpu(handle, "nvmlDeviceGetUUID").uuid)

        def nvmlDeviceGetName(handle: _Handle) -> str | bytes:
            return self._string(self._gpu(handle, "nvmlDeviceGetName").name)

        def nvmlDeviceGetTotalEnergyConsumption(handle: _Handle) -> int:
            gpu = self._gpu(handle, "nvmlDeviceGetTotalEnergyConsumption")
            if gpu.energy_mj is None:
                raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
            return gpu.energy_mj

        def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:
            return self._gpu(handle, "nvmlDeviceGetPowerUsage").power_mw

        def nvmlDeviceGetComputeRunningProcesses(handle: _Handle) -> list[FakeProcessInfo]:
            gpu = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses")
            if handle.mig is not None:
                instance = (gpu.mig_instances or [])[handle.mig]
                return [FakeProcessInfo(pid) for pid in instance.compute_pids]
            return [FakeProcessInfo(pid) for pid in gpu.compute_pids]

        def nvmlDeviceGetMigMode(handle: _Handle) -> tuple[int, int]:
            gpu = self._gpu(handle, "nvmlDeviceGetMigMode")
            mode = NVML_DEVICE_MIG_DISABLE if gpu.mig_instances is None else NVML_DEVICE_MIG_ENABLE
            return mode, mode

        def nvmlDeviceGetMaxMigDeviceCount(handle: _Handle) -> int:
            return len(self._gpu(handle, "nvmlDeviceGetMaxMigDeviceCount").mig_instances or [])

        def nvmlDeviceGetMigDeviceHandleByIndex(handle: _Handle, index: int) -> _Handle:
            gpu = self._gpu(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
            if (gpu.mig_instances or [None] * (index + 1))[index] is None:
                raise NVMLError(NVML_ERROR_NOT_FOUND)
            return _Handle(handle.index, index)

        def nvmlDeviceGetAttributes(handle: _Handle) -> FakeDeviceAttributes:
            gpu = self._gpu(handle, "nvmlDeviceGetAttributes")
            instance = (gpu.mig_instances or [])[handle.mig or 0]
            return FakeDeviceAttributes(instance.slices)

        def nvmlDeviceGetGraphicsRunningProcesses(handle: _Handle) -> list[FakeProcessInfo]:
            gpu = self._gpu(handle, "nvmlDeviceGetGraphicsRunningProcesses")
            return [FakeProcessInfo(pid) for pid in gpu.graphics_pids]

        def nvmlDeviceGetProcessUtilization(handle: _Handle, timeStamp: int
                                            ) -> list[FakeUtilSample]:
            gpu = self._gpu(handle, "nvmlDeviceGetProcessUtilization")
            gpu.util_asked_us.append(timeStamp)
            samples = [s for s in gpu.util_samples
                       if gpu.util_ignores_timestamp or s.timeStamp > timeStamp]
            if not samples:
                raise NVMLError(NVML_ERROR_NOT_FOUND)
            return samples

        def nvmlDeviceGetEnforcedPowerLimit(handle: _Handle) -> int:
            gpu = self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit")
            if gpu.power_limit_mw is None:
                raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
            return gpu.power_limit_mw

        def nvmlDeviceGetClockInfo(handle: _Handle, type: int) -> int:  # noqa: A002
            gpu = self._gpu(handle, "nvmlDeviceGetClockInfo")
            if gpu.sm_clock_mhz is None or type != NVML_CLOCK_SM:
                raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
            return gpu.sm_clock_mhz

        def nvmlDeviceGetMemoryInfo(handle: _Handle) -> FakeMemory:
            gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
            if gpu.memory_used_bytes is None:
                raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
            return FakeMemory(gpu.memory_total_bytes,
                              gpu.memory_total_bytes - gpu.memory_used_bytes,
                              gpu.memory_used_bytes)

        mod.NVML_CLOCK_SM = NVML_CLOCK_SM  # type: ignore[attr-defined]
        mod.NVMLError_NotFound = NVMLError_NotFound  # type: ignore[attr-defined]
        for func in (nvmlInit, nvmlShutdown, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex,
                     nvmlDeviceGetUUID, nvmlDeviceGetName, nvmlDeviceGetTotalEnergyConsumption,
                     nvmlDeviceGetPowerUsage, nvmlDeviceGetComputeRunningProcesses,
                     nvmlDeviceGetGraphicsRunningProcesses, nvmlDeviceGetProcessUtilization,
                     nvmlDeviceGetMigMode, nvmlDeviceGetMaxMigDeviceCount,
                     nvmlDeviceGetMigDeviceHandleByIndex, nvmlDeviceGetAttributes,
                     nvmlDeviceGetEnforcedPowerLimit, nvmlDeviceGetClockInfo,
                     nvmlDeviceGetMemoryInfo):
            setattr(mod, func.__name__, func)
        return mod
