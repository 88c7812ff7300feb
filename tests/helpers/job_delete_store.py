"""Deleting jobs from a store on any database: what tests/store/test_job_delete.py reads
back (on SQLite, and on PostgreSQL with its daily partitions of the raw tables).

The store has what a real node leaves: raw ticks, minute rollups of pruned minutes,
settled job totals, unit counts, a job still running, and an imported job beside
measured ones. Expected figures come from the store before the delete and from the
attribution's own shares (:mod:`tests.helpers.store_jobs`), never from the code under
test.
"""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import text
from sqlalchemy.engine import Engine

from joulestat.store.import_writer import ImportedJob, ImportedNode
from joulestat.store.schema import METADATA
from tests.helpers.store_jobs import (
    T0,
)

WINDOW = (T0 - 3600.0, T0 + 7200.0)
TICKS = 600  # ten minutes of 1 s ticks


def tables_with_job_rows() -> dict[str, str]:
    """Every table of the schema that holds rows of a job, and its job column: whatever
    a later migration adds is checked too."""
    found = {name: "job_id" for name, table in METADATA.tables.items() if "job_id" in table.c}
    found["jobs"] = "id"
    return found


def rows_of(engine: Engine, job_id: str) -> dict[str, int]:
    with engine.connect() as connection:
        return {name: connection.execute(
                    text(f"SELECT count(*) FROM {name} WHERE {column} = :id"), {"id": job_id}
                ).scalar_one()
                for name, column in sorted(tables_with_job_rows().items())}


def counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        return {name: connection.execute(text(f"SELECT count(*) FROM {name}")).scalar_one()
                for name in sorted(METADATA.tables)}


def remainder_totals(engine: Engine, node: str) -> dict[str, float]:
    """The unattributed remainder's settled totals of ``node``, per component."""
    with engine.connect() as connection:
        return {str(c): float(d) + float(i) for c, d, i in connection.execute(text(
            "SELECT component, dynamic_j, idle_j FROM job_energy_totals "
            "WHERE job_id = '' AND node = :node"), {"node": node})}


def settled_totals(engine: Engine, job_id: str, node: str) -> dict[str, float]:
    with engine.connect() as connection:
        return {str(c): float(d) + float(i) for c, d, i in connection.execute(text(
            "SELECT component, dynamic_j, idle_j FROM job_energy_totals "
            "WHERE job_id = :id AND node = :node"), {"id": job_id, "node": node})}


def remainder_rows_sum(engine: Engine, node: str, until_ms: int) -> dict[str, float]:
    """What the remainder's totals should hold: its rows ending at or before the
    node's totals boundary, by the job tables' reading rule (migration 0009: minute
    rollups up to the totals boundary; a raw window ending by it would be a stray)."""
    sums: defaultdict[str, float] = defaultdict(float)
    with engine.connect() as connection:
        for component, joules in connection.execute(text(
                "SELECT component, sum(dynamic_j + idle_j) FROM job_energy "
                "WHERE job_id = '' AND node = :node AND t_end_ms <= :until "
                "GROUP BY component"), {"node": node, "until": until_ms}):
            sums[str(component)] += float(joules)
        for component, joules in connection.execute(text(
                "SELECT component, sum(dynamic_j + idle_j) FROM job_minute_energy "
                "WHERE job_id = '' AND node = :node AND (minute_start_s + 60) * 1000 <= :until "
                "GROUP BY component"), {"node": node, "until": until_ms}):
            sums[str(component)] += float(joules)
    return dict(sums)


def imported(job_id: str, node: str, started_s: float) -> ImportedJob:
    part = ImportedNode(node=node, instance_type="local", region="FR", started_s=started_s,
                        ended_s=started_s + 120.0, dynamic_j={"cpu": 300.0}, idle_j={},
                        units={"samples": 10.0}, source="import:codecarbon")
    return ImportedJob(id=job_id, name=f"name-{job_id}", kind="other", labels={},
                       origin="import:codecarbon", started_s=started_s, nodes=(part,))
