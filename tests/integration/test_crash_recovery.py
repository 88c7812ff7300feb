"""A job's energy survives `kill -9` of the agent, as a user running it under a
supervisor that restarts it would see: fake RAPL at a known wattage, the real agent."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from agent.jobs.http_client import AgentClient
from tests.fakes.powercap import FakePowercap
from tests.helpers.agent_process import (
    agent_env,
    running_agent,
    start_run,
    stored_jobs,
    summary_of,
    wait_for,
)

POWER_W = 50.0
INTERVAL_S = 0.25  # long enough that a loaded machine's scheduling noise stays small


def _kill_9(agent) -> None:
    agent.proc.send_signal(signal.SIGKILL)
    agent.proc.wait()


@pytest.mark.slow
def test_three_kill_9s_during_a_job_leave_its_energy_whole(tmp_path: Path) -> None:
    fake = FakePowercap(tmp_path / "sys")
    fake.add_zone("intel-rapl:0", "package-0")
    args = ("--sysfs-root", str(tmp_path / "sys"), "--interval", str(INTERVAL_S),
            "--node", "n1")
    crashes = 3
    with fake.drive("intel-rapl:0", power_w=POWER_W, hz=500):
        with running_agent(tmp_path, *args) as agent:
            api_port, env = agent.api_port, agent.client_env()
            time.sleep(3.5)  # the agent learns the node's idle power (10 ticks)
            job = start_run("lone", "import time; time.sleep(18)", env)
            wait_for(lambda: "lone" in stored_jobs(env), timeout_s=20, every_s=0.2)
            time.sleep(1.0)
            _kill_9(agent)
        for crash in range(1, crashes + 1):
            time.sleep(0.5)  # nobody measures: the next start covers it from the checkpoint
            with running_agent(tmp_path, *args, api_port=api_port) as agent:
                if crash < crashes:
                    time.sleep(3.0)
                    _kill_9(agent)
                    continue
                summary = summary_of(job)
                assert summary["final"] is True
                assert agent.stop() == 0
    log = (tmp_path / "agent.log").read_text()
    assert log.count("resumed from the checkpoint") == crashes
    stored = stored_jobs(agent_env(JOULESTAT_DB=agent.db_url))["lone"]
    lifetime_s = stored["ended_s"] - stored["started_s"]
    cpu_j = stored["dynamic_j"]["cpu"] + stored["idle_j"]["cpu"]
    expected_j = POWER_W * lifetime_s
    print(f"lone job: {cpu_j:.1f} J stored, {expected_j:.1f} J = {POWER_W} W x "
          f"{lifetime_s:.2f} s; error {cpu_j - expected_j:+.2f} J")
    # Within one tick per crash (and one for the job's first, partial tick).
    assert abs(cpu_j - expected_j) <= (crashes + 1) * POWER_W * INTERVAL_S


def test_a_job_answered_201_survives_a_kill_9(tmp_path: Path) -> None:
    # Store flushes every minute: only the registration itself can have saved the job.
    env = agent_env(JOULESTAT_FLUSH_INTERVAL="60")
    args = ("--sysfs-root", str(tmp_path), "--interval", "0.2", "--node", "n1")
    with running_agent(tmp_path, *args, env=env) as agent:
        api_port = agent.api_port
        request = urllib.request.Request(
            f"{agent.api_url}/v1/jobs", method="POST",
            data=json.dumps({"name": "just-in-time", "kind": "inference"}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 201
            answer = json.loads(response.read())
        assert answer["durable"] is True
        time.sleep(1.0)
        _kill_9(agent)
    with running_agent(tmp_path, *args, env=env, api_port=api_port) as agent:
        job = AgentClient(agent.api_url).get(answer["id"])
        assert (job["name"], job["status"]) == ("just-in-time", "running")
        AgentClient(agent.api_url).count(answer["id"], "request", 3)  # no 404
        assert agent.stop() == 0
    stored = stored_jobs(agent_env(JOULESTAT_DB=agent.db_url))
    assert stored["just-in-time"]["units"] == {"request": 3.0}
