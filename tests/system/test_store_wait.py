"""An agent whose store does not answer at start-up, as an operator meets it: it measures
at once, serves its metrics and job API meanwhile and says it waits, and what it
measured reaches the store once the store answers; a store that turns out to be written
by another live agent of the node stops it with a clear error, its rows set aside.

The store is made to not answer by a connection holding it in SQLite's exclusive
locking mode (even readers are refused, WAL or not) and brought back by closing it."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import closing
from pathlib import Path

import pytest

from joulestat.api.agent_client import AgentClient, AgentError
from tests.fakes.powercap import FakePowercap
from tests.helpers.agent_process import (
    JOULESTAT,
    RunningAgent,
    agent_at_head,
    agent_env,
    free_port,
    idle_process,
    in_memory,
    jobs_in_store,
    read_cli,
    wait_for,
)
from tests.helpers.job_api import register

POWER_W = 50.0
INTERVAL_S = 0.25


def _store_at_head(db_path: Path) -> None:
    done = read_cli("db", "upgrade", "--db", f"sqlite:///{db_path}")
    assert done.returncode == 0, done.stderr


def _block(db_path: Path) -> sqlite3.Connection:
    """A connection that keeps every other one out, readers included, until closed."""
    blocker = sqlite3.connect(db_path, timeout=30, isolation_level=None)
    blocker.execute("PRAGMA locking_mode = EXCLUSIVE")
    blocker.execute("BEGIN EXCLUSIVE")
    return blocker


def _ticks(db_path: Path) -> list[tuple[int, int, float]]:
    # closed, not just committed: an open connection to a WAL store keeps _block out
    with closing(sqlite3.connect(db_path, timeout=30)) as connection:
        return connection.execute(
            "SELECT t_start_ms, t_end_ms, energy_j FROM tick_energy WHERE node = 'n1' AND "
            "component = 'cpu' ORDER BY t_end_ms").fetchall()


def _cpu_j(agent: RunningAgent) -> float:
    """The node's CPU energy so far, as its metrics endpoint says."""
    return sum(value for labels, value in agent.series(
        "joulestat_node_energy_joules_total").items() if dict(labels)["component"] == "cpu")


