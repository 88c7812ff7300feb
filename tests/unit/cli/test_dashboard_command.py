"""``joulestat dashboard``: what it hands to Streamlit (the real start is in
tests/system/test_dashboard_browser.py)."""

from __future__ import annotations

import json
import os
import socket
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
    # resolved: a strict editable install (the Makefile's) runs it through a link
    assert Path(args[4]).resolve() == Path(dashboard.__file__).resolve().parents[2] / (
        "dashboard") / "app.py"
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


def test_host_and_port_come_from_the_environment_and_flags_win(monkeypatch, tmp_path):
    """JOULESTAT_DASHBOARD_HOST and JOULESTAT_DASHBOARD_PORT, as --help names them."""
    monkeypatch.setenv("JOULESTAT_DB", f"sqlite:///{tmp_path / 'j.db'}")
    monkeypatch.setenv("JOULESTAT_DASHBOARD_HOST", "0.0.0.0")
    monkeypatch.setenv("JOULESTAT_DASHBOARD_PORT", "8650")
    args, _env = run([], monkeypatch)
    flags = dict(zip(args[5::2], args[6::2], strict=True))
    assert (flags["--server.address"], flags["--server.port"]) == ("0.0.0.0", "8650")
    args, _env = run(["--port", "8651", "--host", "127.0.0.1"], monkeypatch)
    flags = dict(zip(args[5::2], args[6::2], strict=True))
    assert (flags["--server.address"], flags["--server.port"]) == ("127.0.0.1", "8651")


def test_help_names_every_options_environment_variable(capsys):
    with pytest.raises(SystemExit):
        cli.main(["dashboard", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for env in ("JOULESTAT_DASHBOARD_HOST", "JOULESTAT_DASHBOARD_PORT", "JOULESTAT_CONFIG",
                "JOULESTAT_DB", "JOULESTAT_LOG_LEVEL", "JOULESTAT_PRICES"):
        assert f"env {env}" in out, env


def test_a_bad_port_in_the_environment_is_named(monkeypatch, capsys):
    monkeypatch.setenv("JOULESTAT_DASHBOARD_PORT", "http")
    assert cli.main(["dashboard"]) != 0
    assert "JOULESTAT_DASHBOARD_PORT" in capsys.readouterr().err


def test_it_announces_where_it_listens_for_the_demo(monkeypatch, tmp_path):
    """``<data dir>/dashboard.json``: what ``joulestat demo`` reads to print the URL of
    the dashboard that runs; the store's password is not in it."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    url = "postgresql+psycopg://reader:s3cret@db.internal/joulestat"
    run(["--db", url, "--port", "8652"], monkeypatch)
    record = json.loads((tmp_path / "joulestat" / "dashboard.json").read_text())
    assert record["url"] == "http://127.0.0.1:8652" and record["port"] == 8652
    assert record["pid"] == os.getpid() and "s3cret" not in json.dumps(record)
    # Nothing listens on 8652: the announcement is not taken for a running one. (The
    # port is asked through a stand-in for the connect, so no socket is opened here.)
    asked: list[tuple[str, int]] = []

    def connect(address: tuple[str, int], timeout: float) -> socket.socket:
        asked.append(address)
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(dashboard.socket, "create_connection", connect)
    assert dashboard.running_dashboard() is None
    assert asked == [("127.0.0.1", 8652)]


@pytest.mark.parametrize("port", ["0", "70000", "http"])
def test_bad_port_is_refused(port, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["dashboard", "--port", port])
    assert stop.value.code == 2
    assert "port" in capsys.readouterr().err
