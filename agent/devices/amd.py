"""AMD Instinct energy through ``amdsmi`` (ROCm's Python binding; extra ``joulestat[amd]``).

Energy: ``amdsmi_get_energy_count(h)`` returns an accumulator and its
``counter_resolution`` (µJ per count); joules = accumulator x resolution x 1e-6. The
accumulator's key is ``energy_accumulator`` in current releases and ``power`` in older
ones: both are read. The counter is missing in VM guests and wrong on some parts
(Zeus #113, ROCm/amdsmi#38), so at open each device is sanity-checked: over a short probe
the counter must advance and, where socket power is readable and above 10 W, the power it
implies must lie within 0.5x..2x of it. A device that fails is measured by integrating
``amdsmi_get_power_info(h)`` socket power (W; ``socket_power`` on ROCm 7, else
``current_socket_power``, else ``average_socket_power``; 'N/A' where the part lacks it).
Provenance ``amdsmi`` (counter) or ``amdsmi_power``.

Per-process use: ``amdsmi_get_gpu_process_list(h)`` lists the pids on a device with their
cumulative ``engine_usage.gfx`` busy time (ns); the delta between two calls is each pid's
use over the tick, the weight attribution splits dynamic energy by.

Device info and state: ``power_limit`` of ``amdsmi_get_power_info`` (µW) once at open;
at a scrape (never on the tick) the GFX clock, ``amdsmi_get_clock_info(h,
AmdSmiClkType.GFX)["clk"]`` (MHz; ``cur_clk`` in older releases), and the VRAM in use,
``amdsmi_get_gpu_vram_usage(h)["vram_used"]`` (MiB).

Restart on the same boot (:class:`~joulestat.devices.accelerator.MeteredSensor`'s checkpoint,
by UUID): the accumulator's delta over the whole gap continues the total, or, for a
device measured by power, the trapezoid from the last sample before the stop to the first
after it. The start-up sanity check runs again first; a device that changed path since
(counter then, power now) starts from a baseline rather than mix the two.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from joulestat.core.extras import Extra, install_hint
from joulestat.core.tick import Component
from joulestat.devices.accelerator import (
    CounterTrack,
    EmptySensor,
    MeteredSensor,
    PowerTrack,
    VendorDevice,
    number_or_none,
    text_of,
    watts_or_none,
)
from joulestat.devices.sensor import DeviceProcesses, DeviceState

log = logging.getLogger(__name__)

SOURCE_ENERGY = "amdsmi"
SOURCE_POWER = "amdsmi_power"
VENDOR = "AMD"
PROBE_S = 0.5
SANE_RATIO = (0.5, 2.0)
SANE_MIN_POWER_W = 10.0
_POWER_KEYS = ("socket_power", "current_socket_power", "average_socket_power")
MIB = 1024 * 1024
MHZ = 1e6
UW_PER_W = 1e6  # amdsmi's power_limit is in µW


def read_counter_uj(amdsmi: ModuleType, handle: Any) -> float:
    """The energy accumulator in µJ, whichever key this amdsmi release uses."""
    info = amdsmi.amdsmi_get_energy_count(handle)
    raw = info.get("energy_accumulator", info.get("power"))
    resolution = number_or_none(info.get("counter_resolution"))
    value = number_or_none(raw)
    if value is None or resolution is None or resolution <= 0:
        raise ValueError(f"energy count unusable: {info!r}")
    return value * resolution


def read_power_w(amdsmi: ModuleType, handle: Any) -> float | None:
    info = amdsmi.amdsmi_get_power_info(handle)
    for key in _POWER_KEYS:
        watts = number_or_none(info.get(key))
        if watts is not None:
            return watts
    return None


def counter_is_sane(delta_uj: float, elapsed_s: float, power_w: float | None) -> str:
    """'' when the counter looks right over the probe, else why not."""
    if delta_uj <= 0:
        return "the energy counter did not advance"
    if power_w is None or power_w < SANE_MIN_POWER_W or elapsed_s <= 0:
        return ""
    ratio = delta_uj / 1e6 / elapsed_s / power_w
    if not SANE_RATIO[0] <= ratio <= SANE_RATIO[1]:
        return f"the counter implies {ratio:.2f}x the socket power"
    return ""


@dataclass
class _AmdGpu(VendorDevice):
    prefix = "amdgpu"
    gfx_ns: dict[int, float] = field(default_factory=dict)


class AmdSensor(MeteredSensor[_AmdGpu]):
    """Cumulative joules per AMD GPU since the sensor opened; per-process gfx use."""

    name = "amd"
    vendor = VENDOR
    kind = "AMD GPU"
    library = "amdsmi"
    source_energy = SOURCE_ENERGY
    source_power = SOURCE_POWER
    per_process = True
    live_state = True
    checkpoint_key = "gpus"

    def __init__(self, amdsmi: ModuleType, gpus: list[_AmdGpu]) -> None:
        super().__init__(gpus, log)
        self._amdsmi = amdsmi
        self._gpus = gpus

    def _errors(self) -> tuple[type[Exception], ...]:
        return (self._amdsmi.AmdSmiException, OSError, ValueError)

    def _read_counter(self, device: _AmdGpu) -> float:
        return read_counter_uj(self._amdsmi, device.handle)

    def _read_power(self, device: _AmdGpu) -> float:
        watts = read_power_w(self._amdsmi, device.handle)
        if watts is None:
            raise ValueError("socket power is N/A")
        return watts

    def _shut_down(self) -> None:
        self._amdsmi.amdsmi_shut_down()

    def _read_state(self, device: _AmdGpu) -> DeviceState:
        clock = self._amdsmi.amdsmi_get_clock_info(device.handle,
                                                   self._amdsmi.AmdSmiClkType.GFX)
        mhz = number_or_none(clock.get("clk", clock.get("cur_clk")))
        vram = self._amdsmi.amdsmi_get_gpu_vram_usage(device.handle)
        used_mib = number_or_none(vram.get("vram_used"))
        return DeviceState(None if mhz is None else mhz * MHZ,
                           None if used_mib is None else used_mib * MIB)

    def device_processes(self) -> DeviceProcesses:
        """Per device: {pid: gfx busy ns since the last call}, {pids on the device}."""
        result: DeviceProcesses = {}
        for gpu in self._gpus:
            try:
                entries = self._amdsmi.amdsmi_get_gpu_process_list(gpu.handle)
            except (self._amdsmi.AmdSmiException, OSError) as exc:
                self._problems.problem(f"{gpu.device}/procs", f"{type(exc).__name__}: {exc}",
                                       "AMD GPU %d: process list failed: %s; no process "
                                       "data for it", gpu.index, exc)
                continue
            self._problems.recovered(f"{gpu.device}/procs",
                                     "AMD GPU %d: process list works again", gpu.index)
            seen: dict[int, float] = {}
            use: dict[int, float] = {}
            for entry in entries:
                if not isinstance(entry, dict) or "pid" not in entry:
                    continue
                pid = int(entry["pid"])
                gfx = number_or_none((entry.get("engine_usage") or {}).get("gfx")) or 0.0
                seen[pid] = gfx
                if pid in gpu.gfx_ns and gfx >= gpu.gfx_ns[pid]:
                    use[pid] = gfx - gpu.gfx_ns[pid]
            gpu.gfx_ns = seen
            result[(Component.ACCELERATOR, gpu.device)] = (use, set(seen))
        return result


def _identify(amdsmi: ModuleType, index: int, handle: Any) -> tuple[str, str]:
    try:
        uuid = text_of(amdsmi.amdsmi_get_gpu_device_uuid(handle))
    except (amdsmi.AmdSmiException, OSError):
        uuid = f"amdgpu{index}"
    model = "AMD GPU"
    try:
        asic = amdsmi.amdsmi_get_gpu_asic_info(handle)
        model = text_of(asic.get("market_name") or model)
    except (amdsmi.AmdSmiException, OSError, AttributeError):
        pass
    return uuid, model


def _power_limit_w(amdsmi: ModuleType, handle: Any) -> float | None:
    try:
        return watts_or_none(amdsmi.amdsmi_get_power_info(handle).get("power_limit"), UW_PER_W)
    except (amdsmi.AmdSmiException, OSError, AttributeError):
        return None


def _open_device(amdsmi: ModuleType, index: int, handle: Any, now_s: float,
                 probe: Callable[[], None]) -> _AmdGpu | None:
    gpu = _measured_device(amdsmi, index, handle, now_s, probe)
    if gpu is not None:
        gpu.power_limit_w = _power_limit_w(amdsmi, handle)
    return gpu


def _measured_device(amdsmi: ModuleType, index: int, handle: Any, now_s: float,
                     probe: Callable[[], None]) -> _AmdGpu | None:
    uuid, model = _identify(amdsmi, index, handle)
    label = f"AMD GPU {index} ({model})"
    why = ""
    try:
        first_uj = read_counter_uj(amdsmi, handle)
        started = time.monotonic()
        probe()
        second_uj = read_counter_uj(amdsmi, handle)
        elapsed_s = max(time.monotonic() - started, PROBE_S)
        why = counter_is_sane(second_uj - first_uj, elapsed_s, read_power_w(amdsmi, handle))
    except (amdsmi.AmdSmiException, OSError, ValueError) as exc:
        why = f"no energy counter ({exc})"
    if not why:
        counter = CounterTrack(label, 1e-6)
        counter.update(second_uj, now_s)
        return _AmdGpu(index, uuid, model, handle, SOURCE_ENERGY, counter, PowerTrack(),
                       counting=True)
    log.warning("%s: %s; integrating socket power instead", label, why)
    try:
        watts = read_power_w(amdsmi, handle)
    except (amdsmi.AmdSmiException, OSError) as exc:
        watts, why = None, str(exc)
    if watts is None:
        log.warning("%s: socket power not readable either (%s); not measured", label, why)
        return None
    power = PowerTrack()
    power.update(watts, now_s)
    return _AmdGpu(index, uuid, model, handle, SOURCE_POWER, CounterTrack(label, 1e-6), power,
                   counting=False)


def open_amd(now_s: float | None = None,
             probe: Callable[[], None] | None = None) -> AmdSensor | EmptySensor:
    """A sensor over every measurable AMD GPU, or an :class:`EmptySensor` saying why not.

    ``probe`` waits out the start-up sanity check (default: sleep ``PROBE_S``).
    """
    try:
        import amdsmi
    except ImportError:
        return EmptySensor("amd", f"amdsmi not installed ({install_hint(Extra.AMD)})")
    try:
        amdsmi.amdsmi_init()
    except (amdsmi.AmdSmiException, OSError) as exc:
        return EmptySensor("amd", f"amdsmi init failed ({exc})")
    wait = probe if probe is not None else (lambda: time.sleep(PROBE_S))
    try:
        handles = list(amdsmi.amdsmi_get_processor_handles())
    except (amdsmi.AmdSmiException, OSError) as exc:
        log.warning("amdsmi initialised but listing GPUs failed: %s", exc)
        handles = []
    start_s = time.monotonic() if now_s is None else now_s
    gpus = [g for i, h in enumerate(handles)
            if (g := _open_device(amdsmi, i, h, start_s, wait)) is not None]
    if not gpus:
        AmdSensor(amdsmi, []).close()
        return EmptySensor("amd", "amdsmi found no measurable GPU")
    for gpu in gpus:
        log.info("AMD GPU %d: %s %s via %s", gpu.index, gpu.model, gpu.uuid, gpu.source)
    return AmdSensor(amdsmi, gpus)
