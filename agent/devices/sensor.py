"""The one small interface every power source implements.

A sensor answers a single question: how many joules has each (component, device)
used since this sensor was opened? Answering in cumulative joules (never power)
lets the sampler take exact deltas over whatever interval really elapsed, and lets
counter-based sources (RAPL, NVML energy) and power-based sources (NVML power,
estimators, replayed traces) look the same downstream: a power source integrates
internally over the ``now_s`` timestamps it is handed.

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

# -- The one small interface every power source implements -----------------------------

# Every accelerator, whatever its vendor (NVIDIA, AMD, Gaudi, Neuron), is this one
# component: the store, reports, metrics and dashboard key on it. Its device names
# (gpu0, amdgpu0, neuron0) say which hardware it is.
ACCELERATOR_COMPONENT = "accelerator"
# Components a sensor may report. ``platform`` (RAPL psys) overlaps cpu+dram and is
# reported for reference only: nothing downstream sums it with the others.
COMPONENTS = ("cpu", "dram", ACCELERATOR_COMPONENT, "net", "platform", "other")
# Names components had before (issue 14: "gpu" was every accelerator until schema 2 of
# reports and migration 0006 of the store). What joulestat wrote then, and still reads
# (crash checkpoints, replay traces, schema-1 reports), is mapped through this.
RENAMED_COMPONENTS = {"gpu": ACCELERATOR_COMPONENT}


def current_component(name: str) -> str:
    """The component's name today: an old name mapped, any other name unchanged.

    Why: a checkpoint or trace written before a rename must still match the readings of
    the agent that reads it, or its series would restart from a baseline and lose the gap.
    """
    return RENAMED_COMPONENTS.get(name, name)


@dataclass(frozen=True, slots=True)
class Reading:
    """Cumulative energy of one (component, device) since the sensor opened."""

    component: str
    device: str
    energy_j: float
    # provenance: rapl, nvml_energy, nvml_power, amdsmi, amdsmi_power, hlml, hlml_power,
    # neuron, model:<name>, replay
    source: str


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """What a sensor knows about one device it reports, recorded once per agent start."""

    component: str
    device: str
    source: str
    model: str = ""  # e.g. "NVIDIA H100 80GB HBM3", "Intel(R) Xeon(R) Platinum 8375C"
    uuid: str = ""  # stable hardware id where the API has one (NVML UUID)
    index: int | None = None  # the API's own index (NVML index, RAPL package number)
    vendor: str = ""  # "NVIDIA", "AMD", "Intel", "AWS": with model, what a dashboard shows
    # How its energy is split among processes when not by measured use: "mig_slice_estimate"
    attribution: str = ""
    # The board's power limit in W as its vendor API reports it, read once at start (NVML:
    # enforced limit; amdsmi: power_limit; HLML: default limit); None where it has none.
    # A GPU capped below its rating draws less and runs longer: a comparison should show it.
    power_limit_w: float | None = None


class SensorError(RuntimeError):
    """A sensor could not produce a reading this tick; the agent logs it and goes on."""


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
    """

    name: str

    def describe(self) -> list[DeviceInfo]: ...

    def read(self, now_s: float) -> list[Reading]: ...

    def close(self) -> None: ...

    def checkpoint(self) -> dict: ...

    def restore(self, state: dict) -> None: ...


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
