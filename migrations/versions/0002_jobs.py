"""Jobs: one row per job, its nodes, per-tick shares, minute rollups, units, checkpoints.

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-15

Only new tables, so existing tick rows are untouched and the upgrade is quick on a
populated database. Written by hand so constraint and index names follow the naming
convention in agent/store/schema.py; a test compares the migrated schema with it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_ID = sa.String(length=128)


def _node_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["node"], ["nodes.node"], name=f"fk_{table}_node_nodes")


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", JOB_ID, nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("labels", sa.String(), nullable=False),
        sa.Column("origin", sa.String(), nullable=False),
        sa.Column("created_s", sa.Double(), nullable=False),
        sa.Column("ended_s", sa.Double(), nullable=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
    )
    op.create_table(
        "job_nodes",
        sa.Column("job_id", JOB_ID, nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("instance_type", sa.String(), nullable=False),
        sa.Column("region", sa.String(), nullable=False),
        sa.Column("started_s", sa.Double(), nullable=False),
        sa.Column("ended_s", sa.Double(), nullable=True),
        sa.Column("pids", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_job_nodes_job_id_jobs"),
        _node_fk("job_nodes"),
        sa.PrimaryKeyConstraint("job_id", "node", name="pk_job_nodes"),
    )
    op.create_table(
        "job_energy",
        sa.Column("job_id", JOB_ID, nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("t_end_ms", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("component", sa.String(), nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("t_start_ms", sa.BigInteger(), nullable=False),
        sa.Column("dynamic_j", sa.Double(), nullable=False),
        sa.Column("idle_j", sa.Double(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        _node_fk("job_energy"),
        sa.PrimaryKeyConstraint(
            "job_id", "node", "t_end_ms", "component", "device", name="pk_job_energy"
        ),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_job_energy_node_t_end_ms", "job_energy", ["node", "t_end_ms"])
    op.create_table(
        "job_minute_energy",
        sa.Column("job_id", JOB_ID, nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("minute_start_s", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("component", sa.String(), nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("dynamic_j", sa.Double(), nullable=False),
        sa.Column("idle_j", sa.Double(), nullable=False),
        _node_fk("job_minute_energy"),
        sa.PrimaryKeyConstraint(
            "job_id", "node", "minute_start_s", "component", "device",
            name="pk_job_minute_energy",
        ),
        sqlite_with_rowid=False,
    )
    op.create_index(
        "ix_job_minute_energy_node_minute_start_s", "job_minute_energy",
        ["node", "minute_start_s"],
    )
    op.create_table(
        "job_units",
        sa.Column("job_id", JOB_ID, nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("t_end_ms", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("unit", sa.String(), nullable=False),
        sa.Column("count", sa.Double(), nullable=False),
        _node_fk("job_units"),
        sa.PrimaryKeyConstraint("job_id", "node", "t_end_ms", "unit", name="pk_job_units"),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_job_units_node_t_end_ms", "job_units", ["node", "t_end_ms"])
    op.create_table(
        "node_checkpoints",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("saved_s", sa.Double(), nullable=False),
        sa.Column("boot_id", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        _node_fk("node_checkpoints"),
        sa.PrimaryKeyConstraint("node", name="pk_node_checkpoints"),
    )


def downgrade() -> None:
    op.drop_table("node_checkpoints")
    op.drop_index("ix_job_units_node_t_end_ms", table_name="job_units")
    op.drop_table("job_units")
    op.drop_index("ix_job_minute_energy_node_minute_start_s", table_name="job_minute_energy")
    op.drop_table("job_minute_energy")
    op.drop_index("ix_job_energy_node_t_end_ms", table_name="job_energy")
    op.drop_table("job_energy")
    op.drop_table("job_nodes")
    op.drop_table("jobs")
