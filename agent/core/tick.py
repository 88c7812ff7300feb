"""What one tick of the sampler produced: the node's energy over (t0, t1]."""

from __future__ import annotations

from dataclasses import dataclass


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
