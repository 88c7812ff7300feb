"""A multi-model job's energy split among its models, read from a real PostgreSQL
(the SQLite run of the same scenario is tests/unit/test_model_split.py)."""

from __future__ import annotations

import itertools

import pytest

from tests.helpers.model_split_store import check_split_by_busy_time_and_after_rollup
from tests.helpers.pg import PostgresServer
from tests.helpers.store_rows import migrated_engine

pytestmark = pytest.mark.postgres
_names = itertools.count()


def test_two_models_split_by_busy_time_on_postgresql(pg: PostgresServer) -> None:
    with migrated_engine(pg.create_database(f"joulestat_split_{next(_names)}")) as engine:
        check_split_by_busy_time_and_after_rollup(engine)
