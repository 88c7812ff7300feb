"""Issue 23, acceptance 4: between tenants of one node, a job is ended, counted into and
relabelled only by its registrant (who holds the ``job_token`` its registration
answered), and no registration claims init, the agent or another job's process; a
caller whose uid the API sees claims only its own processes unless root.

All against the real agent over its real HTTP API, as a tenant's client meets it."""

from __future__ import annotations

import http.client
import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.fakes.procfs import FakeProc
from tests.helpers.agent_process import JOULESTAT, agent_at_head, summary_of, wait_for
from tests.helpers.job_api import JOB_TOKEN_HEADER, call, register

ATTACKER = {"team": "attacker"}


def _job(port: int, job_id: str) -> dict[str, Any]:
    status, _, job = call(port, "GET", f"/v1/jobs/{job_id}")
    assert status == 200, job
    return job


def _refused(answer: tuple[int, dict[str, str], Any], *named: str) -> None:
    status, _, body = answer
    assert 400 <= status < 500, (status, body)
    assert isinstance(body, dict) and isinstance(body.get("error"), str), body
    for word in named:
        assert word in body["error"], (word, body)


def test_only_the_registrant_ends_counts_into_or_relabels_its_job(tmp_path: Path) -> None:
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2",
                       "--node", "n1") as agent:
        port = agent.api_port
        job = register(port, name="victim", labels={"team": "ml"})
        assert isinstance(job["job_token"], str) and len(job["job_token"]) >= 32
        job_id, path = job["id"], f"/v1/jobs/{job['id']}"
        wrong = {JOB_TOKEN_HEADER: "not-" + job["job_token"]}
        for headers in ({}, wrong):  # no token, then a wrong one
            _refused(call(port, "POST", f"{path}/end", {}, headers, as_owner=False),
                     JOB_TOKEN_HEADER)
            _refused(call(port, "POST", f"{path}/units", {"unit": "request", "count": 5},
                          headers, as_owner=False), JOB_TOKEN_HEADER)
            _refused(call(port, "POST", "/v1/jobs",
                          {"name": "victim", "kind": "training", "job_id": job_id,
                           "labels": ATTACKER}, headers, as_owner=False), JOB_TOKEN_HEADER)
        # Untouched: still running, its labels and units as the registrant left them.
        after = _job(port, job_id)
        assert after["status"] == "running"
        assert after["labels"].get("team") == "ml" and after["units"] == {}
        assert "job_token" not in after  # shown to its registrant only
        # Another tenant's registration gets its own token, which is no key to this job.
        other = register(port, name="other")
        _refused(call(port, "POST", f"{path}/end", {},
                      {JOB_TOKEN_HEADER: other["job_token"]}, as_owner=False), JOB_TOKEN_HEADER)
        assert _job(port, job_id)["status"] == "running"

        # The registrant, with the token it was given, does all three.
        mine = {JOB_TOKEN_HEADER: job["job_token"]}
        status, _, counted = call(port, "POST", f"{path}/units",
                                  {"unit": "request", "count": 5}, mine, as_owner=False)
        assert status == 200 and counted["units"] == {"request": 5.0}
        status, _, relabelled = call(port, "POST", "/v1/jobs",
                                     {"name": "victim", "kind": "training", "job_id": job_id,
                                      "labels": {"stage": "eval"}}, mine, as_owner=False)
        assert status == 200, relabelled  # the same job, relabelled
        assert relabelled["labels"]["stage"] == "eval" and relabelled["labels"]["team"] == "ml"
        assert relabelled["job_token"] == job["job_token"]
        status, _, ended = call(port, "POST", f"{path}/end", {}, mine, as_owner=False)
        assert status == 200 and ended["status"] == "ended"
        # The tokens derive from a secret of the agent's own, private beside its spool.
        keys = list((tmp_path / "spool").rglob("job-token.key"))
        assert len(keys) == 1 and stat.S_IMODE(keys[0].stat().st_mode) == 0o600
        assert agent.stop() == 0


def test_a_job_cannot_claim_init_the_agent_or_another_jobs_process(tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2",
                           "--node", "n1") as agent:
            port = agent.api_port
            agent_pid = agent.proc.pid
            _refused(call(port, "POST", "/v1/jobs", {"name": "init", "kind": "other",
                                                     "pids": [1]}), "pids: 1")
            _refused(call(port, "POST", "/v1/jobs", {"name": "agent", "kind": "other",
                                                     "pids": [agent_pid]}), str(agent_pid))
            first = register(port, name="first", pids=[sleeper.pid])
            _refused(call(port, "POST", "/v1/jobs", {"name": "second", "kind": "other",
                                                     "pids": [sleeper.pid]}),
                     str(sleeper.pid), first["id"])
            status, _, jobs = call(port, "GET", "/v1/jobs")
            assert status == 200
            names = sorted(job["name"] for job in jobs["jobs"])
            assert names == ["first"], names  # none of the refused ones exists
            assert _job(port, first["id"])["pids"] == [sleeper.pid]
            # Once the first job ends, its process is free to claim.
            assert call(port, "POST", f"/v1/jobs/{first['id']}/end", {})[0] == 200
            assert register(port, name="second", pids=[sleeper.pid])["pids"] == [sleeper.pid]
            assert agent.stop() == 0
    finally:
        sleeper.kill()
        sleeper.wait()


