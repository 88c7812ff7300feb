"""Reads that only reports need: where a job's energy came from, its rows in time, and
which jobs a period covers.

The report has to say, per component, whether a job's joules were measured (``rapl``,
``nvml_energy``) or estimated (``model:...``) or imported (``import:...``), and draw
power over time. Both read the same rows :mod:`agent.store.job_queries` sums: raw
``job_energy`` rows after each node's prune boundary, minute rollups up to it, so the
chart and the totals never disagree about which rows count.

``job_minute_energy`` has no ``source`` column; a rolled-up minute's provenance is the
``source`` of the node's ``minute_energy`` row for the same minute, component and
device (the rollup joins differing sources with ``+``, split again here).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from sqlalchemy import and_, case, func, literal_column, or_, select, union_all
from sqlalchemy.engine import Engine

from agent.store.job_queries import pruned_last_minute_s as _pruned_last_minute_s
from agent.store.tables import (
    JOB_ENERGY,
    JOB_MINUTE_ENERGY,
    JOB_NODES,
    JOB_UNITS,
    JOBS,
    MINUTE_ENERGY,
    NODE_DEVICES,
    NODES,
    TICK_ENERGY,
    UNATTRIBUTED,
)

MINUTE_S = 60


def job_sources(engine: Engine, job_id: str, node: str | None = None) -> dict[str, list[str]]:
    """``{component: [source, ...]}`` of the rows that make up ``job_id``'s energy.

    Sorted and de-duplicated; ``node`` restricts it to one node of the job.
    """
    raw, rolled, minutes, nodes = JOB_ENERGY.c, JOB_MINUTE_ENERGY.c, MINUTE_ENERGY.c, NODES.c
    raw_query = (
        select(raw.component, raw.source)
        .select_from(JOB_ENERGY.join(NODES, nodes.node == raw.node))
        .where(raw.job_id == job_id,
               or_(nodes.raw_pruned_until_ms.is_(None),
                   raw.t_end_ms > nodes.raw_pruned_until_ms))
        .distinct()
    )
    rolled_query = (
        select(rolled.component, minutes.source)
        .select_from(
            JOB_MINUTE_ENERGY
            .join(NODES, nodes.node == rolled.node)
            .join(MINUTE_ENERGY, and_(
                minutes.node == rolled.node, minutes.minute_start_s == rolled.minute_start_s,
                minutes.component == rolled.component, minutes.device == rolled.device)))
        .where(rolled.job_id == job_id, rolled.minute_start_s <= _pruned_last_minute_s())
        .distinct()
    )
    if node is not None:
        raw_query = raw_query.where(raw.node == node)
        rolled_query = rolled_query.where(rolled.node == node)
    found: defaultdict[str, set[str]] = defaultdict(set)
    with engine.connect() as connection:
        for component, source in connection.execute(union_all(raw_query, rolled_query)):
            found[component].update(part for part in str(source).split("+") if part)
    return {component: sorted(sources) for component, sources in sorted(found.items())}


def job_energy_rows(
    engine: Engine, job_id: str
) -> list[tuple[str, float, float, str, float]]:
    """``(node, t_start_s, t_end_s, component, energy_j)`` of every row of ``job_id``,
    summed over devices, in time order.

    Unlike :func:`agent.store.job_queries.job_energy_series` each row keeps its start,
    so a chart can spread a long row (a minute rollup, an imported aggregate) over the
    time it covers instead of piling it on its end.
    """
    return [(node, t0, t1, component, dynamic_j + idle_j)
            for node, t0, t1, component, dynamic_j, idle_j in job_energy_parts(engine, job_id)]


def job_energy_parts(
    engine: Engine, job_id: str
) -> list[tuple[str, float, float, str, float, float]]:
    """:func:`job_energy_rows` with dynamic and idle joules apart: ``(node, t_start_s,
    t_end_s, component, dynamic_j, idle_j)``, what a report's per-node series carries so
    that an import gets both back."""
    raw, rolled, nodes = JOB_ENERGY.c, JOB_MINUTE_ENERGY.c, NODES.c
    raw_query = (
        select(raw.node, raw.t_start_ms, raw.t_end_ms, raw.component,
               func.sum(raw.dynamic_j), func.sum(raw.idle_j))
        .select_from(JOB_ENERGY.join(NODES, nodes.node == raw.node))
        .where(raw.job_id == job_id,
               or_(nodes.raw_pruned_until_ms.is_(None),
                   raw.t_end_ms > nodes.raw_pruned_until_ms))
        .group_by(raw.node, raw.t_start_ms, raw.t_end_ms, raw.component)
    )
    minute_start_ms = rolled.minute_start_s * literal_column("1000")
    minute_end_ms = (rolled.minute_start_s + literal_column("60")) * literal_column("1000")
    rolled_query = (
        select(rolled.node, minute_start_ms, minute_end_ms, rolled.component,
               func.sum(rolled.dynamic_j), func.sum(rolled.idle_j))
        .select_from(JOB_MINUTE_ENERGY.join(NODES, nodes.node == rolled.node))
        .where(rolled.job_id == job_id, rolled.minute_start_s <= _pruned_last_minute_s())
        .group_by(rolled.node, rolled.minute_start_s, rolled.component)
    )
    with engine.connect() as connection:
        rows = connection.execute(union_all(raw_query, rolled_query)).all()
    return sorted((str(node), int(start_ms) / 1000, int(end_ms) / 1000, str(component),
                   float(dynamic_j), float(idle_j))
                  for node, start_ms, end_ms, component, dynamic_j, idle_j in rows)


def job_unit_rows(engine: Engine, job_id: str) -> list[tuple[str, float, str, float]]:
    """``(node, t_end_s, unit, count)`` of every unit row of ``job_id``, in time order."""
    units = JOB_UNITS.c
    query = (select(units.node, units.t_end_ms, units.unit, units.count)
             .where(units.job_id == job_id)
             .order_by(units.t_end_ms, units.node, units.unit))
    with engine.connect() as connection:
        return [(str(node), int(t_end_ms) / 1000, str(unit), float(count))
                for node, t_end_ms, unit, count in connection.execute(query)]


def untracked_cpu_j(engine: Engine, node: str, since_s: float, until_s: float
                    ) -> tuple[float, float] | None:
    """(dynamic CPU joules no job received, all dynamic CPU joules) on ``node`` over
    ``(since_s, until_s]``; None when the store holds no unattributed CPU row there
    (an imported node: its file did not carry the other processes, so the share is
    unknown, not zero).

    Attribution splits a tick's dynamic CPU energy by each job's share of the node's
    busy CPU time and leaves the rest unattributed (job ``''``), so the first over the
    second is the share of the node's busy CPU time that belonged to processes no job
    tracked: on a shared node, how far to trust a job's CPU figure.
    """
    since_ms, until_ms = round(since_s * 1000), round(until_s * 1000)
    raw, rolled, nodes = JOB_ENERGY.c, JOB_MINUTE_ENERGY.c, NODES.c
    untracked = raw.job_id == UNATTRIBUTED
    raw_query = (
        select(func.sum(case((untracked, raw.dynamic_j), else_=literal_column("0.0"))),
               func.sum(raw.dynamic_j), func.sum(case((untracked, literal_column("1")),
                                                      else_=literal_column("0"))))
        .select_from(JOB_ENERGY.join(NODES, nodes.node == raw.node))
        .where(raw.node == node, raw.component == "cpu", raw.t_end_ms > since_ms,
               raw.t_end_ms <= until_ms,
               or_(nodes.raw_pruned_until_ms.is_(None),
                   raw.t_end_ms > nodes.raw_pruned_until_ms)))
    rolled_query = (
        select(func.sum(case((rolled.job_id == UNATTRIBUTED, rolled.dynamic_j),
                             else_=literal_column("0.0"))),
               func.sum(rolled.dynamic_j),
               func.sum(case((rolled.job_id == UNATTRIBUTED, literal_column("1")),
                             else_=literal_column("0"))))
        .select_from(JOB_MINUTE_ENERGY.join(NODES, nodes.node == rolled.node))
        .where(rolled.node == node, rolled.component == "cpu",
               rolled.minute_start_s > (since_ms - MINUTE_S * 1000) // 1000,
               rolled.minute_start_s <= (until_ms - MINUTE_S * 1000) // 1000,
               rolled.minute_start_s <= _pruned_last_minute_s()))
    untracked_j = total_j = 0.0
    rows = 0
    with engine.connect() as connection:
        for query in (raw_query, rolled_query):
            part_untracked, part_total, part_rows = connection.execute(query).one()
            untracked_j += float(part_untracked or 0.0)
            total_j += float(part_total or 0.0)
            rows += int(part_rows or 0)
    return (untracked_j, total_j) if rows else None


def job_ids_active_since(engine: Engine, since_s: float | None = None) -> list[str]:
    """Ids of the jobs that ran at some point after ``since_s`` (epoch seconds): still
    running, or ended after it. All jobs when ``since_s`` is None. By start time."""
    jobs = JOBS.c
    query = select(jobs.id).order_by(jobs.created_s, jobs.id)
    if since_s is not None:
        still_running = select(JOB_NODES.c.job_id).where(JOB_NODES.c.ended_s.is_(None))
        query = query.where(or_(jobs.ended_s.is_(None), jobs.ended_s >= since_s,
                                jobs.id.in_(still_running)))
    with engine.connect() as connection:
        return [str(job_id) for (job_id,) in connection.execute(query)]


def node_sources(engine: Engine, nodes: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """node -> the sources its energy comes from: the devices its agent registered, or,
    for a node known only from imports, the sources of its imported rows (read per node,
    a seek on the energy tables' keys). What ``compare`` classifies a row's energy by,
    without reading every job's rows."""
    wanted = sorted(set(nodes))
    found: defaultdict[str, set[str]] = defaultdict(set)
    devices, ticks, minutes = NODE_DEVICES.c, TICK_ENERGY.c, MINUTE_ENERGY.c
    with engine.connect() as connection:
        for node, source in connection.execute(
                select(devices.node, devices.source).where(devices.node.in_(wanted))
                .distinct()):
            found[str(node)].add(str(source))
        for node in (n for n in wanted if n not in found):
            for table in (ticks, minutes):
                for (source,) in connection.execute(
                        select(table.source).where(table.node == node).distinct()):
                    found[node].update(p for p in str(source).split("+") if p)
    return {node: tuple(sorted(found.get(node, ()))) for node in wanted}
