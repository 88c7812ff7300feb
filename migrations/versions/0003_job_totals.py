"""Job totals: per (job, node) sums of the settled past, so job lists read one row a job.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29

Adds ``nodes.totals_until_ms`` and the tables ``job_energy_totals`` (per job, node and
component) and ``job_unit_totals`` (per job, node and unit); see
agent/store/schema.py. Backfilled from what is final already: for each node with a
prune boundary, the job minute rollups and (compacted) unit rows up to it, and the
boundary becomes ``totals_until_ms``. The agent's next maintain pass advances it over
the raw rows after that; until then queries read those raw rows, so figures are the
same before and after the upgrade.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_ID = sa.String(length=128)


def _node_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["node"], ["nodes.node"], name=f"fk_{table}_node_nodes")


def upgrade() -> None:
    op.add_column("nodes", sa.Column("totals_until_ms", sa.BigInteger(), nullable=True))
    op.create_table(
        "job_energy_totals",
        sa.Column("job_id", JOB_ID, nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("component", sa.String(), nullable=False),
        sa.Column("dynamic_j", sa.Double(), nullable=False),
        sa.Column("idle_j", sa.Double(), nullable=False),
        _node_fk("job_energy_totals"),
        sa.PrimaryKeyConstraint("job_id", "node", "component", name="pk_job_energy_totals"),
    )
    op.create_table(
        "job_unit_totals",
        sa.Column("job_id", JOB_ID, nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("unit", sa.String(), nullable=False),
        sa.Column("count", sa.Double(), nullable=False),
        _node_fk("job_unit_totals"),
        sa.PrimaryKeyConstraint("job_id", "node", "unit", name="pk_job_unit_totals"),
    )
    op.execute("UPDATE nodes SET totals_until_ms = raw_pruned_until_ms")
    # A minute m holds the rows ending in (m, m + 60 s]: it is settled when its end is.
    op.execute(
        "INSERT INTO job_energy_totals (job_id, node, component, dynamic_j, idle_j) "
        "SELECT m.job_id, m.node, m.component, sum(m.dynamic_j), sum(m.idle_j) "
        "FROM job_minute_energy m JOIN nodes n ON n.node = m.node "
        "WHERE n.totals_until_ms IS NOT NULL "
        "AND m.minute_start_s * 1000 + 60000 <= n.totals_until_ms "
        "GROUP BY m.job_id, m.node, m.component"
    )
    op.execute(
        "INSERT INTO job_unit_totals (job_id, node, unit, count) "
        "SELECT u.job_id, u.node, u.unit, sum(u.count) "
        "FROM job_units u JOIN nodes n ON n.node = u.node "
        "WHERE n.totals_until_ms IS NOT NULL AND u.t_end_ms <= n.totals_until_ms "
        "GROUP BY u.job_id, u.node, u.unit"
    )


def downgrade() -> None:
    op.drop_table("job_unit_totals")
    op.drop_table("job_energy_totals")
    # Plain ALTER TABLE (SQLite >= 3.35 drops a column in place): a batch rebuild of
    # nodes would trip the foreign keys of every table that refers to it.
    op.drop_column("nodes", "totals_until_ms")
