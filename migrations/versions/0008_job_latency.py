"""A serving job's latency: the histograms its engine reported, per node of the job.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

Why (issue 26): a job measured from a serving engine's metrics (``--serving-metrics``:
vLLM, TGI, SGLang) counts its tokens and requests as units, but energy per token means
little without the latency it was served at. Adds ``job_nodes.latency``: JSON text,
per model, per kind (``ttft``, ``itl``, ``e2e``), the job's histogram on that node
(``{"buckets": [[le, cumulative count], ...], "sum": s, "count": n}``, the differences
since the job's first sample: agent/runtime/serving.py). Null for every other job.
Reports and ``compare`` add the nodes' histograms and read percentiles from them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("job_nodes", sa.Column("latency", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("job_nodes", "latency")
