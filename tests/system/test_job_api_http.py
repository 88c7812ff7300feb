"""The job API as raw HTTP and behind its access checks: oversized, malformed and cut
short requests, browsers and foreign host names, internal errors, tokens, and a store
not yet answered. (Hosts that are not loopback are refused before anything binds:
tests/unit/api/test_exposure.py.)"""

from __future__ import annotations

import logging
import socket

import pytest

from joulestat.api.server import MAX_BODY_BYTES, ApiServer
from joulestat.attribution.registry import Job, JobRegistry
from tests.helpers.job_api import JOB, JOB_TOKEN_HEADER, call, post_head, raw, register


def test_oversized_bodies_are_413_before_being_read(api: ApiServer, registry: JobRegistry) -> None:
    too_big = MAX_BODY_BYTES + 1
    status, _, answer = raw(api.port, post_head("/v1/jobs", f"Content-Length: {too_big}"))
    assert status == 413 and str(MAX_BODY_BYTES) in answer["error"]
    # Part of the body already sent: the answer still arrives instead of a reset.
    request = post_head("/v1/jobs", "Content-Length: 50000000") + b"x" * 300_000
    assert raw(api.port, request)[0] == 413
    # Exactly the limit is fine.
    job = register(api.port)
    body = b" " * (MAX_BODY_BYTES - 2) + b"{}"
    assert call(api.port, "POST", f"/v1/jobs/{job['id']}/end", body)[0] == 200


@pytest.mark.parametrize(
    ("request_bytes", "status", "message"),
    [
        (post_head("/v1/jobs", "Transfer-Encoding: chunked") + b"2\r\n{}\r\n0\r\n\r\n",
         411, "chunked"),
        (post_head("/v1/jobs") + b'{"name": "x", "kind": "training"}', 411, "Content-Length"),
        (post_head("/v1/jobs", "Content-Length: abc"), 400, "Content-Length"),
        (post_head("/v1/jobs", "Content-Length: -1"), 400, "Content-Length"),
        (post_head("/v1/jobs", "Content-Length: 2", "Content-Length: 3") + b"{}", 400,
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
        sock.sendall(post_head("/v1/jobs", "Content-Length: 100") + b'{"name"')
        sock.shutdown(socket.SHUT_WR)  # the client gives up half way through its body
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.0 400") and b"connection closed after 7 of 100" in data


def test_end_without_a_length_means_no_body(api: ApiServer) -> None:
    job = register(api.port)
    status, _, answer = raw(api.port, post_head(
        f"/v1/jobs/{job['id']}/end", f"X-Joulestat-Job-Token: {job['job_token']}"))
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
    with caplog.at_level(logging.ERROR, logger="joulestat.api.server"):
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


def test_a_job_not_known_while_the_store_has_not_answered_is_503_not_404(
        registry: JobRegistry) -> None:
    """The agent measures while it waits for its store at start-up, and the jobs that
    were running before the start are in that store: a request naming a job the API
    does not know may be about one of them, so it is asked again (503, Retry-After),
    neither taken for a new job nor told the job does not exist."""
    state = ["waiting"]
    api = ApiServer(registry, "127.0.0.1", 0, node="node-a", store_state=lambda: state[0])
    with api:
        port = api.port
        assert call(port, "GET", "/v1/health")[2]["store"] == "waiting"
        unknown = "a" * 32
        for method, path, body in (("GET", f"/v1/jobs/{unknown}", None),
                                   ("POST", f"/v1/jobs/{unknown}/end", {}),
                                   ("POST", "/v1/jobs", {**JOB, "job_id": unknown})):
            status, headers, answer = call(port, method, path, body)
            assert status == 503 and headers["retry-after"] == "2", (method, path, answer)
            assert "waiting for its store" in answer["error"]
        assert unknown not in {job.id for job in registry.jobs()}
        job = register(port)  # a new job (no id given) is taken at once
        assert call(port, "GET", f"/v1/jobs/{job['id']}")[0] == 200
        state[0] = "up"  # the store answered and the jobs of before are back
        assert call(port, "GET", "/v1/health")[2]["store"] == "up"
        assert call(port, "GET", f"/v1/jobs/{unknown}")[0] == 404


def test_a_jobs_end_takes_its_final_tick_at_once(registry: JobRegistry,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    # The agent passes its pipeline's tick (SharedTick.since): `joulestat run` waits for
    # the ended job's last tick to be stored, which would otherwise wait up to an interval.
    seen: list[tuple[str, str]] = []
    failing = False

    def final_tick() -> None:
        if failing:
            raise RuntimeError("sensor gone")
        seen.extend((job.id, job.status) for job in registry.jobs())

    with ApiServer(registry, "127.0.0.1", 0, final_tick=final_tick) as api:
        first, second = register(api.port), register(api.port)
        # Refused (not its registrant): no end, no tick.
        status, _, _ = call(api.port, "POST", f"/v1/jobs/{first['id']}/end", {},
                            as_owner=False)
        assert status == 403 and seen == []
        assert call(api.port, "POST", f"/v1/jobs/{first['id']}/end", {})[0] == 200
        assert seen == [(first["id"], "ended"), (second["id"], "running")]  # after the end
        # A tick that fails leaves the end acknowledged (the next scheduled tick stores it).
        failing = True
        with caplog.at_level(logging.ERROR, logger="joulestat.api.server"):
            status, _, answer = call(api.port, "POST", f"/v1/jobs/{second['id']}/end", {})
        assert status == 200 and answer["status"] == "ended"
        assert registry.get(second["id"]).status == "ended"
        assert any("sensor gone" in (r.exc_text or "") for r in caplog.records)


def test_an_ended_job_it_does_not_hold_is_asked_of_the_store_once_it_answers(
        registry: JobRegistry) -> None:
    # The agent passes a lookup of this node's ended jobs in its store (load_ended_job):
    # a job ended and stored before a restart is answered from there, final, and never
    # while the store has not answered since start-up (503, as for any unknown job).
    ended_id, asked = "b" * 32, []
    stored = Job(id=ended_id, name="done-before", kind="training", labels={}, pids=set(),
                 started_s=1000.0, ended_s=1060.0, idle_j={"cpu": 600.0}, final=True)

    def ended_job(job_id: str) -> Job | None:
        asked.append(job_id)
        return stored if job_id == ended_id else None

    state = ["waiting"]
    with ApiServer(registry, "127.0.0.1", 0, node="node-a", store_state=lambda: state[0],
                   ended_job=ended_job) as api:
        path = f"/v1/jobs/{ended_id}"
        assert call(api.port, "GET", path)[0] == 503 and asked == []
        state[0] = "up"
        status, _, answer = call(api.port, "GET", path)
        assert status == 200 and asked == [ended_id]
        assert (answer["status"], answer["final"], answer["total_energy_j"]) == (
            "ended", True, 600.0)
        # Its end again: its registrant's token, then 200 and nothing changes.
        assert call(api.port, "POST", f"{path}/end", {})[0] == 403
        token = {JOB_TOKEN_HEADER: api.job_token(ended_id)}
        status, _, again = call(api.port, "POST", f"{path}/end", {"ended_at": 2000.0},
                                headers=token)
        assert status == 200 and again["ended_at"] == 1060.0 and again["durable"] is True
        assert ended_id not in {job.id for job in registry.jobs()}
        assert call(api.port, "GET", f"/v1/jobs/{'c' * 32}")[0] == 404
