"""No secret is printed: credential-looking labels go through every command that shows a
job (``jobs``, ``report`` in every format, ``compare``) and the dashboard's pages, and
the secret shows in no output, log line or file (``report --no-redact`` is the one
documented way to keep labels as they are); the dashboard command's first line names its
store with the password hidden. The commands run in this process (tests/helpers/cli.py)
on a store written through the store API. A password-bearing store URL through the
commands that try to reach it, and labels given to ``joulestat run``:
tests/system/test_secrets.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from joulestat.core.records import JobRecord
from joulestat.store import migrate
from joulestat.store.engine import make_engine
from tests.helpers.cli import cli_env, invoke
from tests.helpers.compare_store import node, run_job
from tests.helpers.secret_labels import BAD_DB, LABELS, SECRET

APP = str(Path(__file__).resolve().parents[3] / "dashboard" / "app.py")
JOB_ID = "5ec7e70b1b0a4c2e9d3f6a8b0c1d2e3f"


def cli(*args: str, env: dict[str, str]) -> str:
    result = invoke(*args, env=env)
    return result.stdout + result.stderr


def secretive_store(db: str) -> None:
    """What ``joulestat run --name secretive --kind training --label ...`` leaves: one
    job whose labels are :data:`LABELS`, as given, with an hour of energy, ended an hour
    ago (the dashboard's jobs page shows the recent ones)."""
    engine = make_engine(db)
    migrate.upgrade(engine)
    started_s = time.time() - 7200
    run_job(engine, node("n1", "c6i.xlarge"),
            JobRecord(id=JOB_ID, name="secretive", kind="training", labels=dict(LABELS),
                      pids=frozenset({1}), started_s=started_s, origin="run",
                      ended_s=started_s + 3600),
            ticks=4, gpu_j=1_000.0)
    engine.dispose()


def test_the_dashboard_command_prints_no_store_password(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """The line it prints before handing over to Streamlit (whose exec is caught here:
    tests/helpers/dashboard_command.py)."""
    from tests.helpers.dashboard_command import run

    _args, env = run(["--db", BAD_DB, "--port", "8599"], monkeypatch)
    assert env["JOULESTAT_DB"] == BAD_DB  # Streamlit gets the real URL, in its environment
    first = capsys.readouterr().out.splitlines()[0]
    assert "u:***@127.0.0.1" in first and SECRET not in first


def test_credential_labels_are_redacted_everywhere(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    secretive_store(db)
    env = cli_env(JOULESTAT_DB=db, JOULESTAT_LOG_LEVEL="DEBUG")
    job_id = JOB_ID
    outputs = [cli("jobs", "--json", env=env)]
    assert json.loads(invoke("jobs", "--json", env=env).stdout)[0]["labels"]["team"] == "nlp"
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
