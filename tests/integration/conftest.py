"""Fixtures the integration tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.pg import PostgresServer, running_postgres


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for one test module (see tests/helpers/pg.py)."""
    with running_postgres() as server:
        yield server
