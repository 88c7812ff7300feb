"""PostgreSQL: raw ticks and job shares partitioned by day, so retention drops partitions.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

On PostgreSQL ``tick_energy`` and ``job_energy`` become ``PARTITION BY RANGE (t_end_ms)``
tables with the same names, columns, primary keys, foreign keys and indexes (so the
schema still matches agent/store/schema.py), one partition per UTC day plus a DEFAULT
partition, all in the schema ``joulestat_partitions`` (kept out of the main schema so
that Alembic's autogenerate, which compares only that one, does not take the partitions
for tables it should drop). Existing rows are copied into partitions for the days they
end in, in this one transaction: old table renamed, partitioned table created, rows
copied, old table dropped. Partitions for today and the next few days are made too;
from then on the writers make them (agent/store/maintenance.py, which names and bounds
partitions exactly as here). ``job_units`` stays as it is: its rows before the prune
boundary are the kept, minute-compacted record of units, never dropped wholesale.

Downgrade copies the rows back into plain tables. On SQLite both directions do nothing.
Written by hand, self-contained: a migration must not change when the agent's code does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "joulestat_partitions"
DAY_MS = 86_400_000
DAYS_AHEAD = 3
JOB_ID = sa.String(length=128)


def _tick_energy(partitioned: bool) -> None:
    op.create_table(
        "tick_energy",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("t_end_ms", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("component", sa.String(), nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("t_start_ms", sa.BigInteger(), nullable=False),
        sa.Column("energy_j", sa.Double(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(["node"], ["nodes.node"], name="fk_tick_energy_node_nodes"),
        sa.PrimaryKeyConstraint("node", "t_end_ms", "component", "device",
                                name="pk_tick_energy"),
        **({"postgresql_partition_by": "RANGE (t_end_ms)"} if partitioned else {}),
    )


def _job_energy(partitioned: bool) -> None:
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
        sa.ForeignKeyConstraint(["node"], ["nodes.node"], name="fk_job_energy_node_nodes"),
        sa.PrimaryKeyConstraint("job_id", "node", "t_end_ms", "component", "device",
                                name="pk_job_energy"),
        **({"postgresql_partition_by": "RANGE (t_end_ms)"} if partitioned else {}),
    )
    op.create_index("ix_job_energy_node_t_end_ms", "job_energy", ["node", "t_end_ms"])


# name, how to create it, its columns, its indexes besides the primary key
TABLES = (
    ("tick_energy", _tick_energy,
     "node, t_end_ms, component, device, t_start_ms, energy_j, source", ()),
    ("job_energy", _job_energy,
     "job_id, node, t_end_ms, component, device, t_start_ms, dynamic_j, idle_j, source",
     ("ix_job_energy_node_t_end_ms",)),
)


def _is_postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def _set_aside(name: str, indexes: tuple[str, ...], suffix: str) -> str:
    """Rename ``name`` and its key and indexes out of the way of the new table's."""
    old = f"{name}_{suffix}"
    op.execute(f"ALTER TABLE {name} RENAME TO {old}")
    op.execute(f"ALTER TABLE {old} RENAME CONSTRAINT pk_{name} TO pk_{old}")
    for index in indexes:
        op.execute(f"ALTER INDEX {index} RENAME TO {index}_{suffix}")
    return old


def _partition_name(name: str, day: int) -> str:
    return f"{name}_p{datetime.fromtimestamp(day * 86_400, UTC):%Y%m%d}"


def upgrade() -> None:
    if not _is_postgresql():
        return
    bind = op.get_bind()
    op.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    today = int(time.time() * 1000) // DAY_MS
    for name, create, columns, indexes in TABLES:
        old = _set_aside(name, indexes, "unpartitioned")
        create(True)
        op.execute(f"CREATE TABLE {SCHEMA}.{name}_default PARTITION OF {name} DEFAULT")
        days = {int(day) for (day,) in bind.exec_driver_sql(
            f"SELECT DISTINCT t_end_ms / {DAY_MS} FROM {old}")}
        for day in sorted(days | set(range(today, today + DAYS_AHEAD + 1))):
            op.execute(f"CREATE TABLE {SCHEMA}.{_partition_name(name, day)} PARTITION OF "
                       f"{name} FOR VALUES FROM ({day * DAY_MS}) TO ({(day + 1) * DAY_MS})")
        op.execute(f"INSERT INTO {name} ({columns}) SELECT {columns} FROM {old}")
        op.execute(f"DROP TABLE {old}")


def downgrade() -> None:
    if not _is_postgresql():
        return
    bind = op.get_bind()
    for name, create, columns, indexes in TABLES:
        old = _set_aside(name, indexes, "partitioned")
        create(False)
        op.execute(f"INSERT INTO {name} ({columns}) SELECT {columns} FROM {old}")
        op.execute(f"DROP TABLE {old}")  # and every partition with it
    left = bind.exec_driver_sql(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        f"WHERE n.nspname = '{SCHEMA}'").scalar()
    if not left:
        op.execute(f"DROP SCHEMA IF EXISTS {SCHEMA}")
