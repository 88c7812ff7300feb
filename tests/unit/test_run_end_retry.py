"""A job's end survives an agent restart: the client's retry (bounded, with backoff, only
for "away or busy" answers) and the restarted agent's wait, before its first tick, for
the ends of `joulestat run` jobs whose commands exited while it was down."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from joulestat.api.agent_client import AgentClient, AgentError, AgentUnavailable, retrying
from joulestat.attribution.registry import JobRegistry
from joulestat.runtime.pipeline import await_run_ends


class FakeTime:
    """A clock that moves only when slept on."""

    def __init__(self) -> None:
        self.now, self.slept = 0.0, []

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 3))
        self.now += seconds


def flaky(*failures: Exception, answer: str = "ended"):
    left = list(failures)

    def call() -> str:
        if left:
            raise left.pop(0)
        return answer
    return call


def test_an_agent_away_or_busy_is_asked_again_with_backoff(caplog) -> None:
    fake = FakeTime()
    call = flaky(AgentUnavailable("refused"), AgentUnavailable("reset"), AgentError(503, "x"),
                 AgentError(429, "busy"), AgentUnavailable("refused"))
    assert retrying(call, 60, "ending job j", sleep=fake.sleep, clock=lambda: fake.now) \
        == "ended"
    assert fake.slept == [0.1, 0.2, 0.4, 0.5, 0.5]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "trying again for up to 60 s" in said[0]


def test_a_refusal_is_not_retried() -> None:
    fake = FakeTime()
    with pytest.raises(AgentError, match="404"):
        retrying(flaky(AgentError(404, "no job")), 60, "x", sleep=fake.sleep,
                 clock=lambda: fake.now)
    assert fake.slept == []


def test_the_retry_is_bounded() -> None:
    fake = FakeTime()

    def never() -> str:
        raise AgentUnavailable("refused")
    with pytest.raises(AgentUnavailable):
        retrying(never, 60, "x", sleep=fake.sleep, clock=lambda: fake.now)
    assert fake.now == pytest.approx(60.0)


def test_an_end_sent_while_nothing_listens_lands_once_the_api_is_back(
        registry: JobRegistry) -> None:
    """Over real sockets: the port refuses for a second, then an API comes up on it."""
    from joulestat.api.server import ApiServer, job_token
    from tests.helpers.agent_process import free_port

    port, secret = free_port(), b"k" * 32  # the restarted agent keeps its secret
    job = registry.register("bert", "training", job_id="run-1", origin="run")
    exited = time.time()
    servers: list[ApiServer] = []

    def come_back() -> None:
        time.sleep(1.0)
        server = ApiServer(registry, "127.0.0.1", port, node="n", request_timeout_s=1.0,
                           job_secret=secret)
        server.start()
        servers.append(server)
    threading.Thread(target=come_back, daemon=True).start()
    client = AgentClient(f"http://127.0.0.1:{port}")
    client.remember(job.id, job_token(secret, job.id))  # what the first agent answered
    try:
        answer = retrying(lambda: client.end(job.id, cpu_s=0.5, ended_at=exited), 10, "end")
    finally:
        for server in servers:
            server.close()
    assert answer["status"] == "ended"
    assert registry.get(job.id).ended_s == pytest.approx(exited)  # not when it got there


def test_a_restart_waits_for_the_wrappers_of_run_jobs_whose_processes_are_gone(
        tmp_path: Path, registry: JobRegistry) -> None:
    (tmp_path / "4242").mkdir()  # a live process, in a fake /proc
    gone = registry.register("a", pids=[77], job_id="gone", origin="run")
    registry.register("b", pids=[4242], job_id="alive", origin="run")
    registry.register("c", pids=[78], job_id="api-job", origin="api")
    exited = time.time() - 2.0
    threading.Timer(0.3, lambda: registry.end("gone", at_s=exited)).start()
    started = time.monotonic()
    assert await_run_ends(registry, tmp_path, wait_s=30.0) == 1
    # Back as soon as the wrapper said (0.3 s), far inside the 30 s it would wait
    # otherwise; the bound leaves a loaded machine room.
    assert time.monotonic() - started < 10.0
    assert gone.ended_s == exited
    assert {j.id for j in registry.jobs(running_only=True)} == {"alive", "api-job"}


def test_a_wrapper_that_never_comes_costs_one_bounded_wait(tmp_path: Path,
                                                            registry: JobRegistry) -> None:
    registry.register("a", pids=[77], job_id="orphan", origin="run")
    fake = FakeTime()
    assert await_run_ends(registry, tmp_path, wait_s=3.0, sleep=fake.sleep,
                          clock=lambda: fake.now) == 1
    assert fake.now == pytest.approx(3.0, abs=0.06)
    assert registry.get("orphan").ended_s is None  # the first tick ends it, as before
    assert await_run_ends(JobRegistry(), tmp_path) == 0
