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

Device info: ``hlmlDeviceGetPowerManagementDefaultLimit`` (mW), the default power limit,
once at open. HLML's clock and memory calls are not read: nothing here checks their
shapes against a real pyhlml.

Restart on the same boot: :class:`~joulestat.devices.accelerator.MeteredSensor`'s checkpoint
(the counter's delta, or power integrated, across the gap), keyed ``hpus`` as before.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from types import ModuleType

from joulestat.core.extras import Extra, install_hint
from joulestat.devices.accelerator import (
    CounterTrack,
    EmptySensor,
    MeteredSensor,
    PowerTrack,
    VendorDevice,
    text_of,
    watts_or_none,
)

log = logging.getLogger(__name__)

SOURCE_ENERGY = "hlml"
SOURCE_POWER = "hlml_power"
VENDOR = "Intel"


@dataclass
class _Hpu(VendorDevice):
    prefix = "gaudi"


class GaudiSensor(MeteredSensor[_Hpu]):
    """Cumulative joules per Gaudi device since the sensor opened."""

    name = "gaudi"
    vendor = VENDOR
    kind = "Gaudi"
    library = "HLML"
    source_energy = SOURCE_ENERGY
    source_power = SOURCE_POWER
    checkpoint_key = "hpus"  # what Gaudi checkpoints were keyed by before VendorSensor's

    def __init__(self, hlml: ModuleType, hpus: list[_Hpu]) -> None:
        super().__init__(hpus, log)
        self._hlml = hlml
        self._hpus = hpus

    def _errors(self) -> tuple[type[Exception], ...]:
        return (self._hlml.HLMLError, OSError)

    def _read_counter(self, device: _Hpu) -> float:
        return float(self._hlml.hlmlDeviceGetTotalEnergyConsumption(device.handle))

    def _read_power(self, device: _Hpu) -> float:
        return float(self._hlml.hlmlDeviceGetPowerUsage(device.handle)) / 1000.0

    def _shut_down(self) -> None:
        self._hlml.hlmlShutdown()


def _open_device(hlml: ModuleType, index: int, now_s: float) -> _Hpu | None:
    hpu = _measured_device(hlml, index, now_s)
    if hpu is not None:
        try:
            hpu.power_limit_w = watts_or_none(
                hlml.hlmlDeviceGetPowerManagementDefaultLimit(hpu.handle), 1000.0)
        except (hlml.HLMLError, OSError, AttributeError):
            hpu.power_limit_w = None
    return hpu


def _measured_device(hlml: ModuleType, index: int, now_s: float) -> _Hpu | None:
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
        counter.update(float(hlml.hlmlDeviceGetTotalEnergyConsumption(handle)), now_s)
        return _Hpu(index, uuid, model, handle, SOURCE_ENERGY, counter, PowerTrack(),
                    counting=True)
    except (hlml.HLMLError, OSError) as exc:
        log.info("%s: no energy counter (%s); integrating power instead", label, exc)
    try:
        power = PowerTrack()
        power.update(float(hlml.hlmlDeviceGetPowerUsage(handle)) / 1000.0, now_s)
    except (hlml.HLMLError, OSError) as exc:
        log.warning("%s: neither energy nor power readable (%s); not measured", label, exc)
        return None
    return _Hpu(index, uuid, model, handle, SOURCE_POWER, CounterTrack(label, 1e-3), power,
                counting=False)


def open_gaudi(now_s: float | None = None) -> GaudiSensor | EmptySensor:
    """A sensor over every measurable Gaudi, or an :class:`EmptySensor` saying why not."""
    try:
        import pyhlml
    except ImportError:
        return EmptySensor("gaudi", f"pyhlml not installed ({install_hint(Extra.GAUDI)})")
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
