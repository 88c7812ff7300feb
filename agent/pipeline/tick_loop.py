"""The one tick loop, shared by the daemon and embedded mode.

Ticks are scheduled on the monotonic clock at start + k * interval. A tick that runs
late is not made up for: the missed slots are skipped (logged at debug level) and the
next tick integrates over the real elapsed time, so no energy is lost or invented and
a stalled machine does not cause a burst of ticks. When ``stop`` is set the loop runs
one final tick, which counts the energy since the last one, so a clean stop loses
nothing.

What differs between the two modes is what happens beside each tick, passed in as
hooks: the daemon records how long each tick's work took and forgets long-ended jobs
every minute; embedded mode, which has no store thread, flushes its writer in the
loop. Keeping the schedule in one place keeps the two modes' ticks identical.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

# Called after each scheduled tick with (monotonic now, seconds the tick's work took).
TickHook = Callable[[float, float], None]


class StopEvent(Protocol):
    """What the loop needs of a :class:`threading.Event` (tests pass a fake clock's)."""

    def wait(self, timeout: float | None = None) -> bool: ...


@dataclass(frozen=True, slots=True)
class TickSettings:
    """How often the pipeline ticks (``--interval``), the daemon's and embedded mode's."""

    interval_s: float


class Every:
    """A hook that runs ``action(now_s)`` once ``period_s`` has passed since it last ran
    (the first time, since it was made), or at once when ``asked()`` is true.

    ``asked`` is for work someone is waiting for (a job ended and its final figures
    should be stored now, not at the next interval).
    """

    def __init__(self, period_s: float, action: Callable[[float], object], *,
                 asked: Callable[[], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.period_s = float(period_s)
        self.action = action
        self.asked = asked
        self.next_s = clock() + self.period_s

    def __call__(self, now_s: float, work_s: float) -> None:
        if now_s >= self.next_s or (self.asked is not None and self.asked()):
            self.action(now_s)
            self.next_s = now_s + self.period_s


# The closest a tick asked for on demand follows the last: readers asking in a loop get
# five ticks (and store commits) a second at most, not one per ask.
ON_DEMAND_GAP_S = 0.2


class SharedTick:
    """The pipeline's tick, taken by the loop on schedule and by a reader on demand.

    Why: a job's figures asked for now (the Trainer callback's, at a logging step) must
    hold the units its program counted up to the ask and the energy up to the same
    moment. Counts reach the agent when sent and go into the next tick, so the last
    stored tick holds energy up to its end but only the counts that arrived before it:
    read then, energy per step is the energy of one moment over the steps of an earlier
    one. :meth:`since` runs a tick after the counts arrived (or waits for the loop's, if
    one began meanwhile), so both are of the same moment. The tick contract allows it:
    a tick integrates cumulative counters over ``(t0, t1]`` whatever its length.
    Ticks never overlap (one lock); on-demand ticks are at least
    :data:`ON_DEMAND_GAP_S` apart.
    """

    def __init__(self, tick: Callable[[], object], *, gap_s: float = ON_DEMAND_GAP_S,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] = time.sleep) -> None:
        self._tick, self._gap_s, self._clock, self._sleep = tick, gap_s, clock, sleep
        self._lock = threading.Lock()
        self._began_s: float | None = None  # when the last tick began
        self.on_demand = 0  # ticks run by since(), for tests and benchmarks

    def __call__(self) -> object:
        with self._lock:
            self._began_s = self._clock()
            return self._tick()

    def since(self, asked_s: float) -> None:
        """Return once a tick that began at or after ``asked_s`` (this clock's time) has
        run: the loop's, if one began meanwhile, else one run here."""
        with self._lock:
            if self._began_s is not None and self._began_s >= asked_s:
                return
            if self._began_s is not None:
                wait_s = self._began_s + self._gap_s - self._clock()
                if wait_s > 0:
                    self._sleep(wait_s)
            self._began_s = self._clock()
            self.on_demand += 1
            self._tick()


@dataclass
class TickLoop:
    """Calls ``tick`` every ``interval_s`` until ``stop`` is set, then once more.

    ``hooks`` run after every scheduled tick, in order, not after the final one: what
    follows a stop (closing the pipeline, which flushes the store) does their work.
    """

    tick: Callable[[], object]
    interval_s: float
    stop: StopEvent
    hooks: Sequence[TickHook] = ()
    clock: Callable[[], float] = time.monotonic  # schedules ticks
    timer: Callable[[], float] = time.perf_counter  # times each tick's work

    def run(self) -> int:
        """Tick until stopped; returns how many ticks ran, the final one included."""
        if self.interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {self.interval_s}")
        ticks = 0
        next_tick = self.clock() + self.interval_s
        while not self.stop.wait(max(next_tick - self.clock(), 0.0)):
            started = self.timer()
            self.tick()
            work_s = self.timer() - started
            ticks += 1
            now = self.clock()
            for hook in self.hooks:
                hook(now, work_s)
            next_tick += self.interval_s
            if next_tick <= now:  # late: skip missed slots, the next tick covers the gap
                missed = int((now - next_tick) // self.interval_s) + 1
                log.debug("tick ran late; skipping %d slot(s)", missed)
                next_tick += missed * self.interval_s
        self.tick()  # a clean stop counts the energy since the last tick
        return ticks + 1
