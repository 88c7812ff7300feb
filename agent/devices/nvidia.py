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

What does not depend on NVML (the reads, a failing device's last value kept and said once
per device and error until it recovers, checkpoints by UUID) is
:class:`~joulestat.devices.accelerator.MeteredSensor`'s; the hooks here are one NVML call
each, as in Zeus's ``zeus/device/gpu/nvidia.py``. A device whose call fails in one tick
keeps its last cumulative value; the other devices go on. After a failed tick the
power path integrates straight across the gap from the last good sample, which assumes
power moved linearly between them. ``close()`` calls ``nvmlShutdown()``.

Restart on the same boot: ``checkpoint`` keeps each GPU's last counter or power sample by
UUID (an index names a slot, the UUID names the board), and ``restore`` puts them back, so
the first read after a restart takes the energy counter's delta over the whole gap, or
integrates power across it with the trapezoid rule exactly as after a failed tick.

Processes, for attribution (``device_processes``): per device, the pids holding a compute
or graphics context (``nvmlDeviceGetComputeRunningProcesses``,
``nvmlDeviceGetGraphicsRunningProcesses``) and each pid's SM utilisation averaged over the
samples NVML took since the previous call (``nvmlDeviceGetProcessUtilization`` with the
newest sample timestamp seen so far, in µs). NVML answers NOT_FOUND when no sample is newer
than that timestamp, which is the normal state of an idle GPU, so that means "no
utilisation", not a failure; so does NOT_SUPPORTED (e.g. MIG-enabled devices), where the
context holders are still worth knowing.

Device info and state, besides the energy: the enforced power limit
(``nvmlDeviceGetEnforcedPowerLimit``, mW), read once at start, and the SM clock
(``nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM)``, MHz) and memory in use
(``nvmlDeviceGetMemoryInfo(h).used``, bytes), read when Prometheus scrapes, never on the
tick, which stays as cheap as the energy needs. A failed read leaves the figure out; it
never fails the sensor.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from joulestat.core.extras import Extra, install_hint
from joulestat.core.tick import Component
from joulestat.devices.accelerator import (
    CounterTrack,
    MeteredSensor,
    PowerTrack,
    VendorDevice,
    text_of,
)
from joulestat.devices.sensor import (
    BadState,
    DeviceProcesses,
    DeviceState,
    get_float,
    get_int,
)

log = logging.getLogger(__name__)


# -- What an NVIDIA GPU reports besides its energy -------------------------------------

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


# -- NVIDIA GPU energy through NVML (the ``nvidia-ml-py`` distribution, imported as ` ----

SOURCE_ENERGY = "nvml_energy"
SOURCE_POWER = "nvml_power"

# What pynvml.nvmlInit() loads on Linux (installed with the NVIDIA driver).
NVML_LIBRARY = "libnvidia-ml.so.1"
# NVML return codes, by value (pynvml names them the same): NOT_FOUND is what
# nvmlDeviceGetProcessUtilization answers when there is no sample newer than asked for,
# and pynvml raises SUCCESS itself when the driver reports zero samples without an error.
_NVML_SUCCESS = 0
_NVML_ERROR_NOT_FOUND = 6
_NVML_DEVICE_MIG_ENABLE = 1
ATTRIBUTION_MIG = "mig_slice_estimate"

MJ_PER_J = 1000.0  # nvmlDeviceGetTotalEnergyConsumption counts mJ
MW_PER_W = 1000.0  # nvmlDeviceGetPowerUsage answers mW


@dataclass
class _Gpu(VendorDevice):
    """One GPU and its running state: its tracks count NVML's own units (mJ, mW), so a
    checkpoint keeps exactly what NVML said."""

    prefix = "gpu"
    last_s: float = 0.0  # monotonic time of the last good read (kept in the checkpoint)
    util_seen_us: int = 0  # newest process-utilisation sample timestamp already consumed
    util_unsupported: bool = False  # process utilisation NOT_SUPPORTED: logged once
    mig: bool = False  # MIG enabled: processes weighted by their instance's slice count
    state_unsupported: set[str] = field(default_factory=set)  # device_state calls refused


