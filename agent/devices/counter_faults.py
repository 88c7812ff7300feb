"""What a hardware energy counter does wrong, and how the energy of its faulty ticks is
filled in instead of lost: one rule for RAPL (:mod:`joulestat.devices.rapl`) and the
accelerators' counters (NVML, amdsmi, HLML: :mod:`joulestat.devices.accelerator`).

A cumulative counter (RAPL's ``energy_uj``, NVML's total energy) can freeze while the
hardware still draws power, go back without a wrap (a reset to 0), jump past anything
the part can draw, change the range it wraps at, or vanish. Each of these used to leave
a tick of 0 J labelled as measured. Now the tick's energy is *filled*: the device's
recent power (the mean of its last 5 s of good reads) times the tick's length, stored
under the provenance :func:`joulestat.core.tick.fill_source` gives (``fill:rapl``), which
every view classes as estimated. When the counter reads normally again:

* after a freeze or an unreadable stretch whose counter *caught up* (the hardware kept
  counting: the delta over the gap is about the gap times the recent power, not one
  tick's worth), the gap's true energy is known, so what was filled is reconciled
  against it: the tick that closes the fault adds ``delta - filled``, again as fill,
  and the gap's total is exact. Never less than 0: fills above the counter's delta
  stand (said in the fault's end line), since each filled tick was already split
  among the jobs and the unattributed remainder, so jobs + unattributed = node on
  every tick either way;
* after a freeze whose counter did not catch up (it resumed from the frozen value, the
  hardware's energy of the gap is gone), the fills stand and the delta counts as
  measured;
* after a jump or a reset, the counter was re-based at the faulty value, so the next
  delta is an ordinary tick.

Every event is counted per kind (``joulestat_agent_sensor_faults_total{sensor,kind}``)
and logged twice at most: once when it starts, once when it ends, with its span and the
energy filled.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from enum import StrEnum

# The recent power a fill uses is the mean over the good reads of about this long: long
# enough to smooth one noisy tick, short enough to follow a job that just started.
RECENT_POWER_WINDOW_S = 5.0
class CounterFault(StrEnum):
    """A kind of counter misbehaviour: the ``kind`` label of the faults metric."""

    FROZEN = "frozen"  # unchanged while the zone draws power
    BACKWARDS = "backwards"  # went back with no plausible wrap (a reset)
    JUMP = "jump"  # advanced past what the zone can draw in the time
    RANGE_CHANGED = "range_changed"  # max_energy_range_uj is not what it was
    UNREADABLE = "unreadable"  # the file is gone, unreadable or malformed


@dataclass
class _Event:
    """One fault while it lasts: what, since when (monotonic s), what was filled."""

    kind: CounterFault
    since_s: float
    filled_j: float = 0.0


class CounterRepair:
    """One counter's fault handling: its recent power, the fault it is in, and the
    energy filled for it so far (``filled_j``, cumulative, part of the series' energy).

    The sensor reads its counter in its own units and says what it saw: a fault
    (:meth:`fault`), a read that did not move (:meth:`unchanged`), or a plausible
    advance (:meth:`advanced`, which says whether the delta counts as measured).
    ``gap_filled_j`` is what was filled since the counter's last good value, the part a
    catch-up reconciles against; a re-based counter (jump, reset) starts it afresh.
    ``filled_now`` says the latest read's gain was filled (``Reading.filled``).
    """

    def __init__(self, faults: FaultLog, what: str, frozen_after_s: float) -> None:
        self.faults, self.what, self.frozen_after_s = faults, what, frozen_after_s
        self.recent_w: float | None = None
        self.filled_j = 0.0
        self.filled_now = False
        self.gap_filled_j = 0.0
        self.event: _Event | None = None
        # Seen standing still for a while before it had drawn anything: a device that
        # draws nothing when idle (a fake in a test; no real RAPL zone or accelerator
        # does), whose counter stopping again later is idleness, not a freeze.
        self.stands_still = False
        # The good reads behind recent_w: (J, s), the newest last, RECENT_POWER_WINDOW_S
        # of them (the newest is kept whatever its length).
        self._window: deque[tuple[float, float]] = deque()
        self._window_j = 0.0
        self._window_s = 0.0

    def fault(self, kind: CounterFault, now_s: float, since_read_s: float, detail: str,
              *, rebased: bool, extra_j: float = 0.0) -> None:
        """Fill the time since the last read at the recent power (plus ``extra_j``); a
        re-based counter (``rebased``) continues from its new value, its gap closed."""
        self.faults.begin(self, kind, now_s, self.what, detail)
        added_j = self._fill_j(since_read_s) + extra_j
        self.filled_j += added_j
        self.gap_filled_j = 0.0 if rebased else self.gap_filled_j + added_j
        assert self.event is not None
        self.event.filled_j += added_j
        self.filled_now = True

    def unchanged(self, now_s: float, elapsed_s: float, since_read_s: float,
                  detail: str) -> bool:
        """A read that shows no change ``elapsed_s`` after the last good value: True when
        that is a freeze (filled: the counter stopped while the device drew power)."""
        if elapsed_s < self.frozen_after_s:
            return False  # too soon to tell: the next delta covers this read's time too
        if not self.recent_w or self.stands_still:
            self.stands_still = self.stands_still or not self.recent_w
            return False
        # The counter stopped inside the last good read's interval: that read's
        # shortfall is filled with the freeze's first tick.
        short_j = self._stopped_short_j() if self.event is None else 0.0
        self.fault(CounterFault.FROZEN, now_s, since_read_s, detail, rebased=False,
                   extra_j=short_j)
        return True

    def advanced(self, delta_j: float, elapsed_s: float, since_read_s: float,
                 now_s: float) -> bool:
        """A plausible delta over ``elapsed_s`` since the last good value: True when it
        counts as measured, False when it went into the fill (a caught-up gap). Ends
        the open fault, if any, saying its span and what was filled."""
        if self.event is None:
            self._learn(delta_j, elapsed_s)
            return True
        measured = True
        if self._caught_up(delta_j, elapsed_s, since_read_s):
            rest_j = max(delta_j - self.gap_filled_j, 0.0)
            outcome = (f"the counter caught up with {delta_j:.1f} J over the gap, so "
                       f"{rest_j:.1f} J more were added as fill")
            if delta_j < self.gap_filled_j:
                # Never a negative correction: the filled ticks were split among the
                # jobs and the unattributed remainder already (some jobs may have
                # ended since), and a tick's energy is never below 0 (the sampler
                # counts a series going back as 0 J). The fills stand, balanced on
                # every tick; the overshoot is said here, once.
                outcome = (f"the counter caught up with {delta_j:.1f} J over the gap, "
                           f"{self.gap_filled_j - delta_j:.1f} J less than was filled; "
                           f"the fills stand (no tick takes joules back)")
            self._add_fill(rest_j)
            measured = False
        elif self.gap_filled_j == 0:
            outcome = "counting went on from the value it was re-based at"
            self._learn(delta_j, min(elapsed_s, since_read_s))
        else:
            # Resumed from where it stopped, somewhere inside this read's interval: what
            # it counted is this tick's end; its start, still stopped, is filled.
            short_j = max(self._fill_j(since_read_s) - delta_j, 0.0)
            outcome = (f"the counter resumed without catching up; the fill stands, "
                       f"{short_j:.1f} J more for the part of this tick it was still "
                       f"stopped")
            self._add_fill(short_j)
        self.gap_filled_j = 0.0
        self.faults.end(self, now_s, self.what, outcome)
        return measured

    def _add_fill(self, joules: float) -> None:
        self.filled_j += joules
        assert self.event is not None
        self.event.filled_j += joules
        self.filled_now = True

    def _learn(self, delta_j: float, elapsed_s: float) -> None:
        """Add a good read to the window the recent power is the mean of."""
        if elapsed_s <= 0:
            return
        self._window.append((delta_j, elapsed_s))
        self._window_j += delta_j
        self._window_s += elapsed_s
        while len(self._window) > 1 and \
                self._window_s - self._window[0][1] >= RECENT_POWER_WINDOW_S:
            old_j, old_s = self._window.popleft()
            self._window_j -= old_j
            self._window_s -= old_s
        self.recent_w = self._window_j / self._window_s

    def _stopped_short_j(self) -> float:
        """What the newest good read missed, for a counter now found frozen: it stopped
        somewhere inside that read's interval, so that read counted only part of it. The
        read leaves the window (it is not the device's power) and its shortfall against
        the power of the reads before it is returned."""
        if len(self._window) < 2:
            return 0.0
        delta_j, elapsed_s = self._window.pop()
        self._window_j -= delta_j
        self._window_s -= elapsed_s
        self.recent_w = self._window_j / self._window_s
        return max(self._fill_j(elapsed_s) - delta_j, 0.0)

    def _fill_j(self, elapsed_s: float) -> float:
        """Energy to fill for ``elapsed_s`` seconds: the recent power's, or 0 when no good
        read has said what it is yet (the start log says so)."""
        if self.recent_w is None or elapsed_s <= 0:
            return 0.0
        return self.recent_w * elapsed_s

    def _caught_up(self, delta_j: float, gap_s: float, since_read_s: float) -> bool:
        """Whether a delta over the whole gap since the last good value is the gap's
        energy (the hardware kept counting) rather than the last tick's alone."""
        if self.gap_filled_j <= 0 or not self.recent_w:
            return False
        return delta_j > self.recent_w * (gap_s + since_read_s) / 2


class FaultLog:
    """Counts and says a sensor's counter faults: one line when an event starts, one
    when it ends (with its span and the energy filled), a count per kind."""

    def __init__(self, logger: logging.Logger, source: str, fill_source: str) -> None:
        self._log = logger
        self._source = source
        self._fill_source = fill_source
        self.totals: dict[str, int] = {kind.value: 0 for kind in CounterFault}

    def count(self, kind: CounterFault) -> None:
        self.totals[kind.value] += 1

    def begin(self, state: CounterRepair, kind: CounterFault, now_s: float, what: str,
              detail: str) -> None:
        """``state`` is in a fault of ``kind`` from ``now_s``: counted and said, unless it
        is the fault already open (a frozen counter stays one event however long)."""
        if state.event is not None and state.event.kind == kind:
            return
        self.count(kind)
        if state.event is None:
            state.event = _Event(kind, now_s)
        else:
            state.event.kind = kind
        if state.recent_w is None:
            filling = "no good read has given its power yet, so its ticks are filled with 0 J"
        else:
            filling = (f"each tick is filled at its recent {state.recent_w:.1f} W "
                       f"(stored as {self._fill_source}, an estimate)")
        self._log.warning("%s: %s (%s); %s until it reads normally", what, kind.value,
                          detail, filling)

    def end(self, state: CounterRepair, now_s: float, what: str, outcome: str) -> None:
        """Close the open event of ``state``, saying its span and the energy filled."""
        event = state.event
        if event is None:
            return
        state.event = None
        span_s = max(now_s - event.since_s, 0.0)
        ended_wall = time.time()
        started = time.strftime("%H:%M:%S", time.gmtime(ended_wall - span_s))
        ended = time.strftime("%H:%M:%S", time.gmtime(ended_wall))
        self._log.warning("%s: %s from %s to %s UTC (%.1f s); %.1f J filled as %s; %s",
                          what, event.kind.value, started, ended, span_s,
                          event.filled_j, self._fill_source, outcome)
