"""`joulestat demo` with a store it cannot use, as a user meets it: one error line naming
the store (password hidden) and a non-zero exit, before any workload starts, never a
worker's traceback; and a worker whose demo went away stops quietly."""

from __future__ import annotations

import subprocess
import sys
from importlib.util import find_spec

import pytest

from tests.helpers.agent_process import JOULESTAT, agent_env, free_port


@pytest.mark.parametrize(("url", "says"), [
    (f"postgresql://bob:s3cret@127.0.0.1:{free_port()}/demo", "Connection refused"),
    ("nosuchdb://bob:s3cret@db.example/demo", "cannot open the store"),
])
def test_a_store_the_demo_cannot_open_stops_it_with_one_line(tmp_path, url, says) -> None:
    env = agent_env(JOULESTAT_AGENT_URL=f"http://127.0.0.1:{free_port()}",
                    XDG_DATA_HOME=str(tmp_path / "data"))
    result = subprocess.run([JOULESTAT, "demo", "--seconds", "1", "--backend", "numpy",
                             "--db", url], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("joulestat demo: --db ") and says in lines[0]
    assert "bob:***@" in lines[0] and "s3cret" not in result.stderr + result.stdout
    assert result.stdout == ""  # no workload started, no comparison printed


@pytest.mark.skipif(find_spec("numpy") is None, reason="the demo's workers need numpy")
def test_a_training_worker_whose_demo_is_gone_stops_quietly() -> None:
    worker = subprocess.Popen(
        [sys.executable, "-m", "joulestat.cli.demo_workers", "train", "numpy", "0", "5"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert worker.stdout is not None and worker.stdin is not None
    assert worker.stdout.readline().startswith("{")  # ready, waiting for "go"
    worker.stdin.close()  # the demo died before registering its job
    assert worker.wait(timeout=30) == 1
    assert worker.stderr is not None and worker.stderr.read() == ""
    worker.stdout.close()
    worker.stderr.close()
