"""joulestat.host.serving_address: where a job's serving metrics may be fetched from.
This node's own addresses come from a fake procfs (``net/fib_trie``, ``net/if_inet6``
as the kernel writes them); the allowlist is parsed as the setting is; link-local
addresses are refused whatever it says. (Resolving names and fetching over real
sockets: tests/system/test_serving_metrics_fetch.py.)"""

from __future__ import annotations

import argparse
import ipaddress
from pathlib import Path

import pytest

from joulestat.attribution.agent_labels import validate_serving_url
from joulestat.core.validation import JobError
from joulestat.host.serving_address import (
    AddressRefused,
    ServingAddressRule,
    link_local_literal,
    node_networks,
    parse_serving_allow,
)
from joulestat.runtime.settings import add_options, resolve

# A node with 10.1.2.3 on eth0 and 172.17.0.1 on docker0, as /proc/net/fib_trie shows
# it (both tables; a BROADCAST and a link route that are not the node's addresses).
FIB_TRIE = """\
Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.1.2.0/24 2 0 2
        |-- 10.1.2.0
           /24 link UNICAST
        |-- 10.1.2.3
           /32 host LOCAL
        |-- 10.1.2.255
           /32 link BROADCAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
     |-- 172.17.0.1
        /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 10.1.2.3
        /32 host LOCAL
"""
IF_INET6 = """\
00000000000000000000000000000001 01 80 10 80       lo
fe80000000000000020c29fffe123456 02 40 20 80     eth0
20010db8000000000000000000000042 02 40 00 80     eth0
"""


def procfs(tmp_path: Path, fib_trie: str | None = FIB_TRIE,
           if_inet6: str | None = IF_INET6) -> Path:
    net = tmp_path / "proc" / "net"
    net.mkdir(parents=True)
    if fib_trie is not None:
        (net / "fib_trie").write_text(fib_trie)
    if if_inet6 is not None:
        (net / "if_inet6").write_text(if_inet6)
    return tmp_path / "proc"


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def test_the_nodes_addresses_are_its_local_routes_and_ipv6_addresses(tmp_path) -> None:
    networks = node_networks(procfs(tmp_path))
    assert {str(n) for n in networks} == {
        "10.1.2.3/32", "172.17.0.1/32", "127.0.0.0/8", "127.0.0.1/32",
        "::1/128", "fe80::20c:29ff:fe12:3456/128", "2001:db8::42/128"}
    assert node_networks(procfs(tmp_path / "bare", None, None)) == frozenset()


def test_by_default_only_this_nodes_addresses_pass(tmp_path) -> None:
    rule = ServingAddressRule(procfs_root=procfs(tmp_path))
    for allowed in ("127.0.0.1", "127.3.4.5", "::1", "10.1.2.3", "172.17.0.1", "2001:db8::42"):
        rule.check(allowed, ip(allowed))
    rule.check("vllm.local", ip("10.1.2.3"))  # a name is judged by what it resolves to
    with pytest.raises(AddressRefused) as refused:
        rule.check("10.1.2.4", ip("10.1.2.4"))  # a neighbour on the node's subnet
    assert str(refused.value) == (
        "10.1.2.4 is not an address of this node: serving metrics are fetched from the "
        "job's own node only (loopback and this node's addresses) unless "
        "--serving-metrics-allow (JOULESTAT_SERVING_METRICS_ALLOW) names the host, its "
        "address or a network holding it")
    with pytest.raises(AddressRefused, match=r"^api.internal \(10.9.9.9\) is not an address"):
        rule.check("api.internal", ip("10.9.9.9"))


@pytest.mark.parametrize("address", ["169.254.169.254", "169.254.0.1", "fe80::1",
                                     "fe80::20c:29ff:fe12:3456", "::ffff:169.254.169.254"])
def test_link_local_is_refused_whatever_the_allowlist_says(tmp_path, address) -> None:
    # fe80::20c:29ff:fe12:3456 is even one of the node's own addresses.
    rule = ServingAddressRule(("0.0.0.0/0", "::/0", "metadata.internal"),
                              procfs_root=procfs(tmp_path))
    with pytest.raises(AddressRefused, match="link-local address .*never fetched from one"):
        rule.check("metadata.internal", ip(address))
    assert link_local_literal(address)


def test_the_allowlist_lets_names_addresses_and_networks_through(tmp_path) -> None:
    allow = ("vllm-0.serving.svc", "10.20.0.7", "10.30.0.0/16", "2001:db8:1::/48")
    rule = ServingAddressRule(allow, procfs_root=procfs(tmp_path))
    rule.check("VLLM-0.serving.svc", ip("10.99.0.1"))  # the URL's host as written
    rule.check("10.20.0.7", ip("10.20.0.7"))
    rule.check("10.30.255.1", ip("10.30.255.1"))
    rule.check("2001:db8:1::9", ip("2001:db8:1::9"))
    for refused in ("10.20.0.8", "10.31.0.1", "2001:db8:2::9"):
        with pytest.raises(AddressRefused, match="not an address of this node"):
            rule.check(refused, ip(refused))


def test_the_setting_is_parsed_as_documented() -> None:
    env = {"JOULESTAT_SERVING_METRICS_ALLOW": " gpu-7.example.com, 10.0.0.0/8 ,10.1.2.3,[::1],"}
    resolved = resolve({}, ["serving_metrics_allow"], env=env)
    assert resolved["serving_metrics_allow"] == ("gpu-7.example.com", "10.0.0.0/8",
                                                 "10.1.2.3/32", "::1/128")
    assert resolve({}, ["serving_metrics_allow"], env={})["serving_metrics_allow"] == ()
    assert parse_serving_allow(["a.example", "192.0.2.0/24"]) == ("a.example", "192.0.2.0/24")
    assert parse_serving_allow("10.1.2.3/24") == ("10.1.2.0/24",)
    parser = argparse.ArgumentParser()
    add_options(parser, ["serving_metrics_allow"])
    args = parser.parse_args(["--serving-metrics-allow", "gpu-7.example.com,10.0.0.0/8"])
    assert resolve(args, ["serving_metrics_allow"], env={})["serving_metrics_allow"] == (
        "gpu-7.example.com", "10.0.0.0/8")


@pytest.mark.parametrize(("value", "said"), [
    ("http://10.0.0.1:8000/metrics", "not a host name, an IP address or a CIDR network"),
    ("10.0.0.1:8000", "not a host name"),
    ("bad name", "not a host name"),
    ("169.254.169.254", "link-local"),
    ("fe80::/64", "link-local"),
])
def test_a_bad_allowlist_entry_stops_the_agent_naming_the_setting(value, said) -> None:
    from joulestat.core.errors import ConfigError

    with pytest.raises(ConfigError, match=f"JOULESTAT_SERVING_METRICS_ALLOW: .*{said}"):
        resolve({}, ["serving_metrics_allow"], env={"JOULESTAT_SERVING_METRICS_ALLOW": value})


def test_a_link_local_url_is_refused_before_any_agent_is_asked() -> None:
    """What `joulestat run --serving-metrics` and track() check themselves: the rest of
    the rule is the agent's (its settings, its node)."""
    for url in ("http://169.254.169.254/latest/meta-data/", "http://[fe80::1]:8000/metrics"):
        with pytest.raises(JobError, match=r"^--serving-metrics: .* is a link-local address"):
            validate_serving_url(url, "--serving-metrics")
    assert not link_local_literal("vllm.local") and not link_local_literal("10.0.0.1")
    assert validate_serving_url("http://10.0.0.1:8000/metrics") == "http://10.0.0.1:8000/metrics"
