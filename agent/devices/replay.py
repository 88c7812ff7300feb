"""Recorded power traces replayed as if they were hardware (``--replay FILE``).

A trace lets every later stage (attribution, sinks, reports, dashboard) be run and tested
on a machine with no sensors, against energy that is known exactly.

File format: CSV, header exactly ``t_s,component,device,watts``, one row per change.

* Each row sets the power of (component, device) from its ``t_s`` until the next row for
  the same key: power is piecewise constant, so energy is an exact sum of rectangles.
* Time zero of the replay is the first ``t_s`` in the file; it is mapped to the monotonic
  time the sensor opened, so ``read(now_s)`` replays trace time
  ``first_t_s + (now_s - opened_s)``.
* Before a key's first row its power is 0 W. After its last row it holds its last watts
  for as long as the replay runs (a trace ending in ``0`` stops it cleanly).
* Rows must not go back in time (equal times are allowed; for one key the later row
  wins). Blank lines are ignored. ``component`` must be one of the ``Component`` names
  (``accelerator`` for every GPU: a trace naming ``gpu`` is refused, naming the line).

Restart: ``checkpoint`` keeps the time origin (and the energies last reported, with their
monotonic time); ``restore`` takes the origin back so trace time runs on through the gap,
as hardware would have. Energy is a function of trace time alone, so the origin is all
that matters; the saved energies only confirm it is the same trace: if the trace read
back gives other energies at the saved time, the checkpoint is ignored.
"""

from __future__ import annotations

import bisect
import csv
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from joulestat.core.records import DeviceInfo
from joulestat.core.tick import Component
from joulestat.devices.sensor import (
    BadState,
    Capabilities,
    Reading,
    Sensor,
    SeriesKey,
    get_float,
)

log = logging.getLogger(__name__)

SOURCE = "replay"
HEADER = ("t_s", "component", "device", "watts")
# One device's power: 100 kW is a whole rack. Far above any real device, far below
# where joules over a long trace could overflow a float and poison the counters.
MAX_TRACE_W = 100_000.0
# A trace's span: ten years. Past it, MAX_TRACE_W's joules are beyond any real node's
# (joulestat.core.plausible.MAX_NODE_ENERGY_J is 1e12 J).
MAX_TRACE_SPAN_S = 10 * 365.25 * 86_400

Key = tuple[Component, str]


class TraceError(ValueError):
    """A trace file that cannot be replayed; the message is ``<file>:<line>: <problem>``."""


@dataclass(frozen=True, slots=True)
class Series:
    """One key's steps: ``watts_w[i]`` holds from ``times_s[i]`` to ``times_s[i + 1]``."""

    times_s: tuple[float, ...]
    watts_w: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Trace:
    """A validated trace: where it came from, its time zero, and each key's steps."""

    path: Path
    start_s: float
    series: dict[Key, Series] = field(default_factory=dict)

    @property
    def end_s(self) -> float:
        """Time of the last row (every key holds its last watts after it)."""
        return max(s.times_s[-1] for s in self.series.values())


