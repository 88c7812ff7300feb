"""The in-process client never breaks the program it measures, as a user meets it: a
script doing ``from joulestat import track, count`` run as a real process, with no
agent and a store it cannot open, outside any job, with bad arguments, inside a request
handler and against an agent whose registry is full. Each run exits 0, its body runs
(it prints a marker), every failure is one ``joulestat:`` warning line per cause on
stderr, there is no traceback and no secret; and the job is measured as well as it can
be (``job.mode`` says by whom, ``job.mode_reason`` why).

The client also costs the standard library only: importing joulestat and measuring a
job through a real agent loads no third-party module."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from joulestat.api.agent_client import AgentClient
from tests.helpers.agent_process import RunningAgent, agent_at_head, agent_env, jobs_in_store

NO_AGENT = "http://127.0.0.1:9"  # the discard port: nothing answers
SECRET = "LeakPw31"
BAD_DB = f"postgresql+psycopg://u:{SECRET}@127.0.0.1:1/x"
MAX_JOBS = 3
# Another cause, said on its own line, when an agent answers at the default address
# (one may run on the machine the tests run on): measuring in-process beside it counts
# the node twice.
BESIDE_AN_AGENT = "but one answers at"
MARKER = "BODY RAN"
# The tests of the module's one agent run on one worker, which starts it once
# (pytest-xdist --dist loadgroup).
AGENT = pytest.mark.xdist_group("test_client_never_breaks")

# A training loop as a user writes it, with two mistakes repeated every step.
TRAIN = f"""
import json
from joulestat import track, count

with track("train", kind="training") as job:
    print("{MARKER}", flush=True)
    for step in range(2000):
        job.count("sample", 32)
        count("step")
        job.count("sample", float("nan"))          # a NaN loss-weighted count
        job.count("inference", 1, busy_s=0.02)     # busy_s without model=: counted
print(json.dumps({{"mode": job.mode, "reason": job.mode_reason, "summary": job.summary}}))
"""

# A request handler: a server that counted busy time without naming the model.
HANDLER = f"""
import json, threading, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from joulestat import track

REQUESTS = 40
with track("svc", kind="inference") as job:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            job.count("inference", 1, busy_s=0.02)   # forgot model=: said once, busy_s dropped
            job.count("inference", 1, model="m", busy_s=0.02)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))
    url = f"http://127.0.0.1:{{server.server_port}}/"
    codes = [opener.open(url, timeout=10).status for _ in range(REQUESTS)]
    server.shutdown()
    print("{MARKER}", codes.count(200), flush=True)
print(json.dumps({{"mode": job.mode, "reason": job.mode_reason, "summary": job.summary}}))
"""

# What a user's program loads: the public names, and a job measured through the agent.
IMPORTS = """
import json, sys
before = set(sys.modules)  # what the interpreter and site loaded before joulestat
import joulestat
from joulestat import count, current_job, serving, track

with track("imports", kind="other") as job:
    count("sample", 1)
    with serving("m") as model:
        model.count(1)
    assert current_job() is job
loaded = {name.split(".")[0] for name in set(sys.modules) - before}
third_party = sorted(loaded - set(sys.stdlib_module_names) - {"joulestat"})
print(json.dumps({"mode": job.mode, "reason": job.mode_reason, "third_party": third_party,
                  "joulestat": sorted(m for m in sys.modules if m.startswith("joulestat"))}))
"""


def run_script(code: str, env: dict[str, str]) -> tuple[list[str], dict[str, Any], str]:
    """Run ``code`` as a user's program: its stdout lines, the JSON it printed last, and
    its stderr; it must exit 0 with no traceback and no secret."""
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert SECRET not in result.stdout + result.stderr
    out = result.stdout.splitlines()
    return out, json.loads(out[-1]) if out and out[-1].startswith("{") else {}, result.stderr


def check_said(stderr: str, *causes: str) -> list[str]:
    """Every stderr line is a ``joulestat:`` warning, said once; each cause (a part of
    the line that says it) is on exactly one line."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert all(line.startswith("joulestat: ") for line in lines), lines
    assert len(lines) == len(set(lines)), lines
    for cause in causes:
        assert sum(cause in line for line in lines) == 1, (cause, lines)
    others = [line for line in lines if not any(cause in line for cause in causes)]
    assert all(BESIDE_AN_AGENT in line for line in others), others
    return lines


def embedded_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return agent_env(JOULESTAT_SYSFS_ROOT=str(tmp_path), JOULESTAT_NVML="false",
                     JOULESTAT_INTERVAL="0.2", JOULESTAT_AGENT_URL=NO_AGENT, **extra)


def test_no_agent_and_a_store_it_cannot_open(tmp_path: Path) -> None:
    out, said, stderr = run_script(TRAIN, embedded_env(tmp_path, JOULESTAT_DB=BAD_DB))
    assert MARKER in out
    lines = check_said(stderr, "is not measured", "job.count('sample', nan): count:",
                       "job.count('inference', 1, busy_s=0.02): busy_s: needs model=")
    # The one line about the start names both causes, the store's URL redacted.
    (start,) = [line for line in lines if "is not measured" in line]
    assert f"no joulestat agent answered at {NO_AGENT}" in start
    assert "u:***@127.0.0.1:1/x" in start and "cannot open the store" in start
    assert said["mode"] == "none" and said["reason"] in start
    summary = said["summary"]
    assert (summary["mode"], summary["status"], summary["final"]) == ("none", "ended", False)
    assert summary["units"] == {"sample": 32.0 * 2000, "step": 2000.0, "inference": 2000.0}
    assert "total_energy_j" not in summary  # not measured: no figure, not a zero


