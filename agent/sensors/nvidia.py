"""NVIDIA GPU energy through NVML (the ``nvidia-ml-py`` distribution, imported as ``pynvml``).

The real path: ``pynvml.nvmlInit()`` loads ``libnvidia-ml.so.1`` (installed with the
driver) and fails with ``NVMLError`` (``NVML_ERROR_LIBRARY_NOT_FOUND``,
``NVML_ERROR_DRIVER_NOT_LOADED``) on machines without one, which is the normal case on CPU
nodes, so that is a debug line, not a warning. Then, per device index from
``nvmlDeviceGetCount()``: ``nvmlDeviceGetHandleByIndex(i)``, ``nvmlDeviceGetUUID(h)``,
``nvmlDeviceGetName(h)`` (bytes in older pynvml releases, str in newer ones: both are
accepted), and one of two measurements:

* ``nvmlDeviceGetTotalEnergyConsumption(h)``: mJ since the driver loaded, Volta and newer.
  Preferred: it integrates in hardware, whereas the power reading on A100/H100 samples
  only part of the time (Yang et al., SC24). Provenance ``nvml_energy``.
* ``nvmlDeviceGetPowerUsage(h)``: mW, used when the energy counter is not supported.
  Integrated here with the trapezoid rule over the monotonic ``now_s`` of successive
  reads. Provenance ``nvml_power``. Its accuracy is bounded by the tick interval.

A device whose call fails in one tick keeps its last cumulative value (logged once per
device and error until it recovers); the other devices go on. After a failed tick the
power path integrates straight across the gap from the last good sample, which assumes
power moved linearly between them. ``close()`` calls ``nvmlShutdown()``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from agent.sensors.base import DeviceInfo, Reading

log = logging.getLogger(__name__)

SOURCE_ENERGY = "nvml_energy"
SOURCE_POWER = "nvml_power"


def _text(value: str | bytes) -> str:
    """NVML strings arrive as bytes from older pynvml, str from newer."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


@dataclass
class _Gpu:
    """One device and its running state; ``energy_j`` is cumulative since open."""

    index: int
    handle: Any
    uuid: str
    model: str
    source: str
    last_mj: int = 0  # energy path: counter at the previous good read
    last_mw: float = 0.0  # power path: power at the previous good read
    last_s: float = 0.0
    energy_j: float = 0.0
    failing: str = ""  # the error currently logged for this device, "" when healthy

    @property
    def device(self) -> str:
        return f"gpu{self.index}"


class NvidiaSensor:
    """Cumulative joules per NVIDIA GPU since the sensor opened."""

    name = "nvidia"

    def __init__(self, nvml: ModuleType, gpus: list[_Gpu]) -> None:
        self._nvml = nvml
        self._gpus = gpus
        self._closed = False

    def describe(self) -> list[DeviceInfo]:
        return [
            DeviceInfo(component="gpu", device=g.device, source=g.source, model=g.model,
                       uuid=g.uuid, index=g.index)
            for g in self._gpus
        ]

    def read(self, now_s: float) -> list[Reading]:
        for gpu in self._gpus:
            try:
                self._update(gpu, now_s)
            except self._nvml.NVMLError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                if gpu.failing != problem:
                    log.warning("GPU %d (%s): NVML read failed: %s; keeping its last value",
                                gpu.index, gpu.uuid, problem)
                    gpu.failing = problem
                continue
            if gpu.failing:
                log.info("GPU %d (%s): NVML reads work again", gpu.index, gpu.uuid)
                gpu.failing = ""
        return [Reading("gpu", g.device, g.energy_j, g.source) for g in self._gpus]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown failed: %s", exc)

    def _update(self, gpu: _Gpu, now_s: float) -> None:
        if gpu.source == SOURCE_ENERGY:
            cur_mj = int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle))
            if cur_mj < gpu.last_mj:
                # Counts from driver load: going back means the driver reloaded.
                log.warning("GPU %d: energy counter went back from %d to %d mJ (driver "
                            "reload?); restarting from the new value",
                            gpu.index, gpu.last_mj, cur_mj)
            else:
                gpu.energy_j += (cur_mj - gpu.last_mj) / 1000.0
            gpu.last_mj = cur_mj
            return
        cur_mw = float(self._nvml.nvmlDeviceGetPowerUsage(gpu.handle))
        elapsed_s = max(now_s - gpu.last_s, 0.0)
        gpu.energy_j += (gpu.last_mw + cur_mw) / 2.0 / 1000.0 * elapsed_s
        gpu.last_mw, gpu.last_s = cur_mw, now_s


def _open_device(nvml: ModuleType, index: int, now_s: float) -> _Gpu | None:
    """Identify one GPU and pick its measurement; None when it cannot be measured."""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        model = _text(nvml.nvmlDeviceGetName(handle))
    except nvml.NVMLError as exc:
        log.warning("GPU %d: cannot identify it through NVML (%s); not measured", index, exc)
        return None
    try:
        energy_mj = int(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        return _Gpu(index, handle, uuid, model, SOURCE_ENERGY, last_mj=energy_mj, last_s=now_s)
    except nvml.NVMLError as exc:
        log.debug("GPU %d: no energy counter (%s); integrating power instead", index, exc)
    try:
        power_mw = float(nvml.nvmlDeviceGetPowerUsage(handle))
    except nvml.NVMLError as exc:
        log.warning("GPU %d (%s): neither energy nor power readable through NVML (%s); "
                    "not measured", index, model, exc)
        return None
    return _Gpu(index, handle, uuid, model, SOURCE_POWER, last_mw=power_mw, last_s=now_s)


def open_nvidia(now_s: float | None = None) -> NvidiaSensor | None:
    """A sensor over every measurable NVIDIA GPU, or None (silently) when there is none.

    ``now_s`` is the monotonic time of the first power sample (default: now).
    """
    try:
        import pynvml
    except ImportError as exc:
        log.debug("pynvml not importable (%s); no NVIDIA sensor", exc)
        return None
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError) as exc:
        log.debug("NVML init failed (%s); no NVIDIA sensor", exc)
        return None
    start_s = time.monotonic() if now_s is None else now_s
    try:
        count = int(pynvml.nvmlDeviceGetCount())
        gpus = [g for i in range(count) if (g := _open_device(pynvml, i, start_s)) is not None]
    except pynvml.NVMLError as exc:
        log.warning("NVML initialised but listing GPUs failed: %s", exc)
        gpus = []
    if not gpus:
        log.debug("NVML found no measurable GPU")
        NvidiaSensor(pynvml, []).close()
        return None
    for gpu in gpus:
        log.info("GPU %d: %s %s via %s", gpu.index, gpu.model, gpu.uuid, gpu.source)
    return NvidiaSensor(pynvml, gpus)
