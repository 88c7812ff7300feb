"""`joulestat demo` with a store it cannot open, as a user meets it: one error line naming
the store (password hidden) and exit 2, before any workload starts (here, in process, a
started worker would also fail the test: this tier starts no process). The command runs
in this process (tests/helpers/cli.py); a PostgreSQL store that refuses the connection,
and a worker whose demo went away: tests/system/test_demo_store_errors.py."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.cli import cli_env, invoke


def test_a_store_the_demo_cannot_open_stops_it_with_one_line(tmp_path: Path) -> None:
    env = cli_env(JOULESTAT_AGENT_URL="http://127.0.0.1:9",  # nothing answers there
                  XDG_DATA_HOME=str(tmp_path / "data"))
    result = invoke("demo", "--seconds", "1", "--backend", "numpy",
                    "--db", "nosuchdb://bob:s3cret@db.example/demo", env=env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("joulestat demo: --db ") and "cannot open the store" in lines[0]
    assert "bob:***@" in lines[0] and "s3cret" not in result.stderr + result.stdout
    assert result.stdout == ""  # no workload started, no comparison printed
