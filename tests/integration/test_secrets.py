"""No secret is printed: a password-bearing store URL and credential-looking labels go
through every command and the dashboard, and the secret shows in no output, log line or
file. (`report --no-redact` is the one documented way to keep labels as they are.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.helpers.agent_process import JOULESTAT, agent_env, free_port

SECRET = "LeakPw31"
BAD_DB = f"postgresql+psycopg://u:{SECRET}@127.0.0.1:1/x"
LABELS = {"password": SECRET, "note": f"see https://bob:{SECRET}@git.example.com/repo",
          "header": f"Bearer {SECRET}abcdef", "dsn": f"host=db password={SECRET}",
          "team": "nlp"}
APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def cli(*args: str, env: dict[str, str], timeout_s: float = 60) -> str:
    result = subprocess.run([JOULESTAT, *args], env=env, capture_output=True, text=True,
                            timeout=timeout_s)
    return result.stdout + result.stderr


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
    output = cli(*command, env=agent_env(JOULESTAT_AGENT_URL="http://127.0.0.1:9",
                                         XDG_DATA_HOME=str(tmp_path)))
    assert output.strip(), "the command said nothing about the bad store"
    assert SECRET not in output
    assert "u:***@127.0.0.1" in output or "missing.json" in output


def test_the_dashboard_command_prints_no_store_password() -> None:
    # Its own session, so the kill reaches Streamlit and anything it started: nothing
    # this test starts outlives it. A free port, not a fixed one another test may hold.
    proc = subprocess.Popen([JOULESTAT, "dashboard", "--db", BAD_DB, "--port", str(free_port())],
                            env=agent_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        first = proc.stdout.readline() if proc.stdout else ""
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout:
            proc.stdout.close()
    assert "u:***@127.0.0.1" in first and SECRET not in first


def test_credential_labels_are_redacted_everywhere(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    env = agent_env(JOULESTAT_DB=db, JOULESTAT_SYSFS_ROOT=str(tmp_path),
                    JOULESTAT_AGENT_URL="http://127.0.0.1:9", JOULESTAT_LOG_LEVEL="DEBUG",
                    JOULESTAT_NVML="false")
    labels = [arg for key, value in LABELS.items() for arg in ("--label", f"{key}={value}")]
    outputs = [cli("run", "--name", "secretive", "--kind", "training", *labels, "--json",
                   "--", "true", env=env)]
    job_id = json.loads([line for line in outputs[0].splitlines()
                         if line.startswith("{")][-1])["id"]
    outputs.append(cli("jobs", "--json", env=env))
    assert json.loads(cli("jobs", "--json", env=env))[0]["labels"]["team"] == "nlp"
    files = []
    for fmt in ("json", "csv", "html", "pdf"):
        path = tmp_path / f"report.{fmt}"
        outputs.append(cli("report", job_id, "-o", str(path), env=env))
        files.append(path)
    outputs.append(cli("report", "--all", "--format", "csv", env=env))
    outputs.append(cli("compare", "--json", env=env))
    outputs.append(cli("report", job_id, "--include-env", env=env))
    for text in outputs:
        assert SECRET not in text
    for path in files:
        assert path.stat().st_size > 0
        assert SECRET.encode() not in path.read_bytes()
    assert "[redacted]" in (tmp_path / "report.json").read_text()
    # The one way to keep them, for a report kept to oneself; the old flag says so.
    kept = cli("report", job_id, "--no-redact", env=env)
    assert kept.count(SECRET) == 4
    assert "--include-env is now --no-redact" in outputs[-1]

    monkeypatch.setenv("JOULESTAT_DB", db)
    for page in ("pages/job_detail.py", "pages/jobs.py"):
        at = AppTest.from_file(APP, default_timeout=60)
        at.query_params["job"] = job_id
        at.switch_page(page).run()
        assert not at.exception, [e.value for e in at.exception]
        shown = " ".join(str(e.value) for kind in ("markdown", "caption", "text", "subheader")
                         for e in getattr(at, kind))
        shown += " ".join(str(df.value.to_dict()) for df in at.dataframe)
        said = [e.value for kind in ("info", "warning", "error") for e in getattr(at, kind)]
        assert "team=nlp" in shown, (page, said)
        assert SECRET not in shown + " ".join(map(str, said))
