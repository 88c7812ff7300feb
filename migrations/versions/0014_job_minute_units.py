"""Job unit counts per minute in a table of their own, keyed on SQLite only.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04

Why (issue 28): each maintain pass merged a job's unit rows behind its node's totals
boundary into one row a minute, in ``job_units`` itself. There every row stayed under
that table's key (job, node, t_end_ms, unit), which the raw rows need (a flush written
again after a lost acknowledgement must add nothing), and in its (node, t_end_ms) index.
On PostgreSQL with 50 running jobs that was 0.54 MiB per node-hour, kept for good: the
key index half empty, as every job appends in its middle. ``job_minute_units`` holds the
merged minutes instead, as ``job_minute_energy`` holds the job minutes (migration 0011):
written once by the pass that moves the boundary, read by job, so on PostgreSQL a plain
(job_id, node) index, which PostgreSQL deduplicates, and on SQLite the key that is the
table (WITHOUT ROWID). ``job_units`` keeps the raw rows after the boundary and imported
rows.

Upgrade creates the table and moves into it, in one transaction, every ``job_units`` row
at or before its node's totals boundary that ends on a minute (the merged ones; an
imported row at a bin's end that is not a minute's stays): about as long as copying
those rows. Every figure is the same after it; readers take a job's unit rows from both
tables. Downgrade moves them back, at their minute's end, and drops the table.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "job_minute_units"
KEY = ("job_id", "node", "minute_start_s", "unit")
# job_units rows merged by a maintain pass: at or before their node's totals boundary,
# at a minute's end. The one condition both the copy and the delete use.
_MERGED = ("EXISTS (SELECT 1 FROM nodes n WHERE n.node = job_units.node "
           "AND job_units.t_end_ms <= n.totals_until_ms AND job_units.t_end_ms % 60000 = 0)")


def upgrade() -> None:
    on_postgresql = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        TABLE,
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("minute_start_s", sa.BigInteger(), nullable=False),
        sa.Column("unit", sa.String(), nullable=False),
        sa.Column("count", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["node"], ["nodes.node"],
                                name=op.f("fk_job_minute_units_node_nodes")),
        *(() if on_postgresql else (sa.PrimaryKeyConstraint(*KEY, name=op.f(f"pk_{TABLE}")),)),
        sqlite_with_rowid=False,
    )
    if on_postgresql:
        op.create_index(op.f("ix_job_minute_units_job_id_node"), TABLE, ["job_id", "node"])
    op.execute(f"INSERT INTO {TABLE} (job_id, node, minute_start_s, unit, count) "
               "SELECT job_id, node, t_end_ms / 1000 - 60, unit, count FROM job_units "
               f"WHERE {_MERGED}")
    op.execute(f"DELETE FROM job_units WHERE {_MERGED}")


def downgrade() -> None:
    # Summed per key (PostgreSQL has none on this table), added into a job_units row
    # already at that minute's end (an import's) rather than refused: no count is lost.
    op.execute(
        "INSERT INTO job_units (job_id, node, t_end_ms, unit, count) "
        f"SELECT job_id, node, (minute_start_s + 60) * 1000, unit, sum(count) FROM {TABLE} "
        f"WHERE true GROUP BY {', '.join(KEY)} "
        "ON CONFLICT (job_id, node, t_end_ms, unit) "
        "DO UPDATE SET count = job_units.count + excluded.count")
    op.drop_table(TABLE)
