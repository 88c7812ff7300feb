"""A serving job's load over time, beside its latency (issue 49).

Energy per token over a whole serving job counts its warm-up, ramp-up and drain; the
steady-state window that benchmarks such as ML.ENERGY's measure in is found in a trace
of the job's energy, tokens and the engine's running and waiting requests, a point per
tick, which the agent keeps per job and node (``job_nodes.serving_trace``, JSON).

Upgrade adds the nullable column (a catalog change, instant on both backends); existing
jobs keep NULL (no trace: their reports show whole-job figures only). Downgrade drops
it, and the traces with it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("job_nodes", sa.Column("serving_trace", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("job_nodes", "serving_trace")
