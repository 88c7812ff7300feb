"""The job reference resolver (:mod:`joulestat.store.jobs`) on a SQLite store; the
scenario is :func:`tests.helpers.job_refs.check_resolver`, which
tests/integration/test_store_postgres.py runs unchanged against PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.job_refs import check_resolver
from tests.helpers.report_store import new_store


def test_resolver_on_sqlite(tmp_path: Path) -> None:
    engine = new_store(tmp_path / "refs.db")
    check_resolver(engine)
    engine.dispose()
