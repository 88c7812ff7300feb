"""Intel Gaudi (HL-205, HL-225, HL-325) energy through HLML (``pyhlml``, the optional
extra ``joulestat[gaudi]``).

HLML mirrors NVML: ``hlmlInit``, ``hlmlDeviceGetCount``, ``hlmlDeviceGetHandleByIndex``,
``hlmlDeviceGetName``/``hlmlDeviceGetUUID``, and two measurements:

* ``hlmlDeviceGetTotalEnergyConsumption(h)``: mJ since the driver loaded (HLML C API docs,
  docs.habana.ai). Preferred; provenance ``hlml``. A value that goes back (driver reload)
  starts a new baseline, logged once.
* ``hlmlDeviceGetPowerUsage(h)``: mW, integrated here when the counter is unreadable;
  provenance ``hlml_power``.

``pyhlml`` is imported only when this sensor is opened: a node without it runs as before.
A device whose call fails in one tick keeps its last value (logged once until it heals).
HLML gives no per-process use, so Gaudi devices are attributed to the processes the
caller knows hold them (none here): the capability says so.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from types import ModuleType

from agent.sensors.accelerator import (
    ACCELERATOR_COMPONENT,
    Capabilities,
    CounterTrack,
    EmptySensor,
    OnceLog,
    PowerTrack,
    VendorDevice,
    text_of,
)
from agent.sensors.base import DeviceInfo, Reading

log = logging.getLogger(__name__)

SOURCE_ENERGY = "hlml"
SOURCE_POWER = "hlml_power"
VENDOR = "Intel"


@dataclass
class _Hpu(VendorDevice):
    @property
    def device(self) -> str:
        return f"gaudi{self.index}"


class GaudiSensor:
    """Cumulative joules per Gaudi device since the sensor opened."""

    name = "gaudi"

    def __init__(self, hlml: ModuleType, hpus: list[_Hpu]) -> None:
        self._hlml = hlml
        self._hpus = hpus
        self._closed = False
        self._problems = OnceLog(log)
        self.capabilities = Capabilities(
            energy_counter=any(h.source == SOURCE_ENERGY for h in hpus),
            power_only=all(h.source == SOURCE_POWER for h in hpus))

    def describe(self) -> list[DeviceInfo]:
        return [DeviceInfo(ACCELERATOR_COMPONENT, h.device, h.source, model=h.model,
                           uuid=h.uuid, index=h.index, vendor=VENDOR) for h in self._hpus]

    def read(self, now_s: float) -> list[Reading]:
        for hpu in self._hpus:
            key = hpu.device
            try:
                if hpu.source == SOURCE_ENERGY:
                    hpu.counter.update(float(
                        self._hlml.hlmlDeviceGetTotalEnergyConsumption(hpu.handle)))
                else:
                    hpu.power.update(
                        float(self._hlml.hlmlDeviceGetPowerUsage(hpu.handle)) / 1000.0, now_s)
            except (self._hlml.HLMLError, OSError) as exc:
                self._problems.problem(key, f"Gaudi {hpu.index} ({hpu.uuid}): HLML read "
                                            f"failed: {exc}; keeping its last value")
                continue
            self._problems.clear(key, f"Gaudi {hpu.index}: HLML reads work again")
        return [Reading(ACCELERATOR_COMPONENT, h.device, h.energy_j, h.source)
                for h in self._hpus]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._hlml.hlmlShutdown()
        except (self._hlml.HLMLError, OSError) as exc:
            log.debug("hlmlShutdown failed: %s", exc)

    def checkpoint(self) -> dict:
        return {"hpus": {h.uuid: {"source": h.source, "last": h.counter.last,
                                  "energy_j": h.energy_j} for h in self._hpus}}

    def restore(self, state: dict) -> None:
        """Counter path only: the counter's delta over the gap continues the total."""
        saved = state.get("hpus") if isinstance(state, dict) else None
        if not isinstance(saved, dict):
            return
        for hpu in self._hpus:
            item = saved.get(hpu.uuid)
            if not isinstance(item, dict) or item.get("source") != SOURCE_ENERGY \
                    or hpu.source != SOURCE_ENERGY:
                continue
            try:
                hpu.counter.last = float(item["last"])
                hpu.counter.energy_j = float(item["energy_j"])
            except (KeyError, TypeError, ValueError):
                log.warning("Gaudi %d: unusable checkpoint item skipped", hpu.index)


def _open_device(hlml: ModuleType, index: int, now_s: float) -> _Hpu | None:
    try:
        handle = hlml.hlmlDeviceGetHandleByIndex(index)
        uuid = text_of(hlml.hlmlDeviceGetUUID(handle))
        model = text_of(hlml.hlmlDeviceGetName(handle))
    except (hlml.HLMLError, OSError) as exc:
        log.warning("Gaudi %d: cannot identify it through HLML (%s); not measured", index, exc)
        return None
    label = f"Gaudi {index} ({uuid})"
    try:
        counter = CounterTrack(label, 1e-3)
        counter.update(float(hlml.hlmlDeviceGetTotalEnergyConsumption(handle)))
        return _Hpu(index, handle, uuid, model, SOURCE_ENERGY, counter, PowerTrack(),
                       counting=True)
    except (hlml.HLMLError, OSError) as exc:
        log.info("%s: no energy counter (%s); integrating power instead", label, exc)
    try:
        power = PowerTrack()
        power.update(float(hlml.hlmlDeviceGetPowerUsage(handle)) / 1000.0, now_s)
    except (hlml.HLMLError, OSError) as exc:
        log.warning("%s: neither energy nor power readable (%s); not measured", label, exc)
        return None
    return _Hpu(index, handle, uuid, model, SOURCE_POWER, CounterTrack(label, 1e-3), power,
                counting=False)


def open_gaudi(now_s: float | None = None) -> GaudiSensor | EmptySensor:
    """A sensor over every measurable Gaudi, or an :class:`EmptySensor` saying why not."""
    try:
        import pyhlml
    except ImportError:
        return EmptySensor("gaudi", "pyhlml not installed (pip install 'joulestat[gaudi]')")
    try:
        pyhlml.hlmlInit()
    except (pyhlml.HLMLError, OSError) as exc:
        return EmptySensor("gaudi", f"HLML init failed ({exc})")
    start_s = time.monotonic() if now_s is None else now_s
    try:
        count = int(pyhlml.hlmlDeviceGetCount())
        hpus = [h for i in range(count) if (h := _open_device(pyhlml, i, start_s)) is not None]
    except (pyhlml.HLMLError, OSError) as exc:
        log.warning("HLML initialised but listing devices failed: %s", exc)
        hpus = []
    if not hpus:
        GaudiSensor(pyhlml, []).close()
        return EmptySensor("gaudi", "HLML found no measurable device")
    for hpu in hpus:
        log.info("Gaudi %d: %s %s via %s", hpu.index, hpu.model, hpu.uuid, hpu.source)
    return GaudiSensor(pyhlml, hpus)
