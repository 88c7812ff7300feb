"""A node's open parts and their totals, copied for a fleet's comparison by setup.

A comparison by setup (:mod:`joulestat.store.job_pools`) reads a node's summed days of
ended jobs as their sums (:mod:`joulestat.store.pool_days`) and every other part one by
one: over 1,000 nodes x 7 days x 50 jobs that is the 50,000 running parts, each joined
to its job's row and to its totals in tables of 400,000 parts (1.6 million energy rows),
most of ``joulestat compare``'s 3 s. So the node's maintain pass, after summing its
days, copies its open parts (single-node, on no summed day) with their job's attributes
into ``job_open_parts`` and their totals into ``job_open_energy`` and
``job_open_units``, tables of the open parts only, which the comparison reads instead.

The copies are derived, never kept by the write paths: each pass replaces the node's
rows from the job totals, and triggers (revision 0005) delete a part's
``job_open_parts`` row whenever its job row, one of its job's parts, or its totals
change. A reader takes a part's copied totals only through that row, so it never reads
a copy that no longer holds; it reads the part's totals themselves until the next
pass. A copied part's figures are then its copied totals plus its raw rows after the
node's totals boundary, by the store's one rule (:mod:`joulestat.store.read_rule`),
exactly as for any other part: the copy moves where the totals are read, not what they
are.
"""

from __future__ import annotations

from sqlalchemy import Connection, and_, delete, exists, insert, or_, select

from joulestat.store.pool_days import LOOKBACK_S, summed_day_in
from joulestat.store.schema import (
    JOB_ENERGY_TOTALS,
    JOB_NODES,
    JOB_OPEN_ENERGY,
    JOB_OPEN_PARTS,
    JOB_OPEN_UNITS,
    JOB_UNIT_TOTALS,
    JOBS,
)


def copy_open_parts(connection: Connection, node: str, totals_until_ms: int | None) -> None:
    """Replace ``node``'s copied open parts and totals in the caller's transaction (the
    maintain pass's, after its days are summed).

    Open: running, or ended within :data:`~joulestat.store.pool_days.LOOKBACK_S` of the
    node's totals boundary on no summed day (the day's last minutes, a day a change
    took out of use)."""
    for table in (JOB_OPEN_UNITS, JOB_OPEN_ENERGY, JOB_OPEN_PARTS):
        connection.execute(delete(table).where(table.c.node == node))
    if totals_until_ms is None:
        return
    p, jobs = JOB_NODES.c, JOBS.c
    other = JOB_NODES.alias("other_part")
    names = ["node", "job_id", "kind", "name", "agent_labels", "created_s",
             "instance_type", "region", "started_s", "ended_s"]
    parts = (select(p.node, p.job_id, jobs.kind, jobs.name, jobs.agent_labels, jobs.created_s,
                    p.instance_type, p.region, p.started_s, p.ended_s)
             .join_from(JOB_NODES, JOBS, jobs.id == p.job_id)
             .where(p.node == node,
                    or_(p.ended_s.is_(None),
                        and_(p.ended_s > totals_until_ms / 1000 - LOOKBACK_S,
                             ~summed_day_in(p.node, p.ended_s, None, None))),
                    ~exists().where(other.c.job_id == p.job_id, other.c.node != p.node)))
    connection.execute(insert(JOB_OPEN_PARTS).from_select(names, parts))
    for copy, totals, columns in (
            (JOB_OPEN_ENERGY, JOB_ENERGY_TOTALS, ("component", "source", "dynamic_j", "idle_j")),
            (JOB_OPEN_UNITS, JOB_UNIT_TOTALS, ("unit", "count"))):
        t = totals.c
        connection.execute(insert(copy).from_select(
            ["node", "job_id", *columns],
            select(t.node, t.job_id, *(t[name] for name in columns))
            .join_from(JOB_OPEN_PARTS, totals, and_(t.job_id == JOB_OPEN_PARTS.c.job_id,
                                                    t.node == JOB_OPEN_PARTS.c.node))
            .where(JOB_OPEN_PARTS.c.node == node)))

