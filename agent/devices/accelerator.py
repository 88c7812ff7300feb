"""What every accelerator sensor shares: counters, power integration, checkpoints by UUID,
per-device failures, and the Empty stand-in for absent hardware.

Vendors differ in what they can say (Zeus's ``zeus/device/`` layer makes the same split):
NVIDIA and Gaudi have an energy counter, AMD has one that is not always trustworthy, AWS
Neuron has only a power percentage refreshed about once a minute. What does not depend on
the vendor lives here, once:

* :class:`VendorSensor`: the devices described, a read that keeps a failing device's last
  value and says the failure once until it heals, checkpoints keyed by the device's
  stable id, a close that shuts the library down once, the live-state gauges, and the
  :class:`~joulestat.devices.sensor.Capabilities` declared, so nothing downstream probes;
* :class:`MeteredSensor`: a :class:`VendorSensor` whose devices are measured by an energy
  counter (:class:`CounterTrack`), or by power integrated with the trapezoid rule
  (:class:`PowerTrack`) where there is none: NVIDIA, AMD and Gaudi;
* :class:`EmptySensor`: what a vendor's ``open_*`` returns when its hardware or library
  is absent, so the factory can say what it looked for.

A vendor's module keeps only its library's calls, each hook one call (or two) into NVML,
amdsmi, HLML or the Neuron driver's sysfs, and what only it knows (NVIDIA's MIG, AMD's
counter check, Neuron's estimate from neuron-monitor).

Every accelerator reports one component, ``Component.ACCELERATOR`` ("accelerator").
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from joulestat.core.logs import LogOnce
from joulestat.core.records import DeviceInfo
from joulestat.core.tick import Component, fill_source
from joulestat.devices.counter_faults import CounterFault, CounterRepair, FaultLog
from joulestat.devices.sensor import (
    BadState,
    Capabilities,
    DeviceProcesses,
    DeviceState,
    DeviceStates,
    Reading,
    Sensor,
    SeriesKey,
    get_float,
    get_int,
    restore_each,
)

log = logging.getLogger(__name__)


@dataclass
class EmptySensor(Sensor):
    """Stand-in for a vendor whose hardware or library is absent: reads nothing, and
    answers every question of the protocol with nothing.

    It keeps ``why`` so the agent can say once which accelerators it looked for and why
    each was not there; the factory does not add it to the sampler's list.
    """

    name: str
    why: str
    capabilities: Capabilities = field(default_factory=Capabilities)

    def describe(self) -> list[DeviceInfo]:
        return []

    def read(self, now_s: float) -> list[Reading]:
        return []

    def close(self) -> None:
        return None

    def checkpoint(self) -> dict:
        return {}

    def restore(self, state: dict) -> None:
        return None

    def device_processes(self) -> DeviceProcesses:
        return {}

    def device_state(self) -> DeviceStates:
        return {}

    def known_idle_w(self) -> dict[SeriesKey, float]:
        return {}


# Per device: no accelerator shipping draws this much (the largest boards are rated at
# 1-1.5 kW), yet a bogus step of a 64-bit counter is far past it in any tick.
MAX_ACCELERATOR_POWER_W = 3000.0
# NVML's energy counter updates every 20-100 ms (docs: nvmlDeviceGetTotalEnergyConsumption;
# shared/REFERENCE.md), amdsmi's and HLML's about as often: an unchanged counter is a
# freeze only after a second of a device that was drawing power.
ACCELERATOR_FROZEN_AFTER_S = 1.0
# Allowance added to the elapsed time before judging a step implausible.
SLACK_S = 0.1


@dataclass
class CounterTrack:
    """Cumulative joules from a counter that counts from driver load and may go back.

    A counter that goes backwards (driver reload, device reset) is not a wrap: vendors'
    accelerator counters are 64-bit. The new value becomes the baseline. A delta in
    counter units is ``* scale_j / units_per_j`` joules: AMD's µJ times its resolution
    multiply by ``scale_j`` (1e-6), NVML's mJ divide by ``units_per_j`` (1000), each as
    its sensor always computed it, to the last bit.

    With ``repair`` attached (the sensor does, and reads with a time) a counter that goes
    back, jumps past :data:`MAX_ACCELERATOR_POWER_W`, freezes while the device drew power
    or cannot be read has the time filled from its recent power, as RAPL's
    (:mod:`joulestat.devices.counter_faults`): ``energy_j`` stays what the counter
    measured, ``repair.filled_j`` what was filled.
    """

    label: str
    scale_j: float
    last: float | None = None
    energy_j: float = 0.0
    resets: int = 0
    units_per_j: float = 1.0
    repair: CounterRepair | None = None
    last_s: float | None = None  # when ``last`` was read (monotonic s)
    read_s: float | None = None  # the last read, good or filled

    @property
    def filled_j(self) -> float:
        return 0.0 if self.repair is None else self.repair.filled_j

    def update(self, value: float, now_s: float | None = None) -> float:
        """Take the counter's ``value`` read at ``now_s`` (None: no fault is judged, as
        for the reads a sensor takes while it opens)."""
        if self.repair is not None:
            self.repair.filled_now = False
        if self.last is None or self.repair is None or now_s is None:
            return self._plain(value, now_s)
        since_read_s = max(now_s - (self.read_s if self.read_s is not None else now_s), 0.0)
        self.read_s = now_s
        if self.last_s is None or now_s < self.last_s:
            # Restored from a checkpoint, or read on another clock than the last read
            # (monotonic never goes back in one process): no time to judge by yet.
            return self._plain(value, now_s)
        elapsed_s = max(now_s - self.last_s, 0.0)
        if value < self.last:
            self.resets += 1
            self.repair.fault(CounterFault.BACKWARDS, now_s, since_read_s,
                              f"went back from {self.last} to {value} (driver reload or "
                              "reset?)", rebased=True)
            self.last, self.last_s = value, now_s
            return self.energy_j
        delta_j = (value - self.last) * self.scale_j / self.units_per_j
        if delta_j > MAX_ACCELERATOR_POWER_W * (elapsed_s + SLACK_S):
            self.repair.fault(CounterFault.JUMP, now_s, since_read_s,
                              f"a jump of {delta_j:.1f} J in {elapsed_s:.3f} s, over "
                              f"{MAX_ACCELERATOR_POWER_W:.0f} W", rebased=True)
            self.last, self.last_s = value, now_s
            return self.energy_j
        if value == self.last:
            self.repair.unchanged(now_s, elapsed_s, since_read_s,
                                  f"stuck at {value} for {elapsed_s:.1f} s")
            return self.energy_j
        if self.repair.advanced(delta_j, elapsed_s, since_read_s, now_s):
            self.energy_j += (value - self.last) * self.scale_j / self.units_per_j
        self.last, self.last_s = value, now_s
        return self.energy_j

    def unreadable(self, now_s: float, detail: str) -> bool:
        """The counter could not be read now: the time since the last read is filled;
        False when there is nothing to fill from (no repair attached, never read)."""
        if self.repair is None or self.last is None or self.read_s is None:
            return False
        since_read_s = max(now_s - self.read_s, 0.0)
        self.read_s = now_s
        self.repair.filled_now = False
        self.repair.fault(CounterFault.UNREADABLE, now_s, since_read_s, detail,
                          rebased=False)
        return True

    def _plain(self, value: float, now_s: float | None) -> float:
        """The reading without fault handling: a counter that went back is a new
        baseline, nothing counted across it (said each time)."""
        if self.last is not None:
            if value < self.last:
                self.resets += 1
                log.warning("%s: energy counter went back from %s to %s (driver reload or "
                            "reset?); new baseline, nothing counted across it",
                            self.label, self.last, value)
            else:
                self.energy_j += (value - self.last) * self.scale_j / self.units_per_j
        self.last = value
        if now_s is not None:
            self.last_s = self.read_s = now_s
        return self.energy_j


@dataclass
class PowerTrack:
    """Cumulative joules from power samples: the trapezoid rule over monotonic time.

    ``last`` is the previous sample in the vendor's unit: watts, or ``units_per_w`` of
    them a watt (NVML's mW: 1000), so a checkpoint keeps exactly what the library said.
    """

    last: float | None = None
    last_s: float | None = None
    energy_j: float = 0.0
    units_per_w: float = 1.0

    def update(self, power: float, now_s: float) -> float:
        if self.last is not None and self.last_s is not None:
            elapsed_s = max(now_s - self.last_s, 0.0)
            self.energy_j += (self.last + max(power, 0.0)) / 2.0 / self.units_per_w * elapsed_s
        self.last, self.last_s = max(power, 0.0), now_s
        return self.energy_j


@dataclass
class Accelerator:
    """One accelerator as its vendor names it: the index its API counts it by, the stable
    id that names the board (a checkpoint is matched by it), and its model."""

    prefix: ClassVar[str]  # a vendor's device names: "amdgpu" for amdgpu0
    index: int
    uuid: str
    model: str

    @property
    def device(self) -> str:
        """The device's name in readings: the vendor's ``prefix`` and the index."""
        return f"{self.prefix}{self.index}"


@dataclass
class VendorDevice(Accelerator):
    """One accelerator read through a vendor library: its energy counter, or its power
    integrated where the counter cannot be trusted (``counting`` says which)."""

    handle: Any
    source: str
    counter: CounterTrack
    power: PowerTrack
    counting: bool
    power_limit_w: float | None = None  # read once at open (DeviceInfo.power_limit_w)
    attribution: str = ""  # DeviceInfo.attribution (NVIDIA's MIG: "mig_slice_estimate")

    @property
    def energy_j(self) -> float:
        """Cumulative energy: the counter's, with what was filled for its faults."""
        if self.counting:
            return self.counter.energy_j + self.counter.filled_j
        return self.power.energy_j


D = TypeVar("D", bound=Accelerator)
M = TypeVar("M", bound=VendorDevice)


class VendorSensor(Sensor, ABC, Generic[D]):
    """What every sensor over a vendor's accelerators shares, whatever it measures.

    The capabilities, the devices described, a read that asks each device and, when one
    fails, keeps its last value and says so once until it heals (the others go on), a
    checkpoint of each device keyed by its stable id (an index names a slot, the UUID
    names the board) with a ``restore`` that skips what no longer matches, the live-state
    gauges at a scrape, and a close that shuts the library down once.

    A vendor supplies its names and hooks: what a failed call raises (``_errors``), how a
    device is read (``_update``) and reported (``_readings``, ``_describe_device``), what a
    restart needs of it (``_save``, ``_restore_device``), its state (``_read_state``), and
    how its library is released (``_shut_down``).
    """

    name: ClassVar[str]
    vendor: ClassVar[str]  # DeviceInfo.vendor
    kind: ClassVar[str]  # a device in log lines: "AMD GPU 0"
    library: ClassVar[str]  # the binding in log lines: "amdsmi read failed"
    checkpoint_key: ClassVar[str] = "devices"  # the map of devices in a checkpoint

    def __init__(self, devices: Sequence[D], logger: logging.Logger,
                 capabilities: Capabilities) -> None:
        self._devices = devices
        self._closed = False
        self._log = logger
        self._problems = LogOnce(logger)
        self.capabilities = capabilities

    # -- what a vendor supplies ----------------------------------------------------------

    @abstractmethod
    def _errors(self) -> tuple[type[Exception], ...]:
        """What a failed read raises: the device keeps its last value."""

    @abstractmethod
    def _update(self, device: D, now_s: float) -> None:
        """Take ``device``'s measurement now; raises one of :meth:`_errors` when it
        cannot be read."""

    @abstractmethod
    def _readings(self, device: D) -> list[Reading]:
        """``device``'s cumulative series now (no library call)."""

    @abstractmethod
    def _describe_device(self, device: D) -> list[DeviceInfo]:
        """What ``device``'s series are, recorded once per agent start."""

    @abstractmethod
    def _save(self, device: D) -> dict[str, Any]:
        """What a restart needs of ``device``, in JSON types (no library call)."""

    @abstractmethod
    def _restore_device(self, device: D, item: dict[str, Any]) -> None:
        """Continue ``device`` from its saved ``item``; :class:`BadState` before any
        change when the item does not fit it."""

    @abstractmethod
    def _shut_down(self) -> None:
        """Release the vendor library."""

    def _read_state(self, device: D) -> DeviceState:
        """The device's clock and memory in use now (a vendor with ``live_state``)."""
        return DeviceState()

    def _unreadable(self, device: D, now_s: float, detail: str) -> bool:
        """``device`` could not be read now: True when the time was filled, and said, as
        a counter fault (MeteredSensor); else its last value is kept and the failure
        said here."""
        return False

    def _checkpoint_id(self, device: D) -> str:
        """What names ``device`` in a checkpoint: its stable id."""
        return device.uuid

    # -- the same for every vendor -------------------------------------------------------

    def describe(self) -> list[DeviceInfo]:
        return [info for dev in self._devices for info in self._describe_device(dev)]

    def read(self, now_s: float) -> list[Reading]:
        for dev in self._devices:
            try:
                self._update(dev, now_s)
            except self._errors() as exc:
                if not self._unreadable(dev, now_s, f"{self.library} read failed: {exc}"):
                    self._problems.problem(
                        dev.device, f"{type(exc).__name__}: {exc}",
                        "%s %d (%s): %s read failed: %s; keeping its last value",
                        self.kind, dev.index, dev.uuid, self.library, exc)
                continue
            self._problems.recovered(dev.device, "%s %d (%s): %s reads work again",
                                     self.kind, dev.index, dev.uuid, self.library)
        return [r for dev in self._devices for r in self._readings(dev)]

    def device_state(self) -> DeviceStates:
        """Per device: :meth:`_read_state`, at a scrape; a device whose library call fails
        is left out (debug only: a gauge missing for one scrape needs no warning), and a
        closed sensor answers nothing (its library is shut down)."""
        if self._closed or not self.capabilities.live_state:
            return {}
        states: DeviceStates = {}
        for dev in self._devices:
            try:
                states[(Component.ACCELERATOR, dev.device)] = self._read_state(dev)
            except (*self._errors(), KeyError, TypeError) as exc:
                self._log.debug("%s %d: state not readable: %s", self.kind, dev.index, exc)
        return states

    def checkpoint(self) -> dict:
        """Per device id: :meth:`_save` (no library call: taken every tick)."""
        return {self.checkpoint_key: {self._checkpoint_id(d): self._save(d)
                                      for d in self._devices}}

    def restore(self, state: dict) -> None:
        """Continue each device from its checkpoint, matched by its id; a device gone, at
        another index, measured another way or with a damaged item is logged and starts
        from its baseline (see :func:`joulestat.devices.sensor.restore_each`)."""
        restore_each(state, self.checkpoint_key,
                     {self._checkpoint_id(d): d for d in self._devices},
                     self._restore_device, self._log, self.library, self.kind)

    def close(self) -> None:
        """Shuts the library down once; a failure there only matters to a debugger."""
        if self._closed:
            return
        self._closed = True
        try:
            self._shut_down()
        except self._errors() as exc:
            self._log.debug("%s shutdown failed: %s", self.library, exc)


def _device_state(dev: VendorDevice) -> dict[str, Any]:
    """What a restart needs of one device: its name and path, the cumulative energy, and
    the counter baseline or last power sample (JSON types only: a missing one is left
    out, never null)."""
    state: dict[str, Any] = {"index": dev.index, "source": dev.source,
                             "energy_j": dev.energy_j}
    for key, value in (("last", dev.counter.last), ("last_w", dev.power.last),
                       ("last_s", dev.power.last_s)):
        if value is not None:
            state[key] = value
    return state


def _restore_device(dev: VendorDevice, item: dict[str, Any]) -> None:
    """Continue ``dev`` from its checkpoint item; :class:`BadState` before any change when
    it measured another way, sat at another index (its readings are keyed by the index)
    or a field is missing or of the wrong kind. An item without ``index`` (Gaudi before
    it was saved) is taken at its word."""
    if item.get("source") != dev.source:
        raise BadState(f"measured via {item.get('source')!r} then, {dev.source!r} now")
    if "index" in item and get_int(item, "index") != dev.index:
        raise BadState(f"was {dev.prefix}{item['index']}, is {dev.device} now")
    energy_j = get_float(item, "energy_j")
    if dev.counting:
        dev.counter.last, dev.counter.energy_j = get_float(item, "last"), energy_j
        return
    last_w, last_s = get_float(item, "last_w"), get_float(item, "last_s")
    dev.power.last, dev.power.last_s, dev.power.energy_j = last_w, last_s, energy_j


class MeteredSensor(VendorSensor[M]):
    """A :class:`VendorSensor` over devices measured by an energy counter, or by power
    integrated where the counter is missing or cannot be trusted: NVIDIA (NVML), AMD
    (amdsmi), Intel Gaudi (HLML). A vendor adds its two reads, ``_read_counter`` and
    ``_read_power``, in the units of the device's tracks.

    Restart on the same boot: ``checkpoint`` keeps each device's counter baseline or last
    power sample by UUID, ``restore`` puts them back, so the first read after a restart
    takes the counter's delta over the whole gap, or integrates power across it with the
    trapezoid rule (as after a failed read). A counter that went back meanwhile (driver
    reload) is a new baseline, as always.
    """

    source_energy: ClassVar[str]
    source_power: ClassVar[str]
    per_process: ClassVar[bool] = False  # the vendor overrides device_processes
    live_state: ClassVar[bool] = False  # the vendor overrides _read_state

    def __init__(self, devices: Sequence[M], logger: logging.Logger) -> None:
        super().__init__(devices, logger, Capabilities(
            energy_counter=any(d.source == self.source_energy for d in devices),
            power_only=bool(devices) and all(d.source == self.source_power for d in devices),
            per_process=self.per_process, live_state=self.live_state))
        # A counter that faults is filled, counted and said, as RAPL's (counter_faults).
        self._faults = FaultLog(logger, self.source_energy, fill_source(self.source_energy))
        for dev in devices:
            if dev.counting:
                dev.counter.repair = CounterRepair(
                    self._faults, f"{self.kind} {dev.index} ({dev.uuid})",
                    ACCELERATOR_FROZEN_AFTER_S)

    def faults_total(self) -> dict[str, int]:
        if not self.capabilities.energy_counter:
            return {}
        return dict(self._faults.totals)

    @abstractmethod
    def _read_counter(self, device: M) -> float:
        """The device's energy counter, in its ``CounterTrack``'s units."""

    @abstractmethod
    def _read_power(self, device: M) -> float:
        """The device's power now, in its ``PowerTrack``'s units (W unless it says)."""

    def _update(self, device: M, now_s: float) -> None:
        if device.source == self.source_energy:
            device.counter.update(self._read_counter(device), now_s)
        else:
            device.power.update(self._read_power(device), now_s)

    def _unreadable(self, device: M, now_s: float, detail: str) -> bool:
        return device.counting and device.counter.unreadable(now_s, detail)

    def _readings(self, device: M) -> list[Reading]:
        repair = device.counter.repair if device.counting else None
        return [Reading(Component.ACCELERATOR, device.device, device.energy_j, device.source,
                        repair is not None and repair.filled_now)]

    def _describe_device(self, device: M) -> list[DeviceInfo]:
        return [DeviceInfo(Component.ACCELERATOR, device.device, device.source,
                           model=device.model, uuid=device.uuid, index=device.index,
                           vendor=self.vendor, attribution=device.attribution,
                           power_limit_w=device.power_limit_w)]

    def _save(self, device: M) -> dict[str, Any]:
        """:func:`_device_state`."""
        return _device_state(device)

    def _restore_device(self, device: M, item: dict[str, Any]) -> None:
        """:func:`_restore_device`."""
        _restore_device(device, item)


def combined_device_processes(sensors: Iterable[Sensor]
                              ) -> Callable[[], DeviceProcesses] | None:
    """One ``device_processes`` over every sensor whose capabilities say ``per_process``
    (None: no sensor has it)."""
    sources = [sensor.device_processes for sensor in sensors
               if sensor.capabilities.per_process]
    if not sources:
        return None

    def device_processes() -> DeviceProcesses:
        merged: DeviceProcesses = {}
        for source in sources:
            try:
                merged.update(source())
            except Exception as exc:  # one vendor failing leaves the others' answer
                log.warning("accelerator process query failed: %s", exc)
        return merged

    return device_processes


def combined_device_state(sensors: Iterable[Sensor]) -> Callable[[], DeviceStates] | None:
    """One ``device_state`` over every sensor whose capabilities say ``live_state``; a
    vendor whose call fails leaves the others' answer (a gauge is a convenience)."""
    sources = [sensor.device_state for sensor in sensors if sensor.capabilities.live_state]
    if not sources:
        return None

    def device_state() -> DeviceStates:
        merged: DeviceStates = {}
        for source in sources:
            try:
                merged.update(source())
            except Exception as exc:
                log.debug("accelerator state query failed: %s", exc)
        return merged

    return device_state


def watts_or_none(value: object, per_watt: float) -> float | None:
    """A vendor's power limit in W from its unit (``per_watt`` units a watt: mW 1e3, µW
    1e6); None for 0, 'N/A' and non-numbers. Some pyhlml releases hand back the ctypes
    integer itself, not its ``.value``: both are read."""
    number = number_or_none(getattr(value, "value", value))
    return None if number is None or number <= 0 else number / per_watt


def text_of(value: object) -> str:
    """Vendor strings arrive as bytes from older bindings, str from newer."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def number_or_none(value: object) -> float | None:
    """A vendor's number, or None for 'N/A', '', and other non-numbers."""
    if isinstance(value, Mapping):
        value = value.get("value")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if number == number else None
