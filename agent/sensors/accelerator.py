"""What every accelerator sensor shares: capabilities, counters, power integration, Empty.

Vendors differ in what they can say (Zeus's ``zeus/device/`` layer makes the same split):
NVIDIA and Gaudi have an energy counter, AMD has one that is not always trustworthy, AWS
Neuron has only a power percentage refreshed about once a minute. Rather than probe with
``getattr`` downstream, each sensor declares a :class:`Capabilities`, and absent hardware
is an :class:`EmptySensor` that reads nothing, so the factory can say what it looked for.

Every accelerator reports one component, ``ACCELERATOR_COMPONENT`` ("accelerator"),
defined in :mod:`agent.sensors.base` next to the other component names.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agent.sensors.base import ACCELERATOR_COMPONENT, DeviceInfo, Reading

log = logging.getLogger(__name__)

# (component, device) -> ({pid: utilisation %}, {pids holding the device})
DeviceProcesses = dict[tuple[str, str], tuple[dict[int, float], set[int]]]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a sensor can measure, said once, so nothing downstream has to probe."""

    energy_counter: bool = False  # a hardware energy counter (exact between reads)
    power_only: bool = False  # power samples integrated here (bounded by the interval)
    per_process: bool = False  # per-process use for attribution (device_processes)


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


class VendorSensor(ABC):
    """What the sensors over :class:`VendorDevice` share (AMD's amdsmi, Intel's HLML):
    declared capabilities, the devices described, and a read that takes each device's
    counter or power sample, keeps a failing device's last value and logs the failure
    once until it heals. A vendor supplies its names and the three library calls."""

    name: ClassVar[str]
    vendor: ClassVar[str]  # DeviceInfo.vendor
    kind: ClassVar[str]  # a device in log lines: "AMD GPU 0"
    library: ClassVar[str]  # the binding in log lines: "amdsmi read failed"
    source_energy: ClassVar[str]
    source_power: ClassVar[str]
    per_process: ClassVar[bool] = False

    def __init__(self, devices: Sequence[VendorDevice], logger: logging.Logger) -> None:
        self._devices = devices
        self._closed = False
        self._log = logger
        self._problems = OnceLog(logger)
        self.capabilities = Capabilities(
            energy_counter=any(d.source == self.source_energy for d in devices),
            power_only=all(d.source == self.source_power for d in devices),
            per_process=self.per_process)

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
                           uuid=d.uuid, index=d.index, vendor=self.vendor)
                for d in self._devices]

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
