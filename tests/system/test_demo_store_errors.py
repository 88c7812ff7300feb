"""`joulestat demo` with a PostgreSQL store that refuses the connection, as a user meets
it: one error line naming the store (password hidden) and a non-zero exit, before any
workload starts, never a worker's traceback; and a worker (a process of its own) whose
demo went away stops quietly. The demo runs in this process (tests/helpers/cli.py) but
tries a real connection, so it is here; a store it cannot open at all:
tests/unit/cli/test_demo.py."""

from __future__ import annotations

import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from tests.helpers.agent_process import free_port
from tests.helpers.cli import cli_env, invoke


def test_a_store_the_demo_cannot_reach_stops_it_with_one_line(tmp_path: Path) -> None:
    url, says = f"postgresql://bob:s3cret@127.0.0.1:{free_port()}/demo", "Connection refused"
    env = cli_env(JOULESTAT_AGENT_URL=f"http://127.0.0.1:{free_port()}",
                  XDG_DATA_HOME=str(tmp_path / "data"))
    result = invoke("demo", "--seconds", "1", "--backend", "numpy", "--db", url, env=env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("joulestat demo: --db ") and says in lines[0]
    assert "bob:***@" in lines[0] and "s3cret" not in result.stderr + result.stdout
    assert result.stdout == ""  # no workload started, no comparison printed


@pytest.mark.skipif(find_spec("numpy") is None, reason="the demo's workers need numpy")
def test_a_training_worker_whose_demo_is_gone_stops_quietly() -> None:
    worker = subprocess.Popen(
        [sys.executable, "-m", "joulestat.demo.workers", "train", "numpy", "0", "5"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert worker.stdout is not None and worker.stdin is not None
    assert worker.stdout.readline().startswith("{")  # ready, waiting for "go"
    worker.stdin.close()  # the demo died before registering its job
    assert worker.wait(timeout=30) == 1
    assert worker.stderr is not None and worker.stderr.read() == ""
    worker.stdout.close()
    worker.stderr.close()