def _number(text: str, what: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: {what} is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise TraceError(f"{where}: {what} must be finite, got {text!r}")
    return value


def load_trace(path: Path | str) -> Trace:
    """Read and validate a trace file; any problem raises :class:`TraceError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}:0: cannot read: {exc}") from None
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None or tuple(h.strip() for h in header) != HEADER:
        raise TraceError(f"{path}:1: header must be exactly {','.join(HEADER)!r}, "
                         f"got {','.join(header or [])!r}")
    rows: dict[Key, tuple[list[float], list[float]]] = {}
    start_s: float | None = None
    prev_t_s = -math.inf
    for fields in reader:
        where = f"{path}:{reader.line_num}"
        if not fields or all(not f.strip() for f in fields):
            continue
        if len(fields) != len(HEADER):
            raise TraceError(f"{where}: expected {len(HEADER)} fields, got {len(fields)}")
        t_text, named, device, watts_text = (f.strip() for f in fields)
        t_s = _number(t_text, "t_s", where)
        watts_w = _number(watts_text, "watts", where)
        if not 0 <= watts_w <= MAX_TRACE_W:
            raise TraceError(f"{where}: watts must be between 0 and {MAX_TRACE_W:g} (one "
                             f"device), got {watts_text!r}")
        try:
            component = Component(named)
        except ValueError:
            raise TraceError(f"{where}: unknown component {named!r}; "
                             f"expected one of {', '.join(Component)}") from None
        if not device:
            raise TraceError(f"{where}: device must not be empty")
        if t_s < prev_t_s:
            raise TraceError(f"{where}: time goes backwards ({t_s} after {prev_t_s})")
        prev_t_s = t_s
        if start_s is None:
            start_s = t_s
        if t_s - start_s > MAX_TRACE_SPAN_S:
            raise TraceError(f"{where}: t_s {t_text} is {t_s - start_s:g} s after the first "
                             f"row, more than the limit of {MAX_TRACE_SPAN_S:g} s (ten years)")
        times, watts = rows.setdefault((component, device), ([], []))
        if times and times[-1] == t_s:
            watts[-1] = watts_w  # same instant: the later row wins
        else:
            times.append(t_s)
            watts.append(watts_w)
    if start_s is None:
        raise TraceError(f"{path}:{reader.line_num}: no data rows after the header")
    series = {k: Series(tuple(t), tuple(w)) for k, (t, w) in rows.items()}
    return Trace(path=path, start_s=start_s, series=series)


def trace_energy_j(trace: Trace, t_from_s: float, t_to_s: float) -> dict[Key, float]:
    """Exact joules per key over [t_from_s, t_to_s] in the trace's own time (its t_s).

    Walks every step directly (no precomputed sums), so tests can use it as ground truth
    for :class:`ReplaySensor`.
    """
    if t_to_s < t_from_s:
        raise ValueError(f"t_to_s {t_to_s} is before t_from_s {t_from_s}")
    energy: dict[Key, float] = {}
    for key, s in trace.series.items():
        total_j = 0.0
        for i, watts_w in enumerate(s.watts_w):
            seg_start = max(s.times_s[i], t_from_s)
            seg_end = min(s.times_s[i + 1] if i + 1 < len(s.times_s) else math.inf, t_to_s)
            if seg_end > seg_start:
                total_j += watts_w * (seg_end - seg_start)
        energy[key] = total_j
    return energy


class ReplaySensor(Sensor):
    """Replays a trace in real (monotonic) time; cumulative joules since it opened."""

    name = "replay"
    # Recorded power, integrated exactly; the trace knows its idle (its lowest level).
    capabilities = Capabilities(power_only=True, known_idle=True)

    def __init__(self, trace: Trace, opened_s: float | None = None) -> None:
        self.trace = trace
        self.opened_s = time.monotonic() if opened_s is None else opened_s
        # Joules from each key's first row up to each later row: O(log n) reads.
        self._prefix_j: dict[Key, tuple[float, ...]] = {}
        for key, s in trace.series.items():
            prefix = [0.0]
            for i in range(1, len(s.times_s)):
                prefix.append(prefix[-1] + s.watts_w[i - 1] * (s.times_s[i] - s.times_s[i - 1]))
            self._prefix_j[key] = tuple(prefix)
        self._last_s = self.opened_s  # monotonic time of the last read

    def _energy_to_j(self, key: Key, t_s: float) -> float:
        s = self.trace.series[key]
        i = bisect.bisect_right(s.times_s, t_s) - 1
        if i < 0:
            return 0.0
        return self._prefix_j[key][i] + s.watts_w[i] * (t_s - s.times_s[i])

    def describe(self) -> list[DeviceInfo]:
        return [DeviceInfo(component=c, device=d, source=SOURCE) for c, d in self.trace.series]

    def known_idle_w(self) -> dict[SeriesKey, float]:
        """A trace's idle power is its lowest level: the trace knows its whole future."""
        return {key: min(s.watts_w) for key, s in self.trace.series.items()}

    def _trace_time(self, now_s: float) -> float:
        return self.trace.start_s + max(now_s - self.opened_s, 0.0)

    def read(self, now_s: float) -> list[Reading]:
        self._last_s = now_s
        t_s = self._trace_time(now_s)
        return [
            Reading(c, d, self._energy_to_j((c, d), t_s), SOURCE) for c, d in self.trace.series
        ]

    def checkpoint(self) -> dict:
        """The time origin, the last read's time and the energies it reported."""
        t_s = self._trace_time(self._last_s)
        return {
            "opened_s": self.opened_s,
            "last_s": self._last_s,
            "energy_j": [[c, d, self._energy_to_j((c, d), t_s)] for c, d in self.trace.series],
        }

    def restore(self, state: dict) -> None:
        """Take the checkpoint's time origin, unless its energies show another trace."""
        try:
            if not isinstance(state, dict):
                raise BadState(f"not an object: {type(state).__name__}")
            opened_s = get_float(state, "opened_s")
            last_s = get_float(state, "last_s")
            saved = state.get("energy_j")
            if not isinstance(saved, list):
                raise BadState(f"'energy_j' is not a list: {saved!r:.60}")
            t_s = self.trace.start_s + max(last_s - opened_s, 0.0)
            for row in saved:
                if (not isinstance(row, list) or len(row) != 3
                        or not all(isinstance(x, str) for x in row[:2])):
                    raise BadState(f"malformed energy row {row!r:.60}")
                key = (row[0], row[1])
                energy_j = get_float({"energy_j": row[2]}, "energy_j")
                if key not in self.trace.series:
                    raise BadState(f"{key[0]}/{key[1]} is not in {self.trace.path}")
                if not math.isclose(self._energy_to_j(key, t_s), energy_j,
                                    rel_tol=1e-9, abs_tol=1e-6):
                    raise BadState(f"{key[0]}/{key[1]} had {energy_j} J at trace time {t_s}, "
                                   f"{self.trace.path} gives {self._energy_to_j(key, t_s)} J")
        except BadState as exc:
            log.warning("replay checkpoint ignored (replay restarts from the trace's "
                        "start): %s", exc)
            return
        self.opened_s, self._last_s = opened_s, last_s

    def close(self) -> None:
        """Nothing to release: the trace is held in memory."""


def open_replay(path: Path | str, now_s: float | None = None) -> ReplaySensor:
    """Load ``path`` (raising :class:`TraceError` if invalid) and start replaying at ``now_s``."""
    return ReplaySensor(load_trace(path), opened_s=now_s)
