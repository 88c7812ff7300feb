"""Job totals by source: a figure's provenance and bounds read the totals, not every minute.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

Why (issue 28): a job's bounds and sources (agent/store/provenance.py,
agent/reports/bounds.py) need its energy per source. ``job_minute_energy`` keeps none, so
they joined every job minute to its node's ``minute_energy`` row: 0.50 s per 587,000 job
minutes, growing with the store's history, on every Compare page and ``joulestat
compare``. From this revision ``job_energy_totals`` is keyed by (job, node, component,
**source**) and the agent sums its raw shares into it by their own source, so those
reads take the totals (one row per job, node, component and source) plus the raw
windows after the totals boundary, as the job lists do.

Upgrade rebuilds the table. Each old (job, node, component) total keeps its value to
the last bit: it is split by source in the proportions its job minutes up to the
totals boundary have, each minute taking its node minute's source (what the readers
joined before, so bounds and sources read the same after the upgrade); the last source
takes the remainder, so the parts add up to the old total exactly. A total without job
minutes (none should exist) keeps the source ``unknown``, which no accuracy is known
for, as the readers found no source for it before.

Downgrade sums the sources of each (job, node, component) back into one row.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_ID = sa.String(length=128)
TABLE = "job_energy_totals"
OLD = "job_energy_totals_old"
# The source of a total whose job minutes are gone (see the module's docstring).
UNKNOWN_SOURCE = "unknown"

Key = tuple[str, str, str]


def _set_aside(keys: Sequence[str]) -> None:
    """Rename the table out of the way, with its constraints on PostgreSQL (whose
    constraint and index names share one namespace, so the new table can take them)."""
    op.rename_table(TABLE, OLD)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE {OLD} RENAME CONSTRAINT pk_{TABLE} TO pk_{OLD}")
        op.execute(f"ALTER TABLE {OLD} RENAME CONSTRAINT fk_{TABLE}_node_nodes "
                   f"TO fk_{OLD}_node_nodes")
    op.create_table(
        TABLE,
        sa.Column("job_id", JOB_ID, nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("component", sa.String(), nullable=False),
        *([sa.Column("source", sa.String(), nullable=False)] if "source" in keys else []),
        sa.Column("dynamic_j", sa.Double(), nullable=False),
        sa.Column("idle_j", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["node"], ["nodes.node"], name=f"fk_{TABLE}_node_nodes"),
        sa.PrimaryKeyConstraint(*keys, name=f"pk_{TABLE}"),
    )


def _split(total: float, weights: dict[str, float], order: list[str]) -> dict[str, float]:
    """``total`` in the proportions of ``weights`` (by source, in ``order``), the last
    source taking the remainder so the parts add up to ``total`` exactly."""
    whole = sum(weights.get(source, 0.0) for source in order)
    parts: dict[str, float] = {}
    left = total
    for source in order[:-1]:
        part = total * weights.get(source, 0.0) / whole if whole else 0.0
        parts[source] = part
        left -= part
    parts[order[-1]] = left
    return parts


def upgrade() -> None:
    connection = op.get_bind()
    _set_aside(["job_id", "node", "component", "source"])
    # Each settled job minute's energy by its node minute's source: what the readers
    # joined before this revision (agent/store/provenance.py at 0009).
    by_source: defaultdict[Key, dict[str, list[float]]] = defaultdict(dict)
    for job_id, node, component, source, dynamic_j, idle_j in connection.execute(sa.text(
            "SELECT m.job_id, m.node, m.component, e.source, sum(m.dynamic_j), "
            "sum(m.idle_j) FROM job_minute_energy m "
            "JOIN nodes n ON n.node = m.node "
            "JOIN minute_energy e ON e.node = m.node AND e.minute_start_s = m.minute_start_s "
            "AND e.component = m.component AND e.device = m.device "
            "WHERE n.totals_until_ms IS NOT NULL "
            "AND m.minute_start_s <= (n.totals_until_ms - 60000) / 1000 "
            "GROUP BY m.job_id, m.node, m.component, e.source")):
        by_source[(job_id, node, component)][str(source)] = [float(dynamic_j or 0.0),
                                                              float(idle_j or 0.0)]
    rows = []
    for job_id, node, component, dynamic_j, idle_j in connection.execute(sa.text(
            f"SELECT job_id, node, component, dynamic_j, idle_j FROM {OLD}")):
        found = by_source.get((job_id, node, component), {})
        order = sorted(found) or [UNKNOWN_SOURCE]
        dynamic = _split(float(dynamic_j), {s: v[0] for s, v in found.items()}, order)
        idle = _split(float(idle_j), {s: v[1] for s, v in found.items()}, order)
        rows += [{"job_id": job_id, "node": node, "component": component, "source": source,
                  "dynamic_j": dynamic[source], "idle_j": idle[source]} for source in order]
    if rows:
        connection.execute(sa.text(
            f"INSERT INTO {TABLE} (job_id, node, component, source, dynamic_j, idle_j) "
            "VALUES (:job_id, :node, :component, :source, :dynamic_j, :idle_j)"), rows)
    op.drop_table(OLD)


def downgrade() -> None:
    _set_aside(["job_id", "node", "component"])
    op.execute(
        f"INSERT INTO {TABLE} (job_id, node, component, dynamic_j, idle_j) "
        f"SELECT job_id, node, component, sum(dynamic_j), sum(idle_j) FROM {OLD} "
        "GROUP BY job_id, node, component")
    op.drop_table(OLD)
