"""Agent labels through the real job API on a loopback port: ``cpu_source`` taken apart
from the labels, ``idle_policy`` refused (the agent records it), and an agent from before
agent labels still registers the job `joulestat run` sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulestat.api import server
from joulestat.api.agent_client import AgentClient, AgentError
from joulestat.api.server import ApiServer
from joulestat.attribution.accounting import JobAccounting
from joulestat.attribution.idle import IdleBaselines
from joulestat.attribution.registry import JobRegistry
from joulestat.attribution.shares import IdlePolicy
from tests.helpers.job_api import JOB, call, register


def attributing(registry: JobRegistry, policy: IdlePolicy, tmp_path: Path) -> JobAccounting:
    """The accounting an agent or an embedded run builds over ``registry``."""
    return JobAccounting(registry, tmp_path, IdleBaselines({}), policy)


def test_the_api_takes_cpu_source_apart_and_refuses_the_idle_policy(
        api: ApiServer, registry: JobRegistry, tmp_path: Path) -> None:
    attributing(registry, IdlePolicy.SHARE, tmp_path)
    port = api.port
    job = register(port, labels={"team": "nlp"}, agent_labels={"cpu_source": "process tree"})
    assert job["labels"] == {"team": "nlp"}
    assert job["agent_labels"] == {"cpu_source": "process tree", "idle_policy": "share"}
    assert call(port, "GET", f"/v1/jobs/{job['id']}")[2]["agent_labels"] == job["agent_labels"]
    status, _, answer = call(port, "POST", "/v1/jobs",
                             {**JOB, "agent_labels": {"idle_policy": "exclude"}})
    assert status == 400 and "recorded by the agent" in answer["error"]
    status, _, answer = call(port, "POST", "/v1/jobs", {**JOB, "agent_labels": {"x": "1"}})
    assert status == 400 and "not an agent label" in answer["error"]


def test_an_agent_from_before_agent_labels_still_registers_the_job(
        api: ApiServer, registry: JobRegistry, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A node's agent still running the code from before an upgrade refuses the field
    it does not know; `joulestat run` then registers its job without it (and says so)
    instead of failing."""
    fields = {k: v for k, v in server.JOB_FIELDS.items() if k != "agent_labels"}
    monkeypatch.setattr(server, "JOB_FIELDS", fields)
    client = AgentClient(f"http://127.0.0.1:{api.port}")
    job = client.register("wrapped", "training", labels={"team": "nlp"},
                          agent_labels={"cpu_source": "process tree"}, origin="run")
    assert registry.get(job["id"]).labels == {"team": "nlp"}
    assert "predates agent labels" in caplog.text
    with pytest.raises(AgentError, match="unknown field"):  # other refusals stay refusals
        client._object("POST", "/v1/jobs", {**JOB, "colour": "red"})

