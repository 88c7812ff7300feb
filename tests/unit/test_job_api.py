"""The job API over real sockets: the happy path, then everything a hostile caller sends."""

from __future__ import annotations

import http.client
import json
import logging
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from agent.jobs.api import MAX_BODY_BYTES, ApiServer, check_exposure, is_loopback
from agent.jobs.registry import JobRegistry

log = logging.getLogger(__name__)
Answer = tuple[int, dict[str, str], Any]


def _check(status: int, headers: dict[str, str], body: bytes) -> Answer:
    """Every answer is JSON with a matching Content-Length; every error says why."""
    assert headers.get("content-type") == "application/json", (status, headers)
    assert int(headers["content-length"]) == len(body)
    payload = json.loads(body) if body else None
    if status >= 400:
        assert isinstance(payload, dict) and payload["error"], payload
    return status, headers, payload


def call(port: int, method: str, path: str, body: Any = None,
         headers: dict[str, str] | None = None) -> Answer:
    data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=data, headers=headers or {})
        response = conn.getresponse()
        raw = response.read()
        found = {k.lower(): v for k, v in response.getheaders()}
        return _check(response.status, found, raw)
    finally:
        conn.close()


def raw(port: int, request: bytes, timeout: float = 10.0) -> Answer:
    """Send bytes as they are and parse whatever comes back."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    return _check(status, headers, body)


@pytest.fixture
def registry() -> JobRegistry:
    return JobRegistry()


@pytest.fixture
def api(registry: JobRegistry) -> Iterator[ApiServer]:
    server = ApiServer(registry, "127.0.0.1", 0, node="node-a", request_timeout_s=1.0)
    server.start()
    yield server
    server.close()


def _register(port: int, **fields: Any) -> dict[str, Any]:
    status, _, job = call(port, "POST", "/v1/jobs", {"name": "bert", "kind": "training", **fields})
    assert status == 201, job
    return job


def test_register_count_end_list_get_and_health(api: ApiServer, registry: JobRegistry) -> None:
    port = api.port
    assert call(port, "GET", "/v1/health")[2] == {"status": "ok", "node": "node-a",
                                                  "mode": "agent", "interval_s": None}
    job = _register(port, pids=[4242], labels={"team": "nlp"})
    assert (job["name"], job["kind"], job["pids"], job["labels"], job["status"], job["origin"]) \
        == ("bert", "training", [4242], {"team": "nlp"}, "running", "api")
    assert registry.get(job["id"]).pids == {4242}

    path = f"/v1/jobs/{job['id']}"
    for amount in (32, 8.5):
        status, _, answer = call(port, "POST", path + "/units", {"unit": "sample", "count": amount})
        assert status == 200
    assert answer["units"] == {"sample": 40.5}
    other = _register(port, name="gpt", kind="inference")

    assert call(port, "GET", path)[2]["units"] == {"sample": 40.5}
    status, _, ended = call(port, "POST", path + "/end", b"")
    assert status == 200 and ended["status"] == "ended" and ended["ended_at"] is not None
    assert call(port, "POST", path + "/end", {})[0] == 200  # ending twice is harmless

    listed = call(port, "GET", "/v1/jobs")[2]["jobs"]
    assert [j["id"] for j in listed] == [job["id"], other["id"]]
    running = call(port, "GET", "/v1/jobs?running=1")[2]["jobs"]
    assert [j["id"] for j in running] == [other["id"]]
    assert len(call(port, "GET", "/v1/jobs?running=0")[2]["jobs"]) == 2


def test_same_job_id_joins_up_and_a_different_job_under_it_conflicts(api: ApiServer) -> None:
    port = api.port
    first = _register(port, job_id="run-7", pids=[10], origin="run")
    assert first["id"] == "run-7" and first["origin"] == "run"
    status, _, again = call(port, "POST", "/v1/jobs",
                            {"name": "bert", "kind": "training", "job_id": "run-7", "pids": [11]})
    assert status == 200 and again["pids"] == [10, 11]
    status, _, answer = call(port, "POST", "/v1/jobs",
                             {"name": "other", "kind": "training", "job_id": "run-7"})
    assert status == 409 and "run-7" in answer["error"]


JOB = {"name": "bert", "kind": "training"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "expected a JSON object, got list"),
        (b'"bert"', "expected a JSON object, got str"),
        (b"", "empty body"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"name": "b\xe9rt", "kind": "training"}', "not UTF-8"),
        (b"[" * 100_000, "nested too deeply"),
        (b'{"name": "x", "kind": "training", "pids": [' + b"9" * 5000 + b"]}", "not valid JSON"),
        (b'{"name": "x", "kind": "training", "pids": [NaN]}', "NaN"),
        ({"name": 5, "kind": "training"}, "name: expected a string"),
        ({"name": "a/b", "kind": "training"}, "name: must not contain path separators"),
        ({"name": "..\\x", "kind": "training"}, "name: must not contain path separators"),
        ({"name": "a\u0007b", "kind": "training"}, "name: must not contain control characters"),
        ({"name": "x\n", "kind": "training", "labels": {"k": "v\r"}}, "labels.k"),
        ({"name": "x", "kind": "nope"}, "kind: expected one of"),
        ({"name": "x", "kind": ["training"]}, "kind:"),
        ({"name": "x"}, "kind: required"),
        ({"kind": "training"}, "name: required"),
        ({**JOB, "pids": "123"}, "pids: expected a list"),
        ({**JOB, "pids": [True]}, "pids: True is not a process id"),
        ({**JOB, "pids": [1.5]}, "pids: 1.5 is not a process id"),
        ({**JOB, "labels": ["a"]}, "labels: expected an object"),
        ({**JOB, "labels": {"k": ["v"]}}, "labels.k: expected a string"),
        ({**JOB, "job_id": ["x"]}, "job_id:"),
        ({**JOB, "job_id": "../etc/passwd"}, "job_id:"),
        ({**JOB, "origin": "discovered:k8s"}, "origin: expected one of"),
        ({**JOB, "gpu": 1, "evil": True}, "unknown field(s) evil, gpu"),
    ],
)
def test_bad_registrations_are_400_naming_the_problem(
    api: ApiServer, registry: JobRegistry, body: Any, message: str
) -> None:
    status, _, answer = call(api.port, "POST", "/v1/jobs", body)
    assert status == 400
    assert message in answer["error"]
    assert registry.jobs() == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"unit": "Sample!", "count": 1}, "unit:"),
        ({"unit": "sample", "count": "3"}, "count: expected a number"),
        ({"unit": "sample", "count": -1}, "count: a finite number"),
        (b'{"unit": "sample", "count": 1e400}', "count: a finite number"),
        ({"unit": "sample"}, "count: required"),
        ({"unit": "sample", "count": 1, "extra": 2}, "unknown field(s) extra"),
        (b"[]", "expected a JSON object"),
    ],
)
def test_bad_counts_are_400(api: ApiServer, body: Any, message: str) -> None:
    job = _register(api.port)
    status, _, answer = call(api.port, "POST", f"/v1/jobs/{job['id']}/units", body)
    assert status == 400 and message in answer["error"]
    assert call(api.port, "GET", f"/v1/jobs/{job['id']}")[2]["units"] == {}


def test_end_takes_only_cpu_seconds(api: ApiServer, registry: JobRegistry) -> None:
    job = _register(api.port)
    path = f"/v1/jobs/{job['id']}/end"
    status, _, answer = call(api.port, "POST", path, {"at": 1})
    assert status == 400 and "unknown field(s) at; expected cpu_s" in answer["error"]
    status, _, answer = call(api.port, "POST", path, {"cpu_s": "lots"})
    assert status == 400 and answer["error"].startswith("cpu_s:")
    assert registry.get(job["id"]).status == "running"
    status, _, answer = call(api.port, "POST", path, {"cpu_s": 12.5})
    assert status == 200 and answer["status"] == "ended"
    assert registry.get(job["id"]).final_cpu_s == 12.5


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/jobs/nope", None),
        ("POST", "/v1/jobs/nope/units", {"unit": "sample", "count": 1}),
        ("POST", "/v1/jobs/nope/end", {}),
        ("GET", "/v1/jobs/%ff%fe", None),
    ],
)
def test_unknown_job_ids_are_404(api: ApiServer, method: str, path: str, body: Any) -> None:
    status, _, answer = call(api.port, method, path, body)
    assert status == 404 and "no job with id" in answer["error"]


@pytest.mark.parametrize(
    "path", ["/", "/v1", "/v1/", "/v1/jobs/", "/v2/jobs", "/v1/jobs/x/y", "/v1/jobs/x/units/z",
             "/v1/health/", "/metrics"],
)
def test_unknown_paths_are_404(api: ApiServer, path: str) -> None:
    status, _, answer = call(api.port, "GET", path)
    assert status == 404 and "no such path" in answer["error"]


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/v1/jobs", "GET, POST"),
        ("PUT", "/v1/health", "GET"),
        ("GET", "/v1/jobs/x/units", "POST"),
        ("DELETE", "/v1/jobs/x", "GET"),
        ("PATCH", "/v1/jobs/x/end", "POST"),
        ("BREW", "/v1/jobs", "GET, POST"),
    ],
)
def test_wrong_methods_are_405_with_allow(api: ApiServer, method: str, path: str,
                                           allow: str) -> None:
    status, headers, answer = call(api.port, method, path)
    assert status == 405 and headers["allow"] == allow and method in answer["error"]


def test_query_parameters_are_checked(api: ApiServer) -> None:
    status, _, answer = call(api.port, "GET", "/v1/jobs?running=maybe")
    assert status == 400 and "running" in answer["error"]
    status, _, answer = call(api.port, "GET", "/v1/jobs?limit=5")
    assert status == 400 and "limit" in answer["error"]
    assert call(api.port, "GET", "/v1/health?x=1")[0] == 400


def _post_head(path: str, *headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *headers, "", ""]
    return "\r\n".join(lines).encode()


def test_oversized_bodies_are_413_before_being_read(api: ApiServer, registry: JobRegistry) -> None:
    too_big = MAX_BODY_BYTES + 1
    status, _, answer = raw(api.port, _post_head("/v1/jobs", f"Content-Length: {too_big}"))
    assert status == 413 and str(MAX_BODY_BYTES) in answer["error"]
    # Part of the body already sent: the answer still arrives instead of a reset.
    request = _post_head("/v1/jobs", "Content-Length: 50000000") + b"x" * 300_000
    assert raw(api.port, request)[0] == 413
    # Exactly the limit is fine.
    job = _register(api.port)
    body = b" " * (MAX_BODY_BYTES - 2) + b"{}"
    assert call(api.port, "POST", f"/v1/jobs/{job['id']}/end", body)[0] == 200


@pytest.mark.parametrize(
    ("request_bytes", "status", "message"),
    [
        (_post_head("/v1/jobs", "Transfer-Encoding: chunked") + b"2\r\n{}\r\n0\r\n\r\n",
         411, "chunked"),
        (_post_head("/v1/jobs") + b'{"name": "x", "kind": "training"}', 411, "Content-Length"),
        (_post_head("/v1/jobs", "Content-Length: abc"), 400, "Content-Length"),
        (_post_head("/v1/jobs", "Content-Length: -1"), 400, "Content-Length"),
        (_post_head("/v1/jobs", "Content-Length: 2", "Content-Length: 3") + b"{}", 400,
         "Content-Length"),
        (b"NONSENSE\r\n\r\n", 400, "Bad request"),
        (b"POST /v1/jobs\r\n\r\n", 400, "HTTP/0.9"),
        (b"GET /v1/health HTTP/9.9\r\n\r\n", 400, "version"),
        (b"GET /v1/health HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", 431, "Line too long"),
    ],
)
def test_malformed_requests_are_4xx_json(api: ApiServer, request_bytes: bytes, status: int,
                                         message: str) -> None:
    found, _, answer = raw(api.port, request_bytes)
    assert found == status and message in answer["error"]


def test_a_body_cut_short_is_400(api: ApiServer) -> None:
    with socket.create_connection(("127.0.0.1", api.port), timeout=10) as sock:
        sock.sendall(_post_head("/v1/jobs", "Content-Length: 100") + b'{"name"')
        sock.shutdown(socket.SHUT_WR)  # the client gives up half way through its body
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.0 400") and b"connection closed after 7 of 100" in data


def test_end_without_a_length_means_no_body(api: ApiServer) -> None:
    job = _register(api.port)
    status, _, answer = raw(api.port, _post_head(f"/v1/jobs/{job['id']}/end"))
    assert status == 200 and answer["status"] == "ended"


def test_browsers_and_foreign_host_names_are_refused(api: ApiServer) -> None:
    port = api.port
    status, _, answer = call(port, "POST", "/v1/jobs", JOB, {"Origin": "https://evil.example"})
    assert status == 403 and "Origin" in answer["error"]
    status, _, answer = call(port, "GET", "/v1/jobs", headers={"Host": f"evil.example:{port}"})
    assert status == 403 and "loopback" in answer["error"]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost"):
        assert call(port, "GET", "/v1/health", headers={"Host": host})[0] == 200, host


def test_unexpected_errors_are_logged_and_500(
    api: ApiServer, registry: JobRegistry, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(running_only: bool = False) -> list:
        raise RuntimeError("bug in the registry")

    monkeypatch.setattr(registry, "jobs", broken)
    with caplog.at_level(logging.ERROR, logger="agent.jobs.api"):
        status, _, answer = call(api.port, "GET", "/v1/jobs")
    assert status == 500 and answer == {"error": "internal error"}
    assert any("bug in the registry" in (r.exc_text or "") for r in caplog.records)


def test_token_is_required_when_set(registry: JobRegistry) -> None:
    with ApiServer(registry, "127.0.0.1", 0, token="s3cret-token") as api:
        port = api.port
        status, headers, answer = call(port, "GET", "/v1/health")
        assert status == 401 and "missing" in answer["error"]
        assert headers["www-authenticate"].startswith("Bearer")
        for header in ("Bearer wrong", "Bearer s3cret-tokenX", "Basic s3cret-token",
                       "s3cret-token", "Bearer "):
            status, _, answer = call(port, "POST", "/v1/jobs", JOB, {"Authorization": header})
            assert status == 401 and answer["error"] == "invalid token", header
        assert registry.jobs() == []
        good = {"Authorization": "Bearer s3cret-token"}
        assert call(port, "POST", "/v1/jobs", JOB, good)[0] == 201
        assert call(port, "GET", "/v1/health", headers=good)[0] == 200
        # With a token, the token is the protection: a browser Origin is not refused.
        assert call(port, "GET", "/v1/jobs", headers={**good, "Origin": "https://x"})[0] == 200


def test_non_loopback_host_needs_a_token(registry: JobRegistry) -> None:
    for host in ("0.0.0.0", "10.1.2.3", "::", "example.com", "127.0.0.1.example.com"):
        assert not is_loopback(host)
        message = f"--api-host {host} is not loopback: set --api-token"
        with pytest.raises(ValueError, match=message):
            check_exposure(host, None)
        api = ApiServer(registry, host, 0)
        with pytest.raises(ValueError, match=message):
            api.start()  # refused before anything binds
        assert api.port == 0
        check_exposure(host, "t")
    for host in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback(host)
        check_exposure(host, None)


def test_slow_clients_time_out_while_health_checks_keep_answering(
    registry: JobRegistry,
) -> None:
    """Slow and silent connections hold a socket each, not an in-flight slot: with
    more of them than slots, health checks still answer 200 meanwhile."""
    with ApiServer(registry, "127.0.0.1", 0, max_in_flight=2, request_timeout_s=1.0) as api:
        port = api.port
        slow = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
        slow[0].sendall(b"GET /v1/heal")  # an unfinished request line
        slow[1].sendall(_post_head("/v1/jobs", "Content-Length: 100") + b"{")  # half a body
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
            assert time.monotonic() - began < 0.5
            time.sleep(0.02)
        assert len(answers) >= 5 and set(answers) == {200}, answers

        closed_after, answers_seen = [], []
        for sock in (*slow, trickler):
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
            closed_after.append(time.monotonic() - started)
            answers_seen.append(data.split(b"\r\n", 1)[0])
            sock.close()
        stop.set()
        assert answers_seen[1] == b"HTTP/1.0 408 Request Timeout"  # the half body
        assert answers_seen[0] == answers_seen[2] == answers_seen[3] == b""  # no request
        assert api.busy_rejections == 0
        assert max(closed_after) < 1.0 + 1.0 + 1.5  # deadline + linger + slack
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
                sock.sendall(_post_head("/v1/jobs", "Content-Length: 2"))
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
    shared = _register(port, name="shared")

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
    assert time.monotonic() - began < 1.0
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
