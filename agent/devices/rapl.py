"""CPU package, DRAM and platform energy from the Linux powercap RAPL interface.

Where the numbers come from (kernel ABI ``Documentation/ABI/testing/sysfs-class-powercap``):
``<sysfs_root>/class/powercap/intel-rapl:N[:M]`` (the MSR interface) and
``intel-rapl-mmio:N[:M]`` (the MMIO interface some Intel client parts add). Each zone has
``name``, ``energy_uj`` (cumulative µJ, wraps) and ``max_energy_range_uj`` (where it wraps).
AMD Zen parts are exposed by the same driver under the same ``intel-rapl`` names since
Linux 5.8, so nothing here is vendor specific.

What is reported, and why (RAPL domains overlap, so only non-overlapping ones are summed
downstream):

* ``package-N`` -> component ``cpu``, device ``package-N``.
* ``dram`` under ``package-N`` -> component ``dram``, device ``package-N``: the device names
  the socket whose memory controller it is, so a socket's cpu and dram share one label.
  A ``dram`` zone with no package parent -> device ``dram-N`` (N = its zone number).
* ``psys`` -> component ``platform``, device ``psys``. It covers package and more, so
  base.py's contract applies: reported for reference, never summed with the others.
* ``core`` / ``uncore`` (and unknown names) are skipped: they are parts of their
  package, and adding them on top would count the same joules twice.
* An ``intel-rapl-mmio`` zone that maps to a (component, device) already found through the
  MSR interface is the same physical domain read another way, so it is skipped.

Counters wrap at ``max_energy_range_uj``: delta = cur - prev when cur >= prev, else
(max_range - prev) + cur. A counter that goes backwards for another reason (a glitch,
a reset) would look like a wrap and produce a delta near the whole range, so every delta
is checked against a physical ceiling: ``max_power_w * (elapsed_s + SLACK_S)``. A genuine
wrap produces a small delta and passes; a bogus one is dropped and logged. The default
ceiling of 2 kW per zone is about four times the highest CPU package TDP shipping today
(~500 W) yet far below the ~262 kJ a false wrap adds in a one-second tick. The check can
only catch a bogus wrap while ``max_power_w * elapsed`` stays below the range (about two
minutes at the defaults); longer gaps between reads also risk missing a real wrap.

A counter that misbehaves otherwise (freezes while the zone draws power, goes back with
no plausible wrap, jumps past the ceiling, changes ``max_energy_range_uj``, vanishes or
turns unreadable) no longer leaves a tick of 0 J called measured: the tick is filled
from the zone's recent power and stored as ``fill:rapl``, each event counted and said
with its span and energy (:mod:`joulestat.devices.counter_faults`). The range is read
again whenever the counter goes back, so a changed range is seen where it matters.

Zones that appear after start (a package brought online, a driver loaded late) are
picked up at the next read: the class listing is compared each tick (one ``listdir``)
and a new zone starts from a baseline there.

Restart on the same boot: ``checkpoint`` keeps, per zone id, the last raw ``energy_uj``, its
monotonic time and the running total; ``restore`` puts them back so the next read takes its
delta from the dead process's last value over the real elapsed gap, with the same wrap and
ceiling rules. A gap longer than ``max_range / max_power_w`` (about two minutes at the
defaults) can hide whole wraps: each adds exactly ``max_energy_range_uj`` and leaves no
trace in the counter, so the gap is then a lower bound and a warning says so.

``energy_uj`` is root-only since Linux 5.10 (CVE-2020-8694, PLATYPUS). Without
permission the sensor logs one line saying how to fix it and the agent uses its estimator.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from joulestat.core.logs import LogOnce
from joulestat.core.records import DeviceInfo
from joulestat.core.tick import Component, fill_source
from joulestat.devices.counter_faults import CounterFault, CounterRepair, FaultLog
from joulestat.devices.sensor import (
    BadState,
    Capabilities,
    Reading,
    Sensor,
    get_float,
    get_int,
    restore_each,
)
from joulestat.host.kernel_file import read_bytes

log = logging.getLogger(__name__)

SOURCE = "rapl"

# Per-zone power no current CPU package, DRAM domain or psys reaches (see module docstring).
MAX_ZONE_POWER_W = 2000.0
# Allowance added to the elapsed time so a read taken an instant after the previous one
# can still show a counter step (energy_uj updates about every millisecond).
SLACK_S = 0.1
# A counter that has not moved for this long while its zone drew power is frozen. RAPL
# updates about every millisecond (kernel powercap docs; Intel SDM vol. 3B 15.10), so a
# tick (0.05 s at the shortest) that shows no change is already a fault; the margin only
# keeps two reads an instant apart from looking like one.
FROZEN_AFTER_S = 0.05
# A read this long after the previous one is a restart or an outage, not a late tick: it
# is the only case worth a warning that wraps may have passed unseen.
LONG_GAP_S = 10.0

_ZONE_RE = re.compile(r"^(intel-rapl|intel-rapl-mmio):(\d+(?::\d+)*)$")
_PACKAGE_RE = re.compile(r"^package-(\d+)$")
_SKIPPED_NAMES = frozenset({"core", "uncore"})

PERMISSION_HINT = (
    "run the agent as root, or make energy_uj readable with a sysfs mode rule "
    "(e.g. systemd-tmpfiles 'z /sys/devices/virtual/powercap/intel-rapl/intel-rapl:*/energy_uj "
    "0444 - - -' or a udev rule doing chmod o+r on energy_uj)"
)


@dataclass
class _Zone:
    """One reported RAPL zone and its running state (µJ kept as int: no float drift)."""

    zone_id: str
    path: Path
    name: str
    component: Component
    device: str
    index: int | None
    max_range_uj: int | None
    # The last good counter value and its time: the next delta is taken from them.
    prev_uj: int | None = None
    prev_s: float = 0.0
    # When the last read happened, good or filled: a fill covers the time since.
    read_s: float = 0.0
    total_uj: int = 0  # measured
    # Its faults, and the energy filled in for them (set by the sensor that reads it).
    repair: CounterRepair | None = None

    @property
    def label(self) -> str:
        return f"RAPL zone {self.zone_id} ({self.name})"


def _natural_key(zone_id: str) -> tuple[int, ...]:
    match = _ZONE_RE.match(zone_id)
    assert match is not None
    return tuple(int(part) for part in match.group(2).split(":"))


def _read_text(path: Path) -> str:
    """One sysfs attribute; a module-level function so tests can make it fail. Read
    through raw ``os.read``: each zone's counter is read every tick, and
    ``Path.read_text`` (a buffered text file) cost about 7 us more a read here."""
    return read_bytes(os.fspath(path)).decode()


def _read_uj(path: Path) -> int:
    """A non-negative decimal integer from a sysfs file, else ValueError."""
    text = _read_text(path).strip()
    if not text.isdigit():
        raise ValueError(f"not a non-negative integer: {text[:40]!r}")
    return int(text)


def wrap_delta_uj(prev_uj: int, cur_uj: int, max_range_uj: int | None) -> int | None:
    """Counter increase from prev to cur; None when it went backwards with no known range."""
    if cur_uj >= prev_uj:
        return cur_uj - prev_uj
    if max_range_uj is None or prev_uj > max_range_uj:
        return None
    return (max_range_uj - prev_uj) + cur_uj


def _discover(powercap: Path) -> dict[str, Path]:
    """Zone id -> directory, from the flat class listing and nested sub-zone dirs."""
    found: dict[str, Path] = {}
    for entry in sorted(powercap.iterdir()):
        if not _ZONE_RE.match(entry.name) or not entry.is_dir():
            continue
        found.setdefault(entry.name, entry)
        for child in sorted(entry.iterdir()):
            if _ZONE_RE.match(child.name) and child.is_dir():
                found.setdefault(child.name, child)
    return found


def _map_zone(zone_id: str, name: str, names: dict[str, str]
              ) -> tuple[Component, str, int | None] | None:
    """(component, device, index) for a zone, or None when it must not be reported."""
    numbers = _natural_key(zone_id)
    package = _PACKAGE_RE.match(name)
    if package:
        return Component.CPU, name, int(package.group(1))
    if name == "dram":
        parent_name = names.get(zone_id.rsplit(":", 1)[0], "") if len(numbers) > 1 else ""
        parent_pkg = _PACKAGE_RE.match(parent_name)
        if parent_pkg:
            return Component.DRAM, parent_name, int(parent_pkg.group(1))
        return Component.DRAM, f"dram-{numbers[-1]}", numbers[-1]
    if name == "psys":
        return Component.PLATFORM, "psys", None
    if name not in _SKIPPED_NAMES:
        log.debug("RAPL zone %s has unknown name %r; not reported", zone_id, name)
    return None


def _restore_zone(zone: _Zone, item: dict) -> None:
    total_uj = get_int(item, "total_uj")
    filled_j = get_float(item, "filled_j") if "filled_j" in item else 0.0  # older agents
    prev_s = get_float(item, "prev_s")
    prev_uj = get_int(item, "energy_uj") if "energy_uj" in item else None
    if prev_uj is not None and zone.max_range_uj is not None and prev_uj > zone.max_range_uj:
        raise BadState(f"energy_uj {prev_uj} above max_energy_range_uj {zone.max_range_uj}")
    recent_w = get_float(item, "recent_w") if "recent_w" in item else None
    assert zone.repair is not None
    zone.total_uj, zone.repair.filled_j = total_uj, filled_j
    zone.repair.recent_w = recent_w
    if prev_uj is not None:
        zone.prev_uj, zone.prev_s, zone.read_s = prev_uj, prev_s, prev_s


class RaplSensor(Sensor):
    """Cumulative joules per reported RAPL zone since the sensor opened.

    A zone that stays unreadable or malformed is said once per kind of problem until it
    reads cleanly again (:class:`~joulestat.core.logs.LogOnce`): it would otherwise log
    every tick, once a second, forever. A zone once read is always reported: its faulty
    ticks are filled (module docstring), so a gap is never zeros followed by a spike.
    """

    name = "rapl"
    capabilities = Capabilities(energy_counter=True)

    def __init__(
        self, zones: list[_Zone], now_s: float, max_power_w: float = MAX_ZONE_POWER_W,
        powercap: Path | None = None,
    ) -> None:
        self._zones = zones
        self._max_power_w = max_power_w
        self._problems = LogOnce(log)
        # Zone ids whose last read came after a long gap: said once per stretch of them.
        self._long_gaps = LogOnce(log)
        self._faults = FaultLog(log, SOURCE, fill_source(SOURCE))
        # The class listing as last seen: a zone that appears in it is opened at the
        # next read (None: no listing to watch, as for a sensor built by hand).
        self._powercap = powercap
        self._listed = _listing(powercap) if powercap is not None else frozenset()
        # Every zone id present at open, reported or not (core, a duplicate, one this user
        # may not read): only an id never seen is a zone that appeared.
        self._seen = set(self._listed)
        for zone in zones:
            zone.prev_s = zone.read_s = now_s
            self._attach(zone)

    def describe(self) -> list[DeviceInfo]:
        return [
            DeviceInfo(component=z.component, device=z.device, source=SOURCE, index=z.index)
            for z in self._zones
        ]

    def read(self, now_s: float) -> list[Reading]:
        """Readings of every zone read at least once (a zone never read yet is left out
        until its first good value, its baseline); a faulty tick's gain is filled and
        the reading says so (``filled``)."""
        if self._powercap is not None:
            self._open_new_zones(now_s)
        readings: list[Reading] = []
        for zone in self._zones:
            repair = self._attach(zone)
            repair.filled_now = False
            if self._update(zone, repair, now_s):
                readings.append(Reading(zone.component, zone.device,
                                        zone.total_uj / 1e6 + repair.filled_j, SOURCE,
                                        repair.filled_now))
        return readings

    def _attach(self, zone: _Zone) -> CounterRepair:
        """The zone's fault handling, made on first use (a zone that appears, too)."""
        if zone.repair is None:
            zone.repair = CounterRepair(self._faults, zone.label, FROZEN_AFTER_S)
        return zone.repair

    def faults_total(self) -> dict[str, int]:
        return dict(self._faults.totals)

    def close(self) -> None:
        """Nothing to release: every read opens and closes its own file."""

    def checkpoint(self) -> dict:
        """Per zone id: last raw counter (when one was read), its time, the measured and
        filled totals and the recent power; no I/O, called every tick.

        Raw µJ stay ints so a resumed delta is exact.
        """
        zones: dict[str, dict[str, int | float]] = {}
        for zone in self._zones:
            repair = self._attach(zone)
            item: dict[str, int | float] = {"prev_s": zone.prev_s, "total_uj": zone.total_uj,
                                            "filled_j": repair.filled_j}
            if zone.prev_uj is not None:
                item["energy_uj"] = zone.prev_uj
            if repair.recent_w is not None:
                item["recent_w"] = repair.recent_w
            zones[zone.zone_id] = item
        return {"zones": zones}

    def restore(self, state: dict) -> None:
        """Continue each zone from its checkpoint; unknown or malformed zones are skipped.

        A zone saved before its first good read has no raw value: its total is restored
        and it keeps the baseline this sensor took at open (the gap before that is unknown).
        """
        restore_each(state, "zones", {z.zone_id: z for z in self._zones}, _restore_zone,
                     log, "RAPL", "zone")

    def _open_new_zones(self, now_s: float) -> None:
        """Open the zones that appeared in the class listing since the last read."""
        assert self._powercap is not None
        listed = _listing(self._powercap)
        if listed == self._listed:
            return
        self._listed = listed
        new = {name for name in listed if _ZONE_RE.match(name) and name not in self._seen}
        if not new:
            return
        self._seen |= new
        taken = {(zone.component, zone.device) for zone in self._zones}
        try:
            appeared = _zones_under(self._powercap, skip=self._seen - new, taken=taken)
        except OSError as exc:
            log.debug("cannot list %s: %s", self._powercap, exc)
            return
        for zone in appeared:
            try:
                zone.prev_uj = _read_uj(zone.path / "energy_uj")
            except (OSError, ValueError) as exc:
                log.warning("%s appeared but energy_uj is unreadable (%s); will retry each "
                            "tick", zone.label, exc)
            zone.prev_s = zone.read_s = now_s
            self._zones.append(zone)
            log.warning("%s appeared after start; measured from now on as %s/%s",
                        zone.label, zone.component, zone.device)

    def _update(self, zone: _Zone, repair: CounterRepair, now_s: float) -> bool:
        """Advance ``zone`` to now; False for a zone never read yet that still cannot be."""
        key = zone.label
        since_read_s = max(now_s - zone.read_s, 0.0)
        try:
            cur_uj = _read_uj(zone.path / "energy_uj")
            if zone.max_range_uj is not None and cur_uj > zone.max_range_uj:
                self._reread_range(zone)
                if zone.max_range_uj is not None and cur_uj > zone.max_range_uj:
                    raise ValueError(f"energy_uj {cur_uj} above max_energy_range_uj "
                                     f"{zone.max_range_uj}")
        except (OSError, ValueError) as exc:
            kind = "unreadable" if isinstance(exc, OSError) else "malformed"
            reason = f"cannot read energy_uj: {exc}" if kind == "unreadable" else \
                f"malformed energy_uj: {exc}"
            if zone.prev_uj is None:  # nothing to fill from: left out until it reads
                self._problems.problem(key, kind, "%s: %s", key, reason)
                return False
            repair.fault(CounterFault.UNREADABLE, now_s, since_read_s, reason, rebased=False)
            zone.read_s = now_s
            return True
        zone.read_s = now_s
        if zone.prev_uj is None:  # first good value: baseline only
            self._problems.recovered(key, "%s: reading normally again", key)
            zone.prev_uj, zone.prev_s = cur_uj, now_s
            return True
        prev_uj = zone.prev_uj
        elapsed_s = max(now_s - zone.prev_s, 0.0)
        ceiling_uj = self._max_power_w * (elapsed_s + SLACK_S) * 1e6
        if cur_uj < prev_uj:
            self._reread_range(zone)
            delta_uj = wrap_delta_uj(prev_uj, cur_uj, zone.max_range_uj)
            if delta_uj is None or delta_uj > ceiling_uj:
                repair.fault(CounterFault.BACKWARDS, now_s, since_read_s,
                             f"went back from {prev_uj} to {cur_uj} µJ, not a wrap",
                             rebased=True)
                zone.prev_uj, zone.prev_s = cur_uj, now_s
                return True
        else:
            delta_uj = cur_uj - prev_uj
        if delta_uj > ceiling_uj:
            repair.fault(CounterFault.JUMP, now_s, since_read_s,
                         f"a jump of {delta_uj / 1e6:.1f} J in {elapsed_s:.3f} s, over "
                         f"{self._max_power_w:.0f} W", rebased=True)
            zone.prev_uj, zone.prev_s = cur_uj, now_s
            return True
        if delta_uj == 0:
            # A freeze is filled; too soon to tell, the next delta covers this read too.
            repair.unchanged(now_s, elapsed_s, since_read_s,
                             f"stuck at {cur_uj} µJ for {elapsed_s:.1f} s")
            return True
        self._warn_long_gap(zone, elapsed_s)
        if repair.advanced(delta_uj / 1e6, elapsed_s, since_read_s, now_s):
            zone.total_uj += delta_uj
        zone.prev_uj, zone.prev_s = cur_uj, now_s
        self._problems.recovered(key, "%s: reading normally again", key)
        return True

    def _reread_range(self, zone: _Zone) -> None:
        """Read ``max_energy_range_uj`` again: counted and said when it changed."""
        try:
            current = _read_uj(zone.path / "max_energy_range_uj")
        except (OSError, ValueError):
            return
        if current != zone.max_range_uj:
            self._faults.count(CounterFault.RANGE_CHANGED)
            log.warning("%s: max_energy_range_uj changed from %s to %d µJ; wraps are undone "
                        "at the new range", zone.label, zone.max_range_uj, current)
            zone.max_range_uj = current

    def _warn_long_gap(self, zone: _Zone, elapsed_s: float) -> None:
        ceiling_uj = self._max_power_w * (elapsed_s + SLACK_S) * 1e6
        if (elapsed_s > LONG_GAP_S and zone.max_range_uj is not None
                and ceiling_uj >= zone.max_range_uj):
            # Once per stretch of such reads: a tiny range would otherwise warn every tick.
            self._long_gaps.problem(
                zone.zone_id, "long gap", "%s: %.1f s since the last read, long enough for "
                "whole counter wraps (%.0f J each) to pass unseen; energy over it is a lower "
                "bound", zone.label, elapsed_s, zone.max_range_uj / 1e6)
        else:
            self._long_gaps.recovered(zone.zone_id)


