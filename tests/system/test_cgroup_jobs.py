"""`joulestat run` jobs measured by cgroups of their own, beside a real agent: the same
acceptance as the process-tree tests (test_jobs_cli.py), on this machine's real cgroup
hierarchy where it lets a test make one (skipped, with the reason, where it does not).

The agent reads a fake sysfs (no RAPL: the estimator, as in the other tests) whose
``fs/cgroup`` is a link to the real ``/sys/fs/cgroup``, and so does the wrapper.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from joulestat.host.cgroup_jobs import place
from tests.helpers.agent_process import (
    agent_at_head,
    jobs_in_store,
    start_run,
    summary_of,
    wait_for,
)
from tests.helpers.burners import (
    BURN_CPU_FULL,
    BURN_HALF_UNTIL,
    assert_conserved,
    dynamic_cpu_ratio,
    run_direct_and_nested,
    run_full_and_half,
    run_three_jobs,
    wait_until_stored,
)

REAL_CGROUPS = Path("/sys/fs/cgroup")


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """A fake sysfs whose fs/cgroup is the real one, or a skip saying why there is none."""
    probe = place(REAL_CGROUPS, f"probe-{os.getpid()}-{time.monotonic_ns()}")
    if probe.cgroup is None:
        pytest.skip(f"this machine lets no test make a cgroup: {probe.reason}")
    probe.cgroup.release()
    root = tmp_path / "sys"
    (root / "fs").mkdir(parents=True)
    (root / "fs" / "cgroup").symlink_to(REAL_CGROUPS)
    return root


def _agent(tmp_path: Path, sysfs: Path, *args: str, api_port: int | None = None):
    return agent_at_head(tmp_path, "--sysfs-root", str(sysfs), *args, api_port=api_port)


def _in_cgroups(jobs: dict, names: set[str]) -> None:
    """Each job's agent label says its cgroup; its labels (the user's) never do."""
    for name in names:
        job = jobs[name]
        assert job["agent_labels"]["cpu_source"].startswith("cgroup v"), job["agent_labels"]
        assert "cpu_source" not in job["labels"], job["labels"]


def test_two_burners_in_cgroups_get_dynamic_cpu_in_ratio_2_to_1(tmp_path: Path,
                                                                sysfs: Path) -> None:
    with _agent(tmp_path, sysfs, "--interval", "0.5") as agent:
        summaries, jobs = run_full_and_half(agent.client_env(JOULESTAT_SYSFS_ROOT=str(sysfs)))
        for summary in summaries:
            assert summary["mode"] == "agent" and summary["final"] is True
        assert agent.stop() == 0
    _in_cgroups(jobs, {"full", "half"})
    assert agent.log().count("CPU time from its cgroup v") == 2
    assert dynamic_cpu_ratio(jobs, "full", "half") == pytest.approx(2.0, rel=0.15)
    leftovers = [p.name for p in REAL_CGROUPS.rglob("joulestat-job-*")]
    assert not [name for name in leftovers
                if any(jobs[n]["id"] in name for n in ("full", "half"))]


def test_a_grandchild_in_a_cgroup_counts_like_a_direct_child(tmp_path: Path,
                                                             sysfs: Path) -> None:
    with _agent(tmp_path, sysfs, "--interval", "0.5") as agent:
        jobs = run_direct_and_nested(agent.client_env(JOULESTAT_SYSFS_ROOT=str(sysfs)))
        assert agent.stop() == 0
    _in_cgroups(jobs, {"direct", "nested"})
    assert dynamic_cpu_ratio(jobs, "nested", "direct") == pytest.approx(1.0, rel=0.2)


def test_conservation_on_every_stored_tick_with_cgroup_jobs(tmp_path: Path,
                                                            sysfs: Path) -> None:
    with _agent(tmp_path, sysfs, "--interval", "0.2", "--node", "n1") as agent:
        jobs = run_three_jobs(agent.client_env(JOULESTAT_SYSFS_ROOT=str(sysfs)))
        assert agent.stop() == 0
    _in_cgroups(jobs, {"a", "b", "c"})
    assert_conserved(agent.db_url, "n1")


def test_kill_9_during_a_cgroup_job_resumes_from_its_counter(tmp_path: Path,
                                                             sysfs: Path) -> None:
    args = ("--interval", "0.25", "--node", "n1")
    done = tmp_path / "done"
    with _agent(tmp_path, sysfs, *args) as first:
        env = first.client_env(JOULESTAT_SYSFS_ROOT=str(sysfs))
        job = start_run("survivor", BURN_HALF_UNTIL.format(s=120, path=str(done)), env)
        wait_for(lambda: "survivor" in jobs_in_store(env), timeout_s=20, every_s=0.2)
        time.sleep(1.5)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
    time.sleep(1.5)  # the gap: nobody measures, the cgroup counts on
    with _agent(tmp_path, sysfs, *args, api_port=first.api_port) as second:
        # The job runs on under the restarted agent for a few ticks, then ends.
        ticks = second.value("joulestat_agent_ticks_total")
        wait_for(lambda: second.value("joulestat_agent_ticks_total") >= ticks + 4,
                 timeout_s=60)
        done.touch()
        summary = summary_of(job)
        jobs = wait_until_stored(env, {"survivor"})
        assert second.stop() == 0
    assert "resumed from the checkpoint" in second.log()
    assert "CPU time from its cgroup v" in second.log()
    _in_cgroups(jobs, {"survivor"})
    assert summary["final"] is True and jobs["survivor"]["dynamic_j"]["cpu"] > 0


def test_run_says_where_its_cpu_time_comes_from(tmp_path: Path, sysfs: Path) -> None:
    """Embedded mode (no agent): in a cgroup where the node allows one, else the process
    tree; the job's cpu_source agent label says which (never among its labels), and both
    count the same burn."""
    from tests.helpers.agent_process import agent_env

    no_cgroups = tmp_path / "bare-sys"
    no_cgroups.mkdir()
    burn = BURN_CPU_FULL.format(cpu=1)
    runs = {}
    for name, root in (("cgroup", sysfs), ("tree", no_cgroups)):  # side by side
        env = agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / (name + '.db')}",
                        JOULESTAT_SYSFS_ROOT=str(root), JOULESTAT_AGENT_URL="http://127.0.0.1:9",
                        JOULESTAT_INTERVAL="0.2", JOULESTAT_NVML="false")
        runs[name] = start_run(name, burn, env)
    summaries = {name: summary_of(run) for name, run in runs.items()}
    for summary in summaries.values():
        assert summary["mode"] == "embedded"
    assert summaries["cgroup"]["agent_labels"]["cpu_source"].startswith("cgroup v")
    assert summaries["tree"]["agent_labels"]["cpu_source"] == "process tree"
    for summary in summaries.values():
        assert summary["dynamic_energy_j"] > 0
        assert summary["labels"] == {} and summary["agent_labels"]["idle_policy"] == "share"
