"""What an NVIDIA GPU reports besides its energy: its power limit, SM clock and memory use.

Kept apart from :mod:`joulestat.devices.nvidia` because none of it is on the energy path: the
enforced power limit (``nvmlDeviceGetEnforcedPowerLimit``, mW) is read once at start for
the device info, and the SM clock (``nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM)``, MHz) and
memory in use (``nvmlDeviceGetMemoryInfo(h).used``, bytes) only when Prometheus scrapes.
A failed read leaves the figure out; it never fails the sensor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

from joulestat.devices.accelerator import DeviceState

log = logging.getLogger(__name__)

_NVML_ERROR_NOT_SUPPORTED = 3  # pynvml's NVML_ERROR_NOT_SUPPORTED
MHZ = 1e6


def power_limit_w(nvml: ModuleType, handle: Any) -> float | None:
    """The enforced power limit in W (NVML answers mW); None where NVML cannot say."""
    try:
        limit_mw = float(nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
    except (nvml.NVMLError, AttributeError) as exc:
        log.debug("no enforced power limit: %s", exc)
        return None
    return limit_mw / 1000.0 if limit_mw > 0 else None


def read_state(nvml: ModuleType, handle: Any, unsupported: set[str]) -> DeviceState:
    """SM clock in Hz and memory in use in bytes now. A call the GPU refuses with
    NOT_SUPPORTED is added to ``unsupported`` and not made again (a scrape should not pay
    for a refusal it already had); any other failure leaves the figure None this once."""
    clock_mhz = _call(nvml, handle, "clock", unsupported,
                      lambda h: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))
    memory = _call(nvml, handle, "memory", unsupported,
                   lambda h: nvml.nvmlDeviceGetMemoryInfo(h).used)
    return DeviceState(None if clock_mhz is None else clock_mhz * MHZ, memory)


def _call(nvml: ModuleType, handle: Any, what: str, unsupported: set[str],
          call: Callable[[Any], Any]) -> float | None:
    if what in unsupported:
        return None
    try:
        return float(call(handle))
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) == _NVML_ERROR_NOT_SUPPORTED:
            unsupported.add(what)
        log.debug("GPU %s not readable: %s", what, exc)
        return None
