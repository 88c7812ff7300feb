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


@pytest.fixture
def mlflow_file_store(monkeypatch):
    """MLflow 3 refuses its local file store unless told (it is in maintenance mode);
    the integration tests log to one, as issue 25 asks, and read it back here."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
