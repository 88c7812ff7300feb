"""One writer per node: a lease on the node's row that its writer renews.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

Adds ``nodes.writer_id`` (who writes the node's ticks: ``<boot id>:<pid>``),
``nodes.writer_host`` and ``nodes.writer_mode`` (agent or embedded, for messages and
preemption) and ``nodes.lease_until_s`` (epoch seconds the lease holds until). See
agent/store/durability.py. Existing nodes start with no lease: the next writer takes it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("writer_id", sa.String(), nullable=True))
    op.add_column("nodes", sa.Column("writer_host", sa.String(), nullable=True))
    op.add_column("nodes", sa.Column("writer_mode", sa.String(), nullable=True))
    op.add_column("nodes", sa.Column("lease_until_s", sa.Double(), nullable=True))


def downgrade() -> None:
    # Plain ALTER TABLE (SQLite >= 3.35 drops a column in place): a batch rebuild of
    # nodes would trip the foreign keys of every table that refers to it.
    for name in ("lease_until_s", "writer_mode", "writer_host", "writer_id"):
        op.drop_column("nodes", name)
