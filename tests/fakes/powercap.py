"""A fake Linux powercap tree, laid out like the real one, for RAPL tests.

Real layout (kernel powercap class): zone directories live under
``devices/virtual/powercap/<control>/<zone>[/<sub-zone>]`` and ``class/powercap`` holds a
symlink per control type and per zone, sub-zones included. The fake builds the same so
the sensor's discovery code is exercised as on a real machine.

Every write goes to a temporary file that is then ``os.replace``d over the target, so a
reader in another thread sees the old number or the new one, never half of one.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

_ZONE_RE = re.compile(r"^(intel-rapl|intel-rapl-mmio):\d+(?::\d+)*$")
DEFAULT_MAX_RANGE_UJ = 262143328850


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and an atomic rename."""
    tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class FakePowercap:
    """Builds zones under ``<root>/devices/virtual/powercap`` with ``class/powercap`` links."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.class_dir = root / "class" / "powercap"
        self.devices_dir = root / "devices" / "virtual" / "powercap"
        self.class_dir.mkdir(parents=True, exist_ok=True)
        self.devices_dir.mkdir(parents=True, exist_ok=True)
        self._zones: dict[str, Path] = {}
        self._drivers: dict[str, Driver] = {}

    def add_zone(
        self,
        zone_id: str = "intel-rapl:0",
        name: str = "package-0",
        energy_uj: int = 0,
        max_energy_range_uj: int = DEFAULT_MAX_RANGE_UJ,
        parent: str | None = None,
    ) -> Path:
        """Create a zone; a sub-zone (``intel-rapl:0:1``) nests under its parent."""
        if not _ZONE_RE.match(zone_id):
            raise ValueError(f"not a powercap zone id: {zone_id!r}")
        control = zone_id.split(":", 1)[0]
        if parent is None and zone_id.count(":") > 1:
            parent = zone_id.rsplit(":", 1)[0]
        if parent is not None:
            if parent not in self._zones:
                raise KeyError(f"add parent zone {parent} first")
            zone_dir = self._zones[parent] / zone_id
        else:
            control_dir = self.devices_dir / control
            control_dir.mkdir(exist_ok=True)
            (control_dir / "enabled").write_text("1\n")
            link = self.class_dir / control
            if not link.exists():
                link.symlink_to(os.path.relpath(control_dir, self.class_dir))
            zone_dir = control_dir / zone_id
        zone_dir.mkdir()
        (zone_dir / "name").write_text(name + "\n")
        (zone_dir / "max_energy_range_uj").write_text(f"{max_energy_range_uj}\n")
        atomic_write(zone_dir / "energy_uj", f"{energy_uj}\n")
        (self.class_dir / zone_id).symlink_to(os.path.relpath(zone_dir, self.class_dir))
        self._zones[zone_id] = zone_dir
        return zone_dir

    def zone_dir(self, zone_id: str) -> Path:
        return self._zones[zone_id]

    def vanish(self, zone_id: str) -> None:
        """The zone leaves the tree (a package taken offline, a driver unbound): its
        directory and its ``class/powercap`` link go, as on a real machine, until
        :meth:`reappear` puts both back with the files as they were."""
        aside = self.root / ".vanished" / zone_id
        aside.parent.mkdir(exist_ok=True)
        os.replace(self._zones[zone_id], aside)
        (self.class_dir / zone_id).unlink()

    def reappear(self, zone_id: str) -> None:
        """Undo :meth:`vanish`: the same zone, at the same path, under the same id."""
        os.replace(self.root / ".vanished" / zone_id, self._zones[zone_id])
        (self.class_dir / zone_id).symlink_to(
            os.path.relpath(self._zones[zone_id], self.class_dir))

    def set_energy_uj(self, zone_id: str, value: int) -> None:
        atomic_write(self._zones[zone_id] / "energy_uj", f"{value}\n")

    def write_raw(self, zone_id: str, filename: str, text: str) -> None:
        """Put arbitrary text in a zone file (malformed values, for error tests)."""
        atomic_write(self._zones[zone_id] / filename, text)

    def energy_uj(self, zone_id: str) -> int:
        return int((self._zones[zone_id] / "energy_uj").read_text())

    def max_range_uj(self, zone_id: str) -> int:
        return int((self._zones[zone_id] / "max_energy_range_uj").read_text())

    def drive(
        self, zone_id: str, power_w: float, wrap_uj: int | None = None, hz: float = 200,
        energy_now: Callable[[], float] | None = None,
    ) -> Driver:
        """Start advancing ``zone_id`` in real time at ``power_w``; see :class:`Driver`.

        ``energy_now``: the energy drawn so far, in J, when power is not constant (a
        server whose power follows its load): the counter advances by what it gained
        since the driver started.

        ``wrap_uj`` replaces the zone's ``max_energy_range_uj`` (so tests can force
        frequent wraps); the counter wraps there, as the hardware counter does.
        """
        if wrap_uj is not None:
            atomic_write(self._zones[zone_id] / "max_energy_range_uj", f"{wrap_uj}\n")
        if zone_id in self._drivers:
            self._drivers[zone_id].stop()
        driver = Driver(self, zone_id, power_w, self.max_range_uj(zone_id), hz, energy_now)
        self._drivers[zone_id] = driver
        driver.start()
        return driver

    def pause(self, zone_id: str) -> None:
        """Stop the driver of ``zone_id`` (if any) so a test can write the file itself."""
        driver = self._drivers.get(zone_id)
        if driver is not None:
            driver.stop()


class Driver:
    """A background thread that advances one zone's counter at a constant power.

    ``energy_j`` is the exact ground truth: the joules the counter has advanced by as last
    written (computed from the monotonic clock, then rounded to whole µJ as the file holds).
    Use as a context manager or call :meth:`stop`; stopping writes one final value.

    Faults, as a misbehaving counter shows them while the hardware goes on drawing
    ``power_w`` (``energy_j`` stays the truth): :meth:`freeze` and :meth:`thaw` (the file
    keeps its value, then resumes from it or catches up), :meth:`reset` (back to 0) and
    :meth:`jump` (the file leaps ahead).
    """

    def __init__(
        self, tree: FakePowercap, zone_id: str, power_w: float, max_range_uj: int, hz: float,
        energy_now: Callable[[], float] | None = None,
    ) -> None:
        self._tree = tree
        self._energy_now = energy_now
        self._energy_at_start_j = 0.0
        self._zone_id = zone_id
        self._power_w = power_w
        self._max_range_uj = max_range_uj
        self._period_s = 1.0 / hz
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._advanced_uj = 0
        self._offset_uj = 0  # what the file shows beyond the truth (reset, jump, freeze)
        self._frozen_at_uj: int | None = None
        self.wraps = 0
        self._start_uj = tree.energy_uj(zone_id)
        self._start_s = 0.0
        self._thread = threading.Thread(target=self._run, name=f"drive-{zone_id}", daemon=True)

    def start(self) -> None:
        self._start_s = time.monotonic()
        if self._energy_now is not None:
            self._energy_at_start_j = self._energy_now()
        self._thread.start()

    def _step(self) -> None:
        if self._energy_now is not None:
            advanced_uj = int((self._energy_now() - self._energy_at_start_j) * 1e6)
        else:
            advanced_uj = int(self._power_w * (time.monotonic() - self._start_s) * 1e6)
        with self._lock:
            self._advanced_uj = advanced_uj
            if self._frozen_at_uj is not None:
                return
            absolute_uj = self._start_uj + advanced_uj + self._offset_uj
            self._tree.set_energy_uj(self._zone_id, absolute_uj % self._max_range_uj)
            self.wraps = absolute_uj // self._max_range_uj

    def freeze(self) -> None:
        """The file stops changing; the truth goes on."""
        with self._lock:
            self._frozen_at_uj = self._advanced_uj

    def thaw(self, catch_up: bool) -> None:
        """The file moves again: from the true count (``catch_up``) or from where it froze
        (the energy of the freeze never shows in it)."""
        with self._lock:
            if self._frozen_at_uj is not None and not catch_up:
                self._offset_uj -= self._advanced_uj - self._frozen_at_uj
            self._frozen_at_uj = None

    def reset(self) -> None:
        """The counter restarts from 0."""
        with self._lock:
            self._offset_uj = -(self._start_uj + self._advanced_uj)

    def jump(self, joules: float) -> None:
        """The counter leaps ahead by ``joules`` that were never drawn."""
        with self._lock:
            self._offset_uj += int(joules * 1e6)

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            self._step()
        self._step()

    @property
    def energy_j(self) -> float:
        with self._lock:
            return self._advanced_uj / 1e6

    def stop(self) -> float:
        """Stop the thread after one last write; returns the final ground truth in J.

        Safe to call more than once (``pause`` and the context manager may both stop it).
        """
        self._stop.set()
        self._thread.join()
        return self.energy_j

    def __enter__(self) -> Driver:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
