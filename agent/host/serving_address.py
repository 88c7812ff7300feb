"""Where the agent may fetch a job's serving metrics from: this node, unless told more.

Why a rule at all: a job's ``serving_metrics`` URL is given by whoever registers the job
(``joulestat run --serving-metrics``, ``track(serving_metrics=...)``, the job API), and
the agent fetches it every tick and counts what the page says into the job, which anyone
may read through ``GET /v1/jobs``. Without a rule, a registration could make the agent
fetch whatever it can reach: another service's counters read back as the job's units, a
cloud metadata service at a link-local address. The serving engine whose tokens a job
counts runs beside the job, on the job's node, so by default only this node's own
addresses pass:

* loopback (127.0.0.0/8, ::1);
* the addresses of the node's interfaces, as the kernel lists them in the agent's
  network namespace: the ``LOCAL`` entries of ``<procfs>/net/fib_trie`` (IPv4) and
  ``<procfs>/net/if_inet6`` (IPv6);
* what ``--serving-metrics-allow`` (``JOULESTAT_SERVING_METRICS_ALLOW``) names: host
  names (the URL's host as written), IP addresses or CIDR networks, comma-separated.

Link-local addresses (169.254.0.0/16, fe80::/10; the cloud metadata services live there)
are never fetched, whatever the allowlist says. The rule is checked when a job is
registered and again on every fetch, on the addresses the name resolves to then (DNS may
change): the fetch connects to an address that passed, never resolves again.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["LINK_LOCAL", "AddressRefused", "ServingAddressRule", "link_local_literal",
           "node_networks", "parse_serving_allow"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
LINK_LOCAL: tuple[IPNetwork, ...] = (ipaddress.ip_network("169.254.0.0/16"),
                                     ipaddress.ip_network("fe80::/10"))
LOOPBACK: tuple[IPNetwork, ...] = (ipaddress.ip_network("127.0.0.0/8"),
                                   ipaddress.ip_network("::1/128"))
ALLOW_SETTING = "--serving-metrics-allow (JOULESTAT_SERVING_METRICS_ALLOW)"
# How long the node's own addresses, read from procfs, are trusted: every fetch checks
# its address, and a node's interfaces change rarely (a new address is seen this late).
NODE_ADDRESSES_TTL_S = 10.0
_HOST_NAME = re.compile(r"(?=.{1,253}$)[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*"
                        r"\.?")


class AddressRefused(ValueError):  # noqa: N818 - a refusal, said to the user as is
    """A serving-metrics URL whose host the rule does not let the agent fetch from."""


def _is_link_local(ip: IPAddress) -> bool:
    return _within(ip, LINK_LOCAL)


def _plain(ip: IPAddress) -> IPAddress:
    """An IPv4-mapped IPv6 address (``::ffff:169.254.169.254``) as the IPv4 address it
    reaches, so that no spelling slips past the rule."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def parse_serving_allow(value: Any) -> tuple[str, ...]:
    """``--serving-metrics-allow``: host names, IP addresses or CIDR networks,
    comma-separated (a TOML list also does), normalised (names lower case, networks as
    ``ip/prefix``). ``ValueError`` naming an entry that is none of these, or that is
    link-local (never allowed: saying so beats accepting it and fetching nothing)."""
    if isinstance(value, list | tuple):
        items = [str(v) for v in value]
    elif isinstance(value, str):
        items = value.split(",")
    else:
        raise ValueError("expected host names, IP addresses or CIDR networks, "
                         "comma-separated")
    entries: list[str] = []
    for raw in items:
        entry = raw.strip().lower()
        if not entry:
            continue
        try:
            network = ipaddress.ip_network(entry.strip("[]"), strict=False)
        except ValueError:
            if not _HOST_NAME.fullmatch(entry):
                raise ValueError(f"{raw.strip()[:100]!r} is not a host name, an IP address or "
                                 "a CIDR network (no scheme, port or path)") from None
            entries.append(entry.rstrip("."))
            continue
        if any(network.subnet_of(net) for net in LINK_LOCAL  # type: ignore[arg-type]
               if net.version == network.version):
            raise ValueError(f"{entry} is link-local: serving metrics are never fetched from "
                             "169.254.0.0/16 or fe80::/10")
        entries.append(str(network))
    return tuple(dict.fromkeys(entries))


def link_local_literal(host: str) -> bool:
    """Whether ``host`` is a link-local IP address as written (``169.254.169.254``,
    ``[fe80::1]``): refused before any lookup, by ``joulestat run`` and track() too."""
    try:
        ip = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    return _is_link_local(_plain(ip))


def _fib_trie_local(text: str) -> set[IPNetwork]:
    """The ``LOCAL`` routes of ``/proc/net/fib_trie``: this node's IPv4 addresses (a
    ``/32 host LOCAL`` under an address line; ``/8`` for the whole loopback net)."""
    found: set[IPNetwork] = set()
    current: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|-- "):
            current = stripped[4:].strip()
        elif stripped.startswith("/") and current is not None:
            words = stripped.split()
            if len(words) >= 3 and words[-1] == "LOCAL" and words[-2] == "host":
                try:
                    found.add(ipaddress.ip_network(f"{current}{words[0]}", strict=False))
                except ValueError:
                    continue
    return found


