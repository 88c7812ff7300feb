"""`joulestat jobs delete` where a process is what is tested: on a real terminal it asks,
and deletes only on "y"; and a job a running agent still measures goes only with
--force, the node's energy conserved once the agent has stopped. Listing, filters and
every other delete run in process: tests/unit/cli/test_jobs.py."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

from tests.helpers.agent_process import (
    JOULESTAT,
    agent_env,
    running_agent,
    start_run,
    wait_for,
)
from tests.helpers.burners import assert_conserved
from tests.helpers.cli import invoke
from tests.helpers.job_delete_store import tables_with_job_rows
from tests.helpers.jobs_store import NODE, TRACE, all_counts, build_jobs_store, rows_of


def listed(db_url: str, *args: str) -> list[dict]:
    """``joulestat jobs ARGS --json`` (in this process: what is listed is not the test)."""
    done = invoke("jobs", *args, "--json", "--db", db_url)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_delete_asks_on_a_terminal(tmp_path: Path) -> None:
    """The command's stdin is a pseudo-terminal: it asks, "n" keeps the job (exit 1),
    "y" deletes it. (With no terminal it refuses: tests/unit/cli/test_jobs.py.)"""
    store = build_jobs_store(tmp_path)
    job = next(j for j in listed(store) if j["name"] == "plain")
    before = all_counts(store)

    def answer(text: str) -> subprocess.CompletedProcess:
        main, secondary = pty.openpty()
        try:
            os.write(main, text.encode())
            return subprocess.run([JOULESTAT, "jobs", "delete", job["id"], "--db", store],
                                  env=agent_env(), stdin=secondary, capture_output=True,
                                  text=True, timeout=120)
        finally:
            os.close(secondary)
            os.close(main)

    declined = answer("n\n")
    assert declined.returncode == 1 and job["id"] in declined.stderr
    assert all_counts(store) == before
    accepted = answer("y\n")
    assert accepted.returncode == 0, accepted.stderr
    assert rows_of(store, job["id"]) == dict.fromkeys(tables_with_job_rows(), 0)


def test_a_running_job_goes_only_with_force(tmp_path: Path) -> None:
    """The job runs under `joulestat run` beside a real agent; the deletes run in this
    process on the agent's store while it measures."""
    (tmp_path / "trace.csv").write_text(TRACE)
    with running_agent(tmp_path, "--replay", str(tmp_path / "trace.csv"), "--interval", "0.1",
                       "--node", NODE) as agent:
        env = agent.client_env()
        run = start_run("long", "import time; time.sleep(120)", env)
        try:
            # Registered whole (its command's pid too, which the agent stores before it
            # answers; the job has energy once it has its process): a delete between the
            # two registrations would see the second bring the job back.
            [job] = wait_for(lambda: [j for j in listed(agent.db_url, "--running", "--name",
                                                        "long") if j.get("dynamic_j")],
                             timeout_s=30, every_s=0.2)
            refused = invoke("jobs", "delete", job["id"], "--yes", "--db", agent.db_url)
            assert refused.returncode == 2 and "--force" in refused.stderr
            assert [j["id"] for j in listed(agent.db_url, "--running")] == [job["id"]]
            forced = invoke("jobs", "delete", job["id"], "--yes", "--force",
                            "--db", agent.db_url)
            assert forced.returncode == 0, forced.stderr
            assert job["id"] in forced.stdout
            assert listed(agent.db_url, "--name", "long") == []
        finally:
            run.kill()
            run.wait()
        # Enough ticks for the conservation check (assert_conserved wants over 30 rows):
        # the in-process deletes are quick, so wait for ticks, not for time.
        wait_for(lambda: agent.value("joulestat_agent_ticks_total") >= 20, timeout_s=120)
        assert agent.stop() == 0
    assert_conserved(agent.db_url, NODE)
