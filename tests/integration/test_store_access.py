"""Who may create and migrate a store, as a user meets it through the real CLI: readers
never create or migrate one, writers create only a new one (private to its owner), only
`joulestat db upgrade` migrates, and every refusal says what to do instead of a
traceback (docs/store.md, "Who creates and migrates the store")."""

from __future__ import annotations

import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest

from joulestat.store.migrate import HEAD_REVISION
from tests.helpers.agent_process import JOULESTAT, agent_env, free_port, running_agent

# Every command that only reads the store, with what it needs to get that far.
READERS = {
    "jobs": ["jobs"],
    "jobs --json": ["jobs", "--json"],
    "report": ["report", "--all", "--format", "csv"],
    "compare": ["compare", "--json"],
    "db current": ["db", "current"],
}
# ... and the one command that changes rows of a store it must neither create nor
# migrate: the same rule (an existing store at the head revision only).
NEVER_CREATE = {**READERS, "jobs delete": ["jobs", "delete", "abcd1234", "--yes"]}
OLDER = "0006"  # one migration behind the head
NEWER = "0099"  # a revision no joulestat of this version knows


def joulestat(*args: str, env: dict[str, str] | None = None, timeout_s: float = 120,
              umask: int = -1) -> subprocess.CompletedProcess:
    return subprocess.run([JOULESTAT, *args], env=env or agent_env(), capture_output=True,
                          text=True, timeout=timeout_s, umask=umask)


