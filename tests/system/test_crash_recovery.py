"""A job's energy survives `kill -9` of the agent, as a user running it under a
supervisor that restarts it would see: fake RAPL at a known wattage, the real agent.
Also a job whose command exits while the agent is down (its end is retried and keeps
the exit time) and a crash during a store outage longer than the checkpoint's 300 s
(the restart resumes from the checkpoint in the spool)."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import time
import urllib.request
from contextlib import closing
from pathlib import Path

import pytest

from joulestat.api.agent_client import AgentClient
from tests.fakes.powercap import FakePowercap
from tests.helpers.agent_process import (
    agent_at_head,
    agent_env,
    in_memory,
    jobs_in_store,
    start_run,
    summary_of,
    wait_for,
)

POWER_W = 50.0
INTERVAL_S = 0.25  # long enough that a loaded machine's scheduling noise stays small


def _kill_9(agent) -> None:
    agent.proc.send_signal(signal.SIGKILL)
    agent.proc.wait()


def _checkpoint_saved_since(db_path: Path, since_s: float) -> bool:
    """Whether the agent has stored the node's checkpoint after ``since_s`` (its flush
    writes it): a restart after a kill -9 resumes from it."""
    with closing(sqlite3.connect(db_path, timeout=30)) as connection:
        (saved_s,) = connection.execute("SELECT max(saved_s) FROM node_checkpoints").fetchone()
    return saved_s is not None and saved_s > since_s


def _measure_a_while(agent, db_path: Path, started_s: float) -> None:
    """Wait until ``agent`` (started at ``started_s``) has ticked 4 times and stored a
    checkpoint of its own, however slowly a loaded machine runs it."""
    wait_for(lambda: agent.value("joulestat_agent_ticks_total") >= 4
             and _checkpoint_saved_since(db_path, started_s), timeout_s=60)


@pytest.mark.slow
def test_three_kill_9s_during_a_job_leave_its_energy_whole(tmp_path: Path) -> None:
    fake = FakePowercap(in_memory(tmp_path / "sys"))
    fake.add_zone("intel-rapl:0", "package-0")
    args = ("--sysfs-root", str(tmp_path / "sys"), "--interval", str(INTERVAL_S),
            "--node", "n1")
    crashes = 3
    db_path = tmp_path / "agent.db"
    done = tmp_path / "done"  # the job runs until the test creates it (at most 120 s)
    code = ("import os, time\nend = time.time() + 120\n"
            f"while time.time() < end and not os.path.exists({str(done)!r}): time.sleep(0.05)")
    with fake.drive("intel-rapl:0", power_w=POWER_W, hz=500):
        with agent_at_head(tmp_path, *args) as agent:
            api_port, env = agent.api_port, agent.client_env()
            # The agent learns the node's idle power (10 ticks, recomputed every few),
            # however slowly a loaded machine ticks.
            wait_for(lambda: agent.value("joulestat_agent_ticks_total") >= 15,
                     timeout_s=120, every_s=0.1)
            job = start_run("lone", code, env)
            wait_for(lambda: "lone" in jobs_in_store(env), timeout_s=20, every_s=0.2)
            time.sleep(1.0)
            _kill_9(agent)
        for crash in range(1, crashes + 1):
            time.sleep(0.5)  # nobody measures: the next start covers it from the checkpoint
            started_s = time.time()
            with agent_at_head(tmp_path, *args, api_port=api_port) as agent:
                # Each agent measures the job a while: some ticks and a checkpoint stored
                # after its start (the next start resumes from it), then it dies or, the
                # last one, sees the job end.
                _measure_a_while(agent, db_path, started_s)
                if crash < crashes:
                    _kill_9(agent)
                    continue
                done.touch()
                summary = summary_of(job)
                assert summary["final"] is True
                assert agent.stop() == 0
    log = (tmp_path / "agent.log").read_text()
    assert log.count("resumed from the checkpoint") == crashes
    stored = jobs_in_store(agent_env(JOULESTAT_DB=agent.db_url))["lone"]
    start_ms, end_ms = stored["started_s"] * 1000, stored["ended_s"] * 1000
    lifetime_s = stored["ended_s"] - stored["started_s"]
    db_path = Path(agent.db_url.removeprefix("sqlite:///"))
    node_ticks = [t for t in _ticks(db_path) if t[1] > start_ms and t[0] < end_ms]
    node_j = sum(energy_j for _s, _e, energy_j in node_ticks)
    cpu_j = stored["dynamic_j"]["cpu"] + stored["idle_j"]["cpu"]
    expected_j = POWER_W * lifetime_s
    print(f"lone job: {cpu_j:.1f} J stored, the node {node_j:.1f} J over its life, "
          f"{expected_j:.1f} J = {POWER_W} W x {lifetime_s:.2f} s")
    # The node's energy over the job's life survived the crashes: within one tick per
    # crash (and one for each partial tick at the job's ends) of the truth ...
    assert abs(node_j - expected_j) <= (crashes + 2) * POWER_W * INTERVAL_S
    for (_s0, e0, _j0), (s1, _e1, _j1) in zip(node_ticks, node_ticks[1:], strict=False):
        assert s1 == e0, "a hole or an overlap in the stored ticks"
    # ... and every one of those ticks is the job's too: its rows cover its life, and
    # hold all the idle power (a lone job, --idle-policy share) and its share of the
    # rest. How much of the rest other work on a loaded machine took is no crash's doing.
    with sqlite3.connect(db_path) as connection:
        windows = connection.execute(
            "SELECT t_start_ms, t_end_ms FROM job_energy WHERE job_id = ? "
            "AND component = 'cpu'", (stored["id"],)).fetchall()
    # Its rows are windows of the flushes' ticks (migration 0009): count the node ticks
    # they cover. (The job may have registered after the tick its command started in
    # had ended.)
    job_ticks = sum(1 for s, e, _j in node_ticks
                    if any(w0 <= s and e <= w1 for w0, w1 in windows))
    assert len(node_ticks) - 1 <= job_ticks <= len(node_ticks)
    assert 0 < cpu_j <= node_j + 1e-6
    assert stored["idle_j"]["cpu"] > 0.5 * expected_j, "the idle share survived"


def test_a_job_answered_201_survives_a_kill_9(tmp_path: Path) -> None:
    # Store flushes every minute: only the registration itself can have saved the job.
    env = agent_env(JOULESTAT_FLUSH_INTERVAL="60")
    args = ("--sysfs-root", str(tmp_path), "--interval", "0.2", "--node", "n1")
    with agent_at_head(tmp_path, *args, env=env) as agent:
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
    with agent_at_head(tmp_path, *args, env=env, api_port=api_port) as agent:
        client = AgentClient(agent.api_url)
        # The token the first agent answered still holds: the secret outlives a kill -9.
        client.remember(answer["id"], answer["job_token"])
        job = client.get(answer["id"])
        assert (job["name"], job["status"]) == ("just-in-time", "running")
        client.count(answer["id"], "request", 3)  # no 404, no 403
        assert agent.stop() == 0
    stored = jobs_in_store(agent_env(JOULESTAT_DB=agent.db_url))
    assert stored["just-in-time"]["units"] == {"request": 3.0}


def _agent_args(tmp_path: Path) -> tuple[str, ...]:
    return ("--sysfs-root", str(tmp_path / "sys"), "--interval", str(INTERVAL_S),
            "--node", "n1")


@pytest.mark.slow
def test_a_job_ending_while_the_agent_is_down_ends_when_its_command_exited(
        tmp_path: Path) -> None:
    fake = FakePowercap(in_memory(tmp_path / "sys"))
    fake.add_zone("intel-rapl:0", "package-0")
    go, exited = tmp_path / "go", tmp_path / "exited"
    code = (f"import pathlib, time\ngo = pathlib.Path({str(go)!r})\n"
            "while not go.exists(): time.sleep(0.02)\n"
            f"pathlib.Path({str(exited)!r}).write_text(repr(time.time()))")
    with fake.drive("intel-rapl:0", power_w=POWER_W, hz=500):
        with agent_at_head(tmp_path, *_agent_args(tmp_path)) as agent:
            api_port, env = agent.api_port, agent.client_env()
            # The agent learns the node's idle power (10 ticks, recomputed every few),
            # however slowly a loaded machine ticks.
            wait_for(lambda: agent.value("joulestat_agent_ticks_total") >= 15,
                     timeout_s=120, every_s=0.1)
            job = start_run("ends-in-the-gap", code, env)
            # Killed once a flush has given the job some of the node's energy (on a loaded
            # machine the first ticks after its start may come late).
            wait_for(lambda: "cpu" in jobs_in_store(env).get("ends-in-the-gap", {}).get(
                "dynamic_j", {}), timeout_s=30, every_s=0.2)
            _kill_9(agent)
        go.touch()  # the command exits while nothing answers at the agent's address
        wait_for(exited.exists, timeout_s=10, every_s=0.02)
        exited_s = float(exited.read_text())
        time.sleep(3.0)  # the wrapper keeps trying to end the job meanwhile
        restarted_s = time.time()
        with agent_at_head(tmp_path, *_agent_args(tmp_path), api_port=api_port) as agent:
            summary = summary_of(job)
            assert agent.stop() == 0
    assert job.returncode == 0
    assert summary["final"] is True and summary["status"] == "ended"
    stored = jobs_in_store(agent_env(JOULESTAT_DB=agent.db_url))["ends-in-the-gap"]
    # When the command exited, not when the agent came back and heard of it.
    assert exited_s <= stored["ended_s"] <= exited_s + 0.5 < restarted_s
    assert summary["ended_at"] == pytest.approx(stored["ended_s"], abs=1e-3)
    log = (tmp_path / "agent.log").read_text()
    assert "resumed from the checkpoint" in log
    # Whether the restarted agent had to wait for the wrapper's end (it logs "waiting up
    # to 3 s for their wrappers") or the retried end landed before it looked is the
    # machine's doing; either way the job ended when its command exited (above), where
    # without the wait it would end at the first tick after the restart.
    # Charged until it exited: the gap after its exit (3 s and more) is the node's, not
    # the job's. At most the node's power over its lifetime; less where other work on
    # the machine took part of the node's dynamic power (two CPU burners: 128 J of 168).
    lifetime_s = stored["ended_s"] - stored["started_s"]
    cpu_j = stored["dynamic_j"]["cpu"] + stored["idle_j"]["cpu"]
    assert 0 < cpu_j <= POWER_W * lifetime_s + 2 * POWER_W * INTERVAL_S, (cpu_j, lifetime_s)


def _ticks(db_path: Path) -> list[tuple[int, int, float]]:
    with sqlite3.connect(db_path) as connection:
        return connection.execute(
            "SELECT t_start_ms, t_end_ms, energy_j FROM tick_energy WHERE node = 'n1' AND "
            "component = 'cpu' ORDER BY t_end_ms").fetchall()


@pytest.mark.slow
def test_a_crash_during_a_long_store_outage_resumes_from_the_spools_checkpoint(
        tmp_path: Path) -> None:
    fake = FakePowercap(in_memory(tmp_path / "sys"))
    fake.add_zone("intel-rapl:0", "package-0")
    db_path, spool = tmp_path / "agent.db", tmp_path / "spool"
    with fake.drive("intel-rapl:0", power_w=POWER_W, hz=500):
        with agent_at_head(tmp_path, *_agent_args(tmp_path)) as agent:
            api_port = agent.api_port
            wait_for(lambda: db_path.exists() and _ticks(db_path), timeout_s=20)
            # The store goes away: a lock held elsewhere makes every write fail, and the
            # agent spools its batches, each with the checkpoint taken after its ticks.
            blocker = sqlite3.connect(db_path, timeout=30, isolation_level=None)
            blocker.execute("BEGIN EXCLUSIVE")
            wait_for(lambda: len(list(spool.glob("*.json"))) >= 2, timeout_s=40, every_s=0.2)
            _kill_9(agent)  # ... and the agent dies during the outage
        # The outage has lasted longer than a checkpoint may be old (CHECKPOINT_MAX_AGE_S,
        # 300 s): the store's last checkpoint is that old; the spool's are seconds old.
        blocker.execute("UPDATE node_checkpoints SET saved_s = saved_s - 400")
        blocker.execute("COMMIT")
        blocker.close()
        time.sleep(1.0)  # nothing measures: the restart covers it from the checkpoint
        with agent_at_head(tmp_path, *_agent_args(tmp_path), api_port=api_port) as agent:
            # The spooled batches are written back once the agent has the store.
            wait_for(lambda: agent.value("joulestat_agent_store_up") == 1
                     and not list(spool.glob("*.json")), timeout_s=60, every_s=0.2)
            assert agent.stop() == 0
    log = (tmp_path / "agent.log").read_text()
    assert "spooled batch(es)" in log and "checkpoint not usable" not in log
    ages = [float(a) for a in re.findall(r"resumed from the checkpoint of ([0-9.]+) s ago", log)]
    assert len(ages) == 1 and ages[0] < 60, log
    ticks = _ticks(db_path)
    for (_s0, e0, _j0), (s1, _e1, _j1) in zip(ticks, ticks[1:], strict=False):
        assert abs(s1 - e0) <= 1, "a hole or an overlap in the stored ticks"
    gap_ms = max(end - start for start, end, _ in ticks)
    assert gap_ms >= 1000  # one tick covers the crash, the outage's lost batch and the gap
    covered_s = (ticks[-1][1] - ticks[0][0]) / 1000
    energy_j = sum(j for _s, _e, j in ticks)
    assert abs(energy_j - POWER_W * covered_s) <= POWER_W * INTERVAL_S, (energy_j, covered_s)
