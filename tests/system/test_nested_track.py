"""``track()`` inside ``track()`` in one process, as a user meets it: a script run as a
real process, against the real agent on fake RAPL, in embedded mode, and under
``joulestat run``. One job is stored, the units of both blocks land in it once, and its
energy is stored once: the node's ticks never overlap, every tick's shares add up to the
tick, and the job never gets more than the node measured over its time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from joulestat.store.engine import make_engine
from joulestat.store.schema import JOB_ENERGY, JOBS, TICK_ENERGY
from tests.fakes.powercap import FakePowercap
from tests.helpers.agent_process import (
    agent_at_head,
    agent_env,
    in_memory,
    jobs_in_store,
    start_run,
    wait_for,
)

NO_AGENT = "http://127.0.0.1:9"  # the discard port: nothing answers
POWER_W = 20.0
STEPS = 200
EXPECTED_UNITS = {"sample": 3.0 * STEPS, "step": float(STEPS), "epoch": 1.0}
# The user's script: an outer block counting samples, an inner one counting samples and
# steps into the same job; what each track() says of itself goes to stdout as JSON.
NESTED = f"""
import json, time
from joulestat import track

with track("outer", kind="training") as a:
    with track("inner", kind="training") as b:
        for _ in range({STEPS}):
            a.count("sample", 2)
            b.count("sample", 1)
            b.count("step")
            until = time.process_time() + 0.003
            while time.process_time() < until:
                pass
        inner = {{"id": b.id, "joined": b.joined, "embedded": b.embedded}}
    a.count("epoch")
inner["summary"] = b.summary
outer = {{"id": a.id, "joined": a.joined, "embedded": a.embedded, "summary": a.summary}}
print(json.dumps({{"outer": outer, "inner": inner}}))
"""

pytestmark = pytest.mark.slow


def _run_script(env: dict[str, str]) -> dict[str, Any]:
    result = subprocess.run([sys.executable, "-c", NESTED], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def _run_wrapped(name: str, env: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The script under ``joulestat run --json``: what it printed, and the run's summary."""
    proc = start_run(name, NESTED, env, "--kind", "training")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    summaries = [line for line in err.splitlines() if line.startswith("{")]
    assert summaries, err
    return json.loads(out.splitlines()[-1]), json.loads(summaries[-1])


def _check_stored_once(db_url: str, job: dict[str, Any]) -> None:
    """The job's energy is stored once and is no more than the node measured."""
    engine = make_engine(db_url)
    try:
        with engine.connect() as connection:
            started_s, ended_s = connection.execute(
                select(JOBS.c.created_s, JOBS.c.ended_s).where(JOBS.c.id == job["id"])).one()
            ticks = connection.execute(
                select(TICK_ENERGY.c.node, TICK_ENERGY.c.t_end_ms, TICK_ENERGY.c.component,
                       TICK_ENERGY.c.device, TICK_ENERGY.c.t_start_ms,
                       TICK_ENERGY.c.energy_j)).all()
            shares = connection.execute(
                select(JOB_ENERGY.c.job_id, JOB_ENERGY.c.node, JOB_ENERGY.c.t_end_ms,
                       JOB_ENERGY.c.component, JOB_ENERGY.c.device, JOB_ENERGY.c.dynamic_j,
                       JOB_ENERGY.c.idle_j)).all()
    finally:
        engine.dispose()
    # The node was measured once: per device, its stored ticks never overlap in time.
    spans: dict[tuple[str, str, str], list[tuple[int, int]]] = {}
    for node, t_end, component, device, t_start, _energy in ticks:
        spans.setdefault((node, component, device), []).append((int(t_start), int(t_end)))
    assert spans, "no tick stored"
    for key, found in spans.items():
        found.sort(key=lambda span: span[1])
        for (_s0, e0), (s1, _e1) in zip(found, found[1:], strict=False):
            assert s1 >= e0 - 1, f"{key}: a tick ends at {e0}, the next starts at {s1}"
    # Job rows are windows of a flush's ticks (migration 0009): the node's energy of a
    # window is its ticks' since the previous window's end (a tick after the last window
    # stands alone).
    ends: dict[tuple[str, str, str], list[int]] = {}
    for _job, node, t_end, component, device, _dynamic, _idle in shares:
        ends.setdefault((node, component, device), []).append(int(t_end))
    energy: dict[tuple[str, int, str, str], float] = {}
    start: dict[tuple[str, int, str, str], int] = {}
    for node, t_end, component, device, t_start, tick_j in sorted(ticks, key=lambda r: r[1]):
        later = [e for e in ends.get((node, component, device), []) if e >= int(t_end)]
        key = (node, min(later) if later else int(t_end), component, device)
        energy[key] = energy.get(key, 0.0) + float(tick_j)
        start.setdefault(key, int(t_start))
    everyone: dict[tuple[str, int, str, str], float] = {}
    everyone_dynamic: dict[tuple[str, int, str, str], float] = {}
    mine: dict[tuple[str, int, str, str], tuple[float, float]] = {}
    for job_id, node, t_end, component, device, dynamic_j, idle_j in shares:
        key = (node, int(t_end), component, device)
        everyone[key] = everyone.get(key, 0.0) + dynamic_j + idle_j
        everyone_dynamic[key] = everyone_dynamic.get(key, 0.0) + dynamic_j
        if job_id == job["id"]:
            mine[key] = (float(dynamic_j), float(idle_j))
    assert mine, "the job got no energy"
    for key, (dynamic_j, idle_j) in mine.items():
        # Each window's shares add up to its ticks, and the job's is part of it.
        assert everyone[key] == pytest.approx(energy[key], rel=1e-9, abs=1e-9), key
        assert dynamic_j + idle_j <= energy[key] + 1e-9, key
        assert dynamic_j <= everyone_dynamic[key] + 1e-9, key
    # Over the job's time, no more than the node measured, and its dynamic part no more
    # than the node's busy (dynamic) energy.
    window = [key for key in energy
              if key[1] > started_s * 1000 and start[key] < ended_s * 1000]
    node_j = sum(energy[key] for key in window)
    node_dynamic_j = sum(everyone_dynamic.get(key, 0.0) for key in window)
    job_dynamic_j = sum(dynamic for dynamic, _idle in mine.values())
    job_j = sum(dynamic + idle for dynamic, idle in mine.values())
    print(f"job {job_j:.3f} J ({job_dynamic_j:.3f} J dynamic) of the node's {node_j:.3f} J "
          f"({node_dynamic_j:.3f} J dynamic) over the job's {ended_s - started_s:.2f} s")
    assert all(key in window for key in mine), "a share outside the job's time"
    assert 0 < job_j <= node_j + 1e-9
    assert job_dynamic_j <= node_dynamic_j + 1e-9
    # What `joulestat jobs` lists is those shares, once.
    assert job["total_j"] == pytest.approx(job_j, rel=1e-9)


