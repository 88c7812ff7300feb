"""An index of the parts that hold served latency or a serving trace (issue 45).

``joulestat compare`` and the Compare page first ask whether a matching job holds served
latency histograms or a serving trace: such a comparison reads its jobs one by one
(agent/store/job_pools.py, ``has_latency``). Without an index that question scanned
every part: 35 to 50 ms of a fleet's comparison over 1,000 nodes x 7 days x 50 jobs
(398,000 parts), before anything else could start. A partial index holds only the
served parts, a few rows or none, so the answer is a seek.

Upgrade creates the index: on PostgreSQL ``CREATE INDEX`` holds off writes to
``job_nodes`` while it reads the table once (well under a second for 400,000 parts);
no row changes. Downgrade drops it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SERVED = "latency IS NOT NULL OR serving_trace IS NOT NULL"


def upgrade() -> None:
    op.create_index("ix_job_nodes_served_job_id", "job_nodes", ["job_id"],
                    sqlite_where=sa.text(SERVED), postgresql_where=sa.text(SERVED))


def downgrade() -> None:
    op.drop_index("ix_job_nodes_served_job_id", table_name="job_nodes")
