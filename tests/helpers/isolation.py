"""The in-process tiers' rule, enforced: a test in ``tests/unit/``, or a SQLite store test
in ``tests/store/``, starts no process and opens no network socket.

Those tiers are the loop a developer runs after each change (``make test-fast``); what
needs a process, a server or the network belongs in ``tests/system/`` (or, for
PostgreSQL, in the store tier's ``postgresql`` runs). The rule is checked, not trusted:
a Python audit hook (PEP 578, ``sys.addaudithook``) sees every process start
(``subprocess.Popen``, ``os.system``, ``os.fork``, ``os.posix_spawn``, ``os.exec*``) and
every IPv4/IPv6 socket made, bound or connected, plus name lookups. While a guarded
test's setup, call or teardown runs, such an event fails the operation
(:class:`IsolationError`) and the test, naming what it tried, even where the code under
test catches the error. Unix-domain socket pairs (an event loop's self-pipe) are not
network sockets and pass. What C code does below Python (libpq's own connections in
psycopg) makes no audit event: a PostgreSQL URL has no place in these tiers anyway.

Audit hooks cannot be removed, so one is installed per process and consulted only while
a guarded phase runs.
"""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PROCESS_EVENTS = frozenset({
    "subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec",
    "os.spawn", "pty.spawn",
})
SOCKET_EVENTS = frozenset({"socket.connect", "socket.bind", "socket.getaddrinfo",
                           "socket.sendto", "socket.gethostbyname"})
NETWORK_FAMILIES = frozenset({-1, socket.AF_INET, socket.AF_INET6})

TESTS = Path(__file__).resolve().parents[1]
IN_PROCESS = "in_process"


class IsolationError(RuntimeError):
    """A guarded test tried to start a process or use the network."""


class _Guard:
    def __init__(self) -> None:
        self.active = False
        self.seen: list[str] = []

    def __call__(self, event: str, args: tuple) -> None:
        if not self.active:
            return
        if event in PROCESS_EVENTS:
            what = f"started a process ({event}: {_short(args)})"
        elif event == "socket.__new__" and args[1] in NETWORK_FAMILIES:
            what = f"made a network socket (family {args[1]})"
        elif event in SOCKET_EVENTS:
            what = f"used the network ({event}: {_short(args[1:] or args)})"
        else:
            return
        self.active = False  # the error's own formatting must not trip the hook
        self.seen.append(what)
        raise IsolationError(f"an in-process test {what}; move it to tests/system/")

    def arm(self) -> None:
        self.seen = []
        self.active = True

    def disarm(self) -> list[str]:
        self.active = False
        return self.seen


_GUARD = _Guard()
sys.addaudithook(_GUARD)


@contextlib.contextmanager
def unguarded() -> Iterator[None]:
    """Lets a fixture of a wider scope start or stop what it owns (the session's
    PostgreSQL server), whichever test's setup or teardown it falls in."""
    was = _GUARD.active
    _GUARD.active = False
    try:
        yield
    finally:
        _GUARD.active = was


def _short(args: tuple) -> str:
    text = " ".join(str(a) for a in args)
    return text if len(text) <= 160 else text[:157] + "..."


def in_process_tier(item: pytest.Item) -> bool:
    """Whether ``item`` is in an in-process tier by where it lives: everything under
    tests/unit/, and the store tier's runs that are not marked ``postgres``."""
    try:
        relative = Path(str(item.path)).resolve().relative_to(TESTS)
    except ValueError:
        return False
    tier = relative.parts[0]
    if tier == "unit":
        return True
    return tier == "store" and item.get_closest_marker("postgres") is None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks the in-process tiers' tests ``in_process`` (``-m in_process`` selects them);
    the mark is what the check below reads."""
    for item in items:
        if in_process_tier(item):
            item.add_marker(IN_PROCESS)


def is_guarded(item: pytest.Item) -> bool:
    return (item.get_closest_marker(IN_PROCESS) is not None
            and item.get_closest_marker("postgres") is None)


def _guarded_phase(item: pytest.Item) -> Iterator[None]:
    if not is_guarded(item):
        return (yield)
    _GUARD.arm()
    try:
        result = yield
    finally:
        seen = _GUARD.disarm()
    if seen:
        pytest.fail(f"{item.nodeid} " + "; ".join(dict.fromkeys(seen))
                    + " (tests/unit/ and the SQLite store tests run in process: move it to "
                    "tests/system/)", pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _guarded_phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _guarded_phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    return (yield from _guarded_phase(item))
