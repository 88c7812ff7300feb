"""An index of the job parts no day sums hold: a fleet comparison finds them without
reading every part.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04

Why (issue 28): once ended and running single-node jobs are folded into sums per node
(migration 0012, agent/store/job_days.py), a comparison over a fleet reads one by one
only the parts no sum holds (``job_nodes.pooled_day_s IS NULL``: jobs on several nodes,
jobs ended in the last minutes, jobs started since their node's last maintain pass).
Found through the (node, pooled_day_s) index or a scan, that costs every part the
store holds, a week of a fleet's jobs; this partial index holds only those parts, a few
thousand, so finding them costs what they are. PostgreSQL and SQLite both keep partial
indexes.

Upgrade builds the index (a read of ``job_nodes``); downgrade drops it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_job_nodes_unpooled_job_id"
UNPOOLED = sa.text("pooled_day_s IS NULL")


def upgrade() -> None:
    op.create_index(INDEX, "job_nodes", ["job_id"], postgresql_where=UNPOOLED,
                    sqlite_where=UNPOOLED)


def downgrade() -> None:
    op.drop_index(INDEX, "job_nodes")
