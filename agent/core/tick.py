"""What one tick of the sampler produced: the node's energy over (t0, t1], and the
components that energy is reported by."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Component(StrEnum):
    """What part of a node a series measures: the closed set every layer keys on.

    A ``StrEnum`` so a member *is* its string: it compares and hashes equal to ``"cpu"``,
    formats as ``cpu`` and is written as ``cpu`` by JSON, SQL drivers and Prometheus, so
    stored rows, metrics and reports are what they were when components were strings, and
    a row read back as a plain string still finds its member's entries.

    Every accelerator, whatever its vendor (NVIDIA, AMD, Gaudi, Neuron), is ``ACCELERATOR``:
    its device names (gpu0, amdgpu0, neuron0) say which hardware it is. ``PLATFORM`` (RAPL
    psys) overlaps cpu and dram and is reported for reference only: nothing downstream sums
    it with the others.
    """

    CPU = "cpu"
    DRAM = "dram"
    ACCELERATOR = "accelerator"
    NET = "net"
    PLATFORM = "platform"
    OTHER = "other"


_COMPONENT_NAMES = frozenset(Component)


def is_component(name: object) -> bool:
    """Whether ``name`` is one of :class:`Component`'s names.

    Why: what comes back from disk (a crash checkpoint, a spool segment) is checked
    against the closed set before it keys anything, so a name this joulestat does not
    measure (``gpu``, the accelerator's name before the first release) is refused where
    it is read, with the name, instead of becoming a series of its own.
    """
    return isinstance(name, str) and name in _COMPONENT_NAMES


# A tick whose energy a sensor filled in for a faulty counter (joulestat.devices.
# counter_faults) is stored as ``fill:<the sensor's source>``: an estimate, never the
# sensor's own name (joulestat.reports.sources classes it).
FILL_PREFIX = "fill:"


def fill_source(source: str) -> str:
    """The provenance of a tick ``source``'s counter could not measure: ``fill:rapl``."""
    return f"{FILL_PREFIX}{source}"


@dataclass(frozen=True, slots=True)
class TickEntry:
    """Energy one (component, device) used during the tick, with where it came from."""

    component: str
    device: str
    source: str
    energy_j: float
    # Start of what this entry covers when it is earlier than the tick's start: a sensor
    # that could not be read for a while covers its whole gap in one entry, so the gap
    # shows as one long interval of the right power, not zeros and then a spike.
    t0_s: float | None = None


@dataclass(frozen=True, slots=True)
class Tick:
    """The interval (t0_s, t1_s] in Unix epoch seconds and every entry's energy delta.

    Times are wall clock so rows from several nodes line up; the duration was taken
    from the monotonic clock, so ``t1_s - t0_s`` is the real elapsed time even when a
    tick ran late or the wall clock was stepped.
    """

    t0_s: float
    t1_s: float
    entries: tuple[TickEntry, ...]

    @property
    def duration_s(self) -> float:
        return self.t1_s - self.t0_s

    def entry_t0_s(self, entry: TickEntry) -> float:
        return self.t0_s if entry.t0_s is None else min(entry.t0_s, self.t0_s)

    def entry_duration_s(self, entry: TickEntry) -> float:
        """The time ``entry`` covers: the tick's, or longer after a sensor gap."""
        return self.t1_s - self.entry_t0_s(entry)

    def power_w(self, entry: TickEntry) -> float:
        """Average power of ``entry`` over the time it covers."""
        duration_s = self.entry_duration_s(entry)
        return entry.energy_j / duration_s if duration_s > 0 else 0.0
