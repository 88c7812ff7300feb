"""One tick: read every sensor once and turn cumulative joules into deltas.

The sampler is the only place that knows about time. Sensors answer in cumulative
joules; the sampler remembers the last answer per (component, device, source) and
emits the difference, so a tick that runs late simply covers more time and no
energy is ever assumed from the nominal interval.

Crash recovery: :meth:`Sampler.checkpoint` (every tick, no I/O) captures the last tick's
monotonic time, the cumulative value of every series and each sensor's own state. A
process restarted on the same boot calls :meth:`Sampler.restore` instead of ``start``;
CLOCK_MONOTONIC runs on across processes, so its first tick spans (checkpoint, now] and
the sensors' counters say what was used in between: nothing lost, nothing counted twice.
Whether the checkpoint comes from this boot is the caller's to check (boot_id): after a
reboot monotonic time restarts and the old values mean nothing.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from joulestat.core.logs import LogOnce
from joulestat.core.records import DeviceInfo
from joulestat.core.tick import Component, Tick, TickEntry, fill_source, is_component
from joulestat.devices.sensor import Reading, Sensor

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (component, device, source)


# Past this, a tick starting before (or after) the last one ended is a wall-clock step,
# not the jitter of reading two clocks in turn, and the tick keeps its monotonic length.
CLOCK_JITTER_S = 1.0


class Sampler:
    """Reads sensors and yields :class:`Tick` objects covering consecutive intervals."""

    def __init__(
        self,
        sensors: Sequence[Sensor],
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.sensors = list(sensors)
        self._monotonic = monotonic
        self._wall = wall
        self._last_j: dict[Key, float] = {}
        # Monotonic time each series was last read, when that is before the last tick:
        # a series a sensor could not read for a while covers the whole gap when it
        # comes back (see TickEntry.t0_s).
        self._missed_since: dict[Key, float] = {}
        self._last_mono: float | None = None
        # The last tick's end (wall clock). A tick's start is its end minus the monotonic
        # time elapsed, and the two clocks are read one after the other: a process
        # preempted between the reads (a loaded node) would start the next tick a few
        # ms before this one ended, and two ticks would overlap. The next tick starts
        # here instead (unless the wall clock stepped).
        self._last_wall: float | None = None
        # A failing sensor (or its checkpoint) is said once until it recovers.
        self._failing = LogOnce(log, logging.ERROR)
        self._checkpoint_failing = LogOnce(log)
        self.sensor_errors_total: dict[str, int] = {s.name: 0 for s in self.sensors}

    def describe(self) -> list[DeviceInfo]:
        devices: list[DeviceInfo] = []
        for sensor in self.sensors:
            try:
                devices.extend(sensor.describe())
            except Exception as exc:  # a sensor that cannot describe itself still ticks
                log.warning("sensor %s could not describe its devices: %s", sensor.name, exc)
        return devices

    def start(self) -> None:
        """Take the baseline reading; the first tick then covers (start, first tick]."""
        self._last_mono = self._monotonic()
        self._last_wall = None
        for reading in self._read_all(self._last_mono):
            self._last_j[(reading.component, reading.device, reading.source)] = reading.energy_j

    def checkpoint(self) -> dict:
        """State to resume from after a crash: JSON types only, cheap enough for every tick.

        ``{"mono_s": last tick's monotonic time, "wall_s": its wall-clock end (absent
        before the first tick), "last_j": [[component, device, source, joules], ...],
        "sensors": {sensor name: sensor.checkpoint()}}``. A sensor whose
        checkpoint fails is left out (logged once); it then restarts from a baseline.
        """
        if self._last_mono is None:
            raise RuntimeError("Sampler.checkpoint() before start() or tick()")
        sensors: dict[str, dict] = {}
        for sensor in self.sensors:
            try:
                sensors[sensor.name] = sensor.checkpoint()
            except Exception as exc:
                self._checkpoint_failing.problem(
                    sensor.name, "failed", "sensor %s: checkpoint failed, it will restart "
                    "from a baseline after a crash: %s", sensor.name, exc)
                continue
            self._checkpoint_failing.recovered(sensor.name)
        state: dict[str, Any] = {
            "mono_s": self._last_mono,
            "last_j": [[c, d, src, j] for (c, d, src), j in self._last_j.items()],
            "sensors": sensors,
        }
        if self._last_wall is not None:
            state["wall_s"] = self._last_wall
        return state

    def restore(self, state: dict) -> bool:
        """Resume from :meth:`checkpoint` instead of :meth:`start`; False if unusable.

        On True the next :meth:`tick` covers (checkpoint time, now]. Unusable means: not
        the checkpoint's shape, ``mono_s`` in the future (another boot), or no sensor of
        this process named in it; the caller then calls ``start()``. A sensor with no
        state in the checkpoint, or whose restore fails, is read now as a baseline: its
        share of the gap is unknown, so its series start from here rather than count
        the difference between two unrelated totals.
        """
        now_mono = self._monotonic()
        parsed = self._parse_checkpoint(state, now_mono)
        if parsed is None:
            return False
        mono_s, last_j, saved = parsed
        if not any(sensor.name in saved for sensor in self.sensors):
            log.warning("checkpoint ignored: none of its sensors (%s) is open now",
                        ", ".join(sorted(map(str, saved))) or "none")
            return False
        restored: set[str] = set()
        for sensor in self.sensors:
            if sensor.name not in saved:
                log.info("sensor %s has no checkpoint; it starts from a baseline", sensor.name)
                continue
            try:
                sensor.restore(saved[sensor.name])
            except Exception as exc:
                log.warning("sensor %s: restore failed, it starts from a baseline: %s",
                            sensor.name, exc)
                continue
            restored.add(sensor.name)
        fresh = [s for s in self.sensors if s.name not in restored]
        for reading in self._read_all(now_mono, fresh):
            last_j[(reading.component, reading.device, reading.source)] = reading.energy_j
        self._last_j = last_j
        self._last_mono = mono_s
        # The gap tick starts where the checkpoint's tick ended, to the microsecond: the
        # stored ticks stay contiguous through the crash (an agent before "wall_s" wrote
        # none: then it starts at the checkpoint's monotonic time, read on today's wall).
        wall_s = state.get("wall_s")
        self._last_wall = (float(wall_s) if isinstance(wall_s, int | float)
                           and not isinstance(wall_s, bool) and math.isfinite(wall_s)
                           else None)
        return True

    @staticmethod
    def _parse_checkpoint(
        state: Any, now_mono: float
    ) -> tuple[float, dict[Key, float], dict[str, Any]] | None:
        """(mono_s, last_j, sensor states) from a checkpoint, or None when unusable."""
        if not isinstance(state, dict):
            log.warning("checkpoint ignored: not an object")
            return None
        mono_s = state.get("mono_s")
        rows = state.get("last_j")
        saved = state.get("sensors")
        if (isinstance(mono_s, bool) or not isinstance(mono_s, int | float)
                or not math.isfinite(mono_s) or not isinstance(rows, list)
                or not isinstance(saved, dict)):
            log.warning("checkpoint ignored: it lacks mono_s, last_j or sensors")
            return None
        if mono_s > now_mono:
            log.warning("checkpoint ignored: taken at monotonic %.3f s, after now (%.3f s); "
                        "from another boot?", mono_s, now_mono)
            return None
        last_j: dict[Key, float] = {}
        for row in rows:
            if not (isinstance(row, list) and len(row) == 4
                    and all(isinstance(x, str) for x in row[:3])
                    and isinstance(row[3], int | float) and not isinstance(row[3], bool)
                    and math.isfinite(row[3])):
                log.warning("checkpoint: malformed series row %.80r skipped", row)
            elif not is_component(row[0]):
                # No reading will ever match it (``gpu`` of a development agent from
                # before the first release): said, and its device starts from a baseline.
                log.warning("checkpoint: series row %.80r skipped: last_j component %r "
                            "is not one this joulestat measures (%s)", row, row[0],
                            ", ".join(Component))
            else:
                last_j[(row[0], row[1], row[2])] = float(row[3])
        return float(mono_s), last_j, saved

    def tick(self) -> Tick:
        if self._last_mono is None:
            self.start()
        now_mono = self._monotonic()
        now_wall = self._wall()
        elapsed_s = max(now_mono - (self._last_mono or now_mono), 0.0)
        entries: list[TickEntry] = []
        seen: set[Key] = set()
        last_mono = self._last_mono if self._last_mono is not None else now_mono
        for reading in self._read_all(now_mono):
            key = (reading.component, reading.device, reading.source)
            seen.add(key)
            previous_j = self._last_j.get(key)
            self._last_j[key] = reading.energy_j
            if previous_j is None:
                # A device seen for the first time: this reading is its baseline.
                log.info("new energy series %s/%s from %s", *key)
                continue
            delta_j = reading.energy_j - previous_j
            if delta_j < 0:
                log.warning(
                    "sensor series %s/%s (%s) went backwards by %.3f J; counting 0",
                    *key,
                    -delta_j,
                )
                delta_j = 0.0
            t0_s = None
            since_mono = self._missed_since.pop(key, None)
            if since_mono is not None:
                t0_s = now_wall - (now_mono - since_mono)
                log.warning("series %s/%s (%s) is back after %.1f s unread; one entry covers "
                            "the gap", *key, now_mono - since_mono)
            # A series whose counter faulted is stored as filled (an estimate): the
            # sensor filled its gain from recent power (joulestat.devices.counter_faults).
            source = fill_source(reading.source) if reading.filled else reading.source
            entries.append(TickEntry(reading.component, reading.device, source, delta_j, t0_s))
        for key in self._last_j.keys() - seen:
            self._missed_since.setdefault(key, last_mono)
        self._last_mono = now_mono
        t0_s = now_wall - elapsed_s
        last_wall, self._last_wall = self._last_wall, now_wall
        if (last_wall is not None and last_wall < now_wall
                and last_wall - CLOCK_JITTER_S < t0_s < last_wall + CLOCK_JITTER_S):
            # The clocks' reads drifted apart: continue where the last tick ended, with
            # neither an overlap nor a hole (stored in whole milliseconds, a few
            # microseconds either way could make either).
            t0_s = last_wall
        return Tick(t0_s=t0_s, t1_s=now_wall, entries=tuple(entries))

    def _read_all(
        self, now_mono: float, sensors: Sequence[Sensor] | None = None
    ) -> list[Reading]:
        readings: list[Reading] = []
        for sensor in self.sensors if sensors is None else sensors:
            try:
                readings.extend(sensor.read(now_mono))
            except Exception as exc:  # keep ticking on whatever else can be read
                self.sensor_errors_total[sensor.name] = (
                    self.sensor_errors_total.get(sensor.name, 0) + 1
                )
                self._failing.problem(sensor.name, "failed", "sensor %s failed, skipping it "
                                      "until it recovers: %s", sensor.name, exc)
                continue
            self._failing.recovered(sensor.name, "sensor %s recovered", sensor.name)
        return readings

    def sensor_faults_total(self) -> dict[tuple[str, str], int]:
        """(sensor, kind) -> counter faults found so far (read at a scrape, not per tick)."""
        faults: dict[tuple[str, str], int] = {}
        for sensor in self.sensors:
            try:
                found = sensor.faults_total()
            except Exception as exc:  # a count is a convenience: never fail a scrape
                log.debug("sensor %s could not count its faults: %s", sensor.name, exc)
                continue
            for kind, count in found.items():
                faults[(sensor.name, kind)] = count
        return faults

    def close(self) -> None:
        for sensor in self.sensors:
            try:
                sensor.close()
            except Exception as exc:
                log.debug("closing sensor %s: %s", sensor.name, exc)