def _listing(powercap: Path) -> frozenset[str]:
    """The names in the powercap class directory (empty when it cannot be listed)."""
    try:
        return frozenset(os.listdir(powercap))
    except OSError:
        return frozenset()


def open_rapl(
    sysfs_root: Path, now_s: float | None = None, max_power_w: float = MAX_ZONE_POWER_W
) -> RaplSensor | None:
    """A sensor over every reportable zone, or None when RAPL is absent or unreadable.

    ``now_s`` is the monotonic time of the baseline read (default: now); the first
    ``read`` measures from it.
    """
    powercap = sysfs_root / "class" / "powercap"
    if not powercap.is_dir():
        log.debug("no powercap directory at %s; RAPL not available", powercap)
        return None
    try:
        zones = _zones_under(powercap, skip=frozenset(), taken=set())
    except OSError as exc:
        log.debug("cannot list %s: %s; RAPL not available", powercap, exc)
        return None
    if not zones:
        log.debug("no reportable RAPL zones under %s", powercap)
        return None
    return _baseline(zones, powercap, time.monotonic() if now_s is None else now_s, max_power_w)


def _zones_under(powercap: Path, skip: frozenset[str] | set[str],
                 taken: set[tuple[str, str]]) -> list[_Zone]:
    """The reportable zones under ``powercap`` but those in ``skip``, none repeating a
    (component, device) in ``taken`` (which it extends)."""
    dirs = {zone_id: path for zone_id, path in _discover(powercap).items()
            if zone_id not in skip}
    names: dict[str, str] = {}
    for zone_id, path in dirs.items():
        try:
            names[zone_id] = _read_text(path / "name").strip()
        except OSError as exc:
            log.debug("RAPL zone %s has no readable name (%s); skipped", zone_id, exc)

    # MSR zones first so an MMIO zone for the same domain is the one skipped.
    ordered = sorted(names, key=lambda z: (z.startswith("intel-rapl-mmio"), _natural_key(z)))
    zones: list[_Zone] = []
    for zone_id in ordered:
        mapped = _map_zone(zone_id, names[zone_id], names)
        if mapped is None:
            continue
        component, device, index = mapped
        if (component, device) in taken:
            if zone_id.startswith("intel-rapl-mmio"):
                log.debug("RAPL %s duplicates %s/%s from the MSR interface; skipped",
                          zone_id, component, device)
                continue
            log.warning("RAPL %s repeats %s/%s; reported as %s@%s",
                        zone_id, component, device, device, zone_id)
            device = f"{device}@{zone_id}"
        taken.add((component, device))
        try:
            max_range: int | None = _read_uj(dirs[zone_id] / "max_energy_range_uj")
        except (OSError, ValueError) as exc:
            log.warning("RAPL %s: no usable max_energy_range_uj (%s); wraps cannot be "
                        "undone for it", zone_id, exc)
            max_range = None
        zones.append(_Zone(zone_id, dirs[zone_id], names[zone_id], component, device,
                           index, max_range))
    return zones


