"""The store fixtures: a scenario written once runs on SQLite and on PostgreSQL.

A pytest plugin, registered in tests/conftest.py (``pytest_plugins``), so that there is
one definition of each fixture for every tier: the store tier (tests/store/) uses them
all, a system test that runs one scenario on both backends asks for ``store`` too.

Ask for ``store`` (migrated to head) or ``empty_store`` (no schema yet); both are
parametrized by ``backend``, so a test is written once and collected as
``test_x[sqlite]`` and ``test_x[postgresql]``. The PostgreSQL runs carry the
``postgres`` marker: ``make test-fast`` (``-m "not postgres"``) runs the SQLite half,
which the isolation check keeps free of processes and sockets (tests/helpers/isolation.py).
A scenario that only one backend can show (PostgreSQL's partitions, a server outage,
SQLite's file locks) asks for ``pg_store`` or ``sqlite_store`` instead, which say so in
the test's name.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from tests.helpers.stores import BACKENDS, Backend, Store, Stores, make_head_template


@pytest.fixture(scope="session")
def pg_template(pg) -> object:
    """The session's server, with the migrated database every test copies."""
    make_head_template(pg)
    return pg


def _stores(backend: Backend, request: pytest.FixtureRequest, tmp_path: Path) -> Stores:
    server = request.getfixturevalue("pg_template") if backend is Backend.POSTGRESQL else None
    return Stores(backend, tmp_path, server)


@pytest.fixture(params=BACKENDS)
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    """Makes this test's stores on its backend; disposes of them afterwards."""
    made = _stores(request.param, request, tmp_path)
    yield made
    made.close()


@pytest.fixture
def backend(stores: Stores) -> Backend:
    return stores.backend


@pytest.fixture
def store(stores: Stores) -> Store:
    """A store at the head revision, on each backend."""
    return stores.new()


@pytest.fixture
def engine(store: Store) -> Engine:
    """``store``'s engine, for a scenario that needs nothing else of it."""
    return store.engine


@pytest.fixture
def empty_store(stores: Stores) -> Store:
    """A database with no schema, on each backend (migration scenarios)."""
    return stores.new(migrated=False)


@pytest.fixture
def pg_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    made = _stores(Backend.POSTGRESQL, request, tmp_path)
    yield made
    made.close()


@pytest.fixture
def pg_store(pg_stores: Stores) -> Store:
    """A PostgreSQL store at head, for what only PostgreSQL has (partitions, a server
    to stop); marked ``postgres`` at collection."""
    return pg_stores.new()


@pytest.fixture
def sqlite_stores(tmp_path: Path) -> Iterator[Stores]:
    made = Stores(Backend.SQLITE, tmp_path)
    yield made
    made.close()


@pytest.fixture
def sqlite_store(sqlite_stores: Stores) -> Store:
    """A SQLite store at head, for what only SQLite has (its file, its locks)."""
    return sqlite_stores.new()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test on ``pg_store`` is a PostgreSQL test: marked so, as the parametrized runs."""
    for item in items:
        if {"pg_store", "pg_stores"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)
