"""``joulestat dashboard``: what it hands to Streamlit (the real start is in
tests/integration/test_dashboard_browser.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from joulestat.cli import dashboard
from joulestat.cli import main as cli
from tests.helpers.dashboard_command import run


def test_starts_streamlit_on_the_app_read_only_with_the_url_in_the_environment(
        monkeypatch, capsys):
    monkeypatch.delenv("JOULESTAT_DB", raising=False)
    url = "postgresql+psycopg://reader:s3cret@db.internal/joulestat"
    args, env = run(["--db", url, "--port", "8642"], monkeypatch)
    assert args[:4] == [sys.executable, "-m", "streamlit", "run"]
    assert Path(args[4]) == Path(dashboard.__file__).resolve().parents[2] / "dashboard" / (
        "app.py")
    flags = dict(zip(args[5::2], args[6::2], strict=True))
    assert flags["--server.address"] == "127.0.0.1"
    assert flags["--server.port"] == "8642"
    assert flags["--server.headless"] == "true"
    assert flags["--browser.gatherUsageStats"] == "false"
    assert env["JOULESTAT_DB"] == url
    assert all("s3cret" not in a for a in args)  # never on the command line (ps)
    out = capsys.readouterr().out
    assert "http://127.0.0.1:8642" in out and "read-only" in out and "s3cret" not in out


def test_db_comes_from_the_environment_and_host_is_configurable(monkeypatch, tmp_path):
    url = f"sqlite:///{tmp_path / 'j.db'}"
    monkeypatch.setenv("JOULESTAT_DB", url)
    args, env = run(["--host", "0.0.0.0"], monkeypatch)
    flags = dict(zip(args[5::2], args[6::2], strict=True))
    assert flags["--server.address"] == "0.0.0.0"
    assert flags["--server.port"] == str(dashboard.DEFAULT_PORT)
    assert env["JOULESTAT_DB"] == url


@pytest.mark.parametrize("port", ["0", "70000", "http"])
def test_bad_port_is_refused(port, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["dashboard", "--port", port])
    assert stop.value.code == 2
    assert "port" in capsys.readouterr().err