def test_count_outside_any_job(tmp_path: Path) -> None:
    code = (f"from joulestat import count, serving\nfor _ in range(1000):\n"
            f"    count('sample', 1)\n    with serving('m'):\n        pass\n"
            f"print('{MARKER}')")
    out, _said, stderr = run_script(code, embedded_env(tmp_path))
    assert out == [MARKER]
    check_said(stderr, "count('sample', 1) outside a job", "serving('m') outside a job")


def test_bad_arguments_are_replaced_and_the_job_measured(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'e.db'}"
    code = f"""
import json
from joulestat import track
with track("a\\\\b", kind="fun", labels={{"team": "nlp", "password": "x\\x01", "n": 1}},
           job_id="has space") as job:
    print("{MARKER}", flush=True)
    job.count("Sample", 1)
    job.count("sample", -5)
    job.count("sample", 3)
print(json.dumps({{"mode": job.mode, "reason": job.mode_reason, "summary": job.summary}}))
"""
    env = embedded_env(tmp_path, JOULESTAT_DB=db_url)
    out, said, stderr = run_script(code, env)
    assert MARKER in out
    lines = check_said(stderr, "track(name='a\\\\b'): name:", "track(kind='fun'): kind:",
                       "track(labels=", "track(job_id='has space'): job_id:",
                       "job.count('Sample', 1): unit:", "job.count('sample', -5): count:",
                       f"no joulestat agent answered at {NO_AGENT}")
    (labels,) = [line for line in lines if "track(labels=" in line]
    assert "'password': '[redacted]'" in labels  # a label value shown is redacted
    # No agent: measured in-process, under the names the bad ones were replaced with.
    assert said["mode"] == "embedded"
    summary = said["summary"]
    assert (summary["name"], summary["kind"], summary["labels"]) == (
        "unnamed", "other", {"team": "nlp", "n": "1"})
    assert summary["units"] == {"sample": 3.0} and summary["final"] is True
    assert jobs_in_store(env)["unnamed"]["units"] == {"sample": 3.0}


def test_a_name_with_a_bidi_override_is_said_and_replaced(tmp_path: Path) -> None:
    """The job API refuses U+202E in names (it reverses ``joulestat jobs``' output); from
    ``track()`` that is one warning naming the code point, and the job is measured under
    the replacement name with its label kept."""
    db_url = f"sqlite:///{tmp_path / 'e.db'}"
    code = f"""
import json
from joulestat import track
with track("invoice\\u202etxt.exe", labels={{"team": "nlp"}}) as job:
    print("{MARKER}", flush=True)
    job.count("sample", 2)
print(json.dumps({{"mode": job.mode, "reason": job.mode_reason, "summary": job.summary}}))
"""
    env = embedded_env(tmp_path, JOULESTAT_DB=db_url)
    out, said, stderr = run_script(code, env)
    assert MARKER in out
    (line,) = [line for line in check_said(stderr, "track(name=",
                                           f"no joulestat agent answered at {NO_AGENT}")
               if "track(name=" in line]
    assert "U+202E" in line, line
    summary = said["summary"]
    assert (summary["name"], summary["labels"], summary["units"]) == (
        "unnamed", {"team": "nlp"}, {"sample": 2.0})
    assert jobs_in_store(env)["unnamed"]["units"] == {"sample": 2.0}


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAgent]:
    tmp_path = tmp_path_factory.mktemp("agent")
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2",
                       "--max-jobs", str(MAX_JOBS)) as running:
        yield running


@pytest.mark.slow
@AGENT
def test_a_request_handler_that_forgets_the_model(agent: RunningAgent) -> None:
    env = agent.client_env()
    out, said, stderr = run_script(HANDLER, env)
    assert f"{MARKER} 40" in out  # every request answered 200
    check_said(stderr, "job.count('inference', 1, busy_s=0.02): busy_s: needs model=")
    assert said["mode"] == "agent" and said["summary"]["final"] is True
    stored = jobs_in_store(env)["svc"]
    # Every request's inference counted (40 with the model named, 40 without), and the
    # busy time only of those that named it: what no model was busy with is no one's.
    assert stored["units"] == {"inference": 80.0}


@pytest.mark.slow
@AGENT
def test_an_agent_with_a_full_registry(agent: RunningAgent) -> None:
    client = AgentClient(agent.api_url)
    running = {job["id"] for job in client.jobs(running=True)}
    fillers = [client.register(f"filler-{n}", "other")["id"]
               for n in range(MAX_JOBS - len(running))]
    try:
        out, said, stderr = run_script(TRAIN, agent.client_env())
    finally:
        for job_id in fillers:
            client.end(job_id)
    assert MARKER in out
    lines = check_said(stderr, "refused job 'train'", "job.count('sample', nan): count:",
                       "job.count('inference', 1, busy_s=0.02): busy_s: needs model=")
    # An agent answered: the job is not measured in-process beside it (the node's
    # energy would be stored twice), and nothing is registered behind its back.
    assert any("429" in line for line in lines)
    assert said["mode"] == "none" and "429" in said["reason"]
    assert said["summary"]["units"] == {"sample": 32.0 * 2000, "step": 2000.0,
                                        "inference": 2000.0}
    assert "train" not in {job["name"] for job in client.jobs()}


@pytest.mark.slow
@AGENT
def test_the_client_imports_the_standard_library_only(agent: RunningAgent) -> None:
    out, said, stderr = run_script(IMPORTS, agent.client_env())
    assert stderr == ""  # nothing failed, nothing said
    assert said["mode"] == "agent", said["reason"]
    assert said["third_party"] == [], said["third_party"]
    # Neither the store nor the sensors: only what measuring through an agent needs.
    assert not [m for m in said["joulestat"]
                if m.startswith(("joulestat.store", "joulestat.devices", "joulestat.outputs",
                                 "joulestat.runtime.embedded", "joulestat.dashboard"))]
