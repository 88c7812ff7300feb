"""A job's end survives an agent restart, over real sockets: the client's retry of an
end sent while nothing listens on the agent's port lands once an API is back on it, with
the job's end time, not the time it got there. (The retry's rules and the restarted
agent's wait on driven clocks: tests/unit/runtime/test_run_end_retry.py.)"""

from __future__ import annotations

import time

import pytest

from joulestat.api.agent_client import AgentClient, retrying
from joulestat.api.job_tokens import job_token
from joulestat.api.server import ApiServer
from joulestat.attribution.registry import JobRegistry
from tests.helpers.agent_process import free_port


def test_an_end_sent_while_nothing_listens_lands_once_the_api_is_back(
        registry: JobRegistry) -> None:
    """Over real sockets: the port refuses, then an API comes up on it (once the first
    attempt was refused, in the retry's wait, so at least one refusal is certain)."""
    port, secret = free_port(), b"k" * 32  # the restarted agent keeps its secret
    job = registry.register("bert", "training", job_id="run-1", origin="run")
    exited = time.time()
    servers: list[ApiServer] = []
    waits: list[float] = []

    def come_back_then_wait(seconds: float) -> None:
        waits.append(seconds)
        if not servers:
            server = ApiServer(registry, "127.0.0.1", port, node="n", request_timeout_s=1.0,
                               job_secret=secret)
            server.start()
            servers.append(server)
        # No need to wait out the backoff: the API is up before the next attempt.
    client = AgentClient(f"http://127.0.0.1:{port}")
    client.remember(job.id, job_token(secret, job.id))  # what the first agent answered
    try:
        answer = retrying(lambda: client.end(job.id, cpu_s=0.5, ended_at=exited), 10, "end",
                          sleep=come_back_then_wait)
    finally:
        for server in servers:
            server.close()
    assert waits, "the first attempt was not refused"
    assert answer["status"] == "ended"
    assert registry.get(job.id).ended_s == pytest.approx(exited)  # not when it got there
