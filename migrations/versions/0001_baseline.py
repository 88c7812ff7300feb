"""Baseline: the store's whole schema as joulestat's first release has it.

Revision ID: 0001
Revises:
Create Date: 2026-12-05

Why one revision (issue 45): joulestat 0.1.0 is the first release, so no store made
before it has to be upgraded; the fourteen revisions written while the schema took shape
were folded into this one. It creates exactly the tables of agent/store/schema.py, with
the physical options that module declares per backend:

* ``WITHOUT ROWID`` on SQLite for the tables whose composite key is their only index;
* ``job_minute_energy`` and ``job_minute_units`` keyed on SQLite only (the table is its
  key there) and indexed by ``(job_id, node)`` on PostgreSQL only;
* on PostgreSQL ``tick_energy`` and ``job_energy`` are ``PARTITION BY RANGE
  (t_end_ms)``: a DEFAULT partition ``<table>_default`` and one partition per UTC day,
  ``<table>_pYYYYMMDD`` over ``[day, day + 1)`` in epoch milliseconds, all in the schema
  ``joulestat_partitions`` (kept out of the main schema, the one Alembic's autogenerate
  compares). This makes today's and the next DAYS_AHEAD days'; from then on the writers
  make them, named and bounded the same way (agent/store/maintenance.py);
* triggers (and on PostgreSQL their functions) that take a summed day of
  ``job_pool_days`` out of use when one of its jobs changes (POOL_TRIGGERS; Alembic's
  comparison does not look at triggers, tests/store/test_pool_days.py does).

Written out by hand (started from Alembic's autogenerate against an empty database) and
self-contained: a migration imports nothing of the agent, so it does not change when the
agent's code does. tests/store/test_migrations.py checks that the migrated schema matches
agent/store/schema.py on both backends; docs/migrations.md says how later revisions are
written. Downgrade drops every table (on PostgreSQL their partitions and the partitions'
schema with them): whatever the store held is gone.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_ID = sa.String(length=128)
NO_ROWID = {"sqlite_with_rowid": False}
PARTITION_SCHEMA = "joulestat_partitions"
# The raw tables partitioned by day on PostgreSQL (no partitions on SQLite).
DAY_PARTITIONED = ("tick_energy", "job_energy")
BY_DAY = {"postgresql_partition_by": "RANGE (t_end_ms)"}
DAY_MS = 86_400_000
DAYS_AHEAD = 3


def _node_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["node"], ["nodes.node"], name=f"fk_{table}_node_nodes")


def _on_postgresql() -> bool:
    return op.get_context().dialect.name == "postgresql"


def _partition_name(table: str, day: int) -> str:
    return f"{table}_p{datetime.fromtimestamp(day * 86_400, UTC):%Y%m%d}"


def upgrade() -> None:
    postgresql = _on_postgresql()
    op.create_table(
        "nodes",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("instance_type", sa.String(), nullable=False),
        sa.Column("region", sa.String(), nullable=False),
        sa.Column("cpu_model", sa.String(), nullable=False),
        sa.Column("agent_version", sa.String(), nullable=False),
        sa.Column("first_seen_s", sa.Double(), nullable=False),
        sa.Column("last_seen_s", sa.Double(), nullable=False),
        sa.Column("raw_pruned_until_ms", sa.BigInteger(), nullable=True),
        sa.Column("totals_until_ms", sa.BigInteger(), nullable=True),
        sa.Column("writer_id", sa.String(), nullable=True),
        sa.Column("writer_host", sa.String(), nullable=True),
        sa.Column("writer_mode", sa.String(), nullable=True),
        sa.Column("lease_until_s", sa.Double(), nullable=True),
        sa.Column("writer_api_url", sa.String(), nullable=True),
        sa.PrimaryKeyConstraint("node", name="pk_nodes"),
    )
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
        sa.Column("agent_labels", sa.String(), server_default="{}", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
    )
    op.create_table(
        "node_devices",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("component", sa.String(), nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("uuid", sa.String(), nullable=False),
        sa.Column("device_index", sa.Integer(), nullable=True),
        sa.Column("last_seen_s", sa.Double(), nullable=False),
        _node_fk("node_devices"),
        sa.PrimaryKeyConstraint("node", "component", "device", name="pk_node_devices"),
    )
    op.create_table(
        "tick_energy",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("t_end_ms", sa.BigInteger(), nullable=False),
        sa.Column("component", sa.String(), nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("t_start_ms", sa.BigInteger(), nullable=False),
        sa.Column("energy_j", sa.Double(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        _node_fk("tick_energy"),
        sa.PrimaryKeyConstraint("node", "t_end_ms", "component", "device",
                                name="pk_tick_energy"),
        **NO_ROWID, **BY_DAY,
    )
    op.create_table(
        "minute_energy",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("minute_start_s", sa.BigInteger(), nullable=False),
        sa.Column("component", sa.String(), nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("energy_j", sa.Double(), nullable=False),
        sa.Column("covered_s", sa.Double(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        _node_fk("minute_energy"),
        sa.PrimaryKeyConstraint("node", "minute_start_s", "component", "device",
                                name="pk_minute_energy"),
        **NO_ROWID,
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
        sa.Column("latency", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_job_nodes_job_id_jobs"),
        _node_fk("job_nodes"),
        sa.PrimaryKeyConstraint("job_id", "node", name="pk_job_nodes"),
    )
    op.create_index("ix_job_nodes_node_ended_s", "job_nodes", ["node", "ended_s"])
    op.create_table(
        "job_energy",
        sa.Column("job_id", JOB_ID, nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("t_end_ms", sa.BigInteger(), nullable=False),
        sa.Column("component", sa.String(), nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("t_start_ms", sa.BigInteger(), nullable=False),
        sa.Column("dynamic_j", sa.Double(), nullable=False),
        sa.Column("idle_j", sa.Double(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        _node_fk("job_energy"),
        sa.PrimaryKeyConstraint("job_id", "node", "t_end_ms", "component", "device",
                                name="pk_job_energy"),
        **NO_ROWID, **BY_DAY,
    )
    op.create_index("ix_job_energy_node_t_end_ms", "job_energy", ["node", "t_end_ms"])
    # Keyed on SQLite only, read by job on PostgreSQL (agent/store/schema.py says why).
    op.create_table(
        "job_minute_energy",
        sa.Column("job_id", JOB_ID, nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("minute_start_s", sa.BigInteger(), nullable=False),
        sa.Column("component", sa.String(), nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("dynamic_j", sa.Double(), nullable=False),
        sa.Column("idle_j", sa.Double(), nullable=False),
        _node_fk("job_minute_energy"),
        *(() if postgresql else (sa.PrimaryKeyConstraint(
            "job_id", "node", "minute_start_s", "component", "device",
            name="pk_job_minute_energy"),)),
        **NO_ROWID,
    )
    if postgresql:
        op.create_index("ix_job_minute_energy_job_id_node", "job_minute_energy",
                        ["job_id", "node"])
    op.create_table(
        "job_units",
        sa.Column("job_id", JOB_ID, nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("t_end_ms", sa.BigInteger(), nullable=False),
        sa.Column("unit", sa.String(), nullable=False),
        sa.Column("count", sa.Double(), nullable=False),
        _node_fk("job_units"),
        sa.PrimaryKeyConstraint("job_id", "node", "t_end_ms", "unit", name="pk_job_units"),
        **NO_ROWID,
    )
    op.create_index("ix_job_units_node_t_end_ms", "job_units", ["node", "t_end_ms"])
    # Keyed and indexed as job_minute_energy, for the same reasons.
    op.create_table(
        "job_minute_units",
        sa.Column("job_id", JOB_ID, nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("minute_start_s", sa.BigInteger(), nullable=False),
        sa.Column("unit", sa.String(), nullable=False),
        sa.Column("count", sa.Double(), nullable=False),
        _node_fk("job_minute_units"),
        *(() if postgresql else (sa.PrimaryKeyConstraint(
            "job_id", "node", "minute_start_s", "unit", name="pk_job_minute_units"),)),
        **NO_ROWID,
    )
    if postgresql:
        op.create_index("ix_job_minute_units_job_id_node", "job_minute_units",
                        ["job_id", "node"])
    op.create_table(
        "job_energy_totals",
        sa.Column("job_id", JOB_ID, nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("component", sa.String(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("dynamic_j", sa.Double(), nullable=False),
        sa.Column("idle_j", sa.Double(), nullable=False),
        _node_fk("job_energy_totals"),
        sa.PrimaryKeyConstraint("job_id", "node", "component", "source",
                                name="pk_job_energy_totals"),
    )
    op.create_table(
        "job_unit_totals",
        sa.Column("job_id", JOB_ID, nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("unit", sa.String(), nullable=False),
        sa.Column("count", sa.Double(), nullable=False),
        _node_fk("job_unit_totals"),
        sa.PrimaryKeyConstraint("job_id", "node", "unit", name="pk_job_unit_totals"),
    )
    op.create_table(
        "node_checkpoints",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("saved_s", sa.Double(), nullable=False),
        sa.Column("boot_id", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        _node_fk("node_checkpoints"),
        sa.PrimaryKeyConstraint("node", name="pk_node_checkpoints"),
    )
    _pool_days(postgresql)
    if postgresql:
        _partitions()


def _pool_days(postgresql: bool) -> None:
    """The settled days of single-node jobs summed for a fleet's comparisons, and the
    triggers that take a day's sums out of use whenever one of its jobs changes (see
    POOL_TRIGGERS)."""
    cascade = {"ondelete": "CASCADE"}
    op.create_table(
        "job_pool_days",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("day_s", sa.BigInteger(), nullable=False),
        sa.Column("parts", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["node"], ["nodes.node"], name="fk_job_pool_days_node_nodes",
                                **cascade),
        sa.PrimaryKeyConstraint("node", "day_s", name="pk_job_pool_days"),
    )
    op.create_table(
        "job_pool_sums",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("day_s", sa.BigInteger(), nullable=False),
        *(sa.Column(name, sa.String(), nullable=False) for name in (
            "kind", "instance_type", "region", "name", "agent_labels", "units_key", "unit")),
        sa.Column("runs", sa.Integer(), nullable=False),
        *(sa.Column(name, sa.Double(), nullable=False) for name in (
            "energy_j", "accelerator_j", "dynamic_j", "held_s", "units", "value_mean",
            "value_m2", "first_created_s")),
        sa.Column("first_job_id", JOB_ID, nullable=False),
        sa.ForeignKeyConstraint(["node"], ["nodes.node"], name="fk_job_pool_sums_node_nodes",
                                **cascade),
    )
    op.create_index("ix_job_pool_sums_node_day_s", "job_pool_sums", ["node", "day_s"])
    op.create_table(
        "job_pool_sources",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("day_s", sa.BigInteger(), nullable=False),
        *(sa.Column(name, sa.String(), nullable=False) for name in (
            "kind", "instance_type", "units_key", "component", "source")),
        sa.Column("energy_j", sa.Double(), nullable=False),
        sa.Column("dynamic_j", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["node"], ["nodes.node"],
                                name="fk_job_pool_sources_node_nodes", **cascade),
    )
    op.create_index("ix_job_pool_sources_node_day_s", "job_pool_sources", ["node", "day_s"])
    for statement in _triggers(postgresql):
        op.execute(statement)


# What takes a summed day out of use: any change to one of its jobs. Per table, the
# events and the job id of the changed row (NEW or OLD). job_nodes is deleted BEFORE
# the row goes, so the part is still there to say which day it was in; its update also
# unsums the day the part was in before (OLD.ended_s of the job: a job's end moves
# only with its parts, which are all looked at). The raw job tables need none: the
# writer refuses rows at or behind a node's totals boundary, and a day is summed only
# once that boundary is past it.
POOL_TRIGGERS = (
    ("jobs", "AFTER UPDATE", "NEW.id"),
    ("job_nodes", "AFTER INSERT", "NEW.job_id"),
    ("job_nodes", "AFTER UPDATE", "NEW.job_id"),
    ("job_nodes", "BEFORE DELETE", "OLD.job_id"),
    ("job_energy_totals", "AFTER INSERT", "NEW.job_id"),
    ("job_energy_totals", "AFTER UPDATE", "NEW.job_id"),
    ("job_energy_totals", "AFTER DELETE", "OLD.job_id"),
    ("job_unit_totals", "AFTER INSERT", "NEW.job_id"),
    ("job_unit_totals", "AFTER UPDATE", "NEW.job_id"),
    ("job_unit_totals", "AFTER DELETE", "OLD.job_id"),
)
DAY_S = 86_400


def _unsum(table: str, job_id: str, day: str) -> str:
    """A trigger's body on ``table``: delete the summed days of the job ``job_id``'s
    parts (``day``: the SQL of a UTC day from an epoch-seconds expression, per backend),
    and on ``jobs`` also the day it ended in before, if its end moved."""
    body = (f"DELETE FROM job_pool_days WHERE (node, day_s) IN (SELECT p.node, "
            f"{day.format('j.ended_s')} FROM job_nodes p JOIN jobs j ON j.id = p.job_id "
            f"WHERE p.job_id = {job_id} AND j.ended_s IS NOT NULL)")
    if table == "jobs":
        body += (f"; DELETE FROM job_pool_days WHERE day_s = {day.format('OLD.ended_s')} "
                 "AND node IN (SELECT node FROM job_nodes WHERE job_id = OLD.id)")
    return body


def _triggers(postgresql: bool) -> list[str]:
    """POOL_TRIGGERS as statements: SQLite's triggers hold their body; PostgreSQL's
    call a function of their own that does (and returns the row)."""
    day = (f"(floor(({{}}) / {DAY_S}) * {DAY_S})::bigint" if postgresql
           else f"(CAST(({{}}) / {DAY_S} AS INTEGER) * {DAY_S})")
    statements = []
    for table, event, job_id in POOL_TRIGGERS:
        when, what = event.split()
        name = f"tr_{table}_unsum_{what.lower()}"
        body = _unsum(table, job_id, day)
        if not postgresql:
            statements.append(f"CREATE TRIGGER {name} {when} {what} ON {table} "
                              f"FOR EACH ROW BEGIN {body}; END")
            continue
        back = "OLD" if what == "DELETE" else "NEW"
        statements.append(f"CREATE FUNCTION {name}_f() RETURNS trigger LANGUAGE plpgsql AS "
                          f"$$ BEGIN {body}; RETURN {back}; END $$")
        statements.append(f"CREATE TRIGGER {name} {when} {what} ON {table} "
                          f"FOR EACH ROW EXECUTE FUNCTION {name}_f()")
    return statements


def _partitions() -> None:
    """The DEFAULT partition of each raw table and those of today and the next
    DAYS_AHEAD UTC days."""
    op.execute(f"CREATE SCHEMA IF NOT EXISTS {PARTITION_SCHEMA}")
    today = int(time.time() * 1000) // DAY_MS
    for table in DAY_PARTITIONED:
        op.execute(f"CREATE TABLE {PARTITION_SCHEMA}.{table}_default PARTITION OF {table} "
                   "DEFAULT")
        for day in range(today, today + DAYS_AHEAD + 1):
            op.execute(f"CREATE TABLE {PARTITION_SCHEMA}.{_partition_name(table, day)} "
                       f"PARTITION OF {table} FOR VALUES FROM ({day * DAY_MS}) "
                       f"TO ({(day + 1) * DAY_MS})")


def downgrade() -> None:
    for table in ("job_pool_sources", "job_pool_sums", "job_pool_days",
                  "node_checkpoints", "job_unit_totals", "job_energy_totals",
                  "job_minute_units", "job_units", "job_minute_energy", "job_energy",
                  "job_nodes", "minute_energy", "tick_energy", "node_devices", "jobs",
                  "nodes"):
        op.drop_table(table)  # its indexes and, on PostgreSQL, its partitions with it
    if _on_postgresql():
        for table, event, _job_id in POOL_TRIGGERS:  # their triggers went with the tables
            op.execute(f"DROP FUNCTION IF EXISTS tr_{table}_unsum_{event.split()[1].lower()}_f()")
        # Not CASCADE: anything else found there is not joulestat's to drop.
        op.execute(f"DROP SCHEMA IF EXISTS {PARTITION_SCHEMA}")
