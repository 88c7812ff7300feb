"""A fake ``pyhlml`` module (Intel Gaudi's HLML binding) with configurable devices.

Same names and units as pyhlml: ``hlmlDeviceGetTotalEnergyConsumption`` in mJ since the
driver loaded, ``hlmlDeviceGetPowerUsage`` and ``hlmlDeviceGetPowerManagementDefaultLimit``
in mW, errors ``HLMLError`` with ``.value``.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field

from tests.fakes.module import FakeModule

HLML_ERROR_NOT_SUPPORTED = 3
HLML_ERROR_UNKNOWN = 999
FAKE_FUNCTIONS = (
    "hlmlInit", "hlmlShutdown", "hlmlDeviceGetCount", "hlmlDeviceGetHandleByIndex",
    "hlmlDeviceGetName", "hlmlDeviceGetUUID", "hlmlDeviceGetTotalEnergyConsumption",
    "hlmlDeviceGetPowerUsage", "hlmlDeviceGetPowerManagementDefaultLimit",
)


class HLMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


@dataclass
class FakeHpu:
    name: str = "HL-225"
    uuid: str = "hl-0000"
    energy_mj: int | None = 0  # None: counter not supported
    power_mw: int = 200_000
    power_limit_mw: int = 600_000
    fail: set[str] = field(default_factory=set)


class FakeHlml(FakeModule):
    MODULE_NAME = "pyhlml"

    def __init__(self, hpus: list[FakeHpu] | None = None, *, init_fails: bool = False) -> None:
        self.hpus = list(hpus or [])
        self.init_fails = init_fails
        super().__init__()

    def _hpu(self, handle: int, func: str) -> FakeHpu:
        if handle >= len(self.hpus):
            raise HLMLError(HLML_ERROR_UNKNOWN)
        hpu = self.hpus[handle]
        if func in hpu.fail:
            raise HLMLError(HLML_ERROR_UNKNOWN)
        return hpu

    def _build(self) -> types.ModuleType:
        mod = types.ModuleType("pyhlml")
        mod.HLMLError = HLMLError  # type: ignore[attr-defined]

        def hlmlInit() -> None:
            if self.init_fails:
                raise HLMLError(HLML_ERROR_UNKNOWN)

        def hlmlShutdown() -> None:
            self.shutdown_calls += 1

        def hlmlDeviceGetCount() -> int:
            return len(self.hpus)

        def hlmlDeviceGetHandleByIndex(index: int) -> int:
            self._hpu(index, "hlmlDeviceGetHandleByIndex")
            return index

        def hlmlDeviceGetName(h: int) -> str:
            return self._hpu(h, "hlmlDeviceGetName").name

        def hlmlDeviceGetUUID(h: int) -> str:
            return self._hpu(h, "hlmlDeviceGetUUID").uuid

        def hlmlDeviceGetTotalEnergyConsumption(h: int) -> int:
            hpu = self._hpu(h, "hlmlDeviceGetTotalEnergyConsumption")
            if hpu.energy_mj is None:
                raise HLMLError(HLML_ERROR_NOT_SUPPORTED)
            return hpu.energy_mj

        def hlmlDeviceGetPowerUsage(h: int) -> int:
            return self._hpu(h, "hlmlDeviceGetPowerUsage").power_mw

        def hlmlDeviceGetPowerManagementDefaultLimit(h: int) -> int:
            return self._hpu(h, "hlmlDeviceGetPowerManagementDefaultLimit").power_limit_mw

        for func in (hlmlInit, hlmlShutdown, hlmlDeviceGetCount, hlmlDeviceGetHandleByIndex,
                     hlmlDeviceGetName, hlmlDeviceGetUUID, hlmlDeviceGetTotalEnergyConsumption,
                     hlmlDeviceGetPowerUsage, hlmlDeviceGetPowerManagementDefaultLimit):
            setattr(mod, func.__name__, func)
        return mod
