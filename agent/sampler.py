"""One tick: read every sensor once and turn cumulative joules into deltas.

The sampler is the only place that knows about time. Sensors answer in cumulative
joules; the sampler remembers the last answer per (component, device, source) and
emits the difference, so a tick that runs late simply covers more time and no
energy is ever assumed from the nominal interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from agent.sensors.base import DeviceInfo, Reading, Sensor
from agent.tick import Tick, TickEntry

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (component, device, source)


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
        self._last_mono: float | None = None
        self._failing: set[str] = set()
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
        for reading in self._read_all(self._last_mono):
            self._last_j[(reading.component, reading.device, reading.source)] = reading.energy_j

    def tick(self) -> Tick:
        if self._last_mono is None:
            self.start()
        now_mono = self._monotonic()
        now_wall = self._wall()
        elapsed_s = max(now_mono - (self._last_mono or now_mono), 0.0)
        entries: list[TickEntry] = []
        for reading in self._read_all(now_mono):
            key = (reading.component, reading.device, reading.source)
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
            entries.append(TickEntry(reading.component, reading.device, reading.source, delta_j))
        self._last_mono = now_mono
        return Tick(t0_s=now_wall - elapsed_s, t1_s=now_wall, entries=tuple(entries))

    def _read_all(self, now_mono: float) -> list[Reading]:
        readings: list[Reading] = []
        for sensor in self.sensors:
            try:
                readings.extend(sensor.read(now_mono))
            except Exception as exc:  # keep ticking on whatever else can be read
                self.sensor_errors_total[sensor.name] = (
                    self.sensor_errors_total.get(sensor.name, 0) + 1
                )
                if sensor.name not in self._failing:
                    log.error("sensor %s failed, skipping it until it recovers: %s",
                              sensor.name, exc)
                    self._failing.add(sensor.name)
                continue
            if sensor.name in self._failing:
                log.info("sensor %s recovered", sensor.name)
                self._failing.discard(sensor.name)
        return readings

    def close(self) -> None:
        for sensor in self.sensors:
            try:
                sensor.close()
            except Exception as exc:
                log.debug("closing sensor %s: %s", sensor.name, exc)
