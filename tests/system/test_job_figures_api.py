"""GET /v1/jobs/{id}/figures and /report on the real agent: a job's figures as
``joulestat report`` gives them at that moment, however long the agent's flush
interval, and the errors a caller can meet."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import job_api
from tests.helpers.agent_process import agent_env, agent_on_fake_rapl, read_cli, wait_for

pytestmark = pytest.mark.slow


def test_figures_are_the_reports_now_and_after_the_end_exactly(tmp_path):
    # A flush interval far longer than the test: figures come from rows the agent
    # writes when asked, not from its next flush.
    env = agent_env(JOULESTAT_FLUSH_INTERVAL="300")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with agent_on_fake_rapl(tmp_path, env=env, at_head=True) as agent:
            port = agent.api_port
            job = job_api.register(port, name="figured", pids=[busy.pid])
            path = f"/v1/jobs/{job['id']}"
            assert job_api.call(port, "POST", f"{path}/units",
                                {"unit": "sample", "count": 64})[0] == 200

            def figures() -> dict:
                status, _, body = job_api.call(port, "GET", f"{path}/figures")
                assert status == 200, body
                return body

            # Until the agent has measured the job's CPU (RAPL) in a tick: a first tick
            # of a job may bring it the DRAM estimate's share only (its process's CPU
            # time counts from its registration), and then the figures truly say
            # "estimated (model: dram-gib)".
            running = wait_for(lambda: (f := figures())["energy_j"] > 0
                               and f["energy_by_class_j"].get("measured", 0) > 0
                               and f["work_units"].get("sample") == 64 and f)
            assert running["format"] == "joulestat-figures"
            assert running["status"] == "running" and running["job_id"] == job["id"]
            assert running["energy_is"].startswith("measured")
            assert 0 < running["measured_share"] <= 1
            assert running["per_unit"]["sample"]["energy_j"] == pytest.approx(
                running["energy_j"] / 64)
            # What the CLI reads after it is at least as much (the store only grows).
            cli = json.loads(read_cli("report", "--format", "json", job["id"],
                                      env=agent.client_env()).stdout)
            assert cli["energy_j"]["total"] >= running["energy_j"]

            assert job_api.call(port, "POST", f"{path}/end", {})[0] == 200
            wait_for(lambda: job_api.call(port, "GET", path)[2]["final"], timeout_s=60)
            final = figures()
            status, _, served = job_api.call(port, "GET", f"{path}/report")
            assert status == 200
            cli = json.loads(read_cli("report", "--format", "json", job["id"],
                                      env=agent.client_env()).stdout)

            # Unknown jobs and wrong methods: errors that say so.
            status, _, body = job_api.call(port, "GET", "/v1/jobs/nope/figures")
            assert status == 404 and "nope" in body["error"]
            status, headers, _ = job_api.call(port, "POST", f"{path}/figures", {})
            assert status == 405 and headers["allow"] == "GET"
    finally:
        busy.kill()
        busy.wait()

    assert final["status"] == "ended"
    assert final["energy_j"] == cli["energy_j"]["total"]
    assert final["co2e_g"] == cli["co2e_g"]
    assert final["per_unit"]["sample"]["energy_j"] == cli["per_unit"]["sample"]["energy_j"]
    assert served["format"] == "joulestat-report"
    assert served["energy_j"] == cli["energy_j"] and served["work_units"] == {"sample": 64}
    assert served["power_series"], "the full report, series included"


def test_an_api_without_a_store_answers_501(tmp_path):
    """The API of a job registry with no store behind it (as a test or an embedder
    builds one) says it cannot build figures, rather than failing."""
    from joulestat.api.server import ApiServer
    from joulestat.attribution.registry import JobRegistry

    registry = JobRegistry()
    with ApiServer(registry, "127.0.0.1", 0, agent_pid=None) as api:
        job = job_api.register(api.port, name="storeless")
        status, _, body = job_api.call(api.port, "GET", f"/v1/jobs/{job['id']}/figures")
    assert status == 501 and "store" in body["error"]


def test_track_figures_come_from_the_job_api(tmp_path, monkeypatch):
    """job.figures() is the API's figures: the same numbers, asked through track()."""
    code = ("import json, time\nfrom joulestat import track\n"
            "with track('asked') as job:\n"
            "    job.count('step', 3)\n"
            "    end = time.time() + 1.5\n"
            "    while time.time() < end: pass\n"
            "    running = job.figures()\n"
            "print(json.dumps({'running': running, 'final': job.figures(), 'id': job.id}))\n")
    with agent_on_fake_rapl(tmp_path, at_head=True) as agent:
        result = subprocess.run([sys.executable, "-c", code], env=agent.client_env(),
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        printed = json.loads(result.stdout)
        cli = json.loads(read_cli("report", "--format", "json", printed["id"],
                                  env=agent.client_env()).stdout)
    assert printed["running"]["status"] == "running"
    assert printed["running"]["work_units"] == {"step": 3}
    assert printed["final"]["energy_j"] == cli["energy_j"]["total"]