def _get(url: str) -> tuple[int, dict, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


@pytest.mark.slow
def test_the_agent_measures_and_answers_while_its_store_is_away_at_start(
        tmp_path: Path) -> None:
    fake = FakePowercap(in_memory(tmp_path / "sys"))
    fake.add_zone("intel-rapl:0", "package-0")
    db_path, spool = tmp_path / "agent.db", tmp_path / "spool"
    _store_at_head(db_path)
    blocker = _block(db_path)
    try:
        with fake.drive("intel-rapl:0", power_w=POWER_W, hz=500), \
                agent_at_head(tmp_path, "--sysfs-root", str(tmp_path / "sys"),
                              "--interval", str(INTERVAL_S), "--node", "n1") as agent:
            started_ms = int(time.time() * 1000)
            # Metrics answer, and say the store is not up; the node is measured.
            assert agent.value("joulestat_agent_store_up") == 0
            wait_for(lambda: _cpu_j(agent) >= POWER_W * 2, timeout_s=30)
            status, _headers, health = _get(f"{agent.api_url}/v1/health")
            assert status == 200 and health["store"] == "waiting", health
            # A new job is taken (not durable yet: the store has not answered) ...
            client = AgentClient(agent.api_url)
            job = client.register("during-the-wait", "training", pids=[os.getpid()])
            assert job["durable"] is False
            client.count(job["id"], "step", 5)
            # ... and one it does not know may be a job of before the start: 503, retried.
            status, headers, answer = _get(f"{agent.api_url}/v1/jobs/{'a' * 32}")
            assert status == 503 and headers.get("Retry-After"), (status, answer)
            assert "waiting for its store" in answer["error"]
            with pytest.raises(AgentError) as refused:
                client.register("old", "training", job_id="b" * 32)
            assert refused.value.status == 503
            wait_for(lambda: list(spool.glob("*.json")), timeout_s=60, every_s=0.2)
            assert "does not answer" in agent.log() and "measuring meanwhile" in agent.log()

            returned_ms = int(time.time() * 1000)
            blocker.close()  # the store answers
            wait_for(lambda: agent.value("joulestat_agent_store_up") == 1
                     and not list(spool.glob("*.json")), timeout_s=60, every_s=0.2)
            wait_for(lambda: _get(f"{agent.api_url}/v1/health")[2]["store"] == "up",
                     timeout_s=30)
            client.end(job["id"])
            assert client.wait_final(job["id"], timeout_s=30)["final"] is True
            assert agent.stop() == 0
        ticks = _ticks(db_path)
        # Measured from the start, not from the store's return: the first stored tick
        # began before the test even saw the agent ready.
        # (The agent answers before its first tick's baseline, so "ready" is no bound.)
        assert ticks and ticks[0][0] < returned_ms, (ticks[0], returned_ms, started_ms)
        for (_s0, e0, _j0), (s1, _e1, _j1) in zip(ticks, ticks[1:], strict=False):
            assert abs(s1 - e0) <= 1, "a hole or an overlap in the stored ticks"
        covered_s = (ticks[-1][1] - ticks[0][0]) / 1000
        energy_j = sum(j for _s, _e, j in ticks)
        assert abs(energy_j - POWER_W * covered_s) <= POWER_W * INTERVAL_S, (
            energy_j, covered_s)
        stored = jobs_in_store(agent_env(JOULESTAT_DB=f"sqlite:///{db_path}"))
        assert stored["during-the-wait"]["units"] == {"step": 5.0}
        assert stored["during-the-wait"]["status"] == "ended"
        log = (tmp_path / "agent.log").read_text()
        assert "spooled batch(es)" in log and "answers, " in log
    finally:
        blocker.close()


@pytest.mark.slow
def test_a_crash_during_an_outage_restarted_while_the_store_is_away_resumes_from_the_spool(
        tmp_path: Path) -> None:
    """The store's checkpoint cannot be read at such a start; the spool's is newer anyway
    (test_crash_recovery.py has the restart after the store is back)."""
    fake = FakePowercap(in_memory(tmp_path / "sys"))
    fake.add_zone("intel-rapl:0", "package-0")
    db_path, spool = tmp_path / "agent.db", tmp_path / "spool"
    args = ("--sysfs-root", str(tmp_path / "sys"), "--interval", str(INTERVAL_S),
            "--node", "n1")
    with idle_process() as sleeper, fake.drive("intel-rapl:0", power_w=POWER_W, hz=500):
        with agent_at_head(tmp_path, *args) as agent:
            api_port = agent.api_port
            wait_for(lambda: db_path.exists() and _ticks(db_path), timeout_s=30)
            # A job running across the crash: restored only once the store answers.
            assert register(api_port, name="waits", pids=[sleeper.pid])["durable"] is True
            writes_refused = sqlite3.connect(db_path, timeout=30, isolation_level=None)
            writes_refused.execute("BEGIN EXCLUSIVE")  # an outage: rows go to the spool
            wait_for(lambda: len(list(spool.glob("*.json"))) >= 2, timeout_s=60, every_s=0.2)
            agent.proc.kill()  # ... and the agent dies during it
            agent.proc.wait()
        writes_refused.execute("COMMIT")
        writes_refused.close()
        blocker = _block(db_path)  # still away when the agent starts again: not even reads
        try:
            with agent_at_head(tmp_path, *args, api_port=api_port) as agent:
                wait_for(lambda: "resumed from the checkpoint" in agent.log(), timeout_s=30)
                assert agent.value("joulestat_agent_store_up") == 0
                blocker.close()
                wait_for(lambda: agent.value("joulestat_agent_store_up") == 1
                         and not list(spool.glob("*.json")), timeout_s=60, every_s=0.2)
                # What the wait cost the job is said at WARNING with its joules, and
                # counted in the lost-energy metric (issue 47).
                said = wait_for(lambda: re.search(
                    r"WARNING.*restored only now, ([0-9.]+) s after the start.*the node's "
                    r"([0-9.]+) J since the start are unattributed", agent.log()),
                    timeout_s=30)
                lost = agent.value("joulestat_agent_lost_energy_joules_total",
                                   reason="jobs_restored_late")
                assert lost == pytest.approx(float(said.group(2)), abs=0.1) and lost > 0
                assert agent.stop() == 0
        finally:
            blocker.close()
    log = (tmp_path / "agent.log").read_text()
    assert "checkpoint not usable" not in log and "no checkpoint in the spool" not in log
    ages = [float(a) for a in re.findall(r"resumed from the checkpoint of ([0-9.]+) s ago", log)]
    assert len(ages) == 1 and ages[0] < 60, log
    ticks = _ticks(db_path)
    for (_s0, e0, _j0), (s1, _e1, _j1) in zip(ticks, ticks[1:], strict=False):
        assert abs(s1 - e0) <= 1, "a hole or an overlap in the stored ticks"
    covered_s = (ticks[-1][1] - ticks[0][0]) / 1000
    energy_j = sum(j for _s, _e, j in ticks)
    assert abs(energy_j - POWER_W * covered_s) <= POWER_W * INTERVAL_S, (energy_j, covered_s)


def test_a_store_written_by_another_live_agent_stops_the_agent_when_it_answers(
        tmp_path: Path) -> None:
    fake = FakePowercap(in_memory(tmp_path / "sys"))
    fake.add_zone("intel-rapl:0", "package-0")
    db_path, spool = tmp_path / "agent.db", tmp_path / "spool"
    args = ("--sysfs-root", str(tmp_path / "sys"), "--interval", str(INTERVAL_S),
            "--node", "n1")
    with agent_at_head(tmp_path, *args) as agent:  # the node's row, in a store at head
        assert agent.stop() == 0
    ticks_before = len(_ticks(db_path))
    blocker = _block(db_path)
    try:
        # Meanwhile another agent of node n1 (this test process stands for it: alive,
        # on this boot) holds the node's lease.
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        blocker.execute("UPDATE nodes SET writer_id = ?, writer_host = 'elsewhere', "
                        "writer_mode = 'agent', lease_until_s = ? WHERE node = 'n1'",
                        (f"{boot_id}:{os.getpid()}", time.time() + 3600))
        with agent_at_head(tmp_path, *args) as agent:
            wait_for(lambda: list(spool.glob("*.json")), timeout_s=60, every_s=0.2)
            blocker.execute("COMMIT")
            blocker.close()  # the store answers: with another writer's live lease
            code = agent.proc.wait(timeout=60)
        assert code == 2, agent.log()
        log = agent.log()
        assert f"is written by agent pid {os.getpid()} on host elsewhere" in log
        assert "not written, as it would count the node twice" in log
        assert "Traceback" not in log
        assert not list(spool.glob("*.json"))  # never written back by a later start
        assert list(spool.glob("*.refused"))
        assert len(_ticks(db_path)) == ticks_before  # not one tick of the refused agent
    finally:
        blocker.close()


def test_a_store_that_never_answers_within_db_wait_stops_the_agent(tmp_path: Path) -> None:
    db_path, spool = tmp_path / "agent.db", tmp_path / "spool"
    _store_at_head(db_path)
    blocker = _block(db_path)
    try:
        argv = [JOULESTAT, "agent", "--db", f"sqlite:///{db_path}", "--db-wait", "6s",
                "--sysfs-root", str(tmp_path), "--nvml", "false", "--interval", "0.2",
                "--metrics-port", str(free_port()), "--api-port", str(free_port()),
                "--spool-dir", str(spool)]
        done = subprocess.run(argv, env=agent_env(), capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2, done.stderr
        assert "cannot open the store (waited 6 s)" in done.stderr
        assert "database is locked" in done.stderr
        assert "wait in the spool" in done.stderr  # what it measured meanwhile is kept
        assert "Traceback" not in done.stderr
        assert list(spool.glob("*.json"))
    finally:
        blocker.close()


def test_a_second_agent_on_one_spool_is_refused_at_once(tmp_path: Path) -> None:
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--node", "n1") as agent:
        argv = [JOULESTAT, "agent", "--db", agent.db_url, "--sysfs-root", str(tmp_path),
                "--nvml", "false", "--node", "n2", "--metrics-port", str(free_port()),
                "--api-port", str(free_port()), "--spool-dir", str(tmp_path / "spool")]
        done = subprocess.run(argv, env=agent_env(), capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2, done.stderr
        assert f"--spool-dir {tmp_path / 'spool'}: in use by another process (pid " \
               f"{agent.proc.pid})" in done.stderr
        assert agent.stop() == 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))
