"""Jobs as a user meets them: `joulestat run` beside a real agent, and without one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.agent_process import (
    JOULESTAT,
    agent_at_head,
    agent_env,
    jobs_in_store,
    read_cli,
    start_run,
    summary_of,
    wait_for,
)
from tests.helpers.burners import (
    BURN_HALF,
    BURN_HALF_UNTIL,
    assert_conserved,
    dynamic_cpu_ratio,
    run_direct_and_nested,
    run_full_and_half,
    run_three_jobs,
    wait_until_stored,
)

TICKS = "joulestat_agent_ticks_total"
NO_AGENT = "http://127.0.0.1:9"  # the discard port: nothing answers, so embedded mode


def test_two_burners_get_dynamic_cpu_in_ratio_2_to_1(tmp_path: Path) -> None:
    """Acceptance 1: a full-core and a half-core burner, side by side."""
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.5") as agent:
        # One saturates a core for ~5 s, the other runs at about half a core for ~5 s.
        summaries, jobs = run_full_and_half(agent.client_env())
        assert [summary["mode"] for summary in summaries] == ["agent", "agent"]
        assert agent.stop() == 0
    assert dynamic_cpu_ratio(jobs, "full", "half") == pytest.approx(2.0, rel=0.15)


@pytest.mark.parametrize("policy", ["share", "exclude"])
def test_conservation_on_every_stored_tick(tmp_path: Path, policy: str) -> None:
    """Acceptance 2: jobs + unattributed == node energy, per tick and component."""
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2",
                       "--idle-policy", policy, "--node", "n1") as agent:
        jobs = run_three_jobs(agent.client_env())
        assert agent.stop() == 0
    assert_conserved(agent.db_url, "n1")
    idle = sum(sum(job["idle_j"].values()) for job in jobs.values())
    assert (idle > 0) if policy == "share" else (idle == 0)


def test_embedded_run_says_how_it_measures_in_one_line_not_six(tmp_path: Path) -> None:
    """Issue 24: measured in-process, `run` printed 5-6 INFO lines of sensor inventory
    before its summary. Now one line says the job is measured in-process (never silent),
    then the summary (and, the first time, one saying the store was created); --log-level
    INFO brings the inventory back."""
    env = agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'q.db'}",
                    JOULESTAT_AGENT_URL=NO_AGENT)
    quiet = subprocess.run([JOULESTAT, "run", "--name", "q", "--", "true"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 0, quiet.stderr
    logged = [line for line in quiet.stderr.splitlines() if " INFO " in line
              and " joulestat.store.engine: creating the store's schema" not in line]
    assert len(logged) == 1 and "in-process (embedded mode)" in logged[0], quiet.stderr
    assert "measured embedded" in quiet.stderr
    loud = subprocess.run([JOULESTAT, "run", "--log-level", "INFO", "--name", "q", "--",
                           "true"], env=env, capture_output=True, text=True, timeout=60)
    assert loud.returncode == 0, loud.stderr
    assert " INFO joulestat.runtime.assembly: node " in loud.stderr
    assert len([line for line in loud.stderr.splitlines() if " INFO " in line]) > 3


def test_wrapper_passes_exit_codes_and_signals(tmp_path: Path) -> None:
    """Acceptance 3 (first half), in embedded mode: no agent listens."""
    env = agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'e.db'}",
                    JOULESTAT_SYSFS_ROOT=str(tmp_path), JOULESTAT_INTERVAL="0.2",
                    JOULESTAT_AGENT_URL=NO_AGENT)
    code = subprocess.run([JOULESTAT, "run", "--name", "exit3", "--", "sh", "-c", "exit 3"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert code.returncode == 3, code.stderr
    assert "exited 3" in code.stderr and "embedded" in code.stderr

    marker = tmp_path / "got-sigterm"
    handler = (f"import signal, sys, time\n"
               f"def h(*_):\n    open({str(marker)!r}, 'w').write('yes'); sys.exit(7)\n"
               f"signal.signal(signal.SIGTERM, h)\nprint('ready', flush=True)\ntime.sleep(60)")
    proc = subprocess.Popen([JOULESTAT, "run", "--name", "term", "--", sys.executable, "-c",
                             handler], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)  # to the wrapper only, as a scheduler would
    assert proc.wait(timeout=30) == 7
    assert marker.read_text() == "yes"

    killed = subprocess.run([JOULESTAT, "run", "--name", "killed", "--", "sh", "-c",
                             "kill -9 $$"], env=env, capture_output=True, text=True, timeout=60)
    assert killed.returncode == 128 + 9

    missing = subprocess.run([JOULESTAT, "run", "--name", "x", "--", "/nonexistent/cmd"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 127 and "cannot start" in missing.stderr
    # An argument refused before anything starts: read in this process.
    bad = read_cli("run", "--name", "a\\b", "--", "true", env=env)
    assert bad.returncode == 2 and "backslash" in bad.stderr


def test_children_the_job_spawns_are_counted(tmp_path: Path) -> None:
    """Acceptance 3 (second half): a burner two levels down counts like a direct one."""
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.5") as agent:
        jobs = run_direct_and_nested(agent.client_env())
        assert agent.stop() == 0
    assert dynamic_cpu_ratio(jobs, "nested", "direct") == pytest.approx(1.0, rel=0.2)


def test_api_under_bad_input_keeps_the_agent_ticking(tmp_path: Path) -> None:
    """Acceptance 4 against the real agent (tests/system/test_job_api.py goes deeper)."""
    import http.client
    from concurrent.futures import ThreadPoolExecutor

    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.1") as agent:
        wait_for(lambda: (agent.samples().get((TICKS, ())) or 0) >= 2)

        def post(path: str, body: bytes, headers: dict | None = None) -> tuple[int, str]:
            conn = http.client.HTTPConnection("127.0.0.1", agent.api_port, timeout=10)
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json",
                                                           **(headers or {})})
            response = conn.getresponse()
            text = response.read().decode()
            conn.close()
            return response.status, text

        cases = [
            ("/v1/jobs", b"{not json"),
            ("/v1/jobs", b'{"name": 5, "kind": "training"}'),
            ("/v1/jobs", b'{"name": "a\\u0007b", "kind": "training"}'),
            ("/v1/jobs", b'{"name": "..\\\\etc", "kind": "training"}'),
            ("/v1/jobs", b'{"name": "ok", "kind": "weird"}'),
            ("/v1/jobs/nope/units", b'{"unit": "inference", "count": 1}'),
            ("/v1/jobs", b"x" * (1024 * 1024 + 1)),
        ]
        for path, body in cases:
            status, text = post(path, body)
            assert 400 <= status < 500 and "error" in json.loads(text), (path, status, text)

        before = agent.samples()[(TICKS, ())]
        with ThreadPoolExecutor(32) as pool:
            statuses = list(pool.map(
                lambda i: post("/v1/jobs", json.dumps({"name": f"j{i}", "kind": "other",
                                                       "bogus": i % 2}).encode())[0],
                range(1000)))
        assert all(200 <= s < 500 for s in statuses), sorted(set(statuses))
        wait_for(lambda: agent.samples()[(TICKS, ())] > before)
        assert agent.stop() == 0


def test_kill_9_agent_during_a_job_loses_and_doubles_nothing(tmp_path: Path) -> None:
    """Acceptance 5: the job keeps accruing across a kill -9; the gap comes from counters."""
    from joulestat.store.engine import make_engine

    args = ("--sysfs-root", str(tmp_path), "--interval", "0.25", "--node", "n1")
    done = tmp_path / "done"
    with agent_at_head(tmp_path, *args) as first:
        env = first.client_env()
        job = start_run("survivor", BURN_HALF_UNTIL.format(s=120, path=str(done)), env)
        wait_for(lambda: "survivor" in jobs_in_store(env), timeout_s=20, every_s=0.2)
        time.sleep(2)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
    time.sleep(2.0)  # the gap: nobody measures
    with agent_at_head(tmp_path, *args, api_port=first.api_port) as second:
        # The job runs on under the restarted agent for a few ticks, then ends.
        ticks = second.value(TICKS)
        wait_for(lambda: second.value(TICKS) >= ticks + 4, timeout_s=60)
        done.touch()
        summary_of(job)
        jobs = wait_until_stored(env, {"survivor"})
        assert second.stop() == 0
    assert "resumed from the checkpoint" in second.log()

    engine = make_engine(second.db_url)
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT t_start_ms, t_end_ms FROM tick_energy WHERE node = 'n1' "
            "AND component = 'cpu' ORDER BY t_end_ms").fetchall()
    # Ticks tile time: each starts where the previous ended (to the ms), the gap included.
    gaps = [(b[0] - a[1]) for a, b in zip(rows, rows[1:], strict=False)]
    assert max(abs(g) for g in gaps) <= 2, gaps
    longest_ms = max(end - start for start, end in rows)
    assert longest_ms >= 2000  # one tick spans the kill -9 gap
    assert jobs["survivor"]["dynamic_j"]["cpu"] > 0


def test_embedded_and_agent_modes_agree_on_a_replayed_trace(tmp_path: Path) -> None:
    """Acceptance 6: the same trace, the same job, measured both ways."""
    trace = tmp_path / "trace.csv"
    trace.write_text("t_s,component,device,watts\n0,cpu,package-0,80\n0,dram,package-0,6\n")
    common = ("--replay", str(trace), "--interval", "0.1", "--node", "n1")
    job_code = "import time; time.sleep(4)"

    embedded_env = agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'embedded.db'}",
                             JOULESTAT_AGENT_URL=NO_AGENT, JOULESTAT_REPLAY=str(trace),
                             JOULESTAT_INTERVAL="0.1", JOULESTAT_NODE="n1",
                             JOULESTAT_NVML="false")
    with agent_at_head(tmp_path, *common) as agent:
        env = agent.client_env()
        # Both at once: each store's node is the trace, whatever else the machine runs.
        runs = [start_run("sleeper", job_code, env), start_run("sleeper", job_code,
                                                                embedded_env)]
        in_agent, embedded = (summary_of(run) for run in runs)
        agent_jobs = wait_until_stored(env, {"sleeper"})
        assert agent.stop() == 0
    assert in_agent["mode"] == "agent"
    assert embedded["mode"] == "embedded"
    embedded_jobs = jobs_in_store(embedded_env)

    a, e = agent_jobs["sleeper"], embedded_jobs["sleeper"]
    duration_a = a["ended_s"] - a["started_s"]
    duration_e = e["ended_s"] - e["started_s"]
    print(f"agent {a['total_j']:.2f} J over {duration_a:.3f} s, "
          f"embedded {e['total_j']:.2f} J over {duration_e:.3f} s")
    # A lone job on a constant trace carries the node for exactly its lifetime.
    assert a["total_j"] == pytest.approx(86.0 * duration_a, rel=0.01)
    assert e["total_j"] == pytest.approx(86.0 * duration_e, rel=0.01)
    assert a["total_j"] / duration_a == pytest.approx(e["total_j"] / duration_e, rel=0.01)
    assert os.path.exists(tmp_path / "embedded.db")


def test_one_job_id_across_two_nodes_is_one_job(tmp_path: Path) -> None:
    """Multi-node: data loaders on a CPU node, the model on a GPU node, one job."""
    (tmp_path / "cpu").mkdir()
    (tmp_path / "gpu").mkdir()
    shared_db = f"sqlite:///{tmp_path / 'fleet.db'}"
    env = agent_env(JOULESTAT_DB=shared_db)
    with agent_at_head(tmp_path / "cpu", "--sysfs-root", str(tmp_path), "--node", "loader-1",
                       "--instance-type", "c6i.4xlarge", "--interval", "0.25", "--db", shared_db,
                       env=env) as cpu_node, \
            agent_at_head(tmp_path / "gpu", "--sysfs-root", str(tmp_path), "--node", "trainer-1",
                          "--instance-type", "p4d.24xlarge", "--interval", "0.25",
                          "--db", shared_db, env=env) as gpu_node:
        runs = [start_run("bert", BURN_HALF.format(s=3), node.client_env(JOULESTAT_DB=shared_db),
                          "--kind", "training", "--job-id", "bert-run-7")
                for node in (cpu_node, gpu_node)]
        for run in runs:
            assert summary_of(run)["mode"] == "agent"
        assert cpu_node.stop() == 0 and gpu_node.stop() == 0  # a clean stop flushes
    job = jobs_in_store(agent_env(JOULESTAT_DB=shared_db))["bert"]
    assert job["id"] == "bert-run-7"
    assert sorted(map(tuple, job["nodes"])) == [("loader-1", "c6i.4xlarge"),
                                                ("trainer-1", "p4d.24xlarge")]
    assert job["dynamic_j"]["cpu"] > 0
