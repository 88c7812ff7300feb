"""Which sensors this node gets: measured where the hardware allows, estimated elsewhere."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from joulestat.core.errors import ConfigError
from joulestat.devices.accelerator import (
    DeviceProcesses,
    DeviceStates,
    combined_device_processes,
    combined_device_state,
)
from joulestat.devices.sensor import Sensor, SensorError

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
    if "cpu" not in measured:
        try:
            sensors.append(open_cpu_estimator(procfs_root, cloud=cloud))
        except (SensorError, OSError, ValueError) as exc:
            log.error("no CPU power: no RAPL and the CPU estimator cannot run: %s", exc)
    if "dram" not in measured:
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
    """The per-process accelerator use of every sensor that offers it (None: no such)."""

    return combined_device_processes(sensors)


def device_state_of(sensors: list[Sensor]) -> Callable[[], DeviceStates] | None:
    """The accelerators' clock and memory in use now, for the node's gauges at a scrape
    (None: no sensor offers them)."""
    return combined_device_state(sensors)


def estimator_idle_w(sensors: list[Sensor]) -> dict[tuple[str, str], float]:
    """Idle power known by construction: an estimator's model at 0 % load, a replayed
    trace's lowest level. Measured sources learn theirs (agent/attribution/idle.py)."""
    idle: dict[tuple[str, str], float] = {}
    for sensor in sensors:
        by_key = getattr(sensor, "idle_power_by_key", None)
        if by_key is not None:
            idle.update(by_key())
            continue
        idle_w = getattr(sensor, "idle_power_w", None)
        if idle_w is None:
            continue
        for device in sensor.describe():
            idle[(device.component, device.device)] = float(idle_w)
    return idle


def find_sensor(sensors: list[Sensor], name: str) -> Sensor | None:
    return next((s for s in sensors if s.name == name), None)
