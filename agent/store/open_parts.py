"""A node's open parts and their totals, copied for a fleet's comparison by setup.

A comparison by setup (:mod:`joulestat.store.job_pools`) reads a node's summed days of
ended jobs as their sums (:mod:`joulestat.store.pool_days`) and every other part one by
one: over 1,000 nodes x 7 days x 50 jobs that is the 50,000 running parts, each joined
to its job's row and to its totals in tables of 400,000 parts (1.6 million energy rows),
most of ``joulestat compare``'s 3 s. So the node's maintain pass, after summing its
days, copies its open parts (single-node, on no summed day) with their job's attributes
into ``job_open_parts`` and their totals into ``job_open_energy`` and
``job_open_units``, tables of the open parts only, which the comparison reads instead.

The pass also adds the copies up (revision 0006): per part its copied energy and the
units it counted (``job_open_sums``), per node and job kind the copied parts' energy
per (instance type, units counted, component, source) with how many parts that is
(``job_open_sources``, ``job_open_kinds``). The comparison then reads a copied part as
one row and a node's copied sources as a few, not the 188,000 copied totals rows of a
fleet twice over (:mod:`joulestat.store.job_pools` checks that a node's sums still hold).

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

from collections import Counter, defaultdict

from sqlalchemy import Connection, and_, delete, exists, insert, or_, select

from joulestat.core.tick import Component
from joulestat.store.model_split import ordinary_units
from joulestat.store.pool_days import LOOKBACK_S, summed_day_in, units_key
from joulestat.store.schema import (
    JOB_ENERGY_TOTALS,
    JOB_NODES,
    JOB_OPEN_ENERGY,
    JOB_OPEN_KINDS,
    JOB_OPEN_PARTS,
    JOB_OPEN_SOURCES,
    JOB_OPEN_SUMS,
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
    for table in (JOB_OPEN_SOURCES, JOB_OPEN_KINDS, JOB_OPEN_SUMS, JOB_OPEN_UNITS,
                  JOB_OPEN_ENERGY, JOB_OPEN_PARTS):
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
    _add_up(connection, node)


def _add_up(connection: Connection, node: str) -> None:
    """``node``'s copies added up (revision 0006): per part its energy and the units
    it counted, per kind the parts' energy per (instance type, units counted,
    component, source) and how many parts that is. Added in Python, as the day sums
    are (:mod:`joulestat.store.pool_days`): a node's copies are a few hundred rows."""
    o, e, u = JOB_OPEN_PARTS.c, JOB_OPEN_ENERGY.c, JOB_OPEN_UNITS.c
    parts = {job_id: (kind, itype) for job_id, kind, itype in connection.execute(
        select(o.job_id, o.kind, o.instance_type).where(o.node == node))}
    if not parts:
        return
    counted: dict[str, list[str]] = defaultdict(list)
    for job_id, unit in connection.execute(select(u.job_id, u.unit).where(
            u.node == node, u.count > 0, ordinary_units(u.unit))):
        counted[job_id].append(unit)
    keys = {job_id: units_key(counted[job_id]) for job_id in parts}
    sums = {job_id: [0.0, 0.0, 0.0] for job_id in parts}  # energy, accelerators, dynamic
    sources: dict[tuple[str, str, str, str, str], list[float]] = defaultdict(
        lambda: [0.0, 0.0])
    for job_id, component, source, dynamic_j, idle_j in connection.execute(
            select(e.job_id, e.component, e.source, e.dynamic_j, e.idle_j)
            .where(e.node == node)):
        energy_j = dynamic_j + idle_j
        part = sums[job_id]
        part[0] += energy_j
        part[1] += energy_j if component == Component.ACCELERATOR else 0.0
        part[2] += dynamic_j
        kind, itype = parts[job_id]
        summed = sources[(kind, itype, keys[job_id], component, source)]
        summed[0] += energy_j
        summed[1] += dynamic_j
    connection.execute(insert(JOB_OPEN_SUMS), [
        {"node": node, "job_id": job_id, "energy_j": energy_j, "accelerator_j": accelerator_j,
         "dynamic_j": dynamic_j, "units_key": keys[job_id]}
        for job_id, (energy_j, accelerator_j, dynamic_j) in sums.items()])
    connection.execute(insert(JOB_OPEN_KINDS), [
        {"node": node, "kind": kind, "parts": count}
        for kind, count in Counter(kind for kind, _itype in parts.values()).items()])
    if sources:
        connection.execute(insert(JOB_OPEN_SOURCES), [
            {"node": node, "kind": kind, "instance_type": itype, "units_key": key,
             "component": component, "source": source, "energy_j": energy_j,
             "dynamic_j": dynamic_j}
            for (kind, itype, key, component, source), (energy_j, dynamic_j)
            in sources.items()])
