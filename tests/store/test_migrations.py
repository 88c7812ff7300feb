"""The baseline migration (migrations/versions/0001_baseline.py), on SQLite and on
PostgreSQL: `joulestat db upgrade` on an empty store makes exactly the schema of
agent/store/schema.py, with each backend's keys and physical options as it declares
them; on PostgreSQL the raw tables are partitioned by day as the writers expect; down to
base drops everything and up again makes it anew; a store at a revision this code does
not know is refused and left as it is.

Expected tables, keys and options are read from the models' declaration (``METADATA``),
partition names and bounds from agent/store/maintenance.py, which the writers use: the
migration is self-contained and must agree with both. (`alembic check` and a check that
can fail: tests/store/test_schema.py.)"""

from __future__ import annotations

import time

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine

from joulestat.store import migrate
from joulestat.store.maintenance import (
    DAY_MS,
    DAYS_AHEAD,
    ensure_partitions,
    is_partitioned,
    list_partitions,
    partition_name,
)
from joulestat.store.schema import DAY_PARTITIONED, METADATA, PARTITION_SCHEMA
from tests.helpers.cli import invoke
from tests.helpers.store_jobs import (
    T0,
    TRAINER,
    count,
    downgrade,
    feed,
    make_job,
    writer_for,
)
from tests.helpers.store_revisions import NEWER
from tests.helpers.stores import Backend, Store, Stores

VERSION_TABLE = "alembic_version"


def drift(connection: Connection) -> list:
    """What Alembic's autogenerate finds between the database and the models."""
    return compare_metadata(MigrationContext.configure(connection, opts={
        "include_object": migrate.on_this_dialect(connection.dialect.name)}), METADATA)


def assert_the_models_schema(engine: Engine) -> None:
    """The database has the models' tables and nothing else, no drift, and on each
    backend the primary keys and (SQLite) WITHOUT ROWID the models declare for it."""
    with engine.connect() as connection:
        dialect = connection.dialect.name
        found = inspect(connection)
        assert set(found.get_table_names()) == set(METADATA.tables) | {VERSION_TABLE}
        assert drift(connection) == []
        for table in METADATA.sorted_tables:
            key = table.primary_key
            only_on = getattr(key, "_ddl_if", None)  # ddl_if(dialect=...) in schema.py
            wanted = [c.name for c in key.columns] if (
                only_on is None or only_on.dialect == dialect) else []
            assert found.get_pk_constraint(table.name)["constrained_columns"] == wanted, \
                table.name
            if dialect == "sqlite":
                sql = connection.exec_driver_sql(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                    (table.name,)).scalar_one()
                rowid = table.dialect_options["sqlite"]["with_rowid"]
                assert ("WITHOUT ROWID" in sql) == (rowid is False), table.name


def test_db_upgrade_on_an_empty_store_makes_the_models_schema(empty_store: Store) -> None:
    assert migrate.current_revision(empty_store.engine) is None
    done = invoke("db", "upgrade", "--db", empty_store.url)
    assert done.returncode == 0, done.stderr
    assert f"schema at revision {migrate.HEAD_REVISION} (head)" in done.stdout
    assert migrate.is_at_head(empty_store.engine)
    assert_the_models_schema(empty_store.engine)


def expected_partitions(table: str, now_s: float) -> list[tuple[str, int | None, int | None]]:
    """DEFAULT, then today's and the next DAYS_AHEAD days' partitions, as the writers
    name and bound them."""
    today = round(now_s * 1000) // DAY_MS
    return [(f"{table}_default", None, None)] + [
        (partition_name(table, day), day * DAY_MS, (day + 1) * DAY_MS)
        for day in range(today, today + DAYS_AHEAD + 1)]


def test_the_raw_tables_are_partitioned_by_day_on_postgresql(pg_stores: Stores) -> None:
    engine = pg_stores.new(migrated=False).engine
    before_s = time.time()
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    after_s = time.time()
    with engine.begin() as connection:
        assert is_partitioned(connection)
        for table, column in DAY_PARTITIONED.items():
            assert connection.execute(text(
                "SELECT pg_get_partkeydef(to_regclass(:t))"), {"t": table}
            ).scalar_one() == f"RANGE ({column})"
            found = [(p.name, p.lower_ms, p.upper_ms)
                     for p in list_partitions(connection, table)]
            # (Either side of a midnight the migration may have run across.)
            assert found in (expected_partitions(table, before_s),
                             expected_partitions(table, after_s)), table
            assert {str(s) for s in connection.execute(text(
                "SELECT n.nspname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE i.inhparent = to_regclass(:t)"), {"t": table}).scalars()} == {
                PARTITION_SCHEMA}
        # Every other table is a plain one.
        plain = connection.execute(text(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'p'")).scalars().all()
        assert sorted(plain) == sorted(DAY_PARTITIONED)
        # A writer starting now finds the days it keeps ahead already made.
        ensured = ensure_partitions(connection, after_s)
        assert (ensured.created, ensured.blocked, ensured.failed) == ([], [], None)


def test_down_to_base_drops_everything_and_up_again_makes_it_anew(empty_store: Store) -> None:
    engine = empty_store.engine
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    writer = writer_for(engine)
    writer.save_job(make_job("a", T0))
    feed(writer, T0, 120, ("a",), units={"tokens": 1.0})
    assert writer.flush() and writer.maintain(T0 + 300) is not None
    assert count(engine, "tick_energy") > 0 and count(engine, "job_minute_energy") > 0

    downgrade(engine, "base")
    with engine.connect() as connection:
        assert inspect(connection).get_table_names() == [VERSION_TABLE]
        if empty_store.backend is Backend.POSTGRESQL:  # the partitions went with them
            assert connection.execute(text(
                "SELECT count(*) FROM pg_namespace WHERE nspname = :s"),
                {"s": PARTITION_SCHEMA}).scalar_one() == 0

    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert_the_models_schema(engine)
    assert all(count(engine, table) == 0 for table in METADATA.tables)
    if empty_store.backend is Backend.POSTGRESQL:
        with engine.connect() as connection:
            assert is_partitioned(connection)
    writer = writer_for(engine)  # and a writer writes again
    writer.save_job(make_job("b", T0))
    feed(writer, T0, 60, ("b",))
    assert writer.flush()
    assert count(engine, "tick_energy") == 60 * 2  # two devices a tick
    with engine.connect() as connection:
        assert connection.execute(text("SELECT node FROM nodes")).scalars().all() == [
            TRAINER.node]


@pytest.mark.parametrize("command", [("db", "upgrade"), ("jobs",)])
def test_a_store_at_a_newer_revision_is_refused_and_left_as_it_is(
        store: Store, command: tuple[str, ...]) -> None:
    with store.engine.begin() as connection:
        connection.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = :v"), {"v": NEWER})
    assert migrate.schema_state(NEWER) is migrate.SchemaState.NEWER
    done = invoke(*command, "--db", store.url)
    assert done.returncode == 2, done.stdout
    assert NEWER in done.stderr and f"up to {migrate.HEAD_REVISION}" in done.stderr
    assert "upgrade joulestat" in done.stderr and "Traceback" not in done.stderr
    assert migrate.current_revision(store.engine) == NEWER
    with store.engine.connect() as connection:
        assert drift(connection) == []  # nothing changed
