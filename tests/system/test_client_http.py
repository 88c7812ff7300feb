"""track() and AgentClient against a real ApiServer, and the embedded fallback."""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest

from joulestat.api.agent_client import AgentClient, AgentError, AgentUnavailable
from joulestat.api.server import ApiServer
from joulestat.attribution.registry import JobRegistry
from joulestat.client import tracking
from joulestat.client.context import ENV_AGENT_URL, ENV_JOB_ID, ENV_TOKEN, agent_url_from_env
from joulestat.client.notice import forget
from joulestat.client.tracking import JOIN_WAIT_S, Mode, count, track


class CountingRegistry(JobRegistry):
    """A real registry that also remembers how many count requests reached it."""

    def __init__(self) -> None:
        super().__init__()
        self.count_calls = 0

    def count(self, job_id: str, unit: Any, count: Any):  # type: ignore[override]
        self.count_calls += 1
        return super().count(job_id, unit, count)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in (ENV_AGENT_URL, ENV_TOKEN, "JOULESTAT_AGENT"):
        monkeypatch.delenv(name, raising=False)
    forget()  # each test starts with nothing said yet
    yield
    forget()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and r.name.startswith("joulestat")]


@pytest.fixture
def registry() -> CountingRegistry:
    return CountingRegistry()


@pytest.fixture
def agent(registry: CountingRegistry) -> Iterator[str]:
    with ApiServer(registry, "127.0.0.1", 0, node="node-a", agent_pid=None) as api:
        yield f"http://127.0.0.1:{api.port}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(condition: Any, timeout_s: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_registers_own_pid_and_ends_on_exit(agent: str, registry: CountingRegistry) -> None:
    with track("bert-large", labels={"team": "nlp"}, agent_url=agent) as job:
        seen = registry.get(job.id)
        assert seen.pids == {os.getpid()}
        assert (seen.name, seen.kind, seen.labels, seen.origin, seen.status) == (
            "bert-large", "training", {"team": "nlp"}, "client", "running")
        assert not job.embedded and job.mode is Mode.AGENT
    assert registry.get(job.id).status == "ended"
    assert job.summary is not None and job.summary["status"] == "ended"
    assert job.summary["mode"] == "agent" and agent in job.summary["mode_reason"]


def test_counts_are_batched_and_all_delivered(agent: str, registry: CountingRegistry) -> None:
    with track("bert", agent_url=agent, flush_interval_s=0.05) as job:
        job.count("sample", 32)
        # The background thread delivers while the job runs, not only at exit.
        assert _wait_for(lambda: registry.get(job.id).units.get("sample") == 32)
        calls_before = registry.count_calls
        began = time.perf_counter()
        for _ in range(10_000):
            job.count("sample", 32)
            job.count("token", 512)
        loop_s = time.perf_counter() - began
    units = registry.get(job.id).units
    assert units == {"sample": 32 * 10_001, "token": 512 * 10_000}
    # 20,000 counts, a handful of requests: one per unit per flush, plus the one at exit.
    flushes = loop_s / 0.05 + 2
    assert registry.count_calls - calls_before <= 2 * flushes
    assert loop_s < 2.0


def test_exception_in_the_block_still_sends_counts_and_ends(agent: str,
                                                            registry: CountingRegistry) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with track("bert", agent_url=agent, flush_interval_s=60) as job:
            job.count("sample", 5)
            raise RuntimeError("boom")
    seen = registry.get(job.id)
    assert seen.status == "ended" and seen.units == {"sample": 5}


def test_counts_survive_an_agent_restart(registry: CountingRegistry,
                                         caplog: pytest.LogCaptureFixture) -> None:
    first = ApiServer(registry, "127.0.0.1", 0, agent_pid=None)
    first.start()
    port = first.port
    url = f"http://127.0.0.1:{port}"
    second_registry = JobRegistry()
    second = ApiServer(second_registry, "127.0.0.1", port, agent_pid=None)
    try:
        with track("bert", agent_url=url, job_id="run-1", flush_interval_s=0.05) as job:
            job.count("sample", 10)
            assert _wait_for(lambda: registry.get("run-1").units.get("sample") == 10)
            first.close()
            job.count("sample", 5)  # sends fail: nothing listens; kept for the next try
            assert _wait_for(lambda: any("sending counts failed" in line
                                         for line in warnings_of(caplog)))
            second.start()  # a new agent that has never heard of run-1
            job.count("sample", 1)
            assert _wait_for(lambda: job.id in {j.id for j in second_registry.jobs()})
        seen = second_registry.get("run-1")
        assert seen.units == {"sample": 6} and seen.pids == {os.getpid()}
        assert seen.status == "ended"
    finally:
        first.close()
        second.close()


