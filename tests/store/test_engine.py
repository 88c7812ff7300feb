"""What only SQLite shows of an engine: the pragmas every connection gets."""

from __future__ import annotations

from joulestat.store.engine import make_engine
from tests.helpers.stores import Store


def test_sqlite_connections_get_wal_busy_timeout_and_foreign_keys(sqlite_store: Store) -> None:
    engine = make_engine(sqlite_store.url, busy_timeout_s=1.5)
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 1500
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()
