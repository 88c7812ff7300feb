"""AWS Neuron devices (Inferentia 1/2, Trainium 1/2): power from the driver's sysfs.

The Neuron driver (>= 2.21.37.0) writes, per device, a file ``.../power/utilization``
holding ``<status>,<unix ts>,<min>,<max>,<avg>``: the device's power over the last
minute in **percent of its maximum power**, refreshed about once a minute, with status
``POWER_STATUS_VALID``, ``NO_DATA`` or ``INVALID`` (AWS Neuron sysfs user guide). Driver
2.31 reorganised the tree, so nothing below ``<sysfs>/devices/virtual/neuron_device``
(or ``<sysfs>/class/neuron_device``) is hard-coded: each ``neuron<N>`` directory is
searched for a ``power/utilization`` file at run time. ``utilization_raw`` (driver 2.29,
per die) is not used: its format is not in the references this was built from.

Watts = avg % / 100 x the device's maximum power. AWS publishes no per-chip maximum
power (see docs/methodology.md, "AWS Neuron"), so it is a setting,
``--neuron-max-power-w``; without it the devices are listed but not measured (said once).
The newest sample's average is applied to each tick until the next sample (so the
figure lags the device by up to a minute) and integrated over the tick; a sample older
than ``STALE_S`` counts as no data.

Where the driver gives no power (``NO_DATA``, ``INVALID``, stale) and ``neuron-monitor``
output is available (``--neuron-monitor FILE``: its JSON lines, e.g.
``neuron-monitor > FILE``), power is estimated from the device's mean neuroncore
utilisation x its maximum power, provenance ``model:neuron-util``. Each device reports both
series from the start; each tick adds to exactly one, so nothing is counted twice.

Per-process use for attribution: ``neuron_runtime_data[].report.neuroncore_counters.
neuroncores_in_use[<core>].neuroncore_utilization`` per runtime (``pid``, tagged by
``NEURON_PROCESS_TAG`` as ``neuron_runtime_tag``), mapped to devices by core index //
cores per device (``neuron_hardware_info.neuroncore_per_device_count``).

Restart on the same boot: the driver keeps no counter, only the newest minute's average,
so what happened during the gap is not measured by anything. ``checkpoint`` keeps each
device's totals, last read and last driver power; after ``restore`` the first read covers
a gap up to ``STALE_S`` (the age past which a sample no longer counts as "now" on any
tick) with the trapezoid of the power before the stop and the power after it, an estimate
logged as such; a longer gap is not estimated: it is logged and adds nothing, and the
totals carry on from the checkpoint (docs/methodology.md, "AWS Neuron").
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from joulestat.core.records import DeviceInfo
from joulestat.core.tick import Component
from joulestat.devices.accelerator import Accelerator, EmptySensor, VendorSensor
from joulestat.devices.sensor import BadState, Capabilities, DeviceProcesses, Reading, get_float

log = logging.getLogger(__name__)

SOURCE = "neuron"
SOURCE_ESTIMATE = "model:neuron-util"
VENDOR = "AWS"
STATUS_VALID = "POWER_STATUS_VALID"
STALE_S = 180.0  # three missed refreshes: the driver's figure no longer describes now
RESUME_MAX_S = STALE_S  # the longest restart gap estimated from the samples either side
_ROOTS = ("devices/virtual/neuron_device", "class/neuron_device")
_MODELS = {"inferentia": "AWS Inferentia", "inferentia1": "AWS Inferentia",
           "inferentia2": "AWS Inferentia2", "trainium": "AWS Trainium",
           "trainium1": "AWS Trainium", "trainium2": "AWS Trainium2"}
_FIRST_TAIL_BYTES = 64 << 10
_MAX_TAIL_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class PowerSample:
    status: str
    unix_s: float
    min_pct: float
    max_pct: float
    avg_pct: float


def parse_power_utilization(text: str) -> PowerSample | None:
    """``<status>,<unix ts>,<min>,<max>,<avg>`` or None when malformed."""
    parts = [p.strip() for p in text.strip().split(",")]
    if not parts or not parts[0]:
        return None
    if parts[0] != STATUS_VALID:
        return PowerSample(parts[0], 0.0, 0.0, 0.0, 0.0)
    try:
        ts, low, high, avg = (float(p) for p in parts[1:5])
    except ValueError:
        return None
    return PowerSample(parts[0], ts, low, high, avg)


def model_name(raw: str) -> str:
    key = re.sub(r"[^a-z0-9]", "", raw.lower())
    return _MODELS.get(key, raw.strip() or "AWS Neuron device")


@dataclass
class _NeuronDevice(Accelerator):
    """One Neuron device; ``uuid`` is its sysfs directory's name (the driver has no other
    stable id)."""

    prefix = "neuron"
    path: Path  # the device's directory
    power_file: Path | None
    measured_j: float = 0.0
    estimated_j: float = 0.0
    last_s: float | None = None
    last_w: float | None = None  # the driver's power at the last read (None: no valid one)
    resumed: bool = False  # restored from a checkpoint and not read since


def _read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def discover(sysfs_root: Path) -> list[_NeuronDevice]:
    """Every ``neuron<N>`` directory under the known roots, with its power file if any."""
    found: dict[int, _NeuronDevice] = {}
    for rel in _ROOTS:
        base = Path(sysfs_root) / rel
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            match = re.fullmatch(r"neuron(\d+)", entry.name)
            if match is None or int(match.group(1)) in found:
                continue
            power = sorted(p for p in entry.rglob("utilization")
                           if p.parent.name == "power" and p.is_file())
            name_file = next((p for p in entry.rglob("device_name") if p.is_file()), None)
            raw = _read_text(name_file).strip() if name_file is not None else ""
            found[int(match.group(1))] = _NeuronDevice(
                int(match.group(1)), entry.name, model_name(raw), entry,
                power[0] if power else None)
    return [found[i] for i in sorted(found)]


@dataclass
class MonitorReport:
    """What one neuron-monitor report says about device use."""

    device_util_pct: dict[int, float] = field(default_factory=dict)
    processes: dict[int, tuple[dict[int, float], set[int]]] = field(default_factory=dict)
    device_type: str = ""


def parse_monitor_report(doc: dict, devices: int) -> MonitorReport:
    """Mean neuroncore utilisation per device and per-pid use, from one JSON report."""
    hw = doc.get("neuron_hardware_info") or {}
    per_device = int(hw.get("neuroncore_per_device_count") or 0) or 1
    report = MonitorReport(device_type=str(hw.get("neuron_device_type") or ""))
    sums: dict[int, float] = {}
    for runtime in doc.get("neuron_runtime_data") or []:
        pid = int(runtime.get("pid") or 0)
        counters = ((runtime.get("report") or {}).get("neuroncore_counters") or {})
        for core, values in (counters.get("neuroncores_in_use") or {}).items():
            try:
                util = float(values.get("neuroncore_utilization") or 0.0)
                dev = int(core) // per_device
            except (TypeError, ValueError, AttributeError):
                continue
            sums[dev] = sums.get(dev, 0.0) + util
            use, holders = report.processes.setdefault(dev, ({}, set()))
            if pid:
                use[pid] = use.get(pid, 0.0) + util
                holders.add(pid)
    count = max(devices, 1)
    for dev in range(count):
        report.device_util_pct[dev] = min(sums.get(dev, 0.0) / per_device, 100.0)
    return report


def read_monitor_file(path: Path, devices: int) -> MonitorReport | None:
    """The newest complete JSON line of a neuron-monitor output file, parsed.

    The file grows by a report a second, so only its tail is read: 64 KiB first (a
    report is a few KiB), up to 1 MiB when the newest complete line is longer.
    """
    with open(path, "rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        for tail_bytes in (_FIRST_TAIL_BYTES, _MAX_TAIL_BYTES):
            start = max(size - tail_bytes, 0)
            handle.seek(start)
            lines = handle.read().decode("utf-8", errors="replace").splitlines()
            if start > 0:
                lines = lines[1:]  # the first line is cut
            for line in reversed(lines):
                line = line.strip()
                if not line:
                    continue
                try:
                    doc = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line still being written
                if isinstance(doc, dict):
                    return parse_monitor_report(doc, devices)
            if start == 0:
                break
    return None


def _restore_device(dev: _NeuronDevice, item: dict[str, Any]) -> None:
    """Put ``item``'s totals back on ``dev``; :class:`BadState` before any change when it
    names another model or was never read (no ``last_s``: nothing to continue from)."""
    if item.get("model") != dev.model:
        raise BadState(f"was {item.get('model')!r}, is {dev.model!r} now")
    measured_j, estimated_j = get_float(item, "measured_j"), get_float(item, "estimated_j")
    last_s = get_float(item, "last_s")
    last_w = get_float(item, "last_w") if "last_w" in item else None
    dev.measured_j, dev.estimated_j, dev.last_s, dev.last_w = (measured_j, estimated_j,
                                                               last_s, last_w)
    dev.resumed = True


def _gap_to_count(dev: _NeuronDevice, gap_s: float) -> float:
    """The seconds of a restart gap to integrate: all of it up to ``RESUME_MAX_S`` (an
    estimate from the averages either side, logged), none beyond (logged: unmeasured)."""
    if gap_s > RESUME_MAX_S:
        log.warning("%s: %.0f s passed since its last read before the restart; the driver "
                    "keeps only the last minute's average power, so that gap is not "
                    "counted (over %.0f s it is not estimated; docs/methodology.md)",
                    dev.device, gap_s, RESUME_MAX_S)
        return 0.0
    log.info("%s: %.1f s across the restart estimated from the power averages before and "
             "after it", dev.device, gap_s)
    return gap_s


class NeuronSensor(VendorSensor[_NeuronDevice]):
    """Cumulative joules per Neuron device: measured where the driver says, else estimated.

    The vendor-neutral part (devices described, checkpoints by device, problems said once
    until they clear) is :class:`~joulestat.devices.accelerator.VendorSensor`'s. What is
    Neuron's own is how a device is read: there is no counter and no failing call to keep
    a last value across, only the driver's minute average, applied to each tick until the
    next, or the neuron-monitor estimate where the driver gives none.
    """

    name = "neuron"
    vendor = VENDOR
    kind = "Neuron device"
    library = "Neuron"

    def __init__(self, devices: list[_NeuronDevice], max_power_w: float,
                 monitor_file: Path | None = None,
                 wall_s: Callable[[], float] | None = None) -> None:
        estimated = monitor_file is not None
        super().__init__(devices, log, Capabilities(power_only=True, estimate=estimated,
                                                    per_process=estimated))
        self._max_w = max_power_w
        self._monitor_file = monitor_file
        self._wall = wall_s if wall_s is not None else time.time
        self._report: MonitorReport | None = None

    def _errors(self) -> tuple[type[Exception], ...]:
        return ()  # a file that cannot be read is a power figure missing, not a failure

    def _shut_down(self) -> None:
        return None  # sysfs files are opened per read

    def _checkpoint_id(self, device: _NeuronDevice) -> str:
        return device.device

    def _describe_device(self, device: _NeuronDevice) -> list[DeviceInfo]:
        # The estimate's series first: the store keeps one row per device, the last.
        sources = ([SOURCE_ESTIMATE] if self._monitor_file is not None else []) + [SOURCE]
        return [DeviceInfo(Component.ACCELERATOR, device.device, source, model=device.model,
                           uuid=device.uuid, index=device.index, vendor=VENDOR)
                for source in sources]

    def _refresh_monitor(self) -> None:
        if self._monitor_file is None:
            return
        try:
            report = read_monitor_file(self._monitor_file, len(self._devices))
        except OSError as exc:
            self._problems.problem("monitor", "unreadable", "neuron-monitor output %s "
                                   "unreadable: %s", self._monitor_file, exc)
            self._report = None
            return
        self._problems.recovered("monitor", "neuron-monitor output readable again")
        self._report = report

    def _driver_power_w(self, dev: _NeuronDevice) -> float | None:
        if dev.power_file is None:
            return None
        key = f"{dev.device}/power"
        try:
            sample = parse_power_utilization(_read_text(dev.power_file))
        except OSError as exc:
            self._problems.problem(key, "unreadable", "%s: power file unreadable (%s); "
                                   "device gone?", dev.device, exc)
            return None
        if sample is None or sample.status != STATUS_VALID:
            status = sample.status if sample is not None else "malformed"
            self._problems.problem(key, f"status {status}", "%s: driver power status %s; "
                                   "no measured power until it is valid", dev.device, status)
            return None
        if self._wall() - sample.unix_s > STALE_S:
            self._problems.problem(key, "stale", "%s: driver power sample is stale",
                                   dev.device)
            return None
        self._problems.recovered(key, "%s: driver power valid again", dev.device)
        return max(sample.avg_pct, 0.0) / 100.0 * self._max_w

    def read(self, now_s: float) -> list[Reading]:
        self._refresh_monitor()
        return super().read(now_s)

    def _update(self, dev: _NeuronDevice, now_s: float) -> None:
        """The driver's power (or, without one, the monitor's estimate) over the time since
        the last read; after a restore, the gap the restart left (:func:`_gap_to_count`)."""
        elapsed_s = 0.0 if dev.last_s is None else max(now_s - dev.last_s, 0.0)
        dev.last_s = now_s
        watts = self._driver_power_w(dev)
        before_w, dev.last_w = dev.last_w, watts
        if dev.resumed:
            dev.resumed = False
            elapsed_s = _gap_to_count(dev, elapsed_s)
            if watts is not None and before_w is not None:
                watts = (before_w + watts) / 2.0  # the trapezoid across the gap
        if watts is not None:
            dev.measured_j += watts * elapsed_s
        elif self._report is not None and dev.index in self._report.device_util_pct:
            util = self._report.device_util_pct[dev.index]
            dev.estimated_j += util / 100.0 * self._max_w * elapsed_s

    def _readings(self, device: _NeuronDevice) -> list[Reading]:
        readings = [Reading(Component.ACCELERATOR, device.device, device.measured_j, SOURCE)]
        if self._monitor_file is not None:
            readings.append(Reading(Component.ACCELERATOR, device.device, device.estimated_j,
                                    SOURCE_ESTIMATE))
        return readings

    def device_processes(self) -> DeviceProcesses:
        """Per device: {pid: neuroncore utilisation %}, {pids with a runtime on it}."""
        if self._report is None:
            return {}
        return {(Component.ACCELERATOR, f"neuron{dev}"): (dict(use), set(holders))
                for dev, (use, holders) in self._report.processes.items()}

    def _save(self, device: _NeuronDevice) -> dict[str, Any]:
        """Totals, last read and last driver power (no file read: every tick)."""
        item: dict[str, Any] = {"model": device.model, "measured_j": device.measured_j,
                                "estimated_j": device.estimated_j}
        if device.last_s is not None:
            item["last_s"] = device.last_s
        if device.last_w is not None:
            item["last_w"] = device.last_w
        return item

    def _restore_device(self, device: _NeuronDevice, item: dict[str, Any]) -> None:
        """Continue the device's totals (see the module docstring for what the first read
        makes of the gap); :func:`_restore_device`."""
        _restore_device(device, item)


def open_neuron(sysfs_root: Path, max_power_w: float | None,
                monitor_file: Path | None = None) -> NeuronSensor | EmptySensor:
    """A sensor over the node's Neuron devices, or an :class:`EmptySensor` saying why not."""
    devices = discover(Path(sysfs_root))
    if not devices:
        return EmptySensor("neuron", f"no Neuron device under {sysfs_root}/"
                                     f"{_ROOTS[0]} or {_ROOTS[1]}")
    if not max_power_w or max_power_w <= 0:
        names = ", ".join(f"{d.device} ({d.model})" for d in devices)
        log.warning("Neuron devices found (%s) but not measured: the driver reports percent "
                    "of maximum power and AWS publishes none; set --neuron-max-power-w "
                    "(docs/methodology.md)", names)
        return EmptySensor("neuron", "no --neuron-max-power-w")
    for dev in devices:
        log.info("Neuron %s: %s, power file %s, max %.0f W", dev.device, dev.model,
                 dev.power_file or "none", max_power_w)
    return NeuronSensor(devices, float(max_power_w), monitor_file)
