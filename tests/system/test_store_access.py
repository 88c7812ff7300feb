"""Who may create and migrate a store, where a process is what is tested: the agent
never migrates an older store nor opens a newer one, and says so in one line (as it
does for a config file that is not UTF-8); a store a process creates is private to its
owner whatever the umask it inherits (0600 files, a 0700 data dir); and the agent
creates a new store's schema once and says so (docs/store.md, "Who creates and migrates
the store"). What the other commands do with such stores runs in process:
tests/unit/cli/test_store_access.py."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

from joulestat.store.migrate import HEAD_REVISION
from tests.helpers.agent_process import JOULESTAT, agent_env, free_port, running_agent
from tests.helpers.cli import cli_env, invoke
from tests.helpers.store_revisions import NEWER, OLDER, revision_of, store_at


def joulestat(*args: str, env: dict[str, str] | None = None, timeout_s: float = 120,
              umask: int = -1) -> subprocess.CompletedProcess:
    return subprocess.run([JOULESTAT, *args], env=env or agent_env(), capture_output=True,
                          text=True, timeout=timeout_s, umask=umask)


def agent_argv(url: str, tmp_path: Path) -> list[str]:
    return ["agent", "--db", url, "--sysfs-root", str(tmp_path), "--nvml", "false",
            "--metrics-port", str(free_port()), "--api-port", str(free_port()),
            "--spool-dir", str(tmp_path / "spool")]


def test_the_agent_leaves_an_older_store_as_it_was(tmp_path: Path) -> None:
    """The agent does not migrate an existing store: that is the operator's step. It
    stops, the store still at its revision, its error one line (after the log of what it
    found on the node) naming both revisions and `joulestat db upgrade`. (The readers
    leave it so too: tests/unit/cli/test_store_access.py.)"""
    path = tmp_path / "old.db"
    url = store_at(path, OLDER)
    done = joulestat(*agent_argv(url, tmp_path), timeout_s=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    [error] = [line for line in done.stderr.splitlines()
               if line.startswith("joulestat agent:")]
    assert done.stderr.strip().splitlines()[-1] == error, done.stderr
    said = error.replace(url, "URL")  # the revisions, not digits of the path
    assert url in error and "joulestat db upgrade" in said, done.stderr
    assert OLDER in said and HEAD_REVISION in said, done.stderr
    assert revision_of(path) == [OLDER]


def test_the_agent_names_a_newer_store_with_the_revision_this_code_knows(tmp_path: Path
                                                                        ) -> None:
    path = tmp_path / "new.db"
    url = store_at(path, NEWER)
    argv = agent_argv(url, tmp_path)
    done = joulestat(*argv, timeout_s=60)
    assert done.returncode == 2, (argv, done.stdout)
    assert NEWER in done.stderr and f"up to {HEAD_REVISION}" in done.stderr, argv
    assert "Traceback" not in done.stderr and "Can't locate" not in done.stderr, argv
    assert revision_of(path) == [NEWER]


def test_the_agent_says_a_config_file_is_not_utf8_in_one_line(tmp_path: Path) -> None:
    """A process: were the file read wrongly, the agent would start and run (in a test's
    own process it could not be stopped)."""
    config = tmp_path / "joulestat.toml"
    config.write_bytes(b'db = "sqlite:////tmp/caf\xe9.db"\n')
    done = joulestat("agent", "--config", str(config), timeout_s=60)
    assert done.returncode == 2, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(config) in lines[0] and "UTF-8" in lines[0] and "0xe9" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["joulestat.toml"]


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_store_is_private_under_umask_022(tmp_path: Path) -> None:
    """The agent's path (an embedded `joulestat run` writes through it) creates the
    default store: 0600 files in a 0700 data dir, though the umask the process inherits
    would give 0644/0755."""
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
    listed = invoke("jobs", "--json", env=cli_env(XDG_DATA_HOME=str(tmp_path / "xdg")))
    assert listed.returncode == 0, listed.stderr
    assert '"name": "private"' in listed.stdout

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