def _check_nested(said: dict[str, Any], job: dict[str, Any], name: str) -> None:
    """The inner track() joined the outer's job; the job has both blocks' units once."""
    assert said["inner"]["joined"] is True
    assert said["inner"]["id"] == said["outer"]["id"] == job["id"]
    assert said["inner"]["summary"] is None  # a joined track() ends nothing
    assert (job["name"], job["status"]) == (name, "ended")
    assert job["units"] == EXPECTED_UNITS


def test_nested_track_against_the_agent_and_under_run(tmp_path: Path) -> None:
    fake = FakePowercap(in_memory(tmp_path / "sys"))
    fake.add_zone("intel-rapl:0", "package-0")
    with fake.drive("intel-rapl:0", power_w=POWER_W, hz=200), agent_at_head(
            tmp_path, "--sysfs-root", str(tmp_path / "sys"), "--interval", "0.2",
            "--node", "n1") as agent:
        wait_for(lambda: agent.value("joulestat_agent_ticks_total") >= 3)  # ticking
        env = agent.client_env()
        said = _run_script(env)
        jobs = jobs_in_store(env)
        assert list(jobs) == ["outer"], "the inner track() made a job of its own"
        _check_nested(said, jobs["outer"], "outer")
        outer = said["outer"]
        assert (outer["joined"], outer["embedded"]) == (False, False)
        assert outer["summary"]["final"] is True
        assert outer["summary"]["units"] == EXPECTED_UNITS
        assert outer["summary"]["total_energy_j"] == pytest.approx(jobs["outer"]["total_j"],
                                                                   rel=1e-9)

        # Under `joulestat run`: both track()s join the run's job.
        said, summary = _run_wrapped("wrapped", env)
        jobs = jobs_in_store(env)
        assert sorted(jobs) == ["outer", "wrapped"]
        _check_nested(said, jobs["wrapped"], "wrapped")
        assert said["outer"]["joined"] is True and said["outer"]["summary"] is None
        assert (summary["id"], summary["mode"], summary["final"]) == (
            jobs["wrapped"]["id"], "agent", True)
        assert summary["units"] == EXPECTED_UNITS
        assert agent.stop() == 0
    _check_stored_once(agent.db_url, jobs["outer"])
    _check_stored_once(agent.db_url, jobs["wrapped"])


def test_nested_track_embedded(tmp_path: Path) -> None:
    fake = FakePowercap(in_memory(tmp_path / "sys"))
    fake.add_zone("intel-rapl:0", "package-0")
    db_url = f"sqlite:///{tmp_path / 'e.db'}"
    env = agent_env(JOULESTAT_DB=db_url, JOULESTAT_SYSFS_ROOT=str(tmp_path / "sys"),
                    JOULESTAT_INTERVAL="0.2", JOULESTAT_AGENT_URL=NO_AGENT,
                    JOULESTAT_NVML="false", JOULESTAT_NODE="n1")
    with fake.drive("intel-rapl:0", power_w=POWER_W, hz=200):
        said = _run_script(env)
    jobs = jobs_in_store(env)
    assert list(jobs) == ["outer"], "the inner track() made a job of its own"
    _check_nested(said, jobs["outer"], "outer")
    outer = said["outer"]
    assert (outer["joined"], outer["embedded"]) == (False, True)
    assert said["inner"]["embedded"] is False  # it measures nothing of its own
    assert outer["summary"]["units"] == EXPECTED_UNITS
    assert outer["summary"]["total_energy_j"] == pytest.approx(jobs["outer"]["total_j"],
                                                               rel=1e-9)
    _check_stored_once(db_url, jobs["outer"])
