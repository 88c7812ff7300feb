"""The open parts' totals, copied for a fleet's comparison (issue 45).

A fleet's comparison by setup reads the summed days of ended jobs as their sums and
every other part one by one: over 1,000 nodes x 7 days x 50 jobs, the 50,000 running
parts, each joined to its job's row and its totals in tables of 400,000 parts (1.6
million energy rows). That join was most of ``joulestat compare``'s 3 s. The maintain
pass now copies each node's open parts (single-node, on no summed day) with their job's
attributes into ``job_open_parts``, and their totals into ``job_open_energy`` and
``job_open_units`` (agent/store/open_parts.py), and a comparison reads those.

Triggers delete a part's ``job_open_parts`` row (and the database its copied totals:
their foreign key cascades) whenever its job row, a part of its job, or its energy or
unit totals change (insert, update, delete): a reader takes a copy only through that
row, so it never reads one that no longer holds; the part is read from the
totals themselves until the node's next pass copies it again. Alembic's comparison does
not look at triggers; tests/store/test_open_parts.py does.

Upgrade creates the empty tables (the next pass of each node fills them) and the
triggers; downgrade drops both.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_ID = sa.String(length=128)
PART = ["job_open_parts.node", "job_open_parts.job_id"]
NO_ROWID = {"sqlite_with_rowid": False}  # as the schema's: keyed only, stored as the key

# Per table, the events and which copied parts a changed row takes out of use: every
# part of its job (a job row, or a part, which can make the job's other parts
# multi-node), or its own part (its totals).
OPEN_TRIGGERS = (
    ("jobs", "AFTER UPDATE", "job_id = NEW.id"),
    ("job_nodes", "AFTER INSERT", "job_id = NEW.job_id"),
    ("job_nodes", "AFTER UPDATE", "job_id = NEW.job_id OR job_id = OLD.job_id"),
    ("job_nodes", "AFTER DELETE", "job_id = OLD.job_id"),
    ("job_energy_totals", "AFTER INSERT", "node = NEW.node AND job_id = NEW.job_id"),
    ("job_energy_totals", "AFTER UPDATE", "node = NEW.node AND job_id = NEW.job_id"),
    ("job_energy_totals", "AFTER DELETE", "node = OLD.node AND job_id = OLD.job_id"),
    ("job_unit_totals", "AFTER INSERT", "node = NEW.node AND job_id = NEW.job_id"),
    ("job_unit_totals", "AFTER UPDATE", "node = NEW.node AND job_id = NEW.job_id"),
    ("job_unit_totals", "AFTER DELETE", "node = OLD.node AND job_id = OLD.job_id"),
)


def _name(table: str, event: str) -> str:
    return f"tr_{table}_uncopy_{event.split()[1].lower()}"


def upgrade() -> None:
    cascade = {"ondelete": "CASCADE"}
    op.create_table(
        "job_open_parts",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("job_id", JOB_ID, nullable=False),
        *(sa.Column(name, sa.String(), nullable=False)
          for name in ("kind", "name", "agent_labels")),
        sa.Column("created_s", sa.Double(), nullable=False),
        sa.Column("instance_type", sa.String(), nullable=False),
        sa.Column("region", sa.String(), nullable=False),
        sa.Column("started_s", sa.Double(), nullable=False),
        sa.Column("ended_s", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(["node"], ["nodes.node"], name="fk_job_open_parts_node_nodes",
                                **cascade),
        sa.PrimaryKeyConstraint("node", "job_id", name="pk_job_open_parts"),
    )
    op.create_index("ix_job_open_parts_job_id", "job_open_parts", ["job_id"])
    op.create_table(
        "job_open_energy",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("job_id", JOB_ID, nullable=False),
        sa.Column("component", sa.String(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("dynamic_j", sa.Double(), nullable=False),
        sa.Column("idle_j", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["node", "job_id"], PART,
                                name="fk_job_open_energy_node_job_open_parts", **cascade),
        sa.PrimaryKeyConstraint("node", "job_id", "component", "source",
                                name="pk_job_open_energy"),
        **NO_ROWID,
    )
    op.create_table(
        "job_open_units",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("job_id", JOB_ID, nullable=False),
        sa.Column("unit", sa.String(), nullable=False),
        sa.Column("count", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["node", "job_id"], PART,
                                name="fk_job_open_units_node_job_open_parts", **cascade),
        sa.PrimaryKeyConstraint("node", "job_id", "unit", name="pk_job_open_units"),
        **NO_ROWID,
    )
    postgresql = op.get_context().dialect.name == "postgresql"
    for table, event, which in OPEN_TRIGGERS:
        when, what = event.split()
        name = _name(table, event)
        body = f"DELETE FROM job_open_parts WHERE {which}"
        if not postgresql:
            op.execute(f"CREATE TRIGGER {name} {when} {what} ON {table} "
                       f"FOR EACH ROW BEGIN {body}; END")
            continue
        back = "OLD" if what == "DELETE" else "NEW"
        op.execute(f"CREATE FUNCTION {name}_f() RETURNS trigger LANGUAGE plpgsql AS "
                   f"$$ BEGIN {body}; RETURN {back}; END $$")
        op.execute(f"CREATE TRIGGER {name} {when} {what} ON {table} "
                   f"FOR EACH ROW EXECUTE FUNCTION {name}_f()")


def downgrade() -> None:
    postgresql = op.get_context().dialect.name == "postgresql"
    for table, event, _which in OPEN_TRIGGERS:
        op.execute(f"DROP TRIGGER {_name(table, event)}"
                   + (f" ON {table}" if postgresql else ""))
        if postgresql:
            op.execute(f"DROP FUNCTION {_name(table, event)}_f()")
    for table in ("job_open_units", "job_open_energy", "job_open_parts"):
        op.drop_table(table)
