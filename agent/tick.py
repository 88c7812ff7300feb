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

    def power_w(self, entry: TickEntry) -> float:
        """Average power of ``entry`` over this tick."""
        return entry.energy_j / self.duration_s if self.duration_s > 0 else 0.0
