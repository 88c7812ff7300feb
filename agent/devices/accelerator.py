"""What every accelerator sensor shares: capabilities, counters, power integration, Empty.

Vendors differ in what they can say (Zeus's ``zeus/device/`` layer makes the same split):
NVIDIA and Gaudi have an energy counter, AMD has one that is not always trustworthy, AWS
Neuron has only a power percentage refreshed about once a minute. Rather than probe with
``getattr`` downstream, each sensor declares a :class:`Capabilities`, and absent hardware
is an :class:`EmptySensor` that reads nothing, so the factory can say what it looked for.

Every accelerator reports one component, ``ACCELERATOR_COMPONENT`` ("accelerator"),
defined in :mod:`joulestat.devices.sensor` next to the other component names.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from joulestat.devices.sensor import (
    ACCELERATOR_COMPONENT,
    BadState,
    DeviceInfo,
    Reading,
    get_float,
    get_int,
    restore_each,
)

log = logging.getLogger(__name__)

# (component, device) -> ({pid: utilisation %}, {pids holding the device})
DeviceProcesses = dict[tuple[str, str], tuple[dict[int, float], set[int]]]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a sensor can measure, said once, so nothing downstream has to probe."""

    energy_counter: bool = False  # a hardware energy counter (exact between reads)
    power_only: bool = False  # power samples integrated here (bounded by the interval)
    per_process: bool = False  # per-process use for attribution (device_processes)
    live_state: bool = False  # clock and memory in use now (device_state), at a scrape


@dataclass(frozen=True, slots=True)
class DeviceState:
    """What an accelerator is doing now, for the node's gauges: its compute clock (NVIDIA's
    SM clock, AMD's GFX clock) in Hz and its memory in use in bytes; None where the vendor
    API does not say. Read when Prometheus scrapes (``device_state``), never per tick:
    a tick must stay cheap, and a clock read every second adds nothing to the energy."""

    clock_hz: float | None = None
    memory_used_bytes: float | None = None


# (component, device) -> its state now
DeviceStates = dict[tuple[str, str], DeviceState]