def test_agent_url_and_token_come_from_the_environment(
    registry: CountingRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ApiServer(registry, "127.0.0.1", 0, token="tok", agent_pid=None) as api:
        monkeypatch.setenv(ENV_AGENT_URL, f"http://127.0.0.1:{api.port}")
        monkeypatch.setenv(ENV_TOKEN, "tok")
        with track("bert", kind="inference") as job:
            job.count("request", 3)
        assert registry.get(job.id).units == {"request": 3}
        assert registry.get(job.id).kind == "inference"
    assert agent_url_from_env({}) == "http://127.0.0.1:9465"
    # One name for the agent: the retired JOULESTAT_AGENT is not read.
    assert agent_url_from_env({"JOULESTAT_AGENT": "http://a:1"}) == "http://127.0.0.1:9465"
    assert agent_url_from_env({ENV_AGENT_URL: "http://b:2", "JOULESTAT_AGENT": "http://a:1"}) \
        == "http://b:2"


class FakeEmbeddedJob:
    instances: list[FakeEmbeddedJob] = []

    def __init__(self, name: str, kind: str, labels: dict[str, str], pids: set[int],
                 job_id: str | None = None, reason: str = "") -> None:
        self.args = (name, kind, labels, pids, job_id)
        self.id = job_id or "embedded-1"
        self.calls: list[tuple[Any, ...]] = []
        FakeEmbeddedJob.instances.append(self)

    def start(self) -> None:
        self.calls.append(("start",))

    def count(self, unit: str, count: float) -> None:
        self.calls.append(("count", unit, count))

    def end(self) -> dict[str, Any]:
        self.calls.append(("end",))
        return {"id": self.id, "energy_j": 1.5}


@pytest.fixture
def fake_embedded(monkeypatch: pytest.MonkeyPatch) -> type[FakeEmbeddedJob]:
    module = types.ModuleType("joulestat.runtime.embedded")
    module.EmbeddedJob = FakeEmbeddedJob  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "joulestat.runtime.embedded", module)
    FakeEmbeddedJob.instances = []
    return FakeEmbeddedJob


def test_falls_back_to_embedded_when_no_agent_answers(
    fake_embedded: type[FakeEmbeddedJob],
) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(ZeroDivisionError):
        with track("bert", labels={"team": "nlp"}, agent_url=url) as job:
            assert job.embedded and job.id == "embedded-1"
            job.count("sample", 3)
            job.count("sample", 4)
            1 / 0  # noqa: B018 - the job must still be ended
    (embedded,) = fake_embedded.instances
    assert embedded.args == ("bert", "training", {"team": "nlp"}, {os.getpid()}, None)
    assert embedded.calls == [("start",), ("count", "sample", 3.0), ("count", "sample", 4.0),
                              ("end",)]
    assert job.mode is Mode.EMBEDDED and "no joulestat agent answered" in job.mode_reason
    assert job.summary == {"id": "embedded-1", "energy_j": 1.5, "mode": "embedded",
                           "mode_reason": job.mode_reason}


