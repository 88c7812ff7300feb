"""Network interface energy, estimated from bytes moved: a model, not a measurement.

Reads ``<procfs_root>/net/dev`` (rx and tx byte counters per interface) and multiplies the
bytes each interface moved by a per-byte coefficient. ``/proc/net/dev`` shows the network
namespace of the reading process, so the agent must run with host networking to see the
node's NICs. Provenance ``model:network``.

Only traffic through NICs costs NIC energy, and traffic through virtual devices (veth
pairs, bridges, tunnels, bonds, VLANs) is counted again on the physical interface it
leaves by. Interfaces whose names mark them as virtual (``VIRTUAL_PREFIXES``, ``lo``
included) are therefore skipped; pass ``sysfs_root`` to decide by the kernel's own answer
instead (an interface is physical when ``<sysfs_root>/class/net/<if>/device`` exists).

Counters: a counter that goes backwards (interface reset or deleted and recreated under
the same name) restarts from the new value and counts 0 for that tick. An interface
first seen after the sensor opened, or back after vanishing, starts from its counter at
that moment (what it moved before is unknowable). An interface that vanishes keeps
reporting its last cumulative value, so the totals downstream never decrease.

Restart on the same boot: ``checkpoint`` keeps each interface's last byte counter and its
energy; after ``restore`` the next read counts the bytes moved during the gap on top of
that energy. An interface that is gone by then (or was gone at the checkpoint, so its
counter then is unknown) is skipped or starts from its counter at open.

The coefficient (see docs/methodology-network.md): ``DEFAULT_J_PER_BYTE`` = 1.6e-9 J/byte.
Derivation: a 25 GbE adapter (Mellanox ConnectX-4/5, Broadcom) adds about 9-10 W at the
wall (measured 32 W bare vs 41-42 W with card and cable, jungle-it.blogspot.com 2023-09);
at full-duplex line rate it moves 2 x 25 Gb/s = 6.25e9 B/s; 10 W / 6.25e9 B/s = 1.6e-9 J/B.
That charges the whole card's power to traffic at full load, an upper bound for fast
NICs: a 100 GbE ConnectX-4 drew only 7.8 W more saturated at 100G than at 1G
(static.xtremeownage.com, 2025), i.e. a few 1e-10 J/B. Cloud Carbon Footprint's
0.001 kWh/GB (3.6e-6 J/B) covers the whole internet path (routers, access networks) and
is ~2,000 times too high for one node's NIC.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from joulestat.core.records import DeviceInfo
from joulestat.core.tick import Component
from joulestat.devices.sensor import Capabilities, Reading, Sensor, get_float, get_int, restore_each
from joulestat.host.kernel_file import KernelFile

log = logging.getLogger(__name__)

SOURCE = "model:network"

# NIC energy per byte received or sent (J/B); source and derivation in the module docstring.
DEFAULT_J_PER_BYTE = 1.6e-9

# Name prefixes of virtual interfaces whose traffic is either local or counted again on a
# physical NIC: container/VM plumbing, overlay and VPN tunnels, aggregates. Loopback
# (``lo``) and VLANs (``eth0.100``) are matched separately.
VIRTUAL_PREFIXES = (
    "veth", "docker", "br-", "virbr", "vnet", "cni", "flannel", "cali", "cilium",
    "lxc", "vxlan", "genev", "tun", "tap", "wg", "kube-", "nodelocaldns", "weave", "bond",
    "team", "dummy", "ifb",
)


def parse_net_dev(text: str) -> dict[str, int]:
    """Interface -> rx_bytes + tx_bytes from the text of /proc/net/dev.

    Lines are ``<iface>: rx_bytes rx_packets ... (8 rx fields) tx_bytes ...``; the two
    header lines have no such shape. A malformed line raises ValueError.
    """
    totals: dict[str, int] = {}
    for line in text.splitlines():
        if ":" not in line or "|" in line:
            continue
        iface, _, fields_text = line.partition(":")
        fields = fields_text.split()
        if len(fields) < 9:
            raise ValueError(f"too few fields for {iface.strip()!r}: {line.strip()!r}")
        totals[iface.strip()] = int(fields[0]) + int(fields[8])
    return totals


@dataclass
class _Iface:
    """Running state of one interface: last counter and bytes counted so far.

    ``base_j`` is energy carried over from a restored checkpoint: kept in joules, not
    bytes, so a changed ``j_per_byte`` cannot rewrite what was already reported.
    """

    last_bytes: int
    counted_bytes: int = 0
    present: bool = True  # listed at the previous read
    base_j: float = 0.0

    def energy_j(self, j_per_byte: float) -> float:
        return self.base_j + self.counted_bytes * j_per_byte


def _restore_iface(current: _Iface, item: dict) -> None:
    energy_j = get_float(item, "energy_j")
    last_bytes = get_int(item, "last_bytes") if "last_bytes" in item else None
    current.base_j, current.counted_bytes = energy_j, 0
    if last_bytes is not None:
        current.last_bytes = last_bytes


class NetworkSensor(Sensor):
    """Cumulative estimated NIC joules per physical interface since the sensor opened.

    No idle power is declared: the model is per byte, so all of it is dynamic.
    """

    name = "network"
    capabilities = Capabilities(estimate=True)

    def __init__(
        self,
        procfs_root: Path,
        j_per_byte: float = DEFAULT_J_PER_BYTE,
        sysfs_root: Path | None = None,
    ) -> None:
        if not j_per_byte >= 0:
            raise ValueError(f"j_per_byte must be a non-negative number, got {j_per_byte!r}")
        self._path = procfs_root / "net" / "dev"
        self._file = KernelFile(self._path)
        self._sysfs_root = sysfs_root
        self._physical: dict[str, bool] = {}
        self.j_per_byte = j_per_byte
        self._ifaces: dict[str, _Iface] = {}
        # Baseline now: bytes moved before the sensor opened are not ours to count. An
        # unreadable file is not fatal here: interfaces then count from the first good read.
        try:
            counters = self._counters()
        except (OSError, ValueError) as exc:
            log.warning("cannot read %s (%s); network energy counts from the first good "
                        "read", self._path, exc)
            counters = {}
        for iface, total in counters.items():
            self._ifaces[iface] = _Iface(total)

    def _is_physical(self, iface: str) -> bool:
        """Asked once per interface name; the kernel's answer when sysfs shows the NICs."""
        known = self._physical.get(iface)
        if known is None:
            net = self._sysfs_root / "class" / "net" if self._sysfs_root is not None else None
            if net is not None and net.is_dir():
                known = (net / iface / "device").exists()
            else:
                known = iface != "lo" and "." not in iface and not iface.startswith(
                    VIRTUAL_PREFIXES)
            self._physical[iface] = known
        return known

    def _counters(self) -> dict[str, int]:
        totals = parse_net_dev(self._file.read_text())
        return {k: v for k, v in totals.items() if self._is_physical(k)}

    def describe(self) -> list[DeviceInfo]:
        return [DeviceInfo(component=Component.NET, device=i, source=SOURCE) for i in self._ifaces]

    def read(self, now_s: float) -> list[Reading]:
        """``now_s`` is unused: the energy follows bytes, not time."""
        try:
            counters = self._counters()
        except ValueError as exc:
            raise OSError(f"{self._path}: {exc}") from exc
        for iface, total in counters.items():
            state = self._ifaces.get(iface)
            if state is None or not state.present:
                # New, or back after vanishing (likely recreated): count from now.
                log.info("network interface %s appeared; counting from now", iface)
                if state is None:
                    self._ifaces[iface] = _Iface(total)
                else:
                    state.last_bytes, state.present = total, True
                continue
            if total < state.last_bytes:
                log.info("network interface %s counters went back (reset or recreated); "
                         "restarting from the new value", iface)
            else:
                state.counted_bytes += total - state.last_bytes
            state.last_bytes = total
        for iface, state in self._ifaces.items():
            if state.present and iface not in counters:
                log.info("network interface %s vanished; keeping its total", iface)
                state.present = False
        return [
            Reading(Component.NET, iface, state.energy_j(self.j_per_byte), SOURCE)
            for iface, state in self._ifaces.items()
        ]

    def checkpoint(self) -> dict:
        """Per interface: energy, and the last byte counter while it is present."""
        ifaces: dict[str, dict[str, int | float]] = {}
        for iface, state in self._ifaces.items():
            item: dict[str, int | float] = {"energy_j": state.energy_j(self.j_per_byte)}
            if state.present:
                item["last_bytes"] = state.last_bytes
            ifaces[iface] = item
        return {"ifaces": ifaces}

    def restore(self, state: dict) -> None:
        """Continue each interface seen at open from its checkpoint; others are skipped."""
        restore_each(state, "ifaces", self._ifaces, _restore_iface, log, "network",
                     "interface")

    def close(self) -> None:
        self._file.close()
