"""The job API under load: slow and silent clients, refusals past its in-flight cap,
bursts of requests, connection floods, and a port freed at close."""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from joulestat.api.server import ApiServer
from joulestat.attribution.registry import JobRegistry
from tests.helpers.job_api import JOB, call, post_head, register

log = logging.getLogger(__name__)


@pytest.fixture
def registry() -> JobRegistry:
    return JobRegistry()


def test_slow_clients_time_out_while_health_checks_keep_answering(
    registry: JobRegistry,
) -> None:
    """Slow and silent connections hold a socket each, not an in-flight slot: with
    more of them than slots, health checks still answer 200 meanwhile."""
    with ApiServer(registry, "127.0.0.1", 0, max_in_flight=2, request_timeout_s=3.0) as api:
        port = api.port
        slow = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
        slow[0].sendall(b"GET /v1/heal")  # an unfinished request line
        slow[1].sendall(post_head("/v1/jobs", "Content-Length: 100") + b"{")  # half a body
        # The fourth trickles a byte at a time, each well within any per-read timeout.
        trickler = socket.create_connection(("127.0.0.1", port), timeout=10)
        stop = threading.Event()

        def trickle() -> None:
            for byte in b"GET /v1/health HTTP/1.1\r\nX-Slow: " + b"a" * 1000:
                if stop.wait(0.2):
                    return
                try:
                    trickler.send(bytes([byte]))
                except OSError:
                    return

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        started = time.monotonic()
        answers = []
        while time.monotonic() < started + 0.8:  # four slow clients, two slots: no matter
            began = time.monotonic()
            answers.append(call(port, "GET", "/v1/health")[0])
            # Well within the 3 s the slow clients hold their sockets (a health check
            # queued behind them would take that long), with room for a loaded machine.
            assert time.monotonic() - began < 1.5
            time.sleep(0.02)
        assert len(answers) >= 5 and set(answers) == {200}, answers

        closed_after, answers_seen = [], []
        for sock in (*slow, trickler):
            data = b""
            try:
                while chunk := sock.recv(65536):
                    data += chunk
            except ConnectionResetError:  # closed with the trickler's bytes unread: a reset
                pass
            closed_after.append(time.monotonic() - started)
            answers_seen.append(data.split(b"\r\n", 1)[0])
            sock.close()
        stop.set()
        assert answers_seen[1] == b"HTTP/1.0 408 Request Timeout"  # the half body
        assert answers_seen[0] == answers_seen[2] == answers_seen[3] == b""  # no request
        assert api.busy_rejections == 0
        assert max(closed_after) < 3.0 + 1.0 + 2.0  # deadline + linger + slack
        assert call(port, "GET", "/v1/health")[0] == 200


def test_a_refused_client_that_sends_late_still_reads_its_429(registry: JobRegistry) -> None:
    """The 429 goes out once the request is whole (here its body arrives late); answering
    and closing earlier would make the client's next send hit a reset instead."""
    entered, release = threading.Event(), threading.Event()

    def slow_persist(job: Any) -> bool:
        entered.set()
        return release.wait(10)

    with ApiServer(registry, "127.0.0.1", 0, max_in_flight=1, persist=slow_persist) as api:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(call, api.port, "POST", "/v1/jobs", JOB)  # holds the one slot
            assert entered.wait(5)
            with socket.create_connection(("127.0.0.1", api.port), timeout=10) as sock:
                time.sleep(0.1)
                sock.sendall(post_head("/v1/jobs", "Content-Length: 2"))
                time.sleep(0.05)
                sock.sendall(b"{}")
                data = b""
                while chunk := sock.recv(65536):
                    data += chunk
            release.set()
            status, _, job = first.result(timeout=10)
        assert data.startswith(b"HTTP/1.0 429 ") and b'"error"' in data
        assert b"Retry-After: 1" in data and api.busy_rejections == 1
        assert status == 201 and job["durable"] is True
        assert [j.id for j in registry.jobs()] == [job["id"]]  # the refused one took no effect


@pytest.mark.parametrize("cap", [64, 2])
def test_burst_of_1000_requests(registry: JobRegistry, cap: int) -> None:
    with ApiServer(registry, "127.0.0.1", 0, max_in_flight=cap) as api:
        _burst(api, registry)