@dataclass
class EmptySensor:
    """Stand-in for a vendor whose hardware or library is absent: reads nothing.

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


@dataclass
class CounterTrack:
    """Cumulative joules from a counter that counts from driver load and may go back.

    A counter that goes backwards (driver reload, device reset) is not a wrap: vendors'
    accelerator counters are 64-bit. The new value becomes the baseline, the interval
    across the reset adds nothing (never a negative delta), and the event is logged
    once per reset. ``scale_j`` turns counter units into joules (mJ: 1e-3, µJ: 1e-6).
    """

    label: str
    scale_j: float
    last: float | None = None
    energy_j: float = 0.0
    resets: int = 0

    def update(self, value: float) -> float:
        if self.last is not None:
            if value < self.last:
                self.resets += 1
                log.warning("%s: energy counter went back from %s to %s (driver reload or "
                            "reset?); new baseline, nothing counted across it",
                            self.label, self.last, value)
            else:
                self.energy_j += (value - self.last) * self.scale_j
        self.last = value
        return self.energy_j


@dataclass
class PowerTrack:
    """Cumulative joules from power samples: the trapezoid rule over monotonic time."""

    last_w: float | None = None
    last_s: float | None = None
    energy_j: float = 0.0

    def update(self, power_w: float, now_s: float) -> float:
        if self.last_w is not None and self.last_s is not None:
            elapsed_s = max(now_s - self.last_s, 0.0)
            self.energy_j += (self.last_w + max(power_w, 0.0)) / 2.0 * elapsed_s
        self.last_w, self.last_s = max(power_w, 0.0), now_s
        return self.energy_j


@dataclass
class VendorDevice:
    """One accelerator read through a vendor library: its energy counter, or its power
    integrated where the counter cannot be trusted (``counting`` says which)."""

    prefix: ClassVar[str]  # a vendor's device names: "amdgpu" for amdgpu0
    index: int
    handle: Any
    uuid: str
    model: str
    source: str
    counter: CounterTrack
    power: PowerTrack
    counting: bool
    power_limit_w: float | None = None  # read once at open (DeviceInfo.power_limit_w)

    @property
    def energy_j(self) -> float:
        return self.counter.energy_j if self.counting else self.power.energy_j

    @property
    def device(self) -> str:
        """The device's name in readings: the vendor's ``prefix`` and the index."""
        return f"{self.prefix}{self.index}"


@dataclass
class OnceLog:
    """Logs a problem once per key until it clears, so a broken device does not flood."""

    logger: logging.Logger
    active: dict[str, str] = field(default_factory=dict)

    def problem(self, key: str, message: str) -> None:
        if self.active.get(key) != message:
            self.logger.warning("%s", message)
            self.active[key] = message

    def clear(self, key: str, message: str) -> None:
        if self.active.pop(key, None) is not None:
            self.logger.info("%s", message)


def _device_state(dev: VendorDevice) -> dict[str, Any]:
    """What a restart needs of one device: its name and path, the cumulative energy, and
    the counter baseline or last power sample (JSON types only: a missing one is left
    out, never null)."""
    state: dict[str, Any] = {"index": dev.index, "source": dev.source,
                             "energy_j": dev.energy_j}
    for key, value in (("last", dev.counter.last), ("last_w", dev.power.last_w),
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
    dev.power.last_w, dev.power.last_s, dev.power.energy_j = last_w, last_s, energy_j


class VendorSensor(ABC):
    """What the sensors over :class:`VendorDevice` share (AMD's amdsmi, Intel's HLML):
    declared capabilities, the devices described, and a read that takes each device's
    counter or power sample, keeps a failing device's last value and logs the failure
    once until it heals. A vendor supplies its names and the three library calls.

    Restart on the same boot, as NVML's sensor does it: ``checkpoint`` keeps each
    device's counter baseline or last power sample by UUID, ``restore`` puts them back,
    so the first read after a restart takes the counter's delta over the whole gap, or
    integrates power across it with the trapezoid rule (as after a failed read). A
    counter that went back meanwhile (driver reload) is a new baseline, as always.
    """

    name: ClassVar[str]
    vendor: ClassVar[str]  # DeviceInfo.vendor
    kind: ClassVar[str]  # a device in log lines: "AMD GPU 0"
    library: ClassVar[str]  # the binding in log lines: "amdsmi read failed"
    source_energy: ClassVar[str]
    source_power: ClassVar[str]
    per_process: ClassVar[bool] = False
    live_state: ClassVar[bool] = False  # the vendor overrides _read_state
    checkpoint_key: ClassVar[str] = "devices"  # the map of devices in a checkpoint

    def __init__(self, devices: Sequence[VendorDevice], logger: logging.Logger) -> None:
        self._devices = devices
        self._closed = False
        self._log = logger
        self._problems = OnceLog(logger)
        self.capabilities = Capabilities(
            energy_counter=any(d.source == self.source_energy for d in devices),
            power_only=all(d.source == self.source_power for d in devices),
            per_process=self.per_process, live_state=self.live_state)

    @abstractmethod
    def _errors(self) -> tuple[type[Exception], ...]:
        """What a failed read raises: the device keeps its last value."""

    @abstractmethod
    def _read_counter(self, device: Any) -> float:
        """The device's energy counter, in its ``CounterTrack``'s units."""

    @abstractmethod
    def _read_power_w(self, device: Any) -> float:
        """The device's power now, in W."""

    @abstractmethod
    def _shut_down(self) -> None:
        """Release the vendor library."""

    def describe(self) -> list[DeviceInfo]:
        return [DeviceInfo(ACCELERATOR_COMPONENT, d.device, d.source, model=d.model,
                           uuid=d.uuid, index=d.index, vendor=self.vendor,
                           power_limit_w=d.power_limit_w)
                for d in self._devices]

    def _read_state(self, device: Any) -> DeviceState:
        """The device's clock and memory in use now (a vendor with ``live_state``)."""
        return DeviceState()

    def device_state(self) -> DeviceStates:
        """Per device: :meth:`_read_state`, at a scrape; a device whose library call fails
        is left out (debug only: a gauge missing for one scrape needs no warning), and a
        closed sensor answers nothing (its library is shut down)."""
        if self._closed or not self.live_state:
            return {}
        states: DeviceStates = {}
        for dev in self._devices:
            try:
                states[(ACCELERATOR_COMPONENT, dev.device)] = self._read_state(dev)
            except (*self._errors(), KeyError, TypeError) as exc:
                self._log.debug("%s %d: state not readable: %s", self.kind, dev.index, exc)
        return states

    def read(self, now_s: float) -> list[Reading]:
        for dev in self._devices:
            key = dev.device
            try:
                if dev.source == self.source_energy:
                    dev.counter.update(self._read_counter(dev))
                else:
                    dev.power.update(self._read_power_w(dev), now_s)
            except self._errors() as exc:
                self._problems.problem(key, f"{self.kind} {dev.index} ({dev.uuid}): "
                                       f"{self.library} read failed: {exc}; keeping its "
                                       "last value")
                continue
            self._problems.clear(key, f"{self.kind} {dev.index}: {self.library} reads work "
                                      "again")
        return [Reading(ACCELERATOR_COMPONENT, d.device, d.energy_j, d.source)
                for d in self._devices]

    def checkpoint(self) -> dict:
        """Per device UUID: :func:`_device_state` (no library call: taken every tick)."""
        return {self.checkpoint_key: {d.uuid: _device_state(d) for d in self._devices}}

    def restore(self, state: dict) -> None:
        """Continue each device from its checkpoint, matched by UUID; a device gone, at
        another index, measured another way or with a damaged item is logged and starts
        from its baseline (see :func:`joulestat.devices.sensor.restore_each`)."""
        restore_each(state, self.checkpoint_key, {d.uuid: d for d in self._devices},
                     _restore_device, self._log, self.library, self.kind)

    def close(self) -> None:
        """Shuts the library down once; a failure there only matters to a debugger."""
        if self._closed:
            return
        self._closed = True
        try:
            self._shut_down()
        except self._errors() as exc:
            self._log.debug("%s shutdown failed: %s", self.library, exc)


def combined_device_processes(sensors: Iterable[object]
                              ) -> Callable[[], DeviceProcesses] | None:
    """One ``device_processes`` over every sensor that declares per-process use."""
    sources: list[Callable[[], DeviceProcesses]] = []
    for sensor in sensors:
        caps = getattr(sensor, "capabilities", None)
        if isinstance(caps, Capabilities) and caps.per_process:
            sources.append(sensor.device_processes)  # type: ignore[attr-defined]
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


def combined_device_state(sensors: Iterable[object]) -> Callable[[], DeviceStates] | None:
    """One ``device_state`` over every sensor that declares ``live_state``; a vendor
    whose call fails leaves the others' answer (a gauge is a convenience)."""
    sources: list[Callable[[], DeviceStates]] = []
    for sensor in sensors:
        caps = getattr(sensor, "capabilities", None)
        if isinstance(caps, Capabilities) and caps.live_state:
            sources.append(sensor.device_state)  # type: ignore[attr-defined]
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
