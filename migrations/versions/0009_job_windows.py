"""The job tables read by the totals boundary: raw job rows only a few minutes long.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

Why (issue 28): with 50 running jobs a node's store grew by one ``job_energy`` row per
job, device and tick, kept for the whole raw retention (7 days): over 100 MiB per
node-hour (benchmarks/store_growth.py), most of a fleet's PostgreSQL. From this
revision the agent writes a job's shares as one row per flush window
(agent/store/rows.py) and, each time it advances a node's job totals
(``nodes.totals_until_ms``, a few minutes behind the clock), rolls the minutes it passes
into ``job_minute_energy``, merges their unit counts into one row a minute and deletes
their raw job rows. Readers then take the job tables' raw rows after
``totals_until_ms`` and their minute rollups up to it (agent/store/schema.py's
``boundary_of``); the node's own ticks keep ``raw_pruned_until_ms``.

Upgrade brings a store to that state, node by node, in one transaction: the minutes
between the prune boundary and the totals boundary are rolled up again from their raw
job rows (a late row counted), their ``job_units`` rows merged into one row a minute at
the minute's end, and the raw ``job_energy`` rows up to the totals boundary deleted. No
figure changes: every job row is counted before and after, once, at a minute's
resolution where it was older than the totals boundary.

It also drops ``job_minute_energy``'s ``(node, minute_start_s)`` index (the rollup
found where it stopped through it; nothing else reads the table by node), a quarter of
what is now a busy node's largest table.

Downgrade: code before this revision reads raw job rows after the prune boundary, so
the prune boundary moves up to the totals boundary, after rolling the node's ticks
between them into ``minute_energy`` (the node then reads those minutes from rollups
too); totals are the same.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MINUTE = "((t_end_ms - 1) / 60000) * 60"


def _nodes(connection: sa.engine.Connection) -> list[tuple[str, int | None, int]]:
    return [(str(node), None if pruned is None else int(pruned), int(totals))
            for node, pruned, totals in connection.execute(sa.text(
                "SELECT node, raw_pruned_until_ms, totals_until_ms FROM nodes "
                "WHERE totals_until_ms IS NOT NULL ORDER BY node"))]


def upgrade() -> None:
    # Only the rollup's resume point was read through it; job_minute_energy is read by
    # job (its key) and is now the busiest table: the index was a quarter of its size.
    op.drop_index("ix_job_minute_energy_node_minute_start_s", table_name="job_minute_energy")
    connection = op.get_bind()
    for node, pruned, totals in _nodes(connection):
        window = {"node": node, "after": -1 if pruned is None else pruned, "until": totals}
        connection.execute(sa.text(
            "INSERT INTO job_minute_energy (job_id, node, minute_start_s, component, device, "
            "dynamic_j, idle_j) "
            f"SELECT job_id, node, {_MINUTE}, component, device, sum(dynamic_j), sum(idle_j) "
            "FROM job_energy WHERE node = :node AND t_end_ms > :after "
            f"AND t_end_ms <= :until GROUP BY job_id, node, {_MINUTE}, component, device "
            "ON CONFLICT (job_id, node, minute_start_s, component, device) DO UPDATE "
            "SET dynamic_j = excluded.dynamic_j, idle_j = excluded.idle_j"), window)
        merged = connection.execute(sa.text(
            f"SELECT job_id, ({_MINUTE} + 60) * 1000, unit, sum(count) FROM job_units "
            "WHERE node = :node AND t_end_ms > :after AND t_end_ms <= :until "
            f"GROUP BY job_id, {_MINUTE}, unit"), window).all()
        connection.execute(sa.text(
            "DELETE FROM job_units WHERE node = :node AND t_end_ms > :after "
            "AND t_end_ms <= :until"), window)
        if merged:
            connection.execute(sa.text(
                "INSERT INTO job_units (job_id, node, t_end_ms, unit, count) "
                "VALUES (:job_id, :node, :t_end_ms, :unit, :count)"),
                [{"job_id": job_id, "node": node, "t_end_ms": int(t_end_ms), "unit": unit,
                  "count": float(count)} for job_id, t_end_ms, unit, count in merged])
        connection.execute(sa.text(
            "DELETE FROM job_energy WHERE node = :node AND t_end_ms <= :until"), window)


def downgrade() -> None:
    op.create_index("ix_job_minute_energy_node_minute_start_s", "job_minute_energy",
                    ["node", "minute_start_s"])
    connection = op.get_bind()
    for node, pruned, totals in _nodes(connection):
        if pruned is not None and pruned >= totals:
            continue
        window = {"node": node, "after": -1 if pruned is None else pruned, "until": totals}
        connection.execute(sa.text(
            "INSERT INTO minute_energy (node, minute_start_s, component, device, energy_j, "
            "covered_s, source) "
            f"SELECT node, {_MINUTE}, component, device, sum(energy_j), "
            "sum(t_end_ms - t_start_ms) / 1000.0, "
            "CASE WHEN min(source) = max(source) THEN min(source) "
            "ELSE min(source) || '+' || max(source) END "
            "FROM tick_energy WHERE node = :node AND t_end_ms > :after "
            f"AND t_end_ms <= :until GROUP BY node, {_MINUTE}, component, device "
            "ON CONFLICT (node, minute_start_s, component, device) DO UPDATE "
            "SET energy_j = excluded.energy_j, covered_s = excluded.covered_s, "
            "source = excluded.source"), window)
        connection.execute(sa.text(
            "UPDATE nodes SET raw_pruned_until_ms = :until WHERE node = :node"), window)