def _tcp_row(local: tuple[str, int], remote: tuple[str, int], uid: int) -> str:
    """One /proc/net/tcp row as proc(5) lays it out (IPv4, little-endian words)."""
    def hexed(address: tuple[str, int]) -> str:
        packed = bytes(int(part) for part in address[0].split("."))
        return f"{packed[::-1].hex().upper()}:{address[1]:04X}"
    return (f"   0: {hexed(local)} {hexed(remote)} 01 00000000:00000000 00:00000000 "
            f"00000000 {uid:5d}        0 4242 1 0000000000000000 20 4 30 10 -1\n")


def _claim_as(proc_root: Path, port: int, uid: int | None, pids: list[int]
              ) -> tuple[int, dict[str, Any]]:
    """Register ``pids`` over a connection the fake /proc/net/tcp says ``uid`` owns
    (None: a connection it does not list)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.connect()
        ours = conn.sock.getsockname()
        header = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when "
                  "retrnsmt   uid  timeout inode\n")
        rows = "" if uid is None else _tcp_row(ours, ("127.0.0.1", port), uid)
        (proc_root / "net").mkdir(exist_ok=True)
        (proc_root / "net" / "tcp").write_text(header + rows)
        body = json.dumps({"name": f"claim-{uid}", "kind": "other", "pids": pids})
        conn.request("POST", "/v1/jobs", body=body,
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_a_non_root_caller_claims_only_its_own_processes(tmp_path: Path) -> None:
    """The agent reads the caller's uid from /proc/net/tcp and each process's from
    /proc/<pid>/status; a fake /proc plays a user (uid 1000) beside root's process."""
    fake = FakeProc(tmp_path / "proc")
    fake.add(4242)  # root's
    fake.add(4343)  # the user's
    fake.write()
    (fake.root / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Fake CPU\n"
                                       "physical id\t: 0\n\n")
    (fake.root / "meminfo").write_text("MemTotal:       1048576 kB\n")
    for pid, uid in ((4242, 0), (4343, 1000)):
        (fake.root / str(pid) / "status").write_text(
            f"Name:\tp{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--procfs-root",
                       str(fake.root), "--interval", "0.2", "--node", "n1") as agent:
        port = agent.api_port
        status, answer = _claim_as(fake.root, port, 1000, [4242])
        assert status == 403, answer
        assert "4242" in answer["error"] and "uid 1000" in answer["error"]
        status, answer = _claim_as(fake.root, port, 1000, [4343])
        assert status == 201 and answer["pids"] == [4343], answer
        assert call(port, "POST", f"/v1/jobs/{answer['id']}/end", {},
                    {JOB_TOKEN_HEADER: answer["job_token"]}, as_owner=False)[0] == 200
        status, answer = _claim_as(fake.root, port, 0, [4242])  # root claims anyone's
        assert status == 201 and answer["pids"] == [4242], answer
        assert agent.stop() == 0


RUN_CHILD = """
import os, sys, time
from pathlib import Path
Path(sys.argv[1]).write_text(os.environ["JOULESTAT_JOB_ID"] + " "
                             + os.environ.get("JOULESTAT_JOB_TOKEN", ""))
deadline = time.monotonic() + 60
while not Path(sys.argv[2]).exists() and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def test_run_gives_its_command_the_job_token_and_only_it_counts(tmp_path: Path) -> None:
    told, go = tmp_path / "told", tmp_path / "go"
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2",
                       "--node", "n1") as agent:
        env = agent.client_env()
        proc = subprocess.Popen(
            [JOULESTAT, "run", "--name", "wrapped",
             "--json", "--", sys.executable, "-c", RUN_CHILD, str(told), str(go)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: told.exists() and " " in told.read_text(), timeout_s=30)
            job_id, token = told.read_text().split(" ", 1)
            assert token, "CMD got no JOULESTAT_JOB_TOKEN"
            port, path = agent.api_port, f"/v1/jobs/{job_id}"
            _refused(call(port, "POST", f"{path}/end", {}, as_owner=False), JOB_TOKEN_HEADER)
            assert call(port, "POST", f"{path}/units", {"unit": "step", "count": 3},
                        {JOB_TOKEN_HEADER: token}, as_owner=False)[0] == 200
            assert _job(port, job_id)["status"] == "running"
        finally:
            go.touch()
        summary = summary_of(proc)
        assert summary["id"] == job_id and summary["units"] == {"step": 3.0}, summary
        assert _job(agent.api_port, job_id)["status"] == "ended"  # run still ends it
        assert agent.stop() == 0



def test_run_reopens_an_existing_job_only_with_its_token(tmp_path: Path) -> None:
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2",
                       "--node", "n1") as agent:
        port = agent.api_port
        job = register(port, name="shared", kind="training", labels={"team": "ml"})
        argv = [JOULESTAT, "run", "--name", "shared", "--kind", "training", "--job-id",
                job["id"], "--label", "team=attacker", "--", sys.executable, "-c", "pass"]
        refused = subprocess.run(argv, env=agent.client_env(), capture_output=True,
                                 text=True, timeout=60)
        assert refused.returncode != 0 and JOB_TOKEN_HEADER in refused.stderr, refused.stderr
        kept = _job(port, job["id"])
        assert kept["status"] == "running" and kept["labels"]["team"] == "ml"
        allowed = subprocess.run(
            argv[:9] + ["team=ml", *argv[10:]],
            env=agent.client_env(JOULESTAT_JOB_TOKEN=job["job_token"]),
            capture_output=True, text=True, timeout=60)
        assert allowed.returncode == 0, allowed.stderr
        assert _job(port, job["id"])["status"] == "ended"
        assert agent.stop() == 0