def _if_inet6(text: str) -> set[IPNetwork]:
    """The addresses of ``/proc/net/if_inet6``: 32 hex digits, then index, prefix,
    scope, flags, interface."""
    found: set[IPNetwork] = set()
    for line in text.splitlines():
        words = line.split()
        if not words or len(words[0]) != 32:
            continue
        try:
            ip = ipaddress.IPv6Address(int(words[0], 16))
        except ValueError:
            continue
        found.add(ipaddress.ip_network(ip))
    return found


def node_networks(procfs_root: Path | str = "/proc") -> frozenset[IPNetwork]:
    """This node's own addresses (as networks: loopback's LOCAL route is a /8), read from
    ``<procfs_root>/net/fib_trie`` and ``<procfs_root>/net/if_inet6``; a file that
    cannot be read gives none (an IPv6-less kernel has no if_inet6)."""
    root = Path(procfs_root)
    found: set[IPNetwork] = set()
    for name, parse in (("fib_trie", _fib_trie_local), ("if_inet6", _if_inet6)):
        try:
            text = (root / "net" / name).read_text(errors="replace")
        except OSError as exc:
            log.debug("serving metrics: cannot read %s: %s", root / "net" / name, exc)
            continue
        found |= parse(text)
    return frozenset(found)


class ServingAddressRule:
    """The rule above: ``allow`` as :func:`parse_serving_allow` takes it, the node's own
    addresses read from ``procfs_root`` (a fake tree in tests). Shared by the job API
    (at registration) and the poller (at every fetch), from any thread."""

    def __init__(self, allow: Iterable[str] = (), procfs_root: Path | str = "/proc") -> None:
        self.allow = parse_serving_allow(list(allow))
        self.procfs_root = Path(procfs_root)
        networks: list[IPNetwork] = []
        names: set[str] = set()
        for entry in self.allow:
            try:
                networks.append(ipaddress.ip_network(entry))
            except ValueError:
                names.add(entry)
        self._networks, self._names = tuple(networks), frozenset(names)
        self._lock = threading.Lock()
        self._node_read_at: float | None = None
        self._node: frozenset[IPNetwork] = frozenset()

    def __repr__(self) -> str:
        return f"ServingAddressRule(allow={self.allow!r}, procfs_root={str(self.procfs_root)!r})"

    def node(self) -> frozenset[IPNetwork]:
        """This node's addresses (:func:`node_networks`), read again after
        :data:`NODE_ADDRESSES_TTL_S`."""
        with self._lock:
            now = time.monotonic()
            if self._node_read_at is None or now - self._node_read_at > NODE_ADDRESSES_TTL_S:
                self._node, self._node_read_at = node_networks(self.procfs_root), now
            return self._node

    def check(self, host: str, ip: IPAddress) -> None:
        """``AddressRefused`` unless ``host`` (as the URL writes it), at ``ip``, may be
        fetched from; the message names the address and the rule."""
        ip = _plain(ip)
        name = host.strip("[]").lower().rstrip(".")
        shown = str(ip) if name == str(ip) else f"{host} ({ip})"
        if _is_link_local(ip):
            raise AddressRefused(
                f"{shown} is a link-local address (169.254.0.0/16, fe80::/10, where cloud "
                "metadata services answer): serving metrics are never fetched from one")
        if (_within(ip, LOOPBACK) or name in self._names or _within(ip, self._networks)
                or _within(ip, self.node())):
            return
        raise AddressRefused(
            f"{shown} is not an address of this node: serving metrics are fetched from "
            f"the job's own node only (loopback and this node's addresses) unless "
            f"{ALLOW_SETTING} names the host, its address or a network holding it")

    def resolve(self, host: str, port: int) -> list[tuple[int, tuple[Any, ...]]]:
        """``(family, socket address)`` of each address ``host`` resolves to now, every
        one checked: ``AddressRefused`` when it cannot be resolved or any address is not
        allowed (a name half on this node and half elsewhere is not this node's)."""
        try:
            infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            why = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
            raise AddressRefused(f"cannot resolve {host}: {why}") from None
        addresses: list[tuple[int, tuple[Any, ...]]] = []
        for family, _type, _proto, _name, sockaddr in infos:
            if family not in (socket.AF_INET, socket.AF_INET6):
                continue
            self.check(host, ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]))
            if (family, sockaddr) not in addresses:
                addresses.append((family, sockaddr))
        if not addresses:
            raise AddressRefused(f"cannot resolve {host}: no IPv4 or IPv6 address")
        return addresses


def _within(ip: IPAddress, networks: Iterable[IPNetwork]) -> bool:
    return any(ip in net for net in networks if net.version == ip.version)
