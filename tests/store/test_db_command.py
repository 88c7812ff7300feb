"""`joulestat db` and the readers' refusal, on SQLite and on PostgreSQL, through the CLI's
own entry point: `db upgrade` makes or migrates a store and `db current` says its
revision; `joulestat jobs` (and `jobs delete`) on a database without joulestat's schema
or at a revision before the head (the baseline, ``0001``) stops with a message naming
`joulestat db upgrade`, and leaves the database as it was (on a shared store a reader's
migration would change it under agents still running the old code)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from joulestat.core.redact import redact_url
from joulestat.store import migrate
from tests.helpers.cli import cli_env, invoke
from tests.helpers.store_revisions import OLDER
from tests.helpers.stores import Backend, Store


def test_db_upgrade_and_current(empty_store: Store, tmp_path: Path) -> None:
    url = empty_store.url
    env = cli_env(XDG_DATA_HOME=str(tmp_path / "xdg"))
    done = invoke("db", "upgrade", "--db", url, env=env)
    assert done.returncode == 0, done.stderr
    assert f"schema at revision {migrate.HEAD_REVISION} (head)" in done.stdout
    assert migrate.is_at_head(empty_store.engine)

    done = invoke("db", "current", "--db", url, env=env)
    assert done.returncode == 0, done.stderr
    assert f"schema at revision {migrate.HEAD_REVISION} (head)" in done.stdout
    if empty_store.backend is Backend.SQLITE:  # the URL as given (no password to hide)
        assert done.stdout.startswith(f"{url}: ")


def test_db_current_on_the_default_store_that_is_not_there_makes_nothing(
        tmp_path: Path) -> None:
    env = cli_env(XDG_DATA_HOME=str(tmp_path / "xdg"))
    done = invoke("db", "current", env=env)
    assert done.returncode == 2
    assert "xdg/joulestat/joulestat.db" in done.stderr and "no store there" in done.stderr
    assert not (tmp_path / "xdg").exists()
    for bad in ("nonsense", "mysql://h/db"):
        done = invoke("db", "upgrade", "--db", bad, env=env)
        assert done.returncode == 2 and "--db" in done.stderr, done.stderr


def test_readers_never_create_or_migrate_a_store(empty_store: Store) -> None:
    url = empty_store.url
    jobs = ("jobs", "--db", url)
    delete = ("jobs", "delete", "abcd1234", "--yes", "--db", url)
    for command in (jobs, delete):
        done = invoke(*command)
        assert done.returncode == 2, done.stdout
        assert "not a joulestat store" in done.stderr and "joulestat db upgrade" in done.stderr
    engine = empty_store.engine
    assert migrate.current_revision(engine) is None
    with engine.connect() as connection:
        tables = connection.execute(text(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
            if empty_store.backend is Backend.SQLITE else
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        )).scalar()
    assert tables == 0
    # Alembic's version table holding no revision (`db upgrade --revision base`, or a
    # store migrated down to base) is no joulestat store either.
    assert migrate.upgrade(engine, "base") is None
    for command in (jobs, delete):
        done = invoke(*command)
        assert done.returncode == 2, done.stdout
        assert "not a joulestat store" in done.stderr and "joulestat db upgrade" in done.stderr
    assert migrate.current_revision(engine) is None

    # A store a revision behind the head, as `joulestat db upgrade --revision` leaves it:
    # refused, naming both revisions and who may migrate it; left at its revision.
    done = invoke("db", "upgrade", "--db", url, "--revision", OLDER)
    assert done.returncode == 0, done.stderr
    assert migrate.current_revision(engine) == OLDER != migrate.HEAD_REVISION
    shown = redact_url(url)
    for command in (jobs, delete):
        done = invoke(*command)
        assert done.returncode == 2, done.stdout
        assert shown in done.stderr, done.stderr
        said = done.stderr.replace(shown, "URL")  # the revisions, not digits of the URL
        assert "joulestat db upgrade" in said, done.stderr
        assert OLDER in said and migrate.HEAD_REVISION in said, done.stderr
    assert migrate.current_revision(engine) == OLDER
    done = invoke("db", "current", "--db", url)
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.strip().splitlines()
    assert line.startswith(f"{shown}: schema at revision {OLDER} "), line
    said = line.removeprefix(f"{shown}: schema at revision {OLDER} ")
    assert migrate.HEAD_REVISION in said and "joulestat db upgrade" in said, line
    assert "(head)" not in said, line
    assert migrate.current_revision(engine) == OLDER

    # Who may: db upgrade; then the readers read it.
    done = invoke("db", "upgrade", "--db", url)
    assert done.returncode == 0, done.stderr
    assert f"schema at revision {migrate.HEAD_REVISION} (head)" in done.stdout
    assert migrate.is_at_head(engine)
    done = invoke("jobs", "--json", "--db", url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
