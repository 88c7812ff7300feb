"""The one small interface every power source implements.

A sensor answers a single question: how many joules has each (component, device)
used since this sensor was opened? Answering in cumulative joules (never power)
lets the sampler take exact deltas over whatever interval really elapsed, and lets
counter-based sources (RAPL, NVML energy) and power-based sources (NVML power,
estimators, replayed traces) look the same downstream: a power source integrates
internally over the ``now_s`` timestamps it is handed.

Whatever else a sensor can say (which processes use a device, a device's clock and memory
now, idle power it knows without learning it) and how it knows its energy (a counter,
power samples, a model) it declares in its :class:`Capabilities`. Every sensor has every
method of :class:`Sensor` and answers ``{}`` where it cannot, so the factory and everything
after it ask the capabilities instead of probing a sensor for methods (as Zeus's device
layer does).

A checkpoint comes back from a database row written by another process, possibly by an
older or newer agent, possibly damaged. ``restore`` must never crash on it, and must not
accept a value of the wrong kind either (a string where µJ belong would poison every
later delta), so each field is fetched through the helpers at the end of this module,
which raise :class:`BadState` with a message naming the field; sensors catch it per
item, log it and skip that item.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from joulestat.core.records import DeviceInfo
from joulestat.core.tick import Component

# -- The one small interface every power source implements -----------------------------


@dataclass(frozen=True, slots=True)
class Reading:
    """Cumulative energy of one (component, device) since the sensor opened."""

    component: Component
    device: str
    energy_j: float
    # provenance: rapl, nvml_energy, nvml_power, amdsmi, amdsmi_power, hlml, hlml_power,
    # neuron, model:<name>, replay
    source: str
    # Whether what this series gained since the sensor's previous read was filled in for
    # a faulty counter (joulestat.devices.counter_faults) rather than measured: the
    # sampler then stores the tick as fill_source(source).
    filled: bool = False


class SensorError(RuntimeError):
    """A sensor could not produce a reading this tick; the agent logs it and goes on."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a sensor can say besides its energy, and how it knows its energy, declared once
    so the factory and everything after it ask instead of probing for methods.

    How the energy is known (a sensor over several devices may mix the first two, and
    Neuron reports a measured and an estimated series for each device):

    * ``energy_counter``: a hardware energy counter, exact between reads (RAPL, NVML on
      Volta and newer, amdsmi's accumulator, HLML);
    * ``power_only``: power samples integrated here, bounded by the interval (NVML before
      Volta, a distrusted AMD counter, Neuron's driver figure, a replayed trace);
    * ``estimate``: a model's figure, not a measurement (provenance ``model:...``).

    What else it answers (each method returns ``{}`` on a sensor without the capability):

    * ``per_process``: :meth:`Sensor.device_processes`, per-process device use for
      attribution;
    * ``live_state``: :meth:`Sensor.device_state`, clock and memory in use now, for the
      node's gauges at a scrape;
    * ``known_idle``: :meth:`Sensor.known_idle_w`, idle power known by construction (an
      estimator's model at 0 % load, a trace's lowest level); measured sources learn
      theirs instead (:mod:`joulestat.attribution.idle`).
    """

    energy_counter: bool = False
    power_only: bool = False
    estimate: bool = False
    per_process: bool = False
    live_state: bool = False
    known_idle: bool = False


@dataclass(frozen=True, slots=True)
class DeviceState:
    """What an accelerator is doing now, for the node's gauges: its compute clock (NVIDIA's
    SM clock, AMD's GFX clock) in Hz and its memory in use in bytes; None where the vendor
    API does not say. Read when Prometheus scrapes (``device_state``), never per tick:
    a tick must stay cheap, and a clock read every second adds nothing to the energy."""

    clock_hz: float | None = None
    memory_used_bytes: float | None = None


# (component, device): the key of one series' device
SeriesKey = tuple[str, str]
# (component, device) -> ({pid: utilisation or busy time}, {pids holding the device})
DeviceProcesses = dict[SeriesKey, tuple[dict[int, float], set[int]]]
# (component, device) -> its state now
DeviceStates = dict[SeriesKey, DeviceState]


class Sensor(Protocol):
    """A pure reader of one power source.

    ``read`` is called once per tick with a monotonic timestamp in seconds and must
    return every (component, device) it knows, with energy that never decreases.
    It may raise :class:`SensorError` (or any ``OSError``) for a bad tick; the
    sampler logs that and keeps the previous cumulative values.

    ``checkpoint``/``restore`` let a restarted agent (same boot, so the same
    CLOCK_MONOTONIC) pick up where a killed one stopped: ``checkpoint`` is called every
    tick, so it does no I/O and returns only JSON types (str, int, float, list, dict);
    ``restore`` is called on a freshly opened sensor before its first tick and makes the
    next ``read`` report the checkpoint's cumulative energy plus what the hardware says
    was used since. Items that no longer match (a device gone, a malformed value) are
    skipped with a warning: ``restore`` never raises for bad state.

    ``capabilities`` says which of the optional answers (``device_processes``,
    ``device_state``, ``known_idle_w``) mean something; every sensor has all three, and
    without the capability each answers ``{}``. The bodies here are those empty answers:
    a sensor class names ``Sensor`` as its base and overrides what it can do.
    """

    name: str
    # None of the optional answers; a sensor's class or instance sets its own.
    capabilities: Capabilities = Capabilities()

    def describe(self) -> list[DeviceInfo]: ...

    def read(self, now_s: float) -> list[Reading]: ...

    def close(self) -> None: ...

    def checkpoint(self) -> dict: ...

    def restore(self, state: dict) -> None: ...

    def device_processes(self) -> DeviceProcesses:
        """Per device: who uses it and how much, since the last call (``per_process``)."""
        return {}

    def device_state(self) -> DeviceStates:
        """Per device: its clock and memory in use now, at a scrape (``live_state``)."""
        return {}

    def known_idle_w(self) -> dict[SeriesKey, float]:
        """Per (component, device): idle power in W known without learning it
        (``known_idle``)."""
        return {}

    def faults_total(self) -> dict[str, int]:
        """Counter faults found so far, per kind (joulestat.devices.counter_faults); a
        sensor that checks none answers ``{}``."""
        return {}


# -- Checked access to a sensor checkpoint read back from storage ----------------------

D = TypeVar("D")


class BadState(ValueError):
    """One checkpoint item is missing a field or holds a value of the wrong kind."""


def get_map(state: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``state[key]`` as a dict with string keys (``state`` itself must be a dict)."""
    if not isinstance(state, Mapping):
        raise BadState(f"not an object: {_show(state)}")
    value = state.get(key)
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise BadState(f"{key!r} is not an object: {_show(value)}")
    return value


def get_int(state: Mapping[str, Any], key: str) -> int:
    """``state[key]`` as a non-negative int (a bool, float or string is refused)."""
    value = state.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadState(f"{key!r} is not a non-negative integer: {_show(value)}")
    return value


def get_float(state: Mapping[str, Any], key: str, *, non_negative: bool = True) -> float:
    """``state[key]`` as a finite float; JSON may hand back ``1`` for ``1.0``, so ints pass."""
    value = state.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadState(f"{key!r} is not a finite number: {_show(value)}")
    if non_negative and value < 0:
        raise BadState(f"{key!r} is negative: {value!r}")
    return float(value)


def restore_each(state: Mapping[str, Any], key: str, present: Mapping[str, D],
                 restore_one: Callable[[D, dict[str, Any]], None], log: logging.Logger,
                 what: str, noun: str) -> None:
    """Hand each saved item of ``state[key]`` to ``restore_one(device, item)`` with the
    device of the same name in ``present``; the rest is logged as ``what`` checkpoint
    warnings and skipped: a damaged map, a device not present now, an item that is not
    an object or that ``restore_one`` refuses with :class:`BadState` (raised before it
    changes anything, so a refused item leaves the device as it was)."""
    try:
        saved = get_map(state, key)
    except BadState as exc:
        log.warning("%s checkpoint ignored: %s", what, exc)
        return
    for name, item in saved.items():
        device = present.get(name)
        if device is None:
            log.warning("%s checkpoint: %s %s is not present now; its state ignored",
                        what, noun, name)
            continue
        try:
            if not isinstance(item, dict):
                raise BadState(f"not an object: {type(item).__name__}")
            restore_one(device, item)
        except BadState as exc:
            log.warning("%s checkpoint: %s %s ignored: %s", what, noun, name, exc)


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
