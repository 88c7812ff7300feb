"""Stores for the store tier (tests/store/): one scenario, written once, run on SQLite and
on PostgreSQL.

A test asks for ``store`` (a store migrated to head) or ``empty_store`` (a database with
no schema, for migration scenarios) and gets one per backend; the fixtures live in
tests/helpers/store_fixtures.py. On PostgreSQL every test gets a database of its own, copied from
a template migrated once per session (``CREATE DATABASE ... TEMPLATE``: milliseconds,
where migrating costs a second), on the one server the session runs (tests/helpers/pg.py);
on SQLite a file under the test's ``tmp_path``. Every engine a test opens through
:meth:`Stores.open` is disposed of when the test ends, and its PostgreSQL databases are
dropped, so no test calls ``engine.dispose()`` by hand.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from joulestat.store import migrate
from joulestat.store.engine import make_engine
from tests.helpers.pg import PostgresServer


class Backend(StrEnum):
    SQLITE = "sqlite"
    POSTGRESQL = "postgresql"


HEAD_TEMPLATE = "joulestat_head_template"

# A test's backend: its ``store``/``empty_store`` (tests/helpers/store_fixtures.py) or a module's
# shared store are parametrized by these; the PostgreSQL runs are marked ``postgres``.
BACKENDS = [
    pytest.param(Backend.SQLITE, id="sqlite"),
    pytest.param(Backend.POSTGRESQL, id="postgresql", marks=pytest.mark.postgres),
]
_names = itertools.count()


@dataclass
class Store:
    """One store of a test: its URL and an engine on it (disposed of by the fixture)."""

    backend: Backend
    url: str
    engine: Engine
    stores: Stores

    @property
    def server(self) -> PostgresServer:
        """The PostgreSQL server (a scenario that stops and restarts it)."""
        assert self.stores.server is not None, "only the postgresql runs have a server"
        return self.stores.server

    def open(self) -> Engine:
        """Another engine on this store (a second agent, a reader beside a writer)."""
        return self.stores.open(self.url)


@dataclass
class Stores:
    """Makes a test's stores on its backend and cleans up after it."""

    backend: Backend
    folder: Path
    server: PostgresServer | None = None
    engines: list[Engine] = field(default_factory=list)
    databases: list[str] = field(default_factory=list)

    def new(self, migrated: bool = True) -> Store:
        """A new store: at head when ``migrated``, else an empty database."""
        url = self.new_url(migrated)
        return Store(self.backend, url, self.open(url), self)

    def new_url(self, migrated: bool = True) -> str:
        """The URL of a new store (at head when ``migrated``), no engine opened."""
        name = f"joulestat_{next(_names)}"
        if self.server is None:
            path = self.folder / (name + ".db")
            path.touch()  # an empty database, as a new PostgreSQL one is
            url = f"sqlite:///{path}"
            if migrated:
                migrate.upgrade(url)
            return url
        url = self.server.create_database(name, HEAD_TEMPLATE if migrated else None)
        self.databases.append(url.rsplit("/", 1)[1])
        return url

    def open(self, url: str) -> Engine:
        engine = make_engine(url)
        self.engines.append(engine)
        return engine

    def close(self) -> None:
        for engine in self.engines:
            engine.dispose()
        if self.server is not None:
            for name in self.databases:
                self.server.drop_database(name)


def make_head_template(server: PostgresServer) -> None:
    """The database every PostgreSQL store test copies: migrated to head once."""
    url = server.create_database(HEAD_TEMPLATE, exact=True)
    migrate.upgrade(url)


@contextlib.contextmanager
def refused_inserts(engine: Engine, table: str) -> Iterator[None]:
    """Every insert into ``table`` fails while inside (a trigger raising), on either
    backend: a flush that fails part-way, as a store refusing rows makes it."""
    if engine.dialect.name == "sqlite":
        install = [f"CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} "
                   "BEGIN SELECT RAISE(ABORT, 'refused by test'); END"]
        remove = [f"DROP TRIGGER refuse_{table}"]
    else:
        install = ["CREATE FUNCTION refuse_by_test() RETURNS trigger LANGUAGE plpgsql AS "
                   "$$ BEGIN RAISE EXCEPTION 'refused by test'; END $$",
                   f"CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} "
                   "FOR EACH ROW EXECUTE FUNCTION refuse_by_test()"]
        remove = [f"DROP TRIGGER refuse_{table} ON {table}", "DROP FUNCTION refuse_by_test()"]
    with engine.begin() as connection:
        for statement in install:
            connection.exec_driver_sql(statement)
    try:
        yield
    finally:
        with engine.begin() as connection:
            for statement in remove:
                connection.exec_driver_sql(statement)


def module_store_url(request: pytest.FixtureRequest, folder: Path, name: str) -> str:
    """A new store at head for a module-scoped fixture parametrized by :data:`BACKENDS`
    (a costly store filled once and only read): a SQLite file in ``folder`` or a database
    of the session's PostgreSQL server (left to the server's end)."""
    if request.param is Backend.POSTGRESQL:
        return request.getfixturevalue("pg_template").create_database(name, HEAD_TEMPLATE)
    url = f"sqlite:///{folder / (name + '.db')}"
    migrate.upgrade(url)
    return url

