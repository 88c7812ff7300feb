"""Fixtures the unit tests share: a store on SQLite in ``tmp_path`` (new, or migrated
and filled for the reports) and an empty job registry. Fixtures of one folder live in
that folder's conftest.py; the job API on a port and the fake Kubernetes pod list are
system fixtures (tests/system/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from joulestat.attribution.registry import JobRegistry
from tests.helpers.report_store import Totals, filled_store
from tests.helpers.store_rows import migrated_engine


@pytest.fixture()
def db_url(tmp_path: Path) -> str:
    """The URL of a new SQLite store under ``tmp_path`` (not created yet)."""
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture()
def engine(db_url: str) -> Iterator[Engine]:
    """An engine on :func:`db_url`'s store, migrated to head."""
    with migrated_engine(db_url) as engine:
        yield engine


@pytest.fixture()
def filled(tmp_path: Path) -> tuple[Engine, Totals]:
    """The report tests' store: :func:`tests.helpers.report_store.filled_store`."""
    return filled_store(tmp_path)


@pytest.fixture()
def registry() -> JobRegistry:
    return JobRegistry()
