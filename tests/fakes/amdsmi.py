"""A fake ``amdsmi`` module (ROCm's Python binding) with configurable GPUs.

Same function names, dict keys and units as amdsmi: ``amdsmi_get_energy_count`` returns
``energy_accumulator`` (or ``power`` with ``old_key=True``, as releases before 6.1 did)
and ``counter_resolution`` in µJ per count; ``amdsmi_get_power_info`` socket power in W
('N/A' where a part lacks it) and ``power_limit`` in µW; ``amdsmi_get_gpu_process_list``
dicts with ``pid`` and cumulative ``engine_usage.gfx`` ns; ``amdsmi_get_clock_info(h,
AmdSmiClkType.GFX)`` ``clk`` in MHz; ``amdsmi_get_gpu_vram_usage`` ``vram_used`` and
``vram_total`` in MiB. Errors are
``AmdSmiException`` (``AmdSmiLibraryException`` carries a code). ``advance(s)`` moves every
working counter by its power over ``s`` seconds; tests pass it as the start-up probe.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.module import FakeModule

FAKE_FUNCTIONS = (
    "amdsmi_init", "amdsmi_shut_down", "amdsmi_get_processor_handles",
    "amdsmi_get_gpu_device_uuid", "amdsmi_get_gpu_asic_info", "amdsmi_get_energy_count",
    "amdsmi_get_power_info", "amdsmi_get_gpu_process_list", "amdsmi_get_clock_info",
    "amdsmi_get_gpu_vram_usage",
)


class AmdSmiClkType:
    """amdsmi's clock type enum (the member used here)."""

    GFX = 0


class AmdSmiException(Exception):
    """Base of amdsmi's errors."""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, code: int) -> None:
        super().__init__(f"amdsmi error {code}")
        self.code = code

    def get_error_code(self) -> int:
        return self.code


@dataclass
class FakeAmdGpu:
    market_name: str = "AMD Instinct MI300X"
    uuid: str = "amd-0000"
    accumulator: int = 0  # counts
    resolution_uj: float = 15.3
    power_w: float | str = 300.0
    counter_works: bool = True  # False: the accumulator never moves (broken parts)
    old_key: bool = False
    fail: set[str] = field(default_factory=set)  # function names that raise
    processes: list[dict[str, Any]] = field(default_factory=list)
    power_limit_uw: int | str = 750_000_000
    gfx_clock_mhz: int | str = 2100
    vram_used_mib: int = 1024

    def add_joules(self, joules: float) -> None:
        self.accumulator += round(joules * 1e6 / self.resolution_uj)

    @property
    def energy_j(self) -> float:
        return self.accumulator * self.resolution_uj / 1e6


class FakeAmdsmi(FakeModule):
    MODULE_NAME = "amdsmi"

    def __init__(self, gpus: list[FakeAmdGpu] | None = None, *, init_fails: bool = False
                 ) -> None:
        self.gpus = list(gpus or [])
        self.init_fails = init_fails
        super().__init__()

    def advance(self, seconds: float) -> None:
        for gpu in self.gpus:
            if gpu.counter_works and isinstance(gpu.power_w, int | float):
                gpu.add_joules(gpu.power_w * seconds)

    def _gpu(self, handle: int, func: str) -> FakeAmdGpu:
        if handle >= len(self.gpus):
            raise AmdSmiLibraryException(8)  # device gone
        gpu = self.gpus[handle]
        if func in gpu.fail:
            raise AmdSmiLibraryException(2)
        return gpu

    def _build(self) -> types.ModuleType:
        mod = types.ModuleType("amdsmi")
        mod.AmdSmiException = AmdSmiException  # type: ignore[attr-defined]
        mod.AmdSmiLibraryException = AmdSmiLibraryException  # type: ignore[attr-defined]

        def amdsmi_init(*_flags: Any) -> None:
            if self.init_fails:
                raise AmdSmiLibraryException(1)

        def amdsmi_shut_down() -> None:
            self.shutdown_calls += 1

        def amdsmi_get_processor_handles() -> list[int]:
            return list(range(len(self.gpus)))

        def amdsmi_get_gpu_device_uuid(h: int) -> str:
            return self._gpu(h, "amdsmi_get_gpu_device_uuid").uuid

        def amdsmi_get_gpu_asic_info(h: int) -> dict[str, Any]:
            gpu = self._gpu(h, "amdsmi_get_gpu_asic_info")
            return {"market_name": gpu.market_name, "vendor_name": "Advanced Micro Devices"}

        def amdsmi_get_energy_count(h: int) -> dict[str, Any]:
            gpu = self._gpu(h, "amdsmi_get_energy_count")
            key = "power" if gpu.old_key else "energy_accumulator"
            return {key: gpu.accumulator, "counter_resolution": gpu.resolution_uj,
                    "timestamp": 0}

        def amdsmi_get_power_info(h: int) -> dict[str, Any]:
            gpu = self._gpu(h, "amdsmi_get_power_info")
            return {"current_socket_power": gpu.power_w, "average_socket_power": "N/A",
                    "power_limit": gpu.power_limit_uw}

        def amdsmi_get_gpu_process_list(h: int) -> list[dict[str, Any]]:
            return [dict(p) for p in self._gpu(h, "amdsmi_get_gpu_process_list").processes]

        def amdsmi_get_clock_info(h: int, clk_type: int) -> dict[str, Any]:
            gpu = self._gpu(h, "amdsmi_get_clock_info")
            if clk_type != AmdSmiClkType.GFX:
                raise AmdSmiLibraryException(2)
            return {"clk": gpu.gfx_clock_mhz, "min_clk": 500, "max_clk": 2100,
                    "clk_locked": False, "clk_deep_sleep": False}

        def amdsmi_get_gpu_vram_usage(h: int) -> dict[str, Any]:
            gpu = self._gpu(h, "amdsmi_get_gpu_vram_usage")
            return {"vram_total": 192 * 1024, "vram_used": gpu.vram_used_mib}

        mod.AmdSmiClkType = AmdSmiClkType  # type: ignore[attr-defined]
        for func in (amdsmi_init, amdsmi_shut_down, amdsmi_get_processor_handles,
                     amdsmi_get_gpu_device_uuid, amdsmi_get_gpu_asic_info,
                     amdsmi_get_energy_count, amdsmi_get_power_info,
                     amdsmi_get_gpu_process_list, amdsmi_get_clock_info,
                     amdsmi_get_gpu_vram_usage):
            setattr(mod, func.__name__, func)
        return mod