def revision_of(path: Path) -> list[str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        return [row[0] for row in connection.execute("SELECT version_num FROM alembic_version")]


def store_at(path: Path, revision: str) -> str:
    """A store made by `joulestat db upgrade --revision`, relabelled when the revision is
    one no script has (what a newer joulestat would have left)."""
    url = f"sqlite:///{path}"
    known = revision if revision <= HEAD_REVISION else HEAD_REVISION
    done = joulestat("db", "upgrade", "--db", url, "--revision", known)
    assert done.returncode == 0, done.stderr
    if known != revision:
        with sqlite3.connect(path) as connection:
            connection.execute("UPDATE alembic_version SET version_num = ?", (revision,))
    assert revision_of(path) == [revision]
    return url


def agent_argv(url: str, tmp_path: Path) -> list[str]:
    return ["agent", "--db", url, "--sysfs-root", str(tmp_path), "--nvml", "false",
            "--metrics-port", str(free_port()), "--api-port", str(free_port()),
            "--spool-dir", str(tmp_path / "spool")]


@pytest.mark.parametrize("reader", list(NEVER_CREATE))
def test_a_reader_on_a_missing_store_creates_nothing(tmp_path: Path, reader: str) -> None:
    missing = tmp_path / "typo.db"
    url = f"sqlite:///{missing}"
    done = joulestat(*NEVER_CREATE[reader], "--db", url)
    assert done.returncode == 2, done.stdout
    assert url in done.stderr and "no store there" in done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(tmp_path.iterdir()) == []  # no file, no -wal, no -shm

    # The default store (no --db) of a user who never ran the agent: no data dir either.
    env = agent_env(XDG_DATA_HOME=str(tmp_path / "xdg"))
    done = joulestat(*NEVER_CREATE[reader], env=env)
    assert done.returncode == 2
    assert str(tmp_path / "xdg" / "joulestat" / "joulestat.db") in done.stderr
    assert not (tmp_path / "xdg").exists()


def test_readers_and_the_agent_leave_an_older_store_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url = store_at(path, OLDER)
    for reader, argv in NEVER_CREATE.items():
        if reader == "db current":
            continue
        done = joulestat(*argv, "--db", url)
        assert done.returncode == 2, (reader, done.stdout)
        assert "joulestat db upgrade" in done.stderr, reader
        assert OLDER in done.stderr and HEAD_REVISION in done.stderr, reader
        assert revision_of(path) == [OLDER], reader

    done = joulestat("db", "current", "--db", url)
    assert done.returncode == 0, done.stderr
    assert f"schema at revision {OLDER} (head is {HEAD_REVISION}: run joulestat db upgrade)" \
        in done.stdout
    assert revision_of(path) == [OLDER]

    # The agent does not migrate an existing store either: that is the operator's step.
    done = joulestat(*agent_argv(url, tmp_path), timeout_s=60)
    assert done.returncode == 2, done.stderr
    assert "joulestat db upgrade" in done.stderr and "Traceback" not in done.stderr
    assert revision_of(path) == [OLDER]

    # Who may: db upgrade; then the readers read it.
    done = joulestat("db", "upgrade", "--db", url)
    assert done.returncode == 0, done.stderr
    assert revision_of(path) == [HEAD_REVISION]
    done = joulestat("jobs", "--json", "--db", url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_newer_store_is_named_with_the_revision_this_code_knows(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    url = store_at(path, NEWER)
    for argv in ([*READERS["jobs"], "--db", url], [*NEVER_CREATE["jobs delete"], "--db", url],
                 ["db", "upgrade", "--db", url], agent_argv(url, tmp_path)):
        done = joulestat(*argv, timeout_s=60)
        assert done.returncode == 2, (argv, done.stdout)
        assert NEWER in done.stderr and f"up to {HEAD_REVISION}" in done.stderr, argv
        assert "Traceback" not in done.stderr and "Can't locate" not in done.stderr, argv
        assert revision_of(path) == [NEWER]
    done = joulestat("db", "current", "--db", url)
    assert done.returncode == 0, done.stderr
    assert NEWER in done.stdout and f"up to {HEAD_REVISION}" in done.stdout


def test_a_config_file_that_is_not_utf8_is_a_one_line_error(tmp_path: Path) -> None:
    config = tmp_path / "joulestat.toml"
    config.write_bytes(b'db = "sqlite:////tmp/caf\xe9.db"\n')
    for argv in (["jobs"], ["db", "current"], ["agent"]):
        done = joulestat(*argv, "--config", str(config), timeout_s=60)
        assert done.returncode == 2, (argv, done.stdout)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert str(config) in lines[0] and "UTF-8" in lines[0] and "0xe9" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["joulestat.toml"]


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_store_is_private_under_umask_022(tmp_path: Path) -> None:
    """The agent's path (an embedded `joulestat run` writes through it) creates the
    default store: 0600 files in a 0700 data dir, though the umask would give 0644/0755."""
    env = agent_env(XDG_DATA_HOME=str(tmp_path / "xdg"), JOULESTAT_SYSFS_ROOT=str(tmp_path),
                    JOULESTAT_AGENT_URL="http://127.0.0.1:9", JOULESTAT_INTERVAL="0.2")
    done = joulestat("run", "--name", "private", "--", "true", env=env, umask=0o022)
    assert done.returncode == 0, done.stderr
    data = tmp_path / "xdg" / "joulestat"
    store = data / "joulestat.db"
    assert mode_of(data) == 0o700
    assert mode_of(store) == 0o600
    # SQLite gives its -wal and -shm the mode of the store (those that remain).
    for side in (data / "joulestat.db-wal", data / "joulestat.db-shm"):
        if side.exists():
            assert mode_of(side) == 0o600, side
    assert revision_of(store) == [HEAD_REVISION]
    done = joulestat("jobs", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert '"name": "private"' in done.stdout

    # db upgrade creating a store names its own file the same way.
    fresh = tmp_path / "fresh.db"
    done = joulestat("db", "upgrade", "--db", f"sqlite:///{fresh}", umask=0o022)
    assert done.returncode == 0, done.stderr
    assert mode_of(fresh) == 0o600


def test_the_agent_creates_a_new_store_once_and_says_so(tmp_path: Path) -> None:
    """The agent's log is true: it creates the schema of the store it made (0600), and a
    restart on that store, now at the head, creates and migrates nothing."""
    said = "creating the store's schema at"
    with running_agent(tmp_path, "--sysfs-root", str(tmp_path)) as agent:
        assert agent.stop() == 0
    assert agent.log().count(said) == 1
    assert mode_of(tmp_path / "agent.db") == 0o600
    with running_agent(tmp_path, "--sysfs-root", str(tmp_path)) as agent:
        assert agent.stop() == 0
    assert agent.log().count(said) == 1  # the log file is appended to: still one
    assert "migrat" not in agent.log()
    assert revision_of(tmp_path / "agent.db") == [HEAD_REVISION]
