"""What a hardware energy counter does wrong, and how the energy of its faulty ticks is
filled in instead of lost.

A cumulative counter (RAPL's ``energy_uj``) can freeze while the hardware still draws
power, go back without a wrap (a reset to 0), jump past anything the part can draw,
change the range it wraps at, or vanish. Each of these used to leave a tick of 0 J
labelled as measured. Now the tick's energy is *filled*: the zone's recent power (an
average over the last few seconds of good reads) times the tick's length, stored under
the provenance :func:`joulestat.core.tick.fill_source` gives (``fill:rapl``), which every
view classes as estimated. When the counter reads normally again:

* after a freeze or an unreadable stretch whose counter *caught up* (the hardware kept
  counting: the delta over the gap is about the gap times the recent power, not one
  tick's worth), the gap's true energy is known, so what was filled is reconciled
  against it: the tick that closes the fault adds ``delta - filled`` (never less than
  0), again as fill, and the gap's total is exact;
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
from dataclasses import dataclass, field
from enum import StrEnum

# The recent power a fill uses is the mean over the good reads of about this long: long
# enough to smooth one noisy tick, short enough to follow a job that just started.
RECENT_POWER_WINDOW_S = 5.0
# A counter that has not moved for this long while its zone drew power is frozen. RAPL
# updates about every millisecond (kernel powercap docs; Intel SDM vol. 3B 15.10), so a
# tick (0.05 s at the shortest) that shows no change is already a fault; the margin only
# keeps two reads an instant apart from looking like one.
FROZEN_AFTER_S = 0.05


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
    filled_uj: int = 0


@dataclass
class FillState:
    """One counter's memory for filling: its recent power and the fault it is in.

    ``gap_filled_uj`` is what was filled since the counter's last good value, the part
    a catch-up reconciles against; a re-based counter (jump, reset) starts it afresh.
    """

    recent_w: float | None = None
    gap_filled_uj: int = 0
    event: _Event | None = None
    # The good reads behind recent_w: (µJ, s), the newest last, RECENT_POWER_WINDOW_S
    # of them (the newest is kept whatever its length).
    _window: deque[tuple[int, float]] = field(default_factory=deque)
    _window_uj: int = 0
    _window_s: float = 0.0

    def learn(self, delta_uj: int, elapsed_s: float) -> None:
        """Add a good read to the window the recent power is the mean of."""
        if elapsed_s <= 0:
            return
        self._window.append((delta_uj, elapsed_s))
        self._window_uj += delta_uj
        self._window_s += elapsed_s
        while len(self._window) > 1 and \
                self._window_s - self._window[0][1] >= RECENT_POWER_WINDOW_S:
            old_uj, old_s = self._window.popleft()
            self._window_uj -= old_uj
            self._window_s -= old_s
        self.recent_w = self._window_uj / 1e6 / self._window_s

    def stopped_short_uj(self) -> int:
        """What the newest good read missed, for a counter now found frozen: it stopped
        somewhere inside that read's interval, so that read counted only part of it. The
        read leaves the window (it is not the zone's power) and the shortfall against the
        power of the reads before it is returned, to be filled with the freeze."""
        if len(self._window) < 2:
            return 0
        delta_uj, elapsed_s = self._window.pop()
        self._window_uj -= delta_uj
        self._window_s -= elapsed_s
        self.recent_w = self._window_uj / 1e6 / self._window_s
        return max(self.fill_uj(elapsed_s) - delta_uj, 0)

    def fill_uj(self, elapsed_s: float) -> int:
        """Energy to fill for ``elapsed_s`` seconds: the recent power's, or 0 when no good
        read has said what it is yet (the start log says so)."""
        if self.recent_w is None or elapsed_s <= 0:
            return 0
        return round(self.recent_w * elapsed_s * 1e6)

    def caught_up(self, delta_uj: int, gap_s: float, since_read_s: float) -> bool:
        """Whether a delta over the whole gap since the last good value is the gap's
        energy (the hardware kept counting) rather than the last tick's alone."""
        if self.gap_filled_uj <= 0 or not self.recent_w:
            return False
        midway_s = (gap_s + since_read_s) / 2
        return delta_uj > self.recent_w * midway_s * 1e6


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

    def begin(self, state: FillState, kind: CounterFault, now_s: float, what: str,
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

    def end(self, state: FillState, now_s: float, what: str, outcome: str) -> None:
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
                          event.filled_uj / 1e6, self._fill_source, outcome)
