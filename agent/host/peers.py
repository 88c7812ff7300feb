"""Who is calling the job API over loopback TCP, and whose a process is, from procfs.

A loopback connection carries no credentials, but the kernel knows which user owns
each socket: ``/proc/net/tcp`` and ``/proc/net/tcp6`` list every TCP socket with its
local and remote address and the owner's uid (proc(5)). The caller's side of our
connection is the row whose local address is the peer address we accepted and whose
remote address is our own; its ``uid`` column is the caller's uid. A process's owner is
the real uid on the ``Uid:`` line of ``/proc/<pid>/status``.

Where a row or a file cannot be found (a caller on another host through the API token,
another network namespace, a process gone), the answer is None: the API then cannot
tell, and says so in docs/jobs.md rather than guessing. Linux only, like the agent.
"""

from __future__ import annotations

import ipaddress
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def _hex_address(host: str, port: int) -> tuple[str, ...]:
    """How ``host:port`` reads in /proc/net/tcp{,6}: the address as the kernel's
    32-bit words in host byte order (little-endian here), then the port in hex. An
    IPv4 address is also looked for as IPv4-mapped IPv6 (a dual-stack socket)."""
    address = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    forms = []
    if isinstance(address, ipaddress.IPv4Address):
        forms.append(address.packed[::-1].hex().upper())
        mapped = ipaddress.IPv6Address(f"::ffff:{address}").packed
    else:
        mapped = address.packed
    forms.append("".join(mapped[i:i + 4][::-1].hex().upper() for i in range(0, 16, 4)))
    return tuple(f"{form}:{port:04X}" for form in forms)


class PeerLookup:
    """Reads under ``procfs_root`` (``/proc``, or a fake one in tests)."""

    def __init__(self, procfs_root: Path) -> None:
        self.root = procfs_root

    def caller_uid(self, peer: Any, ours: Any) -> int | None:
        """The uid owning the client end of the TCP connection from ``peer`` to
        ``ours`` (socket addresses as accept() and getsockname() give them), or None."""
        try:
            peer_forms = set(_hex_address(str(peer[0]), int(peer[1])))
            our_forms = set(_hex_address(str(ours[0]), int(ours[1])))
        except (ValueError, IndexError, TypeError):
            return None
        for table in ("tcp", "tcp6"):
            try:
                lines = (self.root / "net" / table).read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                if len(fields) > 7 and fields[1] in peer_forms and fields[2] in our_forms:
                    try:
                        return int(fields[7])
                    except ValueError:
                        return None
        return None

    def exists(self, pid: int) -> bool:
        """Whether process ``pid`` runs now (a zombie counts: it still holds the pid)."""
        return (self.root / str(pid)).is_dir()

    def process_uid(self, pid: int) -> int | None:
        """The real uid of process ``pid``, or None (gone, or unreadable)."""
        try:
            status = (self.root / str(pid) / "status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("Uid:"):
                try:
                    return int(line.split()[1])
                except (IndexError, ValueError):
                    return None
        return None