def _burst(api: ApiServer, registry: JobRegistry) -> None:
    port = api.port
    shared = register(port, name="shared")

    def one(i: int) -> tuple[str, int]:
        if i % 4 == 0:
            return "register", call(port, "POST", "/v1/jobs", {"name": f"j{i}", "kind": "other"})[0]
        if i % 4 == 1:
            body = {"unit": "sample", "count": 2}
            return "count", call(port, "POST", f"/v1/jobs/{shared['id']}/units", body)[0]
        if i % 4 == 2:
            return "bad", call(port, "POST", "/v1/jobs", b"{oops")[0]
        return "health", call(port, "GET", "/v1/health")[0]

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=128) as pool:
        results = list(pool.map(one, range(1000)))
    wall_s = time.perf_counter() - started
    tally = Counter(results)
    log.info("burst of 1000, cap %d: %s in %.2f s", api.max_in_flight, dict(tally), wall_s)

    expected = {"register": 201, "count": 200, "bad": 400, "health": 200}
    for (kind, status), n in tally.items():
        assert status in (expected[kind], 429), (kind, status, n)
    refused = sum(n for (_, status), n in tally.items() if status == 429)
    deadline = time.monotonic() + 2  # the server counts a refusal just after sending it
    while api.busy_rejections < refused and time.monotonic() < deadline:
        time.sleep(0.01)
    assert api.busy_rejections == refused
    assert sum(n for (_, status), n in tally.items() if status != 429) > 0
    if api.max_in_flight < 8:  # 128 clients at once: complete requests past the queue
        assert refused > 0
    # Every accepted request took effect exactly once.
    assert len(registry.jobs()) == 1 + tally[("register", 201)]
    assert registry.get(shared["id"]).units.get("sample", 0) == 2 * tally[("count", 200)]
    assert wall_s < 60
    assert call(port, "GET", "/v1/health")[2]["status"] == "ok"


def test_connection_flood_makes_no_thread_each_and_health_checks_get_through(
    registry: JobRegistry, many_fds: None
) -> None:
    cap, total, max_open = 16, 1000, 256
    with ApiServer(registry, "127.0.0.1", 0, max_in_flight=cap, request_timeout_s=10.0,
                   max_connections=max_open) as api:
        threads_before, peak_threads = threading.active_count(), 0
        socks = []
        try:
            for i in range(total):  # connect all, send nothing
                socks.append(socket.create_connection(("127.0.0.1", api.port), timeout=10))
                peak_threads = max(peak_threads, threading.active_count())
                if i % 100 == 0:  # a health check gets through the flood all along
                    assert call(api.port, "GET", "/v1/health")[0] == 200
            assert peak_threads == threads_before  # the server's threads all exist already
            # At the cap, each newcomer closed the oldest silent connection.
            with selectors.DefaultSelector() as selector:
                for sock in socks:
                    selector.register(sock, selectors.EVENT_READ)
                deadline, closed = time.monotonic() + 5, set()
                while len(closed) < total - max_open and time.monotonic() < deadline:
                    closed |= {key.fileobj for key, _ in selector.select(0.2)}
            # Oldest first. A health check answered but not yet handed back by its
            # worker when the next socket came may cost one silent connection more.
            index = {sock: i for i, sock in enumerate(socks)}
            evicted = sorted(index[sock] for sock in closed)
            at_cap = sum(1 for i in range(max_open, total) if i % 100 == 0)
            assert evicted == list(range(len(evicted)))
            assert total - max_open <= len(evicted) <= total - max_open + at_cap
            assert all(sock.recv(1) == b"" for sock in socks[: len(evicted)])
            held = socks[len(evicted) :]
            for sock in held:  # all at once: past `cap` queued requests, 429 at once
                sock.sendall(b"GET /v1/health HTTP/1.0\r\n\r\n")
            statuses: Counter[int] = Counter()
            for sock in held:
                data = b""
                while chunk := sock.recv(65536):
                    data += chunk
                statuses[int(data.split()[1])] += 1
                assert data.endswith(b"}\n")
        finally:
            for sock in socks:
                sock.close()
        assert set(statuses) <= {200, 429} and sum(statuses.values()) == len(held)
        assert statuses[200] >= cap and api.busy_rejections == statuses[429]
        assert call(api.port, "GET", "/v1/health")[0] == 200


def test_close_frees_the_port(registry: JobRegistry) -> None:
    api = ApiServer(registry, "127.0.0.1", 0)
    api.start()
    port = api.port
    assert port != 0 and call(port, "GET", "/v1/health")[0] == 200
    began = time.monotonic()
    api.close()
    api.close()
    assert time.monotonic() - began < 3.0  # prompt, with room for a loaded machine
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
