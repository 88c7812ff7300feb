"""Ended jobs added up per node and day: a comparison over a fleet reads sums, not jobs.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03

Why (issue 28): ``joulestat compare --by instance_type`` and the Compare page added up
every job of their window in SQL, its totals per component and source: 3.5 s per
124,200 jobs on PostgreSQL, so a fleet's week took ten seconds or more. Once a job has
ended on one node and its node's totals hold all of it, nothing about it changes, so
the node's maintain pass folds it into ``job_day_sums`` and ``job_day_sources``: a few
rows per node and day (agent/store/job_days.py), which a comparison reads instead of
the job's own rows. ``job_nodes.pooled_day_s`` says which day holds a part, and an
index on (node, pooled_day_s) finds a node's parts still to fold.

Upgrade adds the tables, the column and the index, all empty: the next maintain pass of
each node's agent folds its ended jobs; until then, and for nodes no agent maintains
(imported ones), readers add the jobs up one by one as before, with the same result.
Downgrade drops them; nothing else refers to them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_ID = sa.String(length=128)
PARTS_INDEX = "ix_job_nodes_node_pooled_day_s"


def _strings(*names: str) -> list[sa.Column]:
    return [sa.Column(name, sa.String(), nullable=False) for name in names]


def _doubles(*names: str) -> list[sa.Column]:
    return [sa.Column(name, sa.Double(), nullable=False) for name in names]


def upgrade() -> None:
    op.add_column("job_nodes", sa.Column("pooled_day_s", sa.BigInteger(), nullable=True))
    op.create_index(PARTS_INDEX, "job_nodes", ["node", "pooled_day_s"])
    op.create_table(
        "job_day_sums",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("day_s", sa.BigInteger(), nullable=False),
        *_strings("kind", "instance_type", "region", "name", "agent_labels", "units_key",
                  "unit"),
        sa.Column("runs", sa.Integer(), nullable=False),
        *_doubles("energy_j", "accelerator_j", "dynamic_j", "held_s", "units", "value_sum",
                  "value_squares", "first_s"),
        sa.Column("first_job_id", JOB_ID, nullable=False),
        sa.Column("last_created_s", sa.Double(), nullable=False),
    )
    op.create_index("ix_job_day_sums_node_day_s", "job_day_sums", ["node", "day_s"])
    op.create_table(
        "job_day_sources",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("day_s", sa.BigInteger(), nullable=False),
        *_strings("kind", "instance_type", "units_key", "component", "source"),
        *_doubles("energy_j", "dynamic_j"),
    )
    op.create_index("ix_job_day_sources_node_day_s", "job_day_sources", ["node", "day_s"])


def downgrade() -> None:
    op.drop_index("ix_job_day_sources_node_day_s", "job_day_sources")
    op.drop_table("job_day_sources")
    op.drop_index("ix_job_day_sums_node_day_s", "job_day_sums")
    op.drop_table("job_day_sums")
    op.drop_index(PARTS_INDEX, "job_nodes")
    op.drop_column("job_nodes", "pooled_day_s")
