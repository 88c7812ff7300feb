"""Issue 47, item 1: a job claims only processes that run. User B registered 10,001
pids no process held yet (201); user A's `joulestat run` then started on one of them,
the agent refused A's process (409, "already in job <B's>") and the wrapper killed A's
command. Now B's claim is refused, A's run is measured, and a refusal of A's process
for any reason leaves A's command running to its end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from joulestat.api.server import ApiServer
from joulestat.attribution.registry import JobRegistry
from joulestat.core.validation import JobConflict
from tests.helpers.agent_process import (
    JOULESTAT,
    agent_at_head,
    agent_env,
    start_run,
    summary_of,
)
from tests.helpers.job_api import call, register

SPIN = "import time\nend = time.time() + 1.5\nwhile time.time() < end: pass\n"


def _unused_pids(count: int) -> list[int]:
    """``count`` pids above the newest process's that no process holds now: the next
    ones the kernel hands out (pid_max permitting)."""
    probe = subprocess.Popen(["true"])
    probe.wait()
    newest = max(os.getpid(), probe.pid)
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    return [pid for pid in range(newest + 1, pid_max) if not Path(f"/proc/{pid}").exists()
            ][:count]


def test_future_pids_are_refused_and_the_next_run_is_measured(tmp_path: Path) -> None:
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2",
                       "--node", "n1") as agent:
        future = _unused_pids(1000)  # at most 1,024 a registration
        status, _, answer = call(agent.api_port, "POST", "/v1/jobs",
                                 {"name": "squatter", "kind": "other", "pids": future})
        assert status == 400, answer
        # The error names pids that run no process, from those asked (which of them:
        # the suite's other processes may have taken the first few meanwhile).
        named = {int(pid) for pid in re.findall(r"\b\d+\b", answer["error"])}
        assert "no process" in answer["error"] and named and named <= set(future)
        status, _, listed = call(agent.api_port, "GET", "/v1/jobs")
        assert [job["name"] for job in listed["jobs"]] == []  # nothing registered
        squatter = register(agent.api_port, name="squatter")  # B's job, with no process

        summary = summary_of(start_run("victim", SPIN, agent.client_env()))
        assert summary["exit_code"] == 0 and "unmeasured" not in summary, summary
        assert summary["total_energy_j"] > 0, summary
        status, _, theirs = call(agent.api_port, "GET", f"/v1/jobs/{squatter['id']}")
        assert status == 200 and theirs["pids"] == [], theirs
        assert sum(theirs.get("energy_j", {}).values()) == 0, theirs
        assert agent.stop() == 0


class _RefusingRegistry(JobRegistry):
    """A registry that refuses every process it is given, as the agent refuses a pid
    still listed by another job (its process gone, the number reused by the kernel)."""

    def register(self, name: str, kind: str, pids: Any = None, *args: Any,
                 **kwargs: Any) -> Any:
        if pids:
            raise JobConflict(f"pids: process {sorted(pids)[0]} is already in job 'other'")
        return super().register(name, kind, pids, *args, **kwargs)


def test_run_keeps_its_command_running_when_the_agent_refuses_its_process(
        tmp_path: Path) -> None:
    done = tmp_path / "done"
    server = ApiServer(_RefusingRegistry(), "127.0.0.1", 0, node="n1", request_timeout_s=5.0)
    server.start()
    try:
        env = agent_env(JOULESTAT_AGENT_URL=f"http://127.0.0.1:{server.port}")
        code = SPIN + f"open({str(done)!r}, 'w').write('ran to its end')\nraise SystemExit(3)\n"
        proc = subprocess.Popen(
            [JOULESTAT, "run", "--name", "victim", "--json", "--", sys.executable, "-c", code],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        summary = summary_of(proc)
    finally:
        server.close()
    assert proc.returncode == 3  # CMD's own exit code
    assert done.read_text() == "ran to its end"
    assert summary["exit_code"] == 3 and "already in job" in summary["unmeasured"], summary
