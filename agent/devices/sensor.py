"""The one small interface every power source implements.

A sensor answers a single question: how many joules has each (component, device)
used since this sensor was opened? Answering in cumulative joules (never power)
lets the sampler take exact deltas over whatever interval really elapsed, and lets
counter-based sources (RAPL, NVML energy) and power-based sources (NVML power,
estimators, replayed traces) look the same downstream: a power source integrates
internally over the ``now_s`` timestamps it is handed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

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