def test_an_agent_that_refuses_is_not_bypassed(
    registry: CountingRegistry, fake_embedded: type[FakeEmbeddedJob],
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran = []
    with ApiServer(registry, "127.0.0.1", 0, token="tok", agent_pid=None) as api:
        for _ in range(3):  # said once, however many jobs it refuses
            with track("bert", agent_url=f"http://127.0.0.1:{api.port}") as job:
                job.count("sample", 2)
                ran.append(job.mode)
    # The block ran, unmeasured: measuring in-process beside the agent would count twice.
    assert ran == [Mode.NONE] * 3
    assert fake_embedded.instances == [] and registry.jobs() == []
    assert "401" in job.mode_reason and "not measured" in job.mode_reason
    assert job.summary is not None
    assert (job.summary["mode"], job.summary["units"], job.summary["final"]) == (
        "none", {"sample": 2.0}, False)
    (said,) = warnings_of(caplog)
    assert "refused job 'bert'" in said and "401" in said


def test_bad_input_is_said_once_and_never_raised(
    agent: str, registry: CountingRegistry, caplog: pytest.LogCaptureFixture,
) -> None:
    with track("a\\b", kind="fun", labels={"team": "nlp", "Bad Key": "x"},
               job_id="no spaces", agent_url=agent) as job:
        for _ in range(1000):  # a training loop: one warning per argument, not 1000
            job.count("Bad Unit", 1)
            job.count("sample", float("nan"))
            job.count("sample", -1)
            job.count("sample", 1)
    seen = registry.get(job.id)
    # Each bad argument of track() replaced by what still measures the job.
    assert (seen.name, seen.kind, seen.labels) == ("unnamed", "other", {"team": "nlp"})
    assert job.id != "no spaces" and seen.units == {"sample": 1000.0}
    job.count("sample", 1)  # after the end: dropped, said once
    job.count("sample", 1)
    said = warnings_of(caplog)
    assert len(said) == 7, said
    for wanted in ("track(name='a\\\\b'): name:", "track(kind='fun'): kind:",
                   "track(labels={'Bad Key': 'x'}): labels:", "track(job_id='no spaces')",
                   "job.count('Bad Unit', 1): unit:", "job.count('sample', nan): count:",
                   "is not running"):
        assert sum(wanted in line for line in said) == 1, (wanted, said)
    assert not any("job.count('sample', -1)" in line for line in said)  # same cause as nan


def test_agent_client_tells_no_agent_from_a_refusal(agent: str,
                                                    registry: CountingRegistry) -> None:
    client = AgentClient(agent)
    assert client.health() == {"status": "ok", "node": "node-a", "mode": "agent",
                               "interval_s": None}
    job = client.register("bert", "training", pids={7, 3}, labels={"a": "b"}, job_id="x:1@h")
    assert job["pids"] == [3, 7]
    assert client.count("x:1@h", "sample", 2)["units"] == {"sample": 2}
    assert client.get("x:1@h")["id"] == "x:1@h"
    assert [j["id"] for j in client.jobs(running=True)] == ["x:1@h"]
    assert client.end("x:1@h", cpu_s=3.5)["status"] == "ended"
    assert registry.get("x:1@h").final_cpu_s == 3.5
    assert client.jobs(running=True) == [] and len(client.jobs()) == 1
    with pytest.raises(AgentError) as caught:
        client.get("nope")
    assert caught.value.status == 404 and "no job with id" in caught.value.message
    with pytest.raises(AgentError) as caught:
        client.register("a\\b", "training")
    assert caught.value.status == 400 and caught.value.message.startswith("name:")

    with pytest.raises(AgentUnavailable):
        AgentClient(f"http://127.0.0.1:{_free_port()}").health()
    with pytest.raises(ValueError, match="agent URL"):
        AgentClient("127.0.0.1:9465")


def test_agent_client_times_out_on_a_silent_listener() -> None:
    with socket.socket() as listener:  # accepts connections (kernel backlog), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        client = AgentClient(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.2)
        began = time.monotonic()
        with pytest.raises(AgentUnavailable):
            client.health()
        assert time.monotonic() - began < 10.0  # the listener never answers: the timeout did


def test_agent_client_sends_the_token(registry: CountingRegistry) -> None:
    with ApiServer(registry, "127.0.0.1", 0, token="tök-ën", agent_pid=None) as api:
        url = f"http://127.0.0.1:{api.port}"
        assert AgentClient(url, token="tök-ën").health()["status"] == "ok"
        with pytest.raises(AgentError) as caught:
            AgentClient(url, token="wrong").health()
        assert caught.value.status == 401


def test_counting_from_many_threads_loses_nothing(agent: str,
                                                  registry: CountingRegistry) -> None:
    with track("bert", agent_url=agent, flush_interval_s=0.01) as job:
        def work() -> None:
            for _ in range(2000):
                job.count("sample", 1)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert registry.get(job.id).units == {"sample": 16_000}


def test_a_job_it_cannot_join_is_waited_on_once(
    agent: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(ENV_AGENT_URL, agent)
    monkeypatch.setenv(ENV_JOB_ID, "gone")  # as if the run's job had ended and gone
    monkeypatch.setattr(tracking, "_unjoinable", None)
    began = time.monotonic()
    for _ in range(200):
        count("sample", 1)  # a training loop: it must not wait JOIN_WAIT_S each step
    took_s = time.monotonic() - began
    assert JOIN_WAIT_S <= took_s < 2 * JOIN_WAIT_S
    said = warnings_of(caplog)
    assert len(said) == 2, said  # the join that failed, and the counts it drops
    assert "cannot join job gone" in said[0] and "outside a job" in said[1]