class NvidiaSensor(MeteredSensor[_Gpu]):
    """Cumulative joules per NVIDIA GPU since the sensor opened.

    The vendor-neutral part (reads that keep a failing GPU's last value, checkpoints by
    UUID, the capabilities) is :class:`~joulestat.devices.accelerator.MeteredSensor`'s;
    each hook here is one NVML call. The checkpoint keeps the ``gpus`` map and fields
    (``last_mj``, ``last_mw``, ``last_s``) NVIDIA checkpoints have always had, so an agent
    restarted across an upgrade continues its GPUs.
    """

    name = "nvidia"
    vendor = "NVIDIA"
    kind = "GPU"
    library = "NVML"
    source_energy = SOURCE_ENERGY
    source_power = SOURCE_POWER
    per_process = True
    live_state = True
    checkpoint_key = "gpus"

    def __init__(self, nvml: ModuleType, gpus: list[_Gpu]) -> None:
        super().__init__(gpus, log)
        self._nvml = nvml
        self._gpus = gpus

    def _errors(self) -> tuple[type[Exception], ...]:
        return (self._nvml.NVMLError,)

    def _read_counter(self, device: _Gpu) -> float:
        return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(device.handle))

    def _read_power(self, device: _Gpu) -> float:
        return float(self._nvml.nvmlDeviceGetPowerUsage(device.handle))

    def _update(self, device: _Gpu, now_s: float) -> None:
        super()._update(device, now_s)
        device.last_s = now_s

    def _shut_down(self) -> None:
        self._nvml.nvmlShutdown()

    def _read_state(self, device: _Gpu) -> DeviceState:
        """SM clock and memory in use now, at a scrape (:func:`read_state`)."""
        return read_state(self._nvml, device.handle, device.state_unsupported)

    def _save(self, device: _Gpu) -> dict[str, Any]:
        """The last good sample (counter and power, 0 where that path is not used), its
        time and the cumulative energy."""
        return {"index": device.index, "source": device.source,
                "last_mj": device.counter.last if device.counter.last is not None else 0,
                "last_mw": device.power.last if device.power.last is not None else 0.0,
                "last_s": device.last_s, "energy_j": device.energy_j}

    def _restore_device(self, device: _Gpu, item: dict[str, Any]) -> None:
        """A GPU whose index or measurement path changed is refused: its readings are
        keyed by ``gpu<index>`` and source, so continuing under another key would hand one
        board's total to another series."""
        if item.get("source") != device.source:
            raise BadState(f"measured via {item.get('source')!r} then, {device.source!r} now")
        if get_int(item, "index") != device.index:
            raise BadState(f"was gpu{item['index']}, is {device.device} now")
        last_mj = get_int(item, "last_mj")
        last_mw = get_float(item, "last_mw")
        last_s = get_float(item, "last_s")
        energy_j = get_float(item, "energy_j")
        device.counter.last, device.power.last, device.power.last_s = last_mj, last_mw, last_s
        device.last_s = last_s
        if device.counting:
            device.counter.energy_j = energy_j
        else:
            device.power.energy_j = energy_j

    def device_processes(self) -> DeviceProcesses:
        """Per device: {pid: mean SM utilisation % since the last call}, {context pids}.

        A device whose NVML calls fail is left out of the answer (logged once per
        device and error until it recovers); the others are still reported.
        """
        result: DeviceProcesses = {}
        for gpu in self._gpus:
            try:
                if gpu.mig:
                    util, pids = self._mig_slices(gpu)
                else:
                    pids = {p.pid for p in
                            self._nvml.nvmlDeviceGetComputeRunningProcesses(gpu.handle)}
                    pids.update(p.pid for p in
                                self._nvml.nvmlDeviceGetGraphicsRunningProcesses(gpu.handle))
                    util = self._process_utilization(gpu)
            except self._nvml.NVMLError as exc:
                self._problems.problem(f"{gpu.device}/procs", f"{type(exc).__name__}: {exc}",
                                       "GPU %d (%s): NVML process query failed: %s; no "
                                       "process data for it", gpu.index, gpu.uuid, exc)
                continue
            self._problems.recovered(f"{gpu.device}/procs",
                                     "GPU %d (%s): NVML process queries work again",
                                     gpu.index, gpu.uuid)
            result[(Component.ACCELERATOR, gpu.device)] = (util, pids)
        return result

    def _mig_slices(self, gpu: _Gpu) -> tuple[dict[int, float], set[int]]:
        """MIG: energy is per physical GPU and NVML has no per-process utilisation, so each
        instance with processes weighs its GPU slice count, split evenly among its pids.
        An estimate (the device info says ``attribution=mig_slice_estimate``); the GPU's
        energy is still one series, never one per instance, so nothing counts twice."""
        weights: dict[int, float] = {}
        holders: set[int] = set()
        for i in range(int(self._nvml.nvmlDeviceGetMaxMigDeviceCount(gpu.handle))):
            try:
                mig = self._nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, i)
            except self._nvml.NVMLError as exc:
                if getattr(exc, "value", None) == _NVML_ERROR_NOT_FOUND:
                    continue  # no instance in this slot
                raise
            pids = {p.pid for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(mig)}
            if not pids:
                continue
            slices = float(self._nvml.nvmlDeviceGetAttributes(mig).gpuInstanceSliceCount)
            for pid in pids:
                weights[pid] = weights.get(pid, 0.0) + slices / len(pids)
            holders |= pids
        return weights, holders

    def _process_utilization(self, gpu: _Gpu) -> dict[int, float]:
        """Mean SM % per pid over samples newer than the last consumed one."""
        try:
            samples = self._nvml.nvmlDeviceGetProcessUtilization(gpu.handle, gpu.util_seen_us)
        except self._nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in (_NVML_ERROR_NOT_FOUND, _NVML_SUCCESS):
                return {}
            if code == _NVML_ERROR_NOT_SUPPORTED:
                if not gpu.util_unsupported:
                    log.info("GPU %d (%s): per-process utilisation not supported; only "
                             "context holders are reported", gpu.index, gpu.uuid)
                    gpu.util_unsupported = True
                return {}
            raise
        sums: dict[int, float] = {}
        counts: dict[int, int] = {}
        newest_us = gpu.util_seen_us
        for sample in samples:
            stamp = int(sample.timeStamp)
            # Some drivers hand back buffered samples older than asked for: not new.
            if stamp <= gpu.util_seen_us:
                continue
            newest_us = max(newest_us, stamp)
            sums[sample.pid] = sums.get(sample.pid, 0.0) + float(sample.smUtil)
            counts[sample.pid] = counts.get(sample.pid, 0) + 1
        gpu.util_seen_us = newest_us
        return {pid: sums[pid] / counts[pid] for pid in sums}


