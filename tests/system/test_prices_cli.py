"""An instance type the catalog does not know, as a user meets it where a process runs:
``joulestat run`` (measuring its command in process) and the agent warn, naming the
closest type the catalog has; a type it knows, or ``local``, draws no warning. (Prices
files and ``joulestat instances`` run in process: tests/unit/cli/test_prices.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.agent_process import JOULESTAT, agent_env, running_agent

NO_AGENT = "http://127.0.0.1:9"  # nothing answers: `joulestat run` measures in-process


def test_embedded_run_warns_about_an_unknown_type_with_the_closest(tmp_path: Path) -> None:
    env = agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'e.db'}",
                    JOULESTAT_SYSFS_ROOT=str(tmp_path), JOULESTAT_INTERVAL="0.2",
                    JOULESTAT_AGENT=NO_AGENT, JOULESTAT_AGENT_URL=NO_AGENT)
    for itype, warned in (("c5.larg", True), ("local", False), ("c5.large", False)):
        run = subprocess.run([JOULESTAT, "run", "--name", "t", "--instance-type", itype,
                              "--", sys.executable, "-c", "pass"],
                             env=env, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        assert ("instance type 'c5.larg' is not in the catalog" in run.stderr) is warned, (
            itype, run.stderr)
        if warned:
            assert "did you mean c5.large" in run.stderr


def test_agent_warns_about_an_unknown_type(tmp_path: Path) -> None:
    with running_agent(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2",
                       "--instance-type", "c5.larg") as agent:
        assert agent.stop() == 0
    log = agent.log()
    assert "WARNING" in log and "instance type 'c5.larg' is not in the catalog" in log
    assert "did you mean c5.large" in log
