"""Issue 47, item 6: agents started at once on one new SQLite store each find no schema
and each create it; the migration lock (joulestat.store.migrate) lets one create it
and the others find it made. Before: in 1 to 5 of 5 trials one agent died with "table
nodes already exists"."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers.agent_process import (
    JOULESTAT,
    RunningAgent,
    agent_env,
    free_port,
    wait_for,
)

TRIALS, AGENTS = 5, 3


def _start(tmp_path: Path, db_url: str, index: int) -> RunningAgent:
    log_path = tmp_path / f"agent-{index}.log"
    port, api_port = free_port(), free_port()
    argv = [JOULESTAT, "agent", "--db", db_url, "--node", f"node-{index}",
            "--spool-dir", str(tmp_path / f"spool-{index}"), "--nvml", "false",
            "--metrics-port", str(port), "--api-port", str(api_port)]
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, env=agent_env(), stdout=log, stderr=log)
    return RunningAgent(proc, port, db_url, log_path, api_port)


def _started(agent: RunningAgent) -> bool:
    """Whether ``agent`` is done starting: it answers a scrape, or it exited."""
    if agent.proc.poll() is not None:
        return True
    try:
        agent.text()
        return True
    except OSError:
        return False


@pytest.mark.parametrize("trial", range(TRIALS))
def test_agents_started_at_once_on_a_new_sqlite_store_all_start(tmp_path, trial) -> None:
    db_url = f"sqlite:///{tmp_path / 'new.db'}"
    agents = [_start(tmp_path, db_url, index) for index in range(AGENTS)]
    try:
        wait_for(lambda: all(_started(a) for a in agents), timeout_s=90)
        died = [(a.proc.returncode, a.log()) for a in agents if a.proc.poll() is not None]
        assert not died, died
        assert all("already exists" not in a.log() for a in agents)
    finally:
        for agent in agents:
            if agent.proc.poll() is None:
                agent.proc.kill()
            agent.proc.wait()