def _baseline(
    zones: list[_Zone], powercap: Path, now_s: float, max_power_w: float
) -> RaplSensor | None:
    """Take each zone's starting value; handle the root-only energy_uj case in one line."""
    denied: list[str] = []
    kept: list[_Zone] = []
    for zone in zones:
        try:
            zone.prev_uj = _read_uj(zone.path / "energy_uj")
        except PermissionError:
            denied.append(zone.zone_id)
            continue
        except (OSError, ValueError) as exc:
            # Kept: the first good read later becomes its baseline.
            log.warning("RAPL %s: energy_uj unreadable at start (%s); will retry each tick",
                        zone.zone_id, exc)
        kept.append(zone)
    if denied:
        has_cpu = any(z.component == Component.CPU for z in kept)
        outcome = (
            f"skipping {', '.join(denied)}" if has_cpu
            else "falling back to the estimator for CPU energy"
        )
        log.warning(
            "RAPL energy counters under %s are not readable by this user (root-only since "
            "Linux 5.10, CVE-2020-8694): %s; to fix, %s", powercap, outcome, PERMISSION_HINT,
        )
        if not has_cpu:
            return None
    sensor = RaplSensor(kept, now_s, max_power_w, powercap)
    log.debug("RAPL zones: %s", ", ".join(f"{z.zone_id}={z.name}" for z in kept))
    return sensor
