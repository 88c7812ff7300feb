"""Who may create and migrate a store, as a user meets it through the real CLI: readers
never create or migrate one, only `joulestat db upgrade` migrates (or makes the schema of
a store that has none), a store newer than this code is named with the revision it
knows, and every refusal says what to do instead of a traceback (docs/store.md, "Who
creates and migrates the store"). The commands run in this process (tests/helpers/cli.py).
What the agent does with such stores, and the modes of a store a process creates:
tests/system/test_store_access.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulestat.store.migrate import HEAD_REVISION
from tests.helpers.cli import CliResult, cli_env, invoke
from tests.helpers.store_revisions import BASE, NEWER, OLDER, revision_of, store_at

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


def joulestat(*args: str, env: dict[str, str] | None = None) -> CliResult:
    return invoke(*args, env=env)


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
    env = cli_env(XDG_DATA_HOME=str(tmp_path / "xdg"))
    done = joulestat(*NEVER_CREATE[reader], env=env)
    assert done.returncode == 2
    assert str(tmp_path / "xdg" / "joulestat" / "joulestat.db") in done.stderr
    assert not (tmp_path / "xdg").exists()


def test_readers_leave_an_older_store_as_it_was(tmp_path: Path) -> None:
    """A store at a revision before the head (made by `joulestat db upgrade --revision
    0001`): every reader refuses it naming both revisions and `joulestat db upgrade`,
    `db current` says so, and only `db upgrade` migrates it. (The agent leaves it so
    too: tests/system/test_store_access.py.)"""
    path = tmp_path / "old.db"
    url = store_at(path, OLDER)
    for reader, argv in NEVER_CREATE.items():
        if reader == "db current":
            continue
        done = joulestat(*argv, "--db", url)
        assert done.returncode == 2, (reader, done.stdout)
        said = done.stderr.replace(url, "URL")  # the revisions, not digits of the path
        assert url in done.stderr and "joulestat db upgrade" in said, reader
        assert OLDER in said and HEAD_REVISION in said, reader
        assert "Traceback" not in said, reader
        assert revision_of(path) == [OLDER], reader

    done = joulestat("db", "current", "--db", url)
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.strip().splitlines()
    assert line.startswith(f"{url}: schema at revision {OLDER} "), line
    said = line.removeprefix(f"{url}: schema at revision {OLDER} ")
    assert HEAD_REVISION in said and "joulestat db upgrade" in said and "(head)" not in said
    assert revision_of(path) == [OLDER]

    # Who may: db upgrade; then the readers read it.
    done = joulestat("db", "upgrade", "--db", url)
    assert done.returncode == 0, done.stderr
    assert f"schema at revision {HEAD_REVISION} (head)" in done.stdout
    assert revision_of(path) == [HEAD_REVISION]
    done = joulestat("jobs", "--json", "--db", url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_readers_leave_a_store_without_schema_as_it_was(tmp_path: Path) -> None:
    """A store whose schema was never made (Alembic's version table, holding no
    revision): the readers leave it for `joulestat db upgrade`. (The agent creates its
    schema: tests/system/test_store_access.py.)"""
    path = tmp_path / "unmigrated.db"
    url = store_at(path, BASE)
    for reader, argv in NEVER_CREATE.items():
        if reader == "db current":
            continue
        done = joulestat(*argv, "--db", url)
        assert done.returncode == 2, (reader, done.stdout)
        assert "not a joulestat store" in done.stderr, reader
        assert "joulestat db upgrade" in done.stderr, reader
        assert revision_of(path) == [], reader

    done = joulestat("db", "current", "--db", url)
    assert done.returncode == 0, done.stderr
    assert "schema at revision none (empty database: run joulestat db upgrade)" in done.stdout
    assert revision_of(path) == []

    # Who may: db upgrade; then the readers read it.
    done = joulestat("db", "upgrade", "--db", url)
    assert done.returncode == 0, done.stderr
    assert revision_of(path) == [HEAD_REVISION]
    done = joulestat("jobs", "--json", "--db", url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_newer_store_is_named_with_the_revision_this_code_knows(tmp_path: Path) -> None:
    """(The agent names it so too: tests/system/test_store_access.py.)"""
    path = tmp_path / "new.db"
    url = store_at(path, NEWER)
    for argv in ([*READERS["jobs"], "--db", url], [*NEVER_CREATE["jobs delete"], "--db", url],
                 ["db", "upgrade", "--db", url]):
        done = joulestat(*argv)
        assert done.returncode == 2, (argv, done.stdout)
        assert NEWER in done.stderr and f"up to {HEAD_REVISION}" in done.stderr, argv
        assert "Traceback" not in done.stderr and "Can't locate" not in done.stderr, argv
        assert revision_of(path) == [NEWER]
    done = joulestat("db", "current", "--db", url)
    assert done.returncode == 0, done.stderr
    assert NEWER in done.stdout and f"up to {HEAD_REVISION}" in done.stdout


def test_a_config_file_that_is_not_utf8_is_a_one_line_error(tmp_path: Path) -> None:
    """(The agent's one line: tests/system/test_store_access.py.)"""
    config = tmp_path / "joulestat.toml"
    config.write_bytes(b'db = "sqlite:////tmp/caf\xe9.db"\n')
    for argv in (["jobs"], ["db", "current"]):
        done = joulestat(*argv, "--config", str(config))
        assert done.returncode == 2, (argv, done.stdout)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert str(config) in lines[0] and "UTF-8" in lines[0] and "0xe9" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["joulestat.toml"]
