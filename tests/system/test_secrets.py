"""No secret is printed where the command reaches for something: a password-bearing
PostgreSQL URL nothing answers at goes through every command that opens a store, and
credential-looking labels through ``joulestat run``; the secret shows in no output or
log line. The agent and ``run`` run as processes (they start servers and commands); the
other commands run in this process (tests/helpers/cli.py) but try a real connection, so
they are here. What shows a stored job's labels: tests/unit/cli/test_secrets.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers.agent_process import JOULESTAT, agent_env
from tests.helpers.cli import cli_env, invoke
from tests.helpers.secret_labels import BAD_DB, LABELS, SECRET

PROCESSES = ("agent", "run")  # the commands started as a user starts them


def cli(*args: str, env: dict[str, str], timeout_s: float = 60) -> str:
    if args[0] in PROCESSES:
        result = subprocess.run([JOULESTAT, *args], env=env, capture_output=True, text=True,
                                timeout=timeout_s)
        return result.stdout + result.stderr
    done = invoke(*args, env=env)
    return done.stdout + done.stderr


@pytest.mark.parametrize("command", [
    ("agent", "--metrics-port", "0", "--api-port", "0", "--db-wait", "1s", "--db", BAD_DB),
    ("jobs", "--db", BAD_DB), ("jobs", "--json", "--db", BAD_DB),
    ("jobs", "delete", "abcd1234", "--yes", "--db", BAD_DB),
    ("report", "some-job", "--db", BAD_DB), ("report", "--all", "--db", BAD_DB),
    ("compare", "--db", BAD_DB), ("db", "upgrade", "--db", BAD_DB),
    ("run", "--name", "x", "--db", BAD_DB, "--", "true"),
    ("import", "missing.json", "--db", BAD_DB),
    ("db", "--db", BAD_DB, "upgrade"),  # a mistyped command line: argparse's own error
])
def test_a_store_password_is_never_printed(command: tuple[str, ...], tmp_path: Path) -> None:
    # The agent measures while it waits for its store, into a spool in the data dir:
    # this test's own, never the developer's.
    extra = {"JOULESTAT_AGENT_URL": "http://127.0.0.1:9", "XDG_DATA_HOME": str(tmp_path)}
    env = agent_env(**extra) if command[0] in PROCESSES else cli_env(**extra)
    output = cli(*command, env=env)
    assert output.strip(), "the command said nothing about the bad store"
    assert SECRET not in output
    assert "u:***@127.0.0.1" in output or "missing.json" in output


def test_run_prints_no_credential_label(tmp_path: Path) -> None:
    """``joulestat run`` (measuring in process: no agent answers), logging at DEBUG, says
    nothing of the labels' secrets; the store keeps them as given, for the commands that
    show them redacted (tests/unit/cli/test_secrets.py)."""
    db = f"sqlite:///{tmp_path / 's.db'}"
    env = agent_env(JOULESTAT_DB=db, JOULESTAT_SYSFS_ROOT=str(tmp_path),
                    JOULESTAT_AGENT_URL="http://127.0.0.1:9", JOULESTAT_LOG_LEVEL="DEBUG",
                    JOULESTAT_NVML="false")
    labels = [arg for key, value in LABELS.items() for arg in ("--label", f"{key}={value}")]
    output = cli("run", "--name", "secretive", "--kind", "training", *labels, "--json",
                 "--", "true", env=env)
    assert SECRET not in output
    job_id = json.loads([line for line in output.splitlines()
                         if line.startswith("{")][-1])["id"]
    listed = invoke("jobs", "--json", env=cli_env(JOULESTAT_DB=db))
    assert listed.returncode == 0 and SECRET not in listed.stdout + listed.stderr
    [job] = json.loads(listed.stdout)
    assert (job["id"], job["labels"]["team"]) == (job_id, "nlp")
    kept = invoke("report", job_id, "--no-redact", env=cli_env(JOULESTAT_DB=db))
    assert kept.stdout.count(SECRET) == 4