def _open_device(nvml: ModuleType, index: int, now_s: float) -> _Gpu | None:
    """Identify one GPU and pick its measurement; None when it cannot be measured."""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = text_of(nvml.nvmlDeviceGetUUID(handle))
        model = text_of(nvml.nvmlDeviceGetName(handle))
    except nvml.NVMLError as exc:
        log.warning("GPU %d: cannot identify it through NVML (%s); not measured", index, exc)
        return None
    mig = _mig_enabled(nvml, handle)
    limit_w = power_limit_w(nvml, handle)
    if mig:
        log.info("GPU %d (%s): MIG enabled; its energy is split among instances with "
                 "processes by slice count (an estimate)", index, model)
    label = f"GPU {index}"
    counter = CounterTrack(label, 1.0, units_per_j=MJ_PER_J)
    power = PowerTrack(units_per_w=MW_PER_W)
    source = SOURCE_ENERGY
    try:
        counter.update(int(nvml.nvmlDeviceGetTotalEnergyConsumption(handle)), now_s)
    except nvml.NVMLError as exc:
        log.debug("GPU %d: no energy counter (%s); integrating power instead", index, exc)
        source = SOURCE_POWER
        try:
            power.update(float(nvml.nvmlDeviceGetPowerUsage(handle)), now_s)
        except nvml.NVMLError as exc:
            log.warning("GPU %d (%s): neither energy nor power readable through NVML (%s); "
                        "not measured", index, model, exc)
            return None
    return _Gpu(index, uuid, model, handle, source, counter, power,
                counting=source == SOURCE_ENERGY, power_limit_w=limit_w,
                attribution=ATTRIBUTION_MIG if mig else "", last_s=now_s, mig=mig)


def _mig_enabled(nvml: ModuleType, handle: Any) -> bool:
    """MIG mode currently on (not merely pending); False where NVML has no MIG."""
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except (nvml.NVMLError, AttributeError):
        return False
    return int(current) == _NVML_DEVICE_MIG_ENABLE


def _driver_library_loads() -> bool:
    """Whether the driver's NVML library is there, asked before importing pynvml: its
    module alone costs the agent about 1 MiB of RSS, for nothing on a node without an
    NVIDIA driver. ``nvmlInit`` loads the same library by the same name, so this
    refuses exactly the nodes where it would fail with LIBRARY_NOT_FOUND."""
    import ctypes

    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError as exc:
        log.debug("%s not loadable (%s); no NVIDIA sensor", NVML_LIBRARY, exc)
        return False
    return True


def open_nvidia(now_s: float | None = None) -> NvidiaSensor | None:
    """A sensor over every measurable NVIDIA GPU, or None (silently) when there is none.

    ``now_s`` is the monotonic time of the first power sample (default: now).
    """
    checked_driver = "pynvml" not in sys.modules  # else imported (or blocked) already
    if checked_driver and not _driver_library_loads():
        return None
    try:
        import pynvml
    except ImportError as exc:
        if checked_driver:  # the driver is here: GPUs go unmeasured for want of a package
            log.warning("NVIDIA driver found but pynvml is not installed (%s); no NVIDIA "
                        "sensor: %s", exc, install_hint(Extra.NVIDIA))
        else:
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
