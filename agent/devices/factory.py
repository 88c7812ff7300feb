"""Which sensors this node gets: measured where the hardware allows, estimated elsewhere;
and what the rest of the agent asks of them, by their declared capabilities.

Nothing here (or downstream) probes a sensor for a method: each says what it can do in its
:class:`~joulestat.devices.sensor.Capabilities`, and every sensor has every method of the
:class:`~joulestat.devices.sensor.Sensor` protocol, answering ``{}`` where it cannot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from joulestat.core.errors import ConfigError
from joulestat.core.tick import Component
from joulestat.devices.accelerator import combined_device_processes, combined_device_state
from joulestat.devices.sensor import (
    DeviceProcesses,
    DeviceStates,
    Sensor,
    SensorError,
    SeriesKey,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.devices.estimators import CpuModelSensor

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeviceSettings:
    """What the devices layer is told, from the options of the same names: where sysfs and
    procfs are (a fake tree in tests), a recorded trace to replay instead of hardware,
    and what to know of the vendor sources (NVML on or off, the Neuron device's maximum
    power that its driver's percent is of, neuron-monitor's output file)."""

    sysfs_root: Path
    procfs_root: Path
    replay: Path | None
    nvml: bool
    neuron_max_power_w: float | None
    neuron_monitor: Path | None


def build_sensors(settings: DeviceSettings, now_s: float, cloud: str | None = None
                  ) -> list[Sensor]:
    """Measured sources where the hardware has them, honest estimates where it has not."""
    from joulestat.devices.network import NetworkSensor

    procfs_root = settings.procfs_root
    if settings.replay:
        from joulestat.devices.replay import TraceError, open_replay

        try:
            return [open_replay(settings.replay, now_s)]
        except TraceError as exc:
            raise ConfigError(f"--replay: {exc}") from None

    from joulestat.devices.estimators import open_cpu_estimator, open_dram_estimator
    from joulestat.devices.rapl import open_rapl

    sensors: list[Sensor] = []
    rapl = open_rapl(settings.sysfs_root, now_s)
    measured: set[str] = set()
    if rapl is not None:
        sensors.append(rapl)
        measured = {device.component for device in rapl.describe()}
    # Estimate only what is not measured (many CPUs expose no RAPL dram domain).
    if Component.CPU not in measured:
        try:
            sensors.append(open_cpu_estimator(procfs_root, cloud=cloud))
        except (SensorError, OSError, ValueError) as exc:
            log.error("no CPU power: no RAPL and the CPU estimator cannot run: %s", exc)
    if Component.DRAM not in measured:
        try:
            sensors.append(open_dram_estimator(procfs_root))
        except (SensorError, OSError, ValueError) as exc:
            log.warning("no DRAM power estimate: %s", exc)
    sensors.extend(open_accelerators(settings, now_s))
    sensors.append(NetworkSensor(procfs_root, sysfs_root=settings.sysfs_root))
    return sensors


def open_accelerators(settings: DeviceSettings, now_s: float) -> list[Sensor]:
    """Every vendor's accelerators this node has; says once which it looked for.

    Vendor libraries are imported inside each ``open_*`` only: a node without
    ``amdsmi`` or ``pyhlml`` (the extras ``joulestat[amd]``, ``[gaudi]``) runs as before.
    """
    from joulestat.devices.accelerator import EmptySensor
    from joulestat.devices.amd import open_amd
    from joulestat.devices.gaudi import open_gaudi
    from joulestat.devices.neuron import open_neuron
    from joulestat.devices.nvidia import open_nvidia

    found: list[Sensor] = []
    looked: list[str] = []
    if settings.nvml:
        nvidia = open_nvidia(now_s)
        if nvidia is not None:
            found.append(nvidia)
        else:
            looked.append("nvidia (no NVML driver or GPU)")
    else:
        looked.append("nvidia (--nvml false)")
    opened = [open_amd(now_s), open_gaudi(now_s),
              open_neuron(settings.sysfs_root, settings.neuron_max_power_w,
                          settings.neuron_monitor)]
    for sensor in opened:
        if isinstance(sensor, EmptySensor):
            looked.append(f"{sensor.name} ({sensor.why})")
        else:
            found.append(sensor)
    log.info("accelerators: %s; looked for and not found: %s",
             ", ".join(f"{s.name} ({len(s.describe())} series)" for s in found) or "none",
             "; ".join(looked) or "nothing")
    return found


def device_processes_of(sensors: list[Sensor]) -> Callable[[], DeviceProcesses] | None:
    """The per-process device use of every sensor whose capabilities say ``per_process``
    (None: no such sensor, so attribution splits accelerators by CPU time)."""
    return combined_device_processes(sensors)


def device_state_of(sensors: list[Sensor]) -> Callable[[], DeviceStates] | None:
    """The accelerators' clock and memory in use now, for the node's gauges at a scrape,
    from every sensor whose capabilities say ``live_state`` (None: no such sensor)."""
    return combined_device_state(sensors)


def known_idle_w_of(sensors: list[Sensor]) -> dict[SeriesKey, float]:
    """Idle power known by construction, from every sensor whose capabilities say
    ``known_idle``: an estimator's model at 0 % load, a replayed trace's lowest level.
    Measured sources learn theirs (agent/attribution/idle.py)."""
    idle: dict[SeriesKey, float] = {}
    for sensor in sensors:
        if sensor.capabilities.known_idle:
            idle.update(sensor.known_idle_w())
    return idle


def cpu_estimator_of(sensors: list[Sensor]) -> CpuModelSensor | None:
    """The CPU estimator, when the node has one: it reads /proc/stat every tick, and job
    accounting takes the node's CPU times from that read rather than parse it again."""
    from joulestat.devices.estimators import CpuModelSensor

    return next((s for s in sensors if isinstance(s, CpuModelSensor)), None)
