"""What ``joulestat compare`` sends a real PostgreSQL server: a batch of jobs as one array
parameter, finding the figures SQLite finds. (Everything else about ``compare`` runs in
process on SQLite: tests/unit/cli/test_compare.py. This is a store scenario on the
session's one server, ``pg``; its natural home is the store tier, tests/store/.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import event

from joulestat.reports.compare.figures import figures_for, pick_jobs
from tests.helpers.compare_store import SETTINGS, T0, runs_store
from tests.helpers.pg import PostgresServer


@pytest.mark.postgres
def test_compare_on_postgresql_names_a_batch_of_jobs_in_one_parameter(tmp_path: Path,
                                                                     pg: PostgresServer) -> None:
    """On PostgreSQL the bulk reads pass a batch's job ids as one array (``= ANY``), not
    as a parameter per id, and find the same figures as SQLite's ``IN`` lists."""
    lite = runs_store(f"sqlite:///{tmp_path / 'runs-6.db'}", 6)
    expected = figures_for(lite, pick_jobs(lite).refs, SETTINGS, now_s=T0 + 6 * 3600)
    lite.dispose()
    engine = runs_store(pg.create_database("compare_any"), 6)
    sent: list[tuple[str, object]] = []

    def record(_conn: object, _cursor: object, statement: str, parameters: object,
               *_args: object) -> None:
        sent.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    found = figures_for(engine, pick_jobs(engine).refs, SETTINGS, now_s=T0 + 6 * 3600)
    event.remove(engine, "before_cursor_execute", record)
    engine.dispose()
    assert found == expected
    ids = [f"j-{i:03d}" for i in range(6)]
    with_ids = [(statement, dict(parameters)) for statement, parameters in sent
                if "j-000" in str(parameters)]
    assert with_ids, "no statement named the jobs"
    for statement, parameters in with_ids:
        assert "= ANY (" in statement
        assert not any(isinstance(v, str) and v.startswith("j-") for v in parameters.values())
        assert any(isinstance(v, list) and sorted(v) == ids for v in parameters.values())
