"""A job's end survives an agent restart: the client's retry (bounded, with backoff, only
for "away or busy" answers) and the restarted agent's wait, before its first tick, for
the ends of `joulestat run` jobs whose commands exited while it was down, on clocks the
tests drive. (An end sent while nothing listens on the port, landing once an API is
back on it: tests/system/test_run_end_retry_http.py.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from joulestat.api.agent_client import AgentError, AgentUnavailable, retrying
from joulestat.attribution.registry import JobRegistry
from joulestat.pipeline.pipeline import await_run_ends


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


def test_a_restart_waits_for_the_wrappers_of_run_jobs_whose_processes_are_gone(
        tmp_path: Path, registry: JobRegistry) -> None:
    (tmp_path / "4242").mkdir()  # a live process, in a fake /proc
    gone = registry.register("a", pids=[77], job_id="gone", origin="run")
    registry.register("b", pids=[4242], job_id="alive", origin="run")
    registry.register("c", pids=[78], job_id="api-job", origin="api")
    exited = time.time() - 2.0
    fake = FakeTime()

    def sleep(seconds: float) -> None:  # the wrapper's end arrives 0.3 s into the wait
        fake.sleep(seconds)
        if fake.now >= 0.3 and gone.ended_s is None:
            registry.end("gone", at_s=exited)
    assert await_run_ends(registry, tmp_path, wait_s=30.0, sleep=sleep,
                          clock=lambda: fake.now) == 1
    # Back as soon as the wrapper said (0.3 s, give or take one 0.05 s poll), not after
    # the 30 s it would wait otherwise.
    assert fake.now == pytest.approx(0.3, abs=0.06)
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
