"""Job minutes on PostgreSQL: a plain (job_id, node) index instead of a five-column key.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03

Why (issue 28): on PostgreSQL with 50 running jobs, ``job_minute_energy`` grew 2.35 MiB
per node-hour, over half of it (1.20 MiB) its primary key index: the key (job, node,
minute, component, device) stored a second time, in pages that every job fills in the
middle of the index, and a page split there leaves both halves half empty. Its readers
all look rows up by job (a job's series, bounds and split; deleting or re-importing a
job by job and node), so a non-unique ``(job_id, node)`` index serves them, and
PostgreSQL deduplicates it: a job's rows on a node are one key with a list of row
addresses, 0.13 MiB per node-hour (benchmarks/store_growth.py). Uniqueness is kept by
who writes the table, not by an index (agent/store/schema.py says how).

SQLite keeps its key: the table is stored as its key there (WITHOUT ROWID), so the key
costs nothing extra; upgrade and downgrade do nothing on SQLite.

Downgrade (PostgreSQL) puts the key back. Rows that share a key, which nothing should
have written, are summed into one first, so the key can be made and no joule is lost.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "job_minute_energy"
KEY = ("job_id", "node", "minute_start_s", "component", "device")
INDEX = "ix_job_minute_energy_job_id_node"


def _on_postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    if not _on_postgresql():
        return
    op.drop_constraint(f"pk_{TABLE}", TABLE, type_="primary")
    op.create_index(INDEX, TABLE, ["job_id", "node"])


def downgrade() -> None:
    if not _on_postgresql():
        return
    key = ", ".join(KEY)
    shared = op.get_bind().exec_driver_sql(
        f"SELECT 1 FROM {TABLE} GROUP BY {key} HAVING count(*) > 1 LIMIT 1").first()
    if shared is not None:
        # Sum the rows sharing a key into one, keeping the table itself (its grants and
        # foreign key): the sums go aside, the table is emptied and refilled.
        op.execute(f"CREATE TEMPORARY TABLE {TABLE}_summed AS "
                   f"SELECT {key}, sum(dynamic_j) AS dynamic_j, sum(idle_j) AS idle_j "
                   f"FROM {TABLE} GROUP BY {key}")
        op.execute(f"DELETE FROM {TABLE}")
        op.execute(f"INSERT INTO {TABLE} ({key}, dynamic_j, idle_j) "
                   f"SELECT {key}, dynamic_j, idle_j FROM {TABLE}_summed")
        op.execute(f"DROP TABLE {TABLE}_summed")
    op.drop_index(INDEX, TABLE)
    op.create_primary_key(f"pk_{TABLE}", TABLE, list(KEY))
