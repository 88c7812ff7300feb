"""What the open parts' copies add up to, for a fleet's comparison (issue 45).

With the open parts copied (revision 0005), a comparison by setup over 1,000 nodes x 7
days x 50 jobs still read every copied totals row (188,000) twice over: once summed per
part, once per node and source. The maintain pass now also writes what those add up
to (agent/store/open_parts.py): per copied part its energy and the units it counted
(``job_open_sums``), and per node and job kind the copied parts' energy per instance
type, units counted, component and source (``job_open_sources``) with how many parts
that is (``job_open_kinds``).

No trigger is added: a part's sums go with its copy (their foreign key cascades), and a
reader takes a node and kind's sources only while it still has as many copied parts as
they add up. Upgrade creates the empty tables and empties the copies of revision 0005,
so that no part is copied without its sums (the next pass of each node makes both);
downgrade drops the tables.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_ID = sa.String(length=128)
NO_ROWID = {"sqlite_with_rowid": False}  # as the schema's: keyed only, stored as the key
CASCADE = {"ondelete": "CASCADE"}


def upgrade() -> None:
    op.create_table(
        "job_open_sums",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("job_id", JOB_ID, nullable=False),
        *(sa.Column(name, sa.Double(), nullable=False)
          for name in ("energy_j", "accelerator_j", "dynamic_j")),
        sa.Column("units_key", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(["node", "job_id"],
                                ["job_open_parts.node", "job_open_parts.job_id"],
                                name="fk_job_open_sums_node_job_open_parts", **CASCADE),
        sa.PrimaryKeyConstraint("node", "job_id", name="pk_job_open_sums"),
        **NO_ROWID,
    )
    op.create_table(
        "job_open_kinds",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("parts", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["node"], ["nodes.node"], name="fk_job_open_kinds_node_nodes",
                                **CASCADE),
        sa.PrimaryKeyConstraint("node", "kind", name="pk_job_open_kinds"),
    )
    op.create_table(
        "job_open_sources",
        *(sa.Column(name, sa.String(), nullable=False)
          for name in ("node", "kind", "instance_type", "units_key", "component", "source")),
        sa.Column("energy_j", sa.Double(), nullable=False),
        sa.Column("dynamic_j", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["node", "kind"], ["job_open_kinds.node", "job_open_kinds.kind"],
                                name="fk_job_open_sources_node_job_open_kinds", **CASCADE),
        sa.PrimaryKeyConstraint("node", "kind", "instance_type", "units_key", "component",
                                "source", name="pk_job_open_sources"),
        **NO_ROWID,
    )
    for table in ("job_open_units", "job_open_energy", "job_open_parts"):
        op.execute(f"DELETE FROM {table}")  # each: SQLite may run this with no foreign keys


def downgrade() -> None:
    for table in ("job_open_sources", "job_open_kinds", "job_open_sums"):
        op.drop_table(table)
