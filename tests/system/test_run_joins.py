"""`joulestat run` off the happy path, as a user meets it: the agent named one way, a
script counting its own work inside the run, one job per process, a final summary."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from joulestat.api.agent_client import AgentClient
from tests.helpers.agent_process import (
    JOULESTAT,
    agent_at_head,
    agent_env,
    jobs_in_store,
    read_cli,
    start_run,
    summary_of,
)

NO_AGENT = "http://127.0.0.1:9"  # the discard port: nothing answers
STEPS = 300
# A training script as a user writes it: track() for its samples, count() for steps.
TRAIN = f"""
import time
from joulestat import count, track
with track("trainer", kind="training") as job:
    assert job.joined, "track() under joulestat run must join the run's job"
    for _ in range({STEPS}):
        job.count("sample", 32)
        count("step")
        t = time.process_time() + 0.003
        while time.process_time() < t:
            pass
"""


def _node_ticks_ms(db_url: str) -> list[tuple[int, int]]:
    """(start, end) of every stored cpu tick, in order."""
    from joulestat.store.engine import make_engine
    from joulestat.store.schema import TICK_ENERGY

    engine = make_engine(db_url)
    with engine.connect() as connection:
        rows = connection.execute(
            select(TICK_ENERGY.c.t_start_ms, TICK_ENERGY.c.t_end_ms)
            .where(TICK_ENERGY.c.component == "cpu").order_by(TICK_ENERGY.c.t_end_ms)
        ).all()
    engine.dispose()
    return [(int(a), int(b)) for a, b in rows]


def _check_one_job_stored_once(env: dict[str, str], summary: dict, db_url: str) -> dict:
    # Read right after the wrapper exits: no waiting for a later flush.
    jobs = jobs_in_store(env)
    assert list(jobs) == ["train"], "the script's track() made a job of its own"
    job = jobs["train"]
    assert job["status"] == "ended"
    assert job["units"] == {"sample": 32.0 * STEPS, "step": float(STEPS)}
    assert summary["final"] is True
    assert summary["units"] == job["units"]
    # The summary is the stored total, not an early figure.
    assert summary["total_energy_j"] == pytest.approx(job["total_j"], rel=1e-9)
    # The node was measured once: its stored ticks never overlap in time.
    ticks = _node_ticks_ms(db_url)
    assert ticks
    for (_s0, e0), (s1, _e1) in zip(ticks, ticks[1:], strict=False):
        assert s1 >= e0 - 1, f"overlapping ticks: one ends at {e0}, the next starts at {s1}"
    return job


def test_script_under_run_counts_into_the_agent_job(tmp_path: Path) -> None:
    # A long store flush interval: the ended job must reach the store without waiting it.
    env = agent_env(JOULESTAT_FLUSH_INTERVAL="60")
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2",
                       env=env) as agent:
        run_env = agent.client_env(JOULESTAT_FLUSH_INTERVAL="60")
        assert "JOULESTAT_AGENT" not in run_env  # only the documented name
        summary = summary_of(start_run("train", TRAIN, run_env, "--kind", "training"))
        assert summary["mode"] == "agent"
        job = _check_one_job_stored_once(run_env, summary, agent.db_url)
        # `joulestat jobs` and GET /v1/jobs agree about the job that just ended.
        [live] = AgentClient(agent.api_url).jobs()
        assert (live["id"], live["status"], live["units"]) == (job["id"], "ended", job["units"])
        assert live["total_energy_j"] == pytest.approx(job["total_j"], rel=1e-9)
        assert agent.stop() == 0


def test_script_under_run_counts_into_the_embedded_job(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'e.db'}"
    env = agent_env(JOULESTAT_DB=db_url, JOULESTAT_SYSFS_ROOT=str(tmp_path),
                    JOULESTAT_INTERVAL="0.2", JOULESTAT_AGENT_URL=NO_AGENT,
                    JOULESTAT_FLUSH_INTERVAL="60", JOULESTAT_NVML="false")
    proc = start_run("train", TRAIN, env, "--kind", "training")
    summary = summary_of(proc)
    assert summary["mode"] == "embedded"
    _check_one_job_stored_once(env, summary, db_url)


def test_the_agent_is_named_one_way_by_flag_env_and_file(tmp_path: Path) -> None:
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2") as agent:
        bare = agent_env(JOULESTAT_DB=agent.db_url)
        by_flag = start_run("flag", "pass", bare, "--agent-url", agent.api_url)
        by_env = start_run("env", "pass", {**bare, "JOULESTAT_AGENT_URL": agent.api_url})
        config = tmp_path / "joulestat.toml"
        config.write_text(f'agent_url = "{agent.api_url}"\n')
        by_file = start_run("file", "pass", {**bare, "JOULESTAT_CONFIG": str(config)})
        for proc in (by_flag, by_env, by_file):
            assert summary_of(proc)["mode"] == "agent"
        assert agent.stop() == 0


def test_falling_back_to_embedded_beside_an_agent_is_never_silent(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'e.db'}"
    env = agent_env(JOULESTAT_DB=db, JOULESTAT_SYSFS_ROOT=str(tmp_path),
                    JOULESTAT_INTERVAL="0.2", JOULESTAT_NVML="false")
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2") as agent:
        # The name earlier versions read: ignored, and said so.
        old = subprocess.run([JOULESTAT, "run", "--name", "old", "--", "true"],
                             env={**env, "JOULESTAT_AGENT": agent.api_url,
                                  "JOULESTAT_AGENT_URL": ""},
                             capture_output=True, text=True, timeout=60)
        assert old.returncode == 0, old.stderr
        assert "JOULESTAT_AGENT is no longer read (it is JOULESTAT_AGENT_URL now)" in old.stderr
        # --embedded while the agent answers: measured twice, and it says so.
        forced = subprocess.run([JOULESTAT, "run", "--name", "forced", "--embedded",
                                 "--agent-url", agent.api_url, "--", "true"],
                                env=env, capture_output=True, text=True, timeout=60)
        assert forced.returncode == 0, forced.stderr
        assert f"--embedded, but an agent answers at {agent.api_url}" in forced.stderr
        assert "no agent answered" not in forced.stderr
        assert "--embedded: measuring job" in forced.stderr
        assert agent.stop() == 0
    # Something holds the agent's port but does not answer: a missed or wedged agent.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        taken = subprocess.run([JOULESTAT, "run", "--name", "taken", "--", "true"],
                               env={**env, "JOULESTAT_AGENT_URL": url},
                               capture_output=True, text=True, timeout=60)
    assert taken.returncode == 0, taken.stderr
    assert f"something listens at {url} but does not answer as a joulestat agent" \
        in taken.stderr


def test_count_outside_any_job_says_so() -> None:
    # Said, not raised: the program goes on (tests/system/test_client_never_breaks.py).
    env = agent_env()
    result = subprocess.run(
        [sys.executable, "-c", "from joulestat import count; count('sample', 1)"],
        env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "count('sample', 1) outside a job" in result.stderr


def test_help_shows_defaults_as_a_user_writes_them() -> None:
    text = read_cli("agent", "--help", env=agent_env(COLUMNS="200")).stdout
    assert "[default: 7d]" in text and "[default: 5m]" in text
    assert "[default: none]" in text
    assert "frozenset" not in text and "604800" not in text
    run_help = read_cli("run", "--help", env=agent_env(COLUMNS="200")).stdout
    assert "--agent-url URL" in run_help and "JOULESTAT_AGENT_URL" in run_help


def test_the_child_is_told_its_job(tmp_path: Path) -> None:
    env = agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'e.db'}",
                    JOULESTAT_SYSFS_ROOT=str(tmp_path), JOULESTAT_AGENT_URL=NO_AGENT,
                    JOULESTAT_NVML="false")
    code = ("import os, sys; print(os.environ['JOULESTAT_JOB_ID'], "
            "os.environ['JOULESTAT_AGENT_URL'], file=sys.stderr)")
    proc = start_run("told", code, env)
    _out, err = proc.communicate(timeout=60)
    job_id, api_url = err.splitlines()[-2].split()[-2:]
    summary = json.loads(err.splitlines()[-1])
    assert job_id == summary["id"]
    assert api_url.startswith("http://127.0.0.1:") and api_url != NO_AGENT


def test_make_run_passes_run_args_and_dashboard_args() -> None:
    """README's RUN_ARGS / DASHBOARD_ARGS, as `make -n` would run them."""
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        ["make", "-n", "-W", "pyproject.toml", "run", "RUN_ARGS=--interval 0.5",
         "DASHBOARD_ARGS=--port 8600"],
        cwd=repo, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "joulestat agent --interval 0.5" in result.stdout
    assert "joulestat dashboard --port 8600" in result.stdout
